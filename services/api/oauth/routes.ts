import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type Provider from 'oidc-provider';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { type Cache, CacheUnavailableError } from '../../../adapters/cache/port.ts';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { errorMessage, ServiceError } from '../../../contracts/errors.ts';
import { type IssueLike, issueText } from '../../../contracts/issue-text.ts';
import {
  AuthorizationServerMetadata,
  ClientRegistration,
  InteractionNonce,
  JsonWebKeySet,
  KeyChoiceForm,
  KeySignInForm,
  MCP_SCOPE,
  OAUTH_PREFIX,
  OAuthErrorBody,
  ProtectedResourceMetadata,
  RegisteredClient,
  RevocationRequest,
  SIGNIN_MCP_PATH,
  TokenRequest,
  TokenResponse,
  WalletSignInForm,
} from '../../../contracts/oauth.ts';
import type { KeyRecord } from '../../keys/key-registry.ts';
import { type KeyResolver, KeyUnverifiableError } from '../../keys/key-resolver.ts';
import { RATE_LIMIT_EXPOSED_HEADERS } from '../../metering/rate-limit.ts';
import { anyOriginHeaders, anyOriginPreflight } from '../cors.ts';
import { noRouteDetail } from '../errors.ts';
import { issueFreeKey } from '../keys/free-key.ts';
import { consumeNonce, issueNonce } from '../keys/nonces.ts';
import { checkSignIn, siweOrigins } from '../keys/siwe-check.ts';
import { documented, type ResponseDoc, type ResponseHeader } from '../openapi.ts';
import { originCacheControl } from '../public-origin.ts';
import { type ConsentView, consentDocument, errorDocument, type HtmlDocument } from './page.ts';
import { OAUTH_ROUTES } from './provider.ts';

/** The authorization server and protected resource one origin names. */
export interface Site {
  issuer: string;
  resource: string;
  resourceMetadataUrl: string;
  /** Its library instance, built on first use (its keys come from the store, which may be down at start). */
  ready(): Promise<Provider>;
}

export interface OAuthRoutesOptions {
  /** The authorization server and resource a request is served by (its origin's, see oauthSignIn). */
  site: (request: FastifyRequest) => Site;
  keys: KeyResolver;
  /** The keys a wallet holds (active ones), from the key registry. */
  walletKeys: (address: string) => KeyRecord[];
  store: EventStore;
  cache: Cache;
  siweDomain: string;
  /** The path of OAUTH_ISSUER when it has one (`/auth`): its metadata is served there too (RFC 8414 §3.1). */
  issuerPath?: string | undefined;
  /** PUBLIC_BASE_URL, when set: the library names its endpoints at this origin, not the request's. */
  publicBaseUrl?: string | undefined;
  nonceTtlMs: number;
  /** FREE_KEYS_PER_ADDRESS_PER_DAY: the budget POST /api/keys draws on too (issueFreeKey). */
  freeKeysPerDay: number;
  registryCaughtUp: (position: number) => Promise<void>;
  logger: Logger;
}

/** RFC 9728 path insertion: the metadata of `<origin>/mcp/signin`. */
export const PROTECTED_RESOURCE_PATH = `/.well-known/oauth-protected-resource${SIGNIN_MCP_PATH}`;
/** RFC 8414 authorization server metadata: the one discovery document of the authorization server. */
const AS_METADATA_PATH = '/.well-known/oauth-authorization-server';

const PUBLIC_CORS = {
  'access-control-allow-origin': '*',
  'access-control-allow-methods': 'GET',
  'access-control-allow-headers': 'Content-Type, Mcp-Protocol-Version',
};

/** The consent forms' fields whose value a refusal never shows back. */
const SECRET_FIELDS = new Set(['api_key', 'signature']);

