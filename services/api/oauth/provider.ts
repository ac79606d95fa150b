import Provider, { type Configuration, errors, type KoaContextWithOIDC } from 'oidc-provider';
import {
  MCP_SCOPE,
  OAUTH_AUTHORIZE_PATH,
  OAUTH_PREFIX,
  type OAuthSecrets,
  SIGNIN_MCP_PATH,
} from '../../../contracts/oauth.ts';
import { LOOPBACK_HOSTS } from '../../shared/ssrf/address-policy.ts';
import { type ClientLifetime, DEFAULT_CLIENT_LIFETIME, oauthAdapter } from './adapter.ts';
import {
  clientDocumentFetchAllowed,
  DEFAULT_OUTBOUND_POLICY,
  guardedFetch,
  type OutboundPolicy,
} from './client-document.ts';
import { errorDocument } from './page.ts';
import type { OAuthStore } from './store.ts';

export interface ProviderOptions {
  issuer: string;
  /** The one protected resource: the /mcp/signin URL. Tokens are bound to it (their audience). */
  resource: string;
  store: OAuthStore;
  secrets: OAuthSecrets;
  ttl: { accessTokenS: number; refreshTokenS: number; codeS: number; interactionS: number };
  /** Whether the account (an API key id) may still act: a revoked key has no account. */
  keyActive: (keyId: string) => Promise<boolean>;
  /** Which addresses outgoing fetches (client ID metadata documents) may reach; tests resolve names here. */
  outbound?: OutboundPolicy;
  /** TLS for outgoing fetches (tests pass a self-signed CA). */
  outboundTls?: { ca?: string | Buffer };
  /**
   * How long registered clients are kept (DEFAULT_CLIENT_LIFETIME: a day unused, 5,000 waiting;
   * a sign-in under way spares its client for `ttl.interactionS`).
   */
  clientLifetime?: Partial<ClientLifetime>;
}

/**
 * Schemes that are no app's private-use scheme (RFC 8252 §7.1): the library's own refusals
 * (script, inline and local content), the other special schemes of the URL standard (network
 * protocols) and the browser's internal views. A redirect URI using one is refused.
 */
export const REFUSED_REDIRECT_SCHEMES: ReadonlySet<string> = new Set([
  'javascript:',
  'vbscript:',
  'data:',
  'blob:',
  'file:',
  'about:',
  'ftp:',
  'ws:',
  'wss:',
  'view-source:',
  'filesystem:',
  'intent:',
]);

/**
 * Why a redirect URI is refused at registration, or null: https, http on a loopback host only
 * (LOOPBACK_HOSTS: OAuth 2.1 §2.3.1, the MCP authorization profile), or a native app's
 * private-use scheme (RFC 8252 §7.1, e.g. `cursor://anysphere.cursor-mcp/oauth/callback`) that is
 * none of REFUSED_REDIRECT_SCHEMES.
 */
export function redirectUriRefusal(uri: unknown): string | null {
  if (typeof uri !== 'string') return null; // the library's own schema reports the type
  const url = URL.parse(uri);
  if (url === null) return null;
  if (url.protocol === 'http:' && !LOOPBACK_HOSTS.has(url.hostname)) {
    return `redirect_uris must use https, or http only on a loopback host (127.0.0.1, [::1], localhost): ${uri}`;
  }
  if (REFUSED_REDIRECT_SCHEMES.has(url.protocol)) {
    return `redirect_uris must not use the ${url.protocol.slice(0, -1)} scheme (https, http on a loopback host, or an app's own scheme): ${uri}`;
  }
  return null;
}

/** Whether a redirect URI uses an app's private-use scheme (neither https nor http): a native app's. */
export function isPrivateUseRedirect(uri: unknown): boolean {
  if (typeof uri !== 'string') return false;
  const url = URL.parse(uri);
  return url !== null && url.protocol !== 'https:' && url.protocol !== 'http:';
}

/**
 * The scopes a host may ask for and the metadata lists: `mcp` (required) and `offline_access`
 * (taken; a host registered for the refresh_token grant gets a refresh token either way).
 */
export const GRANTED_SCOPES: readonly string[] = ['offline_access', MCP_SCOPE];

/**
 * Why an authorization request's scope is refused, or null. `openid` is not offered: an account
 * here is an API key, not a person, so an ID token would have no one to name (its `sub` would be
 * a key id, shared by whoever holds the key), and the library would otherwise ask for it again
 * after every sign-in. Without `mcp` no token could serve the resource. Both are told before the
 * person signs in; any other scope is ignored (RFC 6749 §3.3).
 */
