import type Provider from 'oidc-provider';
import { MCP_SCOPE } from '../../../contracts/oauth.ts';
import type { KeyRecord } from '../../keys/key-registry.ts';
import { type Caller, keyCaller } from '../../metering/caller.ts';

/**
 * Why a request to /mcp/signin is not served; `invalid_token` when a token was presented,
 * `invalid_request` when the request is malformed (its Authorization sent twice).
 */
export type TokenRefusal = {
  error: 'missing_token' | 'invalid_request' | 'invalid_token' | 'insufficient_scope';
  description: string;
};

export type TokenCheck = { ok: true; caller: Caller } | ({ ok: false } & TokenRefusal);

const BEARER = /^Bearer +(\S+) *$/i;

/** The access token of `Authorization: Bearer <token>`, or null when none is presented that way. */
export function bearerToken(header: string | string[] | undefined): string | null {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return null;
  return BEARER.exec(value)?.[1] ?? null;
}

/** The `WWW-Authenticate` challenge of a refusal (RFC 6750, with RFC 9728's resource_metadata). */
export function challenge(resourceMetadataUrl: string, refusal: TokenRefusal | null): string {
  const parts = [`resource_metadata="${resourceMetadataUrl}"`, `scope="${MCP_SCOPE}"`];
  if (refusal !== null && refusal.error !== 'missing_token') {
    parts.push(
      `error="${refusal.error}"`,
      `error_description="${refusal.description.replace(/["\\]/g, '')}"`,
    );
  }
  return `Bearer ${parts.join(', ')}`;
}

const refuse = (error: TokenRefusal['error'], description: string): TokenCheck => ({
  ok: false,
  error,
  description,
});

/**
 * Checks an access token for the resource, every call: the library's record of it (unknown,
 * expired or revoked tokens have none), its audience (a token issued for another resource is
 * refused), its scope, its grant (a revoked grant ends its tokens) and the key it acts as (a
 * revoked key ends them too). A good token is served as that key's caller: its plan, quota and
 * rate limits, exactly as the key's own Bearer call.
 */
export async function checkAccessToken(
  deps: {
    /** Null only when no token is presented. */
    provider: Provider | null;
    resource: string;
    /** The key record by id; throws KeyUnverifiableError when the registry cannot answer. */
    keyById: (keyId: string) => KeyRecord | undefined;
  },
  token: string | null,
): Promise<TokenCheck> {
  const { provider, resource } = deps;
  if (token === null || provider === null) {
    return refuse('missing_token', 'sign in: this endpoint requires an OAuth access token');
  }
  const accessToken = await provider.AccessToken.find(token);
  if (accessToken === undefined || accessToken.isExpired) {
    return refuse('invalid_token', 'the access token is unknown, expired or revoked');
  }
  const audience = accessToken.aud;
  const audiences = Array.isArray(audience) ? audience : [audience];
  if (!audiences.includes(resource)) {
    return refuse('invalid_token', `the access token was issued for another resource, not ${resource}`);
  }
  if (!(accessToken.scope ?? '').split(' ').includes(MCP_SCOPE)) {
    return refuse('insufficient_scope', `the access token lacks the ${MCP_SCOPE} scope`);
  }
  const grant = accessToken.grantId ? await provider.Grant.find(accessToken.grantId) : undefined;
  if (grant === undefined || grant.isExpired) {
    return refuse('invalid_token', 'the sign-in behind this access token was revoked or has expired');
  }
  const record = deps.keyById(accessToken.accountId);
  if (record === undefined || record.revoked) {
    return refuse('invalid_token', 'the API key this access token acts as was revoked');
  }
  return { ok: true, caller: keyCaller(record) };
}
