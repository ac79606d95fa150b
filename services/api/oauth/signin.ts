import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type Provider from 'oidc-provider';
import type { Logger } from 'pino';
import type { Cache } from '../../../adapters/cache/port.ts';
import { RedisCache } from '../../../adapters/cache/redis.ts';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { type Config, publicBaseUrl } from '../../../contracts/config.ts';
import { SIGNIN_MCP_PATH } from '../../../contracts/oauth.ts';
import { findById, type KeyRecord, type KeyRegistry } from '../../keys/key-registry.ts';
import { type KeyResolver, KeyUnverifiableError } from '../../keys/key-resolver.ts';
import type { SignInGate, SignInOutcome } from '../mcp/plugin.ts';
import { createProvider } from './provider.ts';
import { bearerToken, challenge, checkAccessToken } from './resource.ts';
import { oauthRoutes, PROTECTED_RESOURCE_PATH } from './routes.ts';
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
  /** The OAuth state engine; by default Redis when the cache is Redis (shared by every api host), else in-process. */
  oauthStore?: OAuthStore;
}

const trimSlash = (url: string) => url.replace(/\/+$/, '');

/**
 * OAuth sign-in for MCP hosts: the authorization server (routes and pages) and the gate of
 * /mcp/signin. State lives in an OAuthStore: Redis under `<REDIS_PREFIX>oauth:` when the
 * service runs on Redis, so every api host shares clients, grants, codes and tokens; in-process
 * otherwise (one host; a restart asks hosts to sign in again).
 */
export function oauthSignIn(deps: OAuthSignInDeps): {
  plugin: FastifyPluginAsync;
  gate: SignInGate;
  /** The library instance, once the plugin has started (tests mint tokens with it). */
  provider(): Provider;
} {
  const { config } = deps;
  const base = publicBaseUrl(config);
  const issuer = trimSlash(config.OAUTH_ISSUER ?? base);
  const resource = `${base}${SIGNIN_MCP_PATH}`;
  const resourceMetadataUrl = `${base}${PROTECTED_RESOURCE_PATH}`;
  const store =
    deps.oauthStore ??
    (deps.cache instanceof RedisCache
      ? new RedisOAuthStore(deps.cache.shared.redis, `${deps.cache.shared.prefix}oauth:`)
      : new MemoryOAuthStore());
  let provider: Provider | null = null;

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

  const gate: SignInGate = {
    path: SIGNIN_MCP_PATH,
    async authenticate(request: FastifyRequest): Promise<SignInOutcome> {
      const token = bearerToken(request.headers.authorization);
      try {
        // No token: refused before the store is asked (it may be down; the challenge is still right).
        const check = await checkAccessToken(
          { provider: token === null ? null : await ready(), resource, keyById },
          token,
        );
        if (check.ok) return { caller: check.caller };
        return {
          status: check.error === 'insufficient_scope' ? 403 : 401,
          challenge: challenge(resourceMetadataUrl, check),
          message: check.description,
        };
      } catch (err) {
        deps.logger.warn({ err }, 'access token could not be checked');
        return {
          status: 503,
          challenge: null,
          message: 'the access token could not be checked right now; retry shortly',
        };
      }
    },
  };

  const log = deps.logger.child({ component: 'oauth' });
  /** Closes the provider's outgoing agent (its keep-alive sockets); set once it is built. */
  let closeOutbound: (() => Promise<void>) | null = null;
  let stopped = false;
  const build = async (): Promise<Provider> => {
    const secrets = await loadSecrets(store, config);
    const { provider: built, close } = createProvider({
      issuer,
      resource,
      store,
      secrets,
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
    // Behind a proxy that terminates TLS, the issuer's https comes from X-Forwarded-Proto.
    built.proxy = config.TRUST_PROXY !== '';
    built.on('server_error', (_ctx, err) => log.error({ err }, 'oauth server error'));
    built.on('grant.revoked', (_ctx, grantId) => log.info({ grantId }, 'oauth grant revoked'));
    closeOutbound = close;
    if (stopped) {
      // Stopped while the secrets were loading: nothing will close it later.
      await close();
      throw new Error('the OAuth sign-in has stopped');
    }
    provider = built;
    return built;
  };
  /** The provider, built once; a failed build (the store unreachable) is tried again on the next request. */
  let building: Promise<Provider> | null = null;
  const ready = (): Promise<Provider> => {
    building ??= build().catch((err: unknown) => {
      building = null;
      throw err;
    });
    return building;
  };

  const plugin: FastifyPluginAsync = async (app) => {
    // The provider's outgoing agent keeps sockets alive: closed with the app, so none outlive shutdown.
    app.addHook('onClose', async () => {
      stopped = true;
      await closeOutbound?.();
    });
    // Built now when the store answers; the api starts anyway when it does not (Redis down at start).
    await ready().catch((err: unknown) =>
      log.warn({ err }, 'oauth server not started: its store is unreachable'),
    );
    await app.register(
      oauthRoutes({
        ready,
        issuer,
        resource,
        keys: deps.keys,
        walletKeys,
        store: deps.store,
        cache: deps.cache,
        siweDomain: config.SIWE_DOMAIN,
        publicBaseUrl: config.PUBLIC_BASE_URL,
        nonceTtlMs: config.SIWE_NONCE_TTL_MS,
        registryCaughtUp: deps.registryCaughtUp,
        logger: log,
      }),
    );
  };

  return {
    plugin,
    gate,
    provider: () => {
      if (provider === null) throw new Error('the OAuth provider has not started');
      return provider;
    },
  };
}