export function scopeRefusal(scope: string | undefined): string | null {
  const asked = new Set((scope ?? '').split(' ').filter(Boolean));
  if (asked.has('openid')) {
    return `openid is not offered (this server issues no ID tokens); ask for "${MCP_SCOPE}"`;
  }
  if (!asked.has(MCP_SCOPE)) {
    return `the scope must include "${MCP_SCOPE}", the scope of ${SIGNIN_MCP_PATH} (asked: ${scope ? `"${scope}"` : 'none'})`;
  }
  return null;
}

/**
 * The scope a client is registered with, for the one it asked (RFC 7591 §2: the scopes it may
 * ask for): the GRANTED_SCOPES it named, in its order, and `mcp` always (a client registered
 * without it could never be granted a token the resource takes). Any other scope, `openid`
 * included, is dropped rather than refused: RFC 7591 §3.2.1 lets the server replace a requested
 * value and has the answer name the registered one, and a host cannot amend its metadata, so a
 * refusal would end its sign-in where the registered scope lets it go on.
 */
export function registeredScope(asked: string): string {
  const kept = [...new Set(asked.split(' ').filter((scope) => GRANTED_SCOPES.includes(scope)))];
  if (!kept.includes(MCP_SCOPE)) kept.push(MCP_SCOPE);
  return kept.join(' ');
}

/**
 * Why a refresh request's scope is refused, or null (none given: the token's own scope). RFC 6749
 * §6 lets a refresh narrow the scope, and the token it issues carries the scope asked; one without
 * `mcp` would carry none the resource takes (`offline_access` is not a scope of /mcp/signin), a
 * token every call answers 403. Refused as invalid_scope (§5.2), rather than issued with `mcp`
 * added: that would grant more than was asked, and the host would not learn its request was wrong.
 */
export function refreshScopeRefusal(scope: unknown): string | null {
  if (typeof scope !== 'string' || scope === '') return null;
  if (scope.split(' ').includes(MCP_SCOPE)) return null;
  return `a refresh narrowed to "${scope}" leaves no scope ${SIGNIN_MCP_PATH} takes: include "${MCP_SCOPE}", or send no scope`;
}

/**
 * Bounds of a client's metadata (POST /oauth/register is open to anyone, and what it takes is
 * stored): text fields (client_name, scope, ...), URIs (`*_uri`, `*_uris` members), list lengths
 * (redirect_uris, contacts, ...) and the whole record as JSON.
 */
export const CLIENT_METADATA_LIMITS = { text: 200, uri: 2_000, list: 10, contacts: 5, bytes: 8_192 } as const;

/**
 * Why a client's metadata is refused for its size, or null. Worded so that it does not start with
 * the member's name: the library answers a description starting with `redirect_uris` as
 * invalid_redirect_uri, and a size is invalid_client_metadata (RFC 7591 §3.2.2).
 */
export function clientMetadataRefusal(metadata: Record<string, unknown>): string | null {
  const L = CLIENT_METADATA_LIMITS;
  for (const [key, value] of Object.entries(metadata)) {
    if (key === 'jwks') continue; // keys are long by nature: counted in the whole record only
    const isUri = key.endsWith('_uri') || key.endsWith('_uris');
    const max = isUri ? L.uri : L.text;
    if (typeof value === 'string' && value.length > max) {
      return `the ${key} given is ${value.length} characters long; at most ${max}`;
    }
    if (Array.isArray(value)) {
      const most = key === 'contacts' ? L.contacts : L.list;
      if (value.length > most) return `the ${key} given has ${value.length} entries; at most ${most}`;
      for (const item of value) {
        if (typeof item === 'string' && item.length > max) {
          return `the ${key} given has an entry ${item.length} characters long; at most ${max}`;
        }
      }
    }
  }
  const bytes = Buffer.byteLength(JSON.stringify(metadata));
  if (bytes > L.bytes) return `the client metadata is ${bytes} bytes as JSON; at most ${L.bytes}`;
  return null;
}

/**
 * Members the library's discovery document carries that OpenID Connect Discovery defines: this
 * server issues no ID tokens, has no userinfo and takes no request objects (openid is refused),
 * so RFC 8414 metadata says nothing of them.
 */
const OPENID_ONLY_METADATA = [
  'claims_parameter_supported',
  'claims_supported',
  'claim_types_supported',
  'subject_types_supported',
  'id_token_signing_alg_values_supported',
  'request_uri_parameter_supported',
  'acr_values_supported',
] as const;