const html: ResponseDoc = {
  description: 'HTML page',
  schema: { type: 'string' },
  contentTypes: ['text/html'],
};
const redirect: ResponseDoc = {
  description: 'Back to the authorization server (Location)',
  headers: { location: 'Where the browser goes next' },
};
/** Where an authorization request sends the browser: the sign-in page, or back to the host. */
const toSignInOrHost: ResponseDoc = {
  description:
    "To the sign-in page (/oauth/interaction/{uid}); or back to the host's registered redirect_uri with code, state and iss, or with error and error_description (invalid_request without a PKCE S256 challenge, invalid_scope when the scope lacks mcp or names openid, invalid_target for another resource, access_denied when the person denied)",
  headers: { location: 'The sign-in page, or the redirect_uri with the outcome in its query' },
  // The library writes a line with the link beside the Location (HTML when the caller accepts it).
  content: {
    'text/html': { type: 'string' },
    'text/plain': { type: 'string' },
  },
};

/** The library's answers: never cached (tokens, codes), and varying with the Origin it allows. */
const LIBRARY_HEADERS: readonly ResponseHeader[] = ['Cache-Control', 'Vary'];
/** Our pages: never cached, never framed. */
const PAGE_HEADERS: readonly ResponseHeader[] = [
  'Cache-Control',
  'X-Frame-Options',
  'Content-Security-Policy',
];

const resourceDoc = documented({
  summary: 'OAuth protected resource metadata of /mcp/signin (RFC 9728)',
  tags: ['oauth'],
  sends: LIBRARY_HEADERS,
  responses: {
    200: { description: 'Where to get a token for /mcp/signin', schema: ProtectedResourceMetadata },
  },
});
const asDoc = documented({
  summary:
    'OAuth authorization server metadata (RFC 8414; not an OpenID provider: no /.well-known/openid-configuration)',
  description:
    'Authorization code with PKCE S256 only; dynamic client registration (RFC 7591) at /oauth/register; client ID metadata documents (client_id_metadata_document_supported); token revocation (RFC 7009).',
  tags: ['oauth'],
  sends: LIBRARY_HEADERS,
  responses: { 200: { description: 'Endpoints and capabilities', schema: AuthorizationServerMetadata } },
});
const oauthJson: ResponseDoc = {
  description: 'RFC 6749 error: {error, error_description}',
  schema: OAuthErrorBody,
};
/** A refusal the browser is shown (the library renders it with our error page): never redirected. */
const errorPageDoc: ResponseDoc = {
  ...html,
  description:
    'The request cannot be served and cannot be sent back (an unregistered redirect_uri, an unknown client, an expired interaction): an HTML page naming the error',
  headers: {
    'content-security-policy': "Nothing but the page's own hashed style; no form, never in a frame",
    'x-frame-options': 'DENY: the page is never shown in a frame',
  },
};
/** The body a client sends: its schema and its one media type. */
type RequestDoc = { body: z.ZodType; type: 'application/json' | 'application/x-www-form-urlencoded' };
const FORM = 'application/x-www-form-urlencoded';

const endpointDoc = (
  summary: string,
  responses: Record<number, ResponseDoc>,
  description?: string,
  request?: RequestDoc,
) =>
  documented({
    summary,
    ...(description ? { description } : {}),
    ...(request ? { body: request.body, bodyContentTypes: [request.type] } : {}),
    tags: ['oauth'],
    sends: LIBRARY_HEADERS,
    responses: { 400: oauthJson, ...responses },
  });

/** Registration's answers: any page may read them, and the rate limit's headers (api/cors.ts). */
const REGISTRATION_CORS = anyOriginHeaders(RATE_LIMIT_EXPOSED_HEADERS);

/**
 * The library's endpoints, each declared (the document lists them), each handed to the library as
 * is. `cors`: who answers a browser page's preflight and lets it read the answer — the library
 * (it does for token, revocation and JWKS), us (it does not for registration, which carries no
 * cookie or credential of a person: any page may register a host), or nobody (browser redirects).
 */
