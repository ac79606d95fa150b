import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type Provider from 'oidc-provider';
import type { Logger } from 'pino';
import type { Cache } from '../../../adapters/cache/port.ts';
import { RedisCache } from '../../../adapters/cache/redis.ts';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { type Config, parseTrustProxy, publicBaseUrl } from '../../../contracts/config.ts';
import { ServiceError } from '../../../contracts/errors.ts';
import { SIGNIN_MCP_PATH } from '../../../contracts/oauth.ts';
import { findById, type KeyRecord, type KeyRegistry } from '../../keys/key-registry.ts';
import { type KeyResolver, KeyUnverifiableError } from '../../keys/key-resolver.ts';
import type { SignInGate, SignInOutcome } from '../mcp/plugin.ts';
import { publicOrigin } from '../public-origin.ts';
import { createProvider } from './provider.ts';
import { bearerToken, challenge, checkAccessToken } from './resource.ts';
import { oauthRoutes, PROTECTED_RESOURCE_PATH, type Site } from './routes.ts';
import { loadSecrets } from './signing-keys.ts';
import { MemoryOAuthStore, type OAuthStore, RedisOAuthStore } from './store.ts';

export interface OAuthSignInDeps {
  config: Config;
  store: EventStore;
  cache: Cache;
  keys: KeyResolver;
  registry: { readonly state: KeyRegistry; readonly running: boolean; readonly error: Error | null };
  registryCaughtUp: (position: number) => Promise<void>;
  logger: Logger;
  /** Whether the MCP routes serve this Host (the DNS-rebinding guard's ALLOWED_HOSTS); none when absent. */
  hostAllowed?: (host: string) => boolean;
  /** The OAuth state engine; by default Redis when the cache is Redis (shared by every api host), else in-process. */
  oauthStore?: OAuthStore;
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');
/** The path of an issuer URL without its trailing slash (`/auth`), undefined when it has none. */
const issuerPath = (issuer: string | undefined): string | undefined => {
  const path = issuer === undefined ? '' : new URL(trimSlash(issuer)).pathname.replace(/\/+$/, '');
  return path === '' ? undefined : path;
};

/** The most origins served with their own authorization server (ALLOWED_HOSTS=* admits any Host). */
const MAX_SITES = 16;

/**
 * OAuth sign-in for MCP hosts: the authorization server (routes and pages) and the gate of
 * /mcp/signin. State lives in an OAuthStore: Redis under `<REDIS_PREFIX>oauth:` when the
 * service runs on Redis, so every api host shares clients, grants, codes and tokens; in-process
 * otherwise (one host; a restart asks hosts to sign in again).
 */
export function oauthSignIn(deps: OAuthSignInDeps): {
  plugin: FastifyPluginAsync;
  gate: SignInGate;
  /** The library instance of an origin (default: publicBaseUrl's), once built (tests mint tokens with it). */
  provider(origin?: string): Provider;
} {
  const { config } = deps;
  const fallback = publicBaseUrl(config);
  const requestOrigin = publicOrigin(config.PUBLIC_BASE_URL);
  const hostAllowed = deps.hostAllowed ?? (() => false);
  const store =
    deps.oauthStore ??
    (deps.cache instanceof RedisCache
      ? new RedisOAuthStore(deps.cache.shared.redis, `${deps.cache.shared.prefix}oauth:`)
      : new MemoryOAuthStore());

  const keyById = (keyId: string): KeyRecord | undefined => {
    const { registry } = deps;
    if (registry.error !== null || !registry.running)
      throw new KeyUnverifiableError('key registry is not running');
    return findById(registry.state, keyId);
  };

  const walletKeys = (address: string): KeyRecord[] => {
    const owner = address.toLowerCase();
    return Object.values(deps.registry.state.byHash).filter(
      (r) => !r.revoked && r.owner.toLowerCase() === owner,
    );
  };

  const log = deps.logger.child({ component: 'oauth' });
  const sites = new Map<string, Site & { built: Provider | null; close: (() => Promise<void>) | null }>();
  let stopped = false;
  let secrets: ReturnType<typeof loadSecrets> | null = null;

  /**
   * The authorization server and resource of one origin. The library names one issuer per
   * instance (its constructor's), and its endpoints after the request's origin: one instance per
   * origin keeps a document's issuer, endpoints and resource on the origin it was read from.
   */
  const siteOf = (origin: string): Site => {
    const known = sites.get(origin);
    if (known) return known;
    const issuer = trimSlash(config.OAUTH_ISSUER ?? origin);
    const resource = `${origin}${SIGNIN_MCP_PATH}`;
    let building: Promise<Provider> | null = null;
    const site: Site & { built: Provider | null; close: (() => Promise<void>) | null } = {
      issuer,
      resource,
      resourceMetadataUrl: `${origin}${PROTECTED_RESOURCE_PATH}`,
      built: null,
      close: null,
      // Built once; a failed build (the store unreachable) is tried again on the next request.
      ready: () => {
        building ??= build(site).catch((err: unknown) => {
          building = null;
          throw err;
        });
        return building;
      },
    };
    sites.set(origin, site);
    return site;
  };

  const build = async (site: Site & { built: Provider | null; close: (() => Promise<void>) | null }) => {
    // Every origin's instance shares the store and the signing and cookie keys.
    secrets ??= loadSecrets(store, config).catch((err: unknown) => {
      secrets = null;
      throw err;
    });
    const { provider: built, close } = createProvider({
      issuer: site.issuer,
      resource: site.resource,
      store,
      secrets: await secrets,
      ttl: {
        accessTokenS: config.OAUTH_ACCESS_TOKEN_TTL_S,
        refreshTokenS: config.OAUTH_REFRESH_TOKEN_TTL_S,
        codeS: config.OAUTH_CODE_TTL_S,
        interactionS: config.OAUTH_INTERACTION_TTL_S,
      },
      keyActive: async (keyId) => {
        const record = keyById(keyId);
        return record !== undefined && !record.revoked;
      },
    });
    // Behind a proxy that terminates TLS, the issuer's https comes from X-Forwarded-Proto: read
    // when TRUST_PROXY believes any proxy, as the configuration reads it (`0` believes none), and
    // only from a believed peer: routes.ts hands the library the headers as Fastify read them.
    built.proxy = parseTrustProxy(config.TRUST_PROXY).any;
    built.on('server_error', (_ctx, err) => log.error({ err }, 'oauth server error'));
    built.on('grant.revoked', (_ctx, grantId) => log.info({ grantId }, 'oauth grant revoked'));
    site.close = close;
    if (stopped) {
      // Stopped while the secrets were loading: nothing will close it later.
      await close();
      throw new Error('the OAuth sign-in has stopped');
    }
    site.built = built;
    return built;
  };

  /**
   * The site a request is served by: PUBLIC_BASE_URL's when set; else the origin the request came
   * to (as the OpenAPI document names it), so a host that connects to http://127.0.0.1:<port>
   * meets 127.0.0.1 in every document and a token for that resource. Only for Hosts the MCP
   * routes serve (ALLOWED_HOSTS: /mcp/signin refuses any other, so its sign-in could not be
   * used), whatever its port (a port forward or a proxy in front names another than PORT); at
   * most MAX_SITES of them, the least recently used given up for a new one (ALLOWED_HOSTS names
   * hosts, not ports: Hosts at made-up ports must not fill the table for good); any other Host
   * gets publicBaseUrl's.
   */
  const siteFor = (request: FastifyRequest): Site => {
    const origin = requestOrigin(request);
    const known = sites.get(origin);
    if (known) {
      // Most recently used last: the table's first entries are the ones given up.
      sites.delete(origin);
      sites.set(origin, known);
      return known;
    }
    if (config.PUBLIC_BASE_URL === undefined && !hostAllowed(request.host)) return siteOf(fallback);
    for (const [key, site] of sites) {
      if (sites.size < MAX_SITES) break;
      if (key === fallback) continue;
      sites.delete(key);
      void site.close?.();
    }
    return siteOf(origin);
  };

  const gate: SignInGate = {
    path: SIGNIN_MCP_PATH,
    async authenticate(request: FastifyRequest): Promise<SignInOutcome> {
      const token = bearerToken(request.headers.authorization);
      const site = siteFor(request);
      try {
        // No token: refused before the store is asked (it may be down; the challenge is still right).
        // A token is accepted only for the resource of the origin it is presented at (its audience).
        const check = await checkAccessToken(
          { provider: token === null ? null : await site.ready(), resource: site.resource, keyById },
          token,
        );
        if (check.ok) return { caller: check.caller };
        return {
          status: check.error === 'insufficient_scope' ? 403 : 401,
          challenge: challenge(site.resourceMetadataUrl, check),
          message: check.description,
        };
      } catch (err) {
        // The sign-in not started (its store unreachable since start) or a read that failed: the
        // catalog's 503, in JSON-RPC with its code and Retry-After (the MCP plugin's error handler).
        deps.logger.warn({ err }, 'access token could not be checked');
        throw new ServiceError('SERVICE_UNAVAILABLE', {
          detail: 'the access token could not be checked right now; retry shortly',
        });
      }
    },
    invalidRequest: (request, description) =>
      challenge(siteFor(request).resourceMetadataUrl, { error: 'invalid_request', description }),
  };

  const plugin: FastifyPluginAsync = async (app) => {
    // The provider's outgoing agent keeps sockets alive: closed with the app, so none outlive shutdown.
    app.addHook('onClose', async () => {
      stopped = true;
      await Promise.all([...sites.values()].map((site) => site.close?.()));
    });
    // Built now when the store answers; the api starts anyway when it does not (Redis down at start).
    await siteOf(fallback)
      .ready()
      .catch((err: unknown) => log.warn({ err }, 'oauth server not started: its store is unreachable'));
    await app.register(
      oauthRoutes({
        site: siteFor,
        issuerPath: issuerPath(config.OAUTH_ISSUER),
        keys: deps.keys,
        walletKeys,
        store: deps.store,
        cache: deps.cache,
        siweDomain: config.SIWE_DOMAIN,
        publicBaseUrl: config.PUBLIC_BASE_URL,
        nonceTtlMs: config.SIWE_NONCE_TTL_MS,
        freeKeysPerDay: config.FREE_KEYS_PER_ADDRESS_PER_DAY,
        registryCaughtUp: deps.registryCaughtUp,
        logger: log,
      }),
    );
  };

  return {
    plugin,
    gate,
    provider: (origin = fallback) => {
      const built = sites.get(trimSlash(origin))?.built;
      if (!built) throw new Error(`the OAuth provider of ${origin} has not started`);
      return built;
    },
  };
}