/**
 * The library's discovery document as RFC 8414 metadata of this server: the OpenID-only members
 * dropped, the scopes those granted (the library always lists `openid`, its claims name it), and
 * the revocation endpoint's client authentication named (RFC 8414 §2: left out, it would read as
 * client_secret_basic alone, while hosts are public clients revoking with `none`). The library
 * authenticates a client at its revocation endpoint as at its token endpoint.
 */
export function authorizationServerMetadata(document: Record<string, unknown>): Record<string, unknown> {
  const metadata: Record<string, unknown> = { ...document, scopes_supported: [...GRANTED_SCOPES] };
  for (const member of OPENID_ONLY_METADATA) delete metadata[member];
  if (metadata.revocation_endpoint !== undefined) {
    metadata.revocation_endpoint_auth_methods_supported = metadata.token_endpoint_auth_methods_supported;
    metadata.revocation_endpoint_auth_signing_alg_values_supported =
      metadata.token_endpoint_auth_signing_alg_values_supported;
  }
  return metadata;
}

/** Client metadata of OpenID Connect registration the library fills in by default: about ID tokens, which are never issued. */
const OPENID_ONLY_CLIENT_METADATA = [
  'id_token_signed_response_alg',
  'require_auth_time',
  'subject_type',
] as const;

/**
 * A registered client as RFC 7591/7592 answers it: its metadata without the OpenID-only defaults,
 * and without a client secret when it authenticates with none (`needsSecret` false). The library
 * makes a secret for a registration that names no token_endpoint_auth_method (RFC 7591 reads that
 * as client_secret_basic) before our default, none, applies: a host told that secret and using it,
 * as RFC 6749 §2.3.1 has a client holding one do, was refused invalid_client on every token request.
 */
export function registeredClient(
  client: Record<string, unknown>,
  needsSecret: boolean,
): Record<string, unknown> {
  const answer = { ...client };
  for (const member of OPENID_ONLY_CLIENT_METADATA) delete answer[member];
  if (!needsSecret) {
    delete answer.client_secret;
    delete answer.client_secret_expires_at;
  }
  return answer;
}

/**
 * Whether a client's metadata needs a secret, by the library's own rule (Client.needsSecret, a
 * static its types leave out: an authentication method other than none, private_key_jwt or TLS,
 * or a symmetric algorithm); true if a version of the library had none (the answer as it was).
 */
function needsSecret(provider: Provider, client: Record<string, unknown>): boolean {
  const rule = (provider.Client as unknown as { needsSecret?: (metadata: object) => boolean }).needsSecret;
  return typeof rule === 'function' ? rule.call(provider.Client, client) : true;
}

/**
 * A refresh token's lifetime in seconds: the configured one, cut to what its grant has left
 * (`grantExp`, in epoch seconds, when the grant is known), one second at least (the library
 * refuses an expired grant before issuing one).
 */
export function refreshTokenLifetime(
  configuredS: number,
  grantExp: number | undefined,
  now = Date.now(),
): number {
  if (grantExp === undefined) return configuredS;
  return Math.max(1, Math.min(configuredS, grantExp - Math.floor(now / 1_000)));
}

/** The authorization server's routes, under /oauth (the well-known documents are at the root). */
export const OAUTH_ROUTES = {
  authorization: OAUTH_AUTHORIZE_PATH,
  token: `${OAUTH_PREFIX}/token`,
  registration: `${OAUTH_PREFIX}/register`,
  revocation: `${OAUTH_PREFIX}/revoke`,
  jwks: `${OAUTH_PREFIX}/jwks`,
  end_session: `${OAUTH_PREFIX}/session/end`,
  introspection: `${OAUTH_PREFIX}/introspect`,
  userinfo: `${OAUTH_PREFIX}/me`,
  pushed_authorization_request: `${OAUTH_PREFIX}/par`,
  code_verification: `${OAUTH_PREFIX}/device`,
  device_authorization: `${OAUTH_PREFIX}/device/auth`,
  backchannel_authentication: `${OAUTH_PREFIX}/backchannel`,
  challenge: `${OAUTH_PREFIX}/challenge`,
  credential: `${OAUTH_PREFIX}/credential`,
} as const;

const interactionPath = (uid: string) => `${OAUTH_PREFIX}/interaction/${uid}`;

/** The provider and what it holds open: `close` ends the keep-alive sockets of its outgoing fetches. */
export interface OAuthProvider {
  provider: Provider;
  close(): Promise<void>;
}

/**
 * The MCP authorization profile on oidc-provider: authorization code with PKCE (S256, always
 * required), exact redirect URIs, dynamic client registration and client ID metadata documents,
 * one resource (RFC 8707) whose tokens are opaque, short-lived and checked in the store on every
 * call (so revoking a grant or its key ends them at once), refresh tokens rotated on use.
 */