const LIBRARY_ROUTES: {
  method: 'GET' | 'POST';
  url: string;
  doc: ReturnType<typeof documented>;
  cors: 'library' | 'ours' | false;
}[] = [
  {
    method: 'GET',
    url: OAUTH_ROUTES.authorization,
    cors: false,
    doc: endpointDoc(
      'Authorization request (response_type=code, PKCE S256 required, resource=<origin>/mcp/signin)',
      { 303: toSignInOrHost, 400: errorPageDoc },
      "Sends the browser to the sign-in page, then back to the registered redirect_uri with code (or error) and iss. A redirect_uri that is not registered exactly (a native client's loopback http one: on any port, RFC 8252 §7.3) is answered here (400 page), never redirected to.",
    ),
  },
  {
    method: 'GET',
    url: `${OAUTH_ROUTES.authorization}/:uid`,
    cors: false,
    doc: endpointDoc('Resumes an authorization request after the sign-in page', {
      303: toSignInOrHost,
      400: errorPageDoc,
    }),
  },
  {
    method: 'POST',
    url: OAUTH_ROUTES.token,
    cors: 'library',
    doc: endpointDoc(
      'Token endpoint: authorization_code (with code_verifier) and refresh_token grants',
      {
        200: {
          description: 'access_token (opaque, short-lived, bound to the resource), refresh_token, expires_in',
          schema: TokenResponse,
        },
        401: { ...oauthJson, description: 'invalid_client: the client_id is not registered' },
      },
      'A code is used once (a second use is refused and ends the tokens of the first); refresh tokens rotate.',
      { body: TokenRequest, type: FORM },
    ),
  },
  {
    method: 'POST',
    url: OAUTH_ROUTES.registration,
    cors: 'ours',
    doc: endpointDoc(
      "Dynamic client registration (RFC 7591): public clients; https, loopback http or an app's own scheme (then a native client) redirect URIs",
      {
        201: {
          description: 'The registered client: client_id, and registration_access_token to read it back',
          schema: RegisteredClient,
        },
      },
      undefined,
      { body: ClientRegistration, type: 'application/json' },
    ),
  },
  {
    method: 'GET',
    url: `${OAUTH_ROUTES.registration}/:clientId`,
    cors: 'ours',
    doc: endpointDoc('A registered client, read with its registration_access_token (RFC 7592)', {
      200: { description: 'The client metadata', schema: RegisteredClient },
      401: {
        ...oauthJson,
        description: 'invalid_token: the registration_access_token is missing or wrong',
        headers: { 'www-authenticate': 'Bearer realm, error="invalid_token" and error_description' },
      },
    }),
  },
  {
    method: 'POST',
    url: OAUTH_ROUTES.revocation,
    cors: 'library',
    doc: endpointDoc(
      'Token revocation (RFC 7009): revoking a refresh token ends its whole grant',
      {
        200: { description: 'Revoked (or unknown: the answer is the same)' },
        400: {
          ...oauthJson,
          description:
            'invalid_request: no token, or no client_id; invalid_grant: the token was issued to another client (nothing revoked)',
        },
        401: { ...oauthJson, description: 'invalid_client: the client_id is not registered' },
      },
      undefined,
      { body: RevocationRequest, type: FORM },
    ),
  },
  {
    method: 'GET',
    url: OAUTH_ROUTES.jwks,
    cors: 'library',
    doc: endpointDoc('The public signing keys (JWKS)', {
      200: { description: 'JWKS', schema: JsonWebKeySet, contentTypes: ['application/jwk-set+json'] },
    }),
  },
];

const pageDoc = documented({
  summary: 'Sign-in and consent page of an authorization request',
  tags: ['oauth'],
  sends: PAGE_HEADERS,
  responses: { 200: html, 400: html },
});
/** A consent page's form post: `form` the fields it takes (none: the post alone). */
const formDoc = (summary: string, form?: z.ZodType, extra: Record<number, ResponseDoc> = {}) =>
  documented({
    summary,
    ...(form ? { body: form, bodyContentTypes: [FORM] } : {}),
    tags: ['oauth'],
    sends: PAGE_HEADERS,
    responses: { 303: redirect, 200: html, 400: html, 401: html, 503: html, ...extra },
  });

