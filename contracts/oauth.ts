import { z } from 'zod';

/**
 * OAuth sign-in for MCP hosts: the documents and bodies of the MCP authorization profile that
 * this service writes itself. The authorization server's own endpoints (authorize, token,
 * register, revoke, its RFC 8414 metadata) are the library's; their shapes are the RFCs'.
 */

/** The path of the MCP endpoint that requires sign-in; `/mcp` stays anonymous or keyed. */
export const SIGNIN_MCP_PATH = '/mcp/signin';
/** The one scope a token carries: call the MCP tools as the chosen key. */
export const MCP_SCOPE = 'mcp';
/** Where the authorization server's own routes live. */
export const OAUTH_PREFIX = '/oauth';
/** The authorization endpoint (the OAuth routes' and the sign-in rate limit's). */
export const OAUTH_AUTHORIZE_PATH = `${OAUTH_PREFIX}/authorize`;

/** RFC 9728 protected resource metadata of /mcp/signin. */
export const ProtectedResourceMetadata = z.object({
  resource: z.url(),
  authorization_servers: z.array(z.url()).min(1),
  scopes_supported: z.array(z.string()),
  bearer_methods_supported: z.array(z.literal('header')),
  resource_name: z.string(),
  resource_documentation: z.url().optional(),
});
export type ProtectedResourceMetadata = z.infer<typeof ProtectedResourceMetadata>;

/** The signing keys (a private JWKS) and cookie secrets of the authorization server. */
export const OAuthSecrets = z.object({
  jwks: z.object({ keys: z.array(z.looseObject({ kty: z.string(), kid: z.string() })).min(1) }),
  cookieKeys: z.array(z.string().min(16)).min(1),
});
export type OAuthSecrets = z.infer<typeof OAuthSecrets>;

/** Consent page: sign in with an API key the person already holds (it is the key the host acts as). */
export const KeySignInForm = z.strictObject({
  api_key: z.string().trim().min(1, 'enter your API key').max(200),
});

/** Consent page: sign in with a wallet (an EIP-4361 message signed in the page). */
export const WalletSignInForm = z.strictObject({
  // A form post turns every line break into CRLF; the wallet signed the message with LF.
  message: z
    .string()
    .min(1)
    .max(4_096)
    .transform((message) => message.replace(/\r\n/g, '\n')),
  signature: z.string().regex(/^0x[0-9a-fA-F]+$/, '0x-prefixed hex'),
});

/** Consent page: the single-use nonce its wallet sign-in puts in the EIP-4361 message it signs. */
export const InteractionNonce = z.object({
  nonce: z.string(),
  /** The EIP-4361 domain the message names (SIWE_DOMAIN). */
  domain: z.string(),
  expires_at: z.iso.datetime(),
});
export type InteractionNonce = z.infer<typeof InteractionNonce>;

/** Consent page, after a wallet sign-in: the key (of that wallet) the host will act as. */
export const KeyChoiceForm = z.strictObject({
  key_id: z.string().min(1).max(100),
});

/*
 * The library's requests, as the document describes them to a client (the library reads and
 * checks them itself): loose where the RFCs let a client send more members.
 */
/** Dynamic client registration (RFC 7591), a JSON body: public clients only. */
export const ClientRegistration = z.looseObject({
  redirect_uris: z.array(z.string()).min(1),
  client_name: z.string().optional(),
  grant_types: z.array(z.enum(['authorization_code', 'refresh_token'])).optional(),
  response_types: z.array(z.literal('code')).optional(),
  token_endpoint_auth_method: z.literal('none').optional(),
  scope: z
    .string()
    .optional()
    .describe(
      'Registered as mcp, with offline_access when named; any other scope (openid included) is dropped, and the answer names the scope registered',
    ),
});

/** The token endpoint's form: a code with its PKCE verifier, or a refresh token. */
export const TokenRequest = z.looseObject({
  grant_type: z.enum(['authorization_code', 'refresh_token']),
  client_id: z.string(),
  code: z.string().optional().describe('authorization_code: the code the redirect carried'),
  code_verifier: z.string().optional().describe('authorization_code: the PKCE verifier of its challenge'),
  redirect_uri: z.string().optional().describe('authorization_code: the redirect_uri of the request'),
  refresh_token: z.string().optional().describe('refresh_token: the refresh token (it rotates)'),
  resource: z.string().optional().describe('The resource the token is for (<origin>/mcp/signin)'),
  scope: z
    .string()
    .optional()
    .describe(
      'refresh_token: narrows the scope (RFC 6749 §6); without mcp it is refused invalid_scope and the refresh token stays good',
    ),
});

/** Token revocation's form (RFC 7009). */
export const RevocationRequest = z.looseObject({
  client_id: z.string(),
  token: z.string(),
  token_type_hint: z.enum(['access_token', 'refresh_token']).optional(),
});

/** The error body of the sign-in routes (an OAuth-style error with a readable description). */
export const OAuthErrorBody = z.object({
  error: z.string(),
  error_description: z.string(),
});

/*
 * The library's answers (oidc-provider), as they arrive on the wire: the document describes them
 * and the conformance test checks every real answer against them. Loose where the RFCs let a
 * server add members.
 */

/**
 * RFC 8414 authorization server metadata (at /.well-known/oauth-authorization-server alone): an
 * OAuth server's, with no OpenID Connect Discovery member (no ID tokens are issued).
 */
export const AuthorizationServerMetadata = z.looseObject({
  issuer: z.url(),
  authorization_endpoint: z.url(),
  token_endpoint: z.url(),
  registration_endpoint: z.url(),
  revocation_endpoint: z.url(),
  revocation_endpoint_auth_methods_supported: z.array(z.string()),
  jwks_uri: z.url(),
  response_types_supported: z.array(z.string()),
  grant_types_supported: z.array(z.string()),
  code_challenge_methods_supported: z.array(z.literal('S256')),
  scopes_supported: z.array(z.string()),
  token_endpoint_auth_methods_supported: z.array(z.string()),
  client_id_metadata_document_supported: z.boolean(),
});

/** RFC 7517 JWK Set: the public signing keys. */
export const JsonWebKeySet = z.object({
  keys: z.array(z.looseObject({ kty: z.string(), kid: z.string(), use: z.string(), alg: z.string() })),
});

/** RFC 7591/7592: a registered client, as registration answers it and as it is read back. */
export const RegisteredClient = z.looseObject({
  client_id: z.string(),
  client_id_issued_at: z.number().int(),
  redirect_uris: z.array(z.string()),
  grant_types: z.array(z.string()),
  response_types: z.array(z.string()),
  token_endpoint_auth_method: z.string(),
  client_name: z.string().optional(),
  scope: z.string().optional(),
  registration_access_token: z.string().optional(),
  registration_client_uri: z.url().optional(),
});

/** RFC 6749 5.1: the token endpoint's answer. */
export const TokenResponse = z.object({
  access_token: z.string(),
  token_type: z.literal('Bearer'),
  expires_in: z.number().int(),
  scope: z.string(),
  refresh_token: z.string().optional(),
});