export function createProvider(options: ProviderOptions): OAuthProvider {
  const { resource, ttl } = options;
  const outbound = options.outbound ?? DEFAULT_OUTBOUND_POLICY;
  const outboundFetch = guardedFetch(outbound, options.outboundTls);
  const configuration: Configuration = {
    adapter: oauthAdapter(options.store, {
      ...DEFAULT_CLIENT_LIFETIME,
      signInS: ttl.interactionS,
      ...options.clientLifetime,
    }),
    jwks: options.secrets.jwks as Configuration['jwks'],
    cookies: {
      keys: options.secrets.cookieKeys,
      long: { httpOnly: true, sameSite: 'lax' },
      short: { httpOnly: true, sameSite: 'lax' },
    },
    clients: [],
    // Hosts are public clients (no secret): PKCE is what binds the code to the one who asked.
    clientDefaults: {
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    },
    responseTypes: ['code'],
    // `mcp` is listed too: hosts register with the scope of the resource metadata (RFC 7591 checks it).
    scopes: [...GRANTED_SCOPES],
    // Not a parameter of our own: a validator of the standard one, run on every authorization
    // request once its client and redirect_uri are known, so a refusal goes back to the host.
    extraParams: {
      // The scope as the host sent it: the library has already dropped `offline_access` from the
      // value it hands over (kept only with prompt=consent), so a host asking for
      // "offline_access" alone was told it had asked for none. The value stands in when the
      // request no longer carries it (the return from the sign-in page, /oauth/authorize/{uid}).
      scope: async (ctx, value) => {
        const sent = (ctx.method === 'POST' ? ctx.oidc.body : ctx.query)?.scope;
        const asked = typeof sent === 'string' ? sent : typeof value === 'string' ? value : undefined;
        const why = scopeRefusal(asked);
        // The scope sent goes back beside the error; none sent (or an empty one): no scope
        // parameter at all, never `scope=` (the library leaves out what is undefined).
        if (why === null) return;
        const refusal = new errors.InvalidScope(why, asked ?? '');
        if (!asked?.trim()) delete (refusal as { scope?: string }).scope;
        throw refusal;
      },
    },
    claims: { openid: ['sub'] },
    pkce: { required: () => true },
    allowOmittingSingleRegisteredRedirectUri: false,
    // Listing a standard property here runs the validator on it for every client the library
    // builds: registration (POST /oauth/register), stored clients and metadata documents. Its
    // call for redirect_uris (always made) checks the sizes of the whole record first: a
    // 50,000-character client_name was stored as it came.
    // The call for scope (made when a client names one) registers it with the scopes granted
    // (registeredScope), before the library checks it against its own list (which has openid).
    extraClientMetadata: {
      properties: ['redirect_uris', 'scope'],
      validator: (_ctx, key, value, metadata) => {
        if (key === 'scope' && typeof value === 'string') {
          (metadata as { scope?: string }).scope = registeredScope(value);
          return;
        }
        if (key !== 'redirect_uris') return;
        const tooBig = clientMetadataRefusal(metadata as Record<string, unknown>);
        if (tooBig !== null) throw new errors.InvalidClientMetadata(tooBig);
        if (!Array.isArray(value)) return;
        for (const uri of value) {
          const why = redirectUriRefusal(uri);
          if (why !== null) {
            const err = new errors.InvalidRedirectUri();
            err.error_description = why;
            throw err;
          }
        }
        // A host that lists an app's own scheme (Cursor: cursor://, beside an https and a
        // loopback URI) is a native app (RFC 8252): the library takes such schemes only from a
        // client of application_type native, and every client is web unless it says. Set here,
        // before the library checks the URIs, and returned in the registration response (RFC
        // 7591 §3.2.1). Native also means: https on a loopback host is refused, a loopback http
        // URI matches on any port (RFC 8252 §7.3), and the person is always asked.
        if (value.some(isPrivateUseRedirect)) {
          (metadata as { application_type?: string }).application_type = 'native';
        }
      },
    },
    // Every outgoing request (client ID metadata documents) dials only an address that passed the policy.
    fetch: outboundFetch.fetch,
    routes: OAUTH_ROUTES,
    features: {
      devInteractions: { enabled: false },
      registration: { enabled: true },
      // A host revokes only its own tokens (revoking its refresh token ends the whole grant).
      // Another client's token is refused (RFC 7009 §2.1), in invalid_grant (RFC 6749 §5.2: "was
      // issued to another client"): the library's false answers 200 having revoked nothing, so a
      // host that registered again and signs the person out with its new client_id would believe
      // the sign-in ended while its tokens still work. A token no client holds stays a 200 (§2.2).
      revocation: {
        enabled: true,
        allowedPolicy: (_ctx, client, token) => {
          if (token.clientId === client.clientId) return true;
          throw new errors.CustomOIDCProviderError(
            'invalid_grant',
            'the token was issued to another client: revoke it as the client it was issued to',
          );
        },
      },
      userinfo: { enabled: false },
      // Tokens are Bearer tokens: /mcp/signin takes `Authorization: Bearer` and checks no DPoP
      // proof, so a DPoP-bound token (token_type DPoP) would be refused there, or, sent as a
      // Bearer, served without the proof its binding promises. Off: not advertised, the header
      // ignored, every token Bearer.
      dPoP: { enabled: false },
      pushedAuthorizationRequests: { enabled: false },
      rpInitiatedLogout: { enabled: false },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => resource,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, indicator) => {
          if (indicator !== resource) {
            throw new errors.InvalidTarget(`this server issues tokens only for ${resource}`);
          }
          return {
            scope: MCP_SCOPE,
            audience: resource,
            accessTokenTTL: ttl.accessTokenS,
            accessTokenFormat: 'opaque',
          };
        },
      },
      clientIdMetadataDocument: {
        enabled: true,
        ack: 'draft-02',
        allowFetch: (_ctx: unknown, clientId: string) => clientDocumentFetchAllowed(clientId, outbound),
      } as never,
    },
    ttl: {
      AccessToken: ttl.accessTokenS,
      AuthorizationCode: ttl.codeS,
      // A grant lasts OAUTH_REFRESH_TOKEN_TTL_S from the consent, and no refresh token of it
      // outlives it: each one, the sign-in's and each rotated one, ends when its grant does
      // (RFC 9700 §4.14.2: rotation must not lengthen a grant's life), instead of a fresh
      // OAUTH_REFRESH_TOKEN_TTL_S from every refresh.
      RefreshToken: (ctx) => refreshTokenLifetime(ttl.refreshTokenS, ctx?.oidc?.entities.Grant?.exp),
      Grant: ttl.refreshTokenS,
      Interaction: ttl.interactionS,
      Session: ttl.interactionS,
      // RegistrationAccessToken: none here (a lifetime would be written into the token and end
      // it even once its client is used); the adapter stores it for as long as its client.
    },
    // A host keeps its tokens after the browser window that signed in is closed.
    expiresWithSession: async () => false,
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    // Asked on every refresh once the library has checked the token, its grant and the scope
    // against the token's, and before the token is used: the last place a refusal leaves the
    // host its refresh token. A narrowed scope without mcp is refused here (refreshScopeRefusal).
    // Otherwise the token rotates, every time, as the README says (the library's default rotates
    // a confidential client's only past 70 % of its lifetime).
    rotateRefreshToken: (ctx) => {
      const scope = ctx.oidc.params?.scope;
      const why = refreshScopeRefusal(scope);
      if (why !== null) throw new errors.InvalidScope(why, String(scope));
      return true;
    },
    findAccount: async (_ctx: KoaContextWithOIDC, sub: string) =>
      (await options.keyActive(sub)) ? { accountId: sub, claims: async () => ({ sub }) } : undefined,
    interactions: { url: (_ctx, interaction) => interactionPath(interaction.uid) },
    // An error the browser is shown (a redirect URI that is not registered, a bad request): our page, not the library's.
    renderError: async (ctx, out) => {
      const { html, policy } = errorDocument(
        'This sign-in request cannot be served',
        `${out.error}: ${out.error_description ?? 'the request is invalid'}. Start again from your MCP host.`,
      );
      ctx.set('content-security-policy', policy);
      ctx.set('x-frame-options', 'DENY');
      ctx.type = 'html';
      ctx.body = html;
    },
  };
  try {
    const provider = new Provider(options.issuer, configuration);
    provider.use(async (ctx, next) => {
      await next();
      const route = ctx.oidc?.route;
      if (!ctx.body || typeof ctx.body !== 'object') return;
      if (route === 'discovery') ctx.body = authorizationServerMetadata(ctx.body as Record<string, unknown>);
      else if (route === 'registration' || route === 'client') {
        const client = ctx.body as Record<string, unknown>;
        ctx.body = registeredClient(client, needsSecret(provider, client));
      }
    });
    return { provider, close: outboundFetch.close };
  } catch (err) {
    void outboundFetch.close();
    throw err;
  }
}