const nonceDoc = documented({
  summary: "The consent page's wallet sign-in: a single-use nonce for its EIP-4361 message",
  description:
    'Fetched by the page itself, on the sign-in budget (RATE_LIMIT_SIGNIN) as every /oauth path is; only while the interaction of its cookie is live.',
  tags: ['oauth'],
  sends: PAGE_HEADERS,
  responses: {
    200: {
      description: 'The nonce, the domain the message names, and when the nonce lapses',
      schema: InteractionNonce,
    },
    400: { ...html, description: 'The interaction expired (or its cookie is missing): an HTML page' },
    503: { ...html, description: 'The nonce store cannot be reached: an HTML page; retry shortly' },
  },
});

type InteractionDetails = Awaited<ReturnType<Provider['interactionDetails']>>;

/**
 * The authorization server's HTTP face: the protected resource and authorization server metadata,
 * the library's own endpoints under /oauth (handed the raw request, body unread), and the
 * sign-in and consent page, where the person signs in with an API key or a wallet and so chooses
 * the key the host will act as.
 */
export function oauthRoutes(options: OAuthRoutesOptions): FastifyPluginAsync {
  /** Each request's site and its built instance, set by each scope's first hook before any handler runs. */
  const served = new WeakMap<
    FastifyRequest,
    { site: Site; provider: Provider; callback: ReturnType<Provider['callback']> }
  >();
  const callbacks = new WeakMap<Provider, ReturnType<Provider['callback']>>();
  const started = async (request: FastifyRequest) => {
    const site = options.site(request);
    let provider: Provider;
    try {
      provider = await site.ready();
    } catch (err) {
      options.logger.warn({ err }, 'oauth server not ready');
      throw new ServiceError('SERVICE_UNAVAILABLE', {
        detail: 'sign-in is unavailable right now; retry shortly',
      });
    }
    let callback = callbacks.get(provider);
    if (callback === undefined) {
      // The forwarded headers are ours (set by passThrough), never a client's: see below.
      if (publicUrl) provider.proxy = true;
      callback = provider.callback();
      callbacks.set(provider, callback);
    }
    if (!publicUrl) {
      // The library (Koa, `proxy` once TRUST_PROXY believes anyone) would read these headers from
      // any peer; Fastify's protocol and host read them only from a peer TRUST_PROXY believes (the
      // request's address's trust test), else the socket and Host. The library is given those.
      request.raw.headers['x-forwarded-proto'] = request.protocol;
      request.raw.headers['x-forwarded-host'] = request.host;
    }
    served.set(request, { site, provider, callback });
  };
  const of = (request: FastifyRequest) => {
    const serving = served.get(request);
    if (serving === undefined) throw new Error('an OAuth route ran before its started hook');
    return serving;
  };
  const metadata = (site: Site): ProtectedResourceMetadata => ({
    resource: site.resource,
    authorization_servers: [site.issuer],
    scopes_supported: [MCP_SCOPE],
    bearer_methods_supported: ['header'],
    resource_name: 'Signal service MCP (sign-in)',
  });

  const publicUrl = options.publicBaseUrl ? new URL(options.publicBaseUrl) : null;
  const passThrough = async (request: FastifyRequest, reply: FastifyReply, url?: string) => {
    reply.hijack();
    if (url !== undefined) request.raw.url = url;
    if (publicUrl) {
      // The library names its endpoints (metadata, registration_client_uri) after the request's
      // origin: it reads the public one, whatever forwarded headers the client sent.
      request.raw.headers['x-forwarded-host'] = publicUrl.host;
      request.raw.headers['x-forwarded-proto'] = publicUrl.protocol.slice(0, -1);
      delete request.raw.headers['x-forwarded-for'];
    }
    await of(request).callback(request.raw, reply.raw);
  };

  const page = (reply: FastifyReply, status: number, document: HtmlDocument) =>
    reply
      .code(status)
      .headers({
        'cache-control': 'no-store',
        'x-frame-options': 'DENY',
        'content-security-policy': document.policy,
        'content-type': 'text/html; charset=utf-8',
      })
      .send(document.html);

  /** The interaction of the request's cookie, or an error page when it is gone. */
  const interaction = async (
    request: FastifyRequest,
    reply: FastifyReply,
  ): Promise<InteractionDetails | null> => {
    try {
      const details = await of(request).provider.interactionDetails(request.raw, reply.raw);
      const { uid } = request.params as { uid: string };
      if (details.uid !== uid) throw new Error('interaction mismatch');
      return details;
    } catch {
      page(
        reply,
        400,
        errorDocument(
          'This sign-in has expired',
          'The sign-in request is no longer valid (it expired, or was opened in another browser). Start again from your MCP host.',
        ),
      );
      return null;
    }
  };

  const view = async (
    request: FastifyRequest,
    details: InteractionDetails,
    extra: Partial<ConsentView> = {},
  ): Promise<ConsentView> => {
    const { provider, site } = of(request);
    const clientId = String(details.params.client_id);
    const client = await provider.Client.find(clientId);
    const redirectUri = String(details.params.redirect_uri ?? '');
    let redirectHost = redirectUri;
    let redirectApp = false;
    let redirectSource: string | undefined;
    try {
      const to = new URL(redirectUri);
      // An app's own scheme names the app (cursor://anysphere.cursor-mcp), worded as an app: a
      // scheme may hold dots (www.cursor.com:/cb), which shown bare would read as a web host.
      redirectApp = to.protocol !== 'https:' && to.protocol !== 'http:';
      redirectHost = !redirectApp
        ? to.host || redirectUri
        : to.host
          ? `${to.protocol}//${to.host}`
          : to.protocol;
      redirectSource = redirectApp ? to.protocol : to.origin;
    } catch {}
    return {
      uid: details.uid,
      clientName: client?.clientName ?? clientId,
      clientId,
      redirectHost,
      ...(redirectApp ? { redirectApp } : {}),
      ...(redirectSource ? { redirectSource } : {}),
      resource: site.resource,
      ...extra,
    };
  };

  /** Signs the person in as the key and grants the host the MCP scope on the resource; back to the flow. */
  const finish = async (
    request: FastifyRequest,
    reply: FastifyReply,
    details: InteractionDetails,
    keyId: string,
  ) => {
    const { provider, site } = of(request);
    const clientId = String(details.params.client_id);
    const existing = details.grantId ? await provider.Grant.find(details.grantId) : undefined;
    const grant =
      existing && existing.accountId === keyId
        ? existing
        : new provider.Grant({ accountId: keyId, clientId });
    grant.addResourceScope(site.resource, MCP_SCOPE);
    const scopes = String(details.params.scope ?? '').split(' ');
    const granted = scopes.filter((scope) => scope === 'offline_access' || scope === MCP_SCOPE);
    if (granted.length > 0) grant.addOIDCScope(granted.join(' '));
    const grantId = await grant.save();
    const to = await provider.interactionResult(
      request.raw,
      reply.raw,
      { login: { accountId: keyId }, consent: { grantId } },
      { mergeWithLastSubmission: false },
    );
    return reply.code(303).header('cache-control', 'no-store').redirect(to, 303);
  };

  /**
   * A refused form in the words of every other channel (issueText: what the field must be, what
   * was sent), never zod's. A secret field's value (the API key, the signature) is never shown back
   * on the page: for it only whether it was sent, never what.
   */
  const invalidForm = (schema: z.ZodType, body: unknown, issues: readonly IssueLike[]) => {
    const sent = (body ?? {}) as Record<string, unknown>;
    return issues
      .map((issue) => {
        const field = issue.path.map(String).join('.') || '(form)';
        const top = issue.path[0];
        if (typeof top !== 'string' || !SECRET_FIELDS.has(top)) return issueText(issue, field, schema, sent);
        // Present: what it must be, no "got"; absent: that it is required.
        return Object.hasOwn(sent, top) && sent[top] !== undefined
          ? issueText(issue, field, schema)
          : issueText(issue, field, schema, {});
      })
      .join('; ');
  };

  return async (app) => {
    // The library's endpoints read their own bodies (form or JSON) from the raw request.
    await app.register(async (raw) => {
      raw.addHook('onRequest', started);
      raw.removeAllContentTypeParsers();
      raw.addContentTypeParser('*', (_request, _payload, done) => done(null));
      for (const route of LIBRARY_ROUTES) {
        raw.route({
          method: route.method,
          url: route.url,
          config: route.doc,
          handler: (request, reply) => {
            // An empty path segment names no client or interaction: the library would answer it
            // with a bare text/plain 404, outside the shapes this operation documents.
            if (Object.values(request.params as Record<string, string>).some((v) => v === ''))
              throw new ServiceError('NOT_FOUND', { detail: noRouteDetail(request.method, request.url) });
            if (route.cors === 'ours')
              for (const [name, value] of Object.entries(REGISTRATION_CORS)) reply.raw.setHeader(name, value);
            return passThrough(request, reply);
          },
        });
        // CORS preflights of the endpoints a browser-based host calls.
        if (route.cors === 'library') raw.options(route.url, (request, reply) => passThrough(request, reply));
        if (route.cors === 'ours') {
          raw.options(route.url, async (_request, reply) =>
            reply
              .code(204)
              .headers(
                anyOriginPreflight(route.method, 'Content-Type, Authorization', RATE_LIMIT_EXPOSED_HEADERS),
              )
              .send(),
          );
        }
      }
      // RFC 8414 metadata only, at its own well-known path: the library's discovery document is
      // served under the RFC 8414 name, never under its own, /.well-known/openid-configuration,
      // which announces an OpenID provider (ID tokens, its required members), and this server is
      // none (openid is refused). MCP clients read the RFC 8414 path first (OpenID Connect
      // Discovery is their fallback, an authorization server needs only one of the two).
      const handler = (request: FastifyRequest, reply: FastifyReply) =>
        passThrough(request, reply, '/.well-known/openid-configuration');
      const metadataHandler = (request: FastifyRequest, reply: FastifyReply) => {
        // Without PUBLIC_BASE_URL the library names its endpoints after the request's Host, which
        // any client names: no shared cache may keep that answer for other clients (see
        // originCacheControl). The library sends no Cache-Control of its own here.
        if (!publicUrl) reply.raw.setHeader('cache-control', 'private');
        return handler(request, reply);
      };
      // An issuer with a path (OAUTH_ISSUER=https://host/auth) has its metadata at the well-known
      // path with the issuer's path inserted (RFC 8414 §3.1), the one place MCP clients look for
      // it; the root one stays.
      for (const path of new Set([AS_METADATA_PATH, `${AS_METADATA_PATH}${options.issuerPath ?? ''}`])) {
        raw.get(path, { config: asDoc }, metadataHandler);
        raw.options(path, handler);
      }
    });

    // Names the request's origin without PUBLIC_BASE_URL: cached by no shared cache then (originCacheControl).
    app.get(PROTECTED_RESOURCE_PATH, { config: resourceDoc }, async (request, reply) =>
      reply
        .headers({ ...PUBLIC_CORS, 'cache-control': originCacheControl(options.publicBaseUrl, 300) })
        .send(metadata(options.site(request))),
    );
    app.options(PROTECTED_RESOURCE_PATH, async (_request, reply) =>
      reply.headers(PUBLIC_CORS).code(204).send(),
    );

    await app.register(async (pages) => {
      pages.addHook('onRequest', started);
      // The consent page posts forms alone: a JSON body is 415 UNSUPPORTED_MEDIA_TYPE (in `default`),
      // not the app's 400 INVALID_JSON in a shape these routes' 400 (an HTML page) does not declare.
      pages.removeAllContentTypeParsers();
      pages.addContentTypeParser(
        'application/x-www-form-urlencoded',
        { parseAs: 'string' },
        (_request, body, done) => done(null, Object.fromEntries(new URLSearchParams(body as string))),
      );
      // Any other type: the catalog's 415, worded for a form (its own words name application/json).
      pages.addContentTypeParser('*', (_request, _payload, done) =>
        done(
          new ServiceError('UNSUPPORTED_MEDIA_TYPE', {}, undefined, {
            message: `send the form as ${FORM}`,
          }),
        ),
      );

      pages.get(`${OAUTH_PREFIX}/interaction/:uid`, { config: pageDoc }, async (request, reply) => {
        const details = await interaction(request, reply);
        if (details === null) return reply;
        const wallet = (details.result as { wallet?: string } | undefined)?.wallet;
        return page(
          reply,
          200,
          consentDocument(
            await view(
              request,
              details,
              wallet ? { wallet: { address: wallet, keys: keyChoices(options.walletKeys(wallet)) } } : {},
            ),
          ),
        );
      });

      // The wallet sign-in's nonce under the interaction's own path: a sign-in path, so fetching it
      // takes from the sign-in budget, never the anonymous product budget of /api/keys/nonce.
      pages.get(`${OAUTH_PREFIX}/interaction/:uid/nonce`, { config: nonceDoc }, async (request, reply) => {
        if ((await interaction(request, reply)) === null) return reply;
        let issued: { nonce: string; expiresAt: number };
        try {
          issued = await issueNonce(options.cache, options.nonceTtlMs);
        } catch (err) {
          if (!(err instanceof CacheUnavailableError)) throw err;
          return page(reply, 503, errorDocument('Sign-in is unavailable', 'Please try again shortly.'));
        }
        return reply.headers({ 'cache-control': 'no-store', 'x-frame-options': 'DENY' }).send({
          nonce: issued.nonce,
          domain: options.siweDomain,
          expires_at: new Date(issued.expiresAt).toISOString(),
        } satisfies InteractionNonce);
      });

      pages.post(
        `${OAUTH_PREFIX}/interaction/:uid/key`,
        { config: formDoc('Sign in with an API key (the key the host will act as)', KeySignInForm) },
        async (request, reply) => {
          const details = await interaction(request, reply);
          if (details === null) return reply;
          const form = KeySignInForm.safeParse(request.body ?? {});
          if (!form.success) {
            const error = invalidForm(KeySignInForm, request.body, form.error.issues);
            return page(
              reply,
              400,
              consentDocument(await view(request, details, { error, errorField: 'api_key' })),
            );
          }
          let lookup: Awaited<ReturnType<KeyResolver['resolve']>>;
          try {
            lookup = await options.keys.resolve(form.data.api_key);
          } catch (err) {
            if (!(err instanceof KeyUnverifiableError)) throw err;
            return page(
              reply,
              503,
              consentDocument(
                await view(request, details, {
                  error: 'The key cannot be checked right now; try again shortly.',
                }),
              ),
            );
          }
          if (lookup.status !== 'active') {
            const error =
              lookup.status === 'revoked'
                ? 'This API key was revoked.'
                : 'This is not an API key of this service.';
            return page(
              reply,
              401,
              consentDocument(await view(request, details, { error, errorField: 'api_key' })),
            );
          }
          return finish(request, reply, details, lookup.record.keyId);
        },
      );

      pages.post(
        `${OAUTH_PREFIX}/interaction/:uid/wallet`,
        {
          config: formDoc('Sign in with a wallet (EIP-4361); then choose one of its keys', WalletSignInForm, {
            429: {
              ...html,
              description:
                "A wallet without a key, when the client network's free keys for the UTC day are issued (FREE_KEYS_PER_ADDRESS_PER_DAY, shared with POST /api/keys): the page says so, Retry-After the seconds to the next UTC midnight; the nonce stays usable",
            },
          }),
        },
        async (request, reply) => {
          const details = await interaction(request, reply);
          if (details === null) return reply;
          const form = WalletSignInForm.safeParse(request.body ?? {});
          if (!form.success) {
            return page(
              reply,
              400,
              consentDocument(
                await view(request, details, {
                  error: invalidForm(WalletSignInForm, request.body, form.error.issues),
                }),
              ),
            );
          }
          const check = await checkSignIn({
            message: form.data.message,
            signature: form.data.signature as `0x${string}`,
            domain: options.siweDomain,
            origins: siweOrigins(options.siweDomain, options.publicBaseUrl),
            now: new Date(),
          });
          if (!check.ok)
            return page(reply, 401, consentDocument(await view(request, details, { error: check.message })));
          if (!(await consumeNonce(options.cache, check.nonce, options.nonceTtlMs))) {
            return page(
              reply,
              401,
              consentDocument(
                await view(request, details, {
                  error: 'The sign-in nonce was already used or expired; sign again.',
                }),
              ),
            );
          }
          let held = options.walletKeys(check.address);
          if (held.length === 0) {
            // A wallet without a key gets its free one through POST /api/keys's own issuance, on
            // the same budget per client network and day; a wallet with one is never charged.
            let outcome: Awaited<ReturnType<typeof issueFreeKey>>;
            try {
              outcome = await issueFreeKey(
                {
                  store: options.store,
                  cache: options.cache,
                  perDay: options.freeKeysPerDay,
                  logger: options.logger,
                },
                { address: check.address, clientAddress: request.ip, nonce: check.nonce },
              );
            } catch (err) {
              if (!(err instanceof CacheUnavailableError)) throw err;
              return page(reply, 503, errorDocument('Sign-in is unavailable', 'Please try again shortly.'));
            }
            if ('refused' in outcome && outcome.refused === 'budget') {
              const seconds = outcome.retryAfterSeconds;
              reply.header('retry-after', seconds);
              return page(
                reply,
                429,
                consentDocument(
                  await view(request, details, {
                    error: errorMessage('FREE_KEY_LIMIT_REACHED', { limit: outcome.limit, seconds }),
                  }),
                ),
              );
            }
            // 'exists': the wallet's key was issued and since revoked; it holds none to choose.
            if ('issued' in outcome) await options.registryCaughtUp(outcome.issued.position);
            held = options.walletKeys(check.address);
          }
          await of(request).provider.interactionResult(request.raw, reply.raw, { wallet: check.address });
          return page(
            reply,
            200,
            consentDocument(
              await view(request, details, { wallet: { address: check.address, keys: keyChoices(held) } }),
            ),
          );
        },
      );

      pages.post(
        `${OAUTH_PREFIX}/interaction/:uid/choose`,
        { config: formDoc("After a wallet sign-in: the wallet's key the host will act as", KeyChoiceForm) },
        async (request, reply) => {
          const details = await interaction(request, reply);
          if (details === null) return reply;
          const wallet = (details.result as { wallet?: string } | undefined)?.wallet;
          if (wallet === undefined) {
            return page(
              reply,
              401,
              consentDocument(await view(request, details, { error: 'Sign in first.' })),
            );
          }
          const form = KeyChoiceForm.safeParse(request.body ?? {});
          const held = options.walletKeys(wallet);
          const chosen = form.success ? held.find((k) => k.keyId === form.data.key_id) : undefined;
          if (chosen === undefined) {
            return page(
              reply,
              400,
              consentDocument(
                await view(request, details, {
                  error: 'Choose one of the keys listed.',
                  wallet: { address: wallet, keys: keyChoices(held) },
                }),
              ),
            );
          }
          return finish(request, reply, details, chosen.keyId);
        },
      );

      pages.post(
        `${OAUTH_PREFIX}/interaction/:uid/abort`,
        { config: formDoc('Deny the request (the host is told access_denied)') },
        async (request, reply) => {
          const details = await interaction(request, reply);
          if (details === null) return reply;
          const to = await of(request).provider.interactionResult(
            request.raw,
            reply.raw,
            { error: 'access_denied', error_description: 'the person denied the request' },
            { mergeWithLastSubmission: false },
          );
          return reply.redirect(to, 303);
        },
      );
    });
  };
}

const keyChoices = (records: KeyRecord[]) =>
  records.map((r) => ({ keyId: r.keyId, prefix: r.prefix, plan: r.plan }));
