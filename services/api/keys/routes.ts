import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import { type Cache, CacheUnavailableError } from '../../../adapters/cache/port.ts';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { ServiceError } from '../../../contracts/errors.ts';
import type { PlanTable } from '../../metering/plans.ts';
import {
  corsHeaders,
  type GuardConfig,
  hostAllowed,
  logRefusedHost,
  originAllowed,
} from '../mcp/request-guard.ts';
import { declared, refusal } from '../openapi.ts';
import { issueFreeKey } from './free-key.ts';
import { consumeNonce, issueNonce } from './nonces.ts';
import { checkSignIn, siweOrigins } from './siwe-check.ts';

export interface KeyRoutesOptions {
  store: EventStore;
  cache: Cache;
  plans: PlanTable;
  guard: GuardConfig;
  siweDomain: string;
  /** PUBLIC_BASE_URL: a message's uri must have the service's public origin (`siweOrigins`). */
  publicBaseUrl?: string | undefined;
  nonceTtlMs: number;
  /** FREE_KEYS_PER_ADDRESS_PER_DAY: free keys per client network and UTC day (issueFreeKey). */
  freeKeysPerDay: number;
  /** Resolves once the key registry has folded the given log position (read-your-writes). */
  registryCaughtUp: (position: number) => Promise<void>;
  logger: Logger;
}

const SignInBody = z.strictObject({
  message: z.string().min(1).max(4_096),
  signature: z.string().regex(/^0x[0-9a-fA-F]+$/, '0x-prefixed hex'),
});

const NonceAnswer = z.object({
  nonce: z.string(),
  domain: z.string().describe('The domain the EIP-4361 message must name'),
  expires_at: z.iso.datetime(),
  statement: z.string(),
});

const IssuedKeyAnswer = z.object({
  key: z.string().describe('Shown once: store it'),
  key_id: z.string(),
  prefix: z.string(),
  plan: z.literal('free'),
  owner: z.string(),
  limits: z.object({ monthly: z.number().int(), daily: z.number().int().nullable() }),
  note: z.string(),
});

const FORBIDDEN = refusal(
  ['FORBIDDEN_HOST', 'FORBIDDEN_ORIGIN'],
  'A Host or Origin this server does not serve',
);

const nonceRoute = declared({
  summary: 'A single-use nonce for Sign-In with Ethereum',
  tags: ['keys'],
  sends: ['Cache-Control'],
  responses: {
    200: { description: 'Nonce to put in the EIP-4361 message', schema: NonceAnswer },
    403: FORBIDDEN,
    503: refusal(['SERVICE_UNAVAILABLE'], 'The nonce store cannot be reached'),
  },
});

const signInRoute = declared({
  summary: 'One free API key per wallet, for a signed EIP-4361 message',
  description:
    'At most FREE_KEYS_PER_ADDRESS_PER_DAY free keys (3 by default) per client network (an IPv4 address, an IPv6 /64) and UTC day, this route and the OAuth wallet sign-in together; past it 429 FREE_KEY_LIMIT_REACHED with Retry-After (the seconds to the next UTC midnight), and the nonce stays usable.',
  tags: ['keys'],
  sends: ['Cache-Control'],
  body: SignInBody,
  responses: {
    201: { description: 'The key (shown once)', schema: IssuedKeyAnswer },
    400: refusal(
      ['INVALID_FIELD', 'INVALID_SIWE_MESSAGE', 'INVALID_JSON', 'JSON_TOO_DEEP'],
      'The body is not {message, signature} (INVALID_FIELD names the field), or the message is not EIP-4361',
    ),
    401: refusal(
      [
        'SIWE_DOMAIN_MISMATCH',
        'SIWE_EXPIRED',
        'SIWE_NOT_YET_VALID',
        'SIWE_SIGNATURE_INVALID',
        'SIWE_NONCE_INVALID',
      ],
      'The message, signature, domain, time or nonce does not check',
    ),
    403: FORBIDDEN,
    409: refusal(['KEY_ALREADY_ISSUED']),
    429: refusal(
      ['FREE_KEY_LIMIT_REACHED'],
      "The client network's free keys for the UTC day are issued; Retry-After: the seconds to the next UTC midnight",
    ),
    503: refusal(['SERVICE_UNAVAILABLE']),
  },
});

const signInUnavailable = () =>
  new ServiceError('SERVICE_UNAVAILABLE', { detail: 'sign-in is unavailable right now; retry shortly' });

/**
 * A signed message checked, its nonce spent, and the address's one free key issued (issueFreeKey):
 * the key's first event goes to stream `wallet-<address>` expecting no stream, so a second sign-in
 * (here or on any replica) is refused as KEY_ALREADY_ISSUED; and the client network's budget for
 * the day must have room, else FREE_KEY_LIMIT_REACHED.
 */
async function signIn(options: KeyRoutesOptions, body: z.infer<typeof SignInBody>, clientAddress: string) {
  const check = await checkSignIn({
    message: body.message,
    signature: body.signature as `0x${string}`,
    domain: options.siweDomain,
    origins: siweOrigins(options.siweDomain, options.publicBaseUrl),
    now: new Date(),
  });
  if (!check.ok) throw new ServiceError(check.code, { detail: check.message });

  try {
    if (!(await consumeNonce(options.cache, check.nonce, options.nonceTtlMs))) {
      throw new ServiceError('SIWE_NONCE_INVALID');
    }
    const outcome = await issueFreeKey(
      { store: options.store, cache: options.cache, perDay: options.freeKeysPerDay, logger: options.logger },
      { address: check.address, clientAddress, nonce: check.nonce },
    );
    if ('refused' in outcome) {
      if (outcome.refused === 'exists')
        throw new ServiceError('KEY_ALREADY_ISSUED', { address: check.address });
      const seconds = outcome.retryAfterSeconds;
      throw new ServiceError('FREE_KEY_LIMIT_REACHED', { limit: outcome.limit, seconds }, undefined, {
        headers: { 'retry-after': String(seconds) },
      });
    }
    const { issued } = outcome;
    await options
      .registryCaughtUp(issued.position)
      .catch((err: unknown) =>
        options.logger.warn({ err, keyId: issued.keyId }, 'key registry slow to fold a new key'),
      );
    const limits = options.plans.free;
    return {
      key: issued.key,
      key_id: issued.keyId,
      prefix: issued.prefix,
      plan: issued.plan,
      owner: issued.owner,
      limits: { monthly: limits.monthly, daily: limits.daily },
      note: 'Store this key now: it is shown only once. Send it as "Authorization: Bearer <key>".',
    };
  } catch (err) {
    if (err instanceof CacheUnavailableError) {
      throw signInUnavailable();
    }
    throw err;
  }
}

const KEYS_METHODS = 'GET, POST';

/**
 * The free sign-in: GET /api/keys/nonce, then POST /api/keys with a signed EIP-4361 message.
 * One free key per address, decided by the event store: the key's first event goes to stream
 * `wallet-<address>` expecting no stream, so a second sign-in (here or on any replica) fails; and
 * at most FREE_KEYS_PER_ADDRESS_PER_DAY per client network and UTC day (issueFreeKey).
 */
export function keyRoutes(options: KeyRoutesOptions): FastifyPluginAsync {
  return async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    // This plugin is encapsulated: the hook runs for its own routes (/api/keys, /api/keys/nonce)
    // alone, however their path is spelled. A check of the raw URL here let /api/%6beys past it.
    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      if (!hostAllowed(options.guard, request.headers.host)) {
        logRefusedHost(request.log, request.headers.host);
        throw new ServiceError('FORBIDDEN_HOST');
      }
      const origin = request.headers.origin;
      if (!originAllowed(options.guard, origin)) throw new ServiceError('FORBIDDEN_ORIGIN');
      reply.headers(corsHeaders(origin, KEYS_METHODS));
    });
    app.options('/api/keys', async (_request, reply) => reply.code(204).send());
    app.options('/api/keys/nonce', async (_request, reply) => reply.code(204).send());

    app.get('/api/keys/nonce', nonceRoute, async (_request, reply) => {
      try {
        const { nonce, expiresAt } = await issueNonce(options.cache, options.nonceTtlMs);
        reply.header('cache-control', 'no-store');
        return {
          nonce,
          domain: options.siweDomain,
          expires_at: new Date(expiresAt).toISOString(),
          statement: 'Sign in to get a free API key.',
        };
      } catch (err) {
        if (err instanceof CacheUnavailableError) {
          throw signInUnavailable();
        }
        throw err;
      }
    });

    app.post('/api/keys', signInRoute, async (request, reply) => {
      reply.header('cache-control', 'no-store');
      return reply.code(201).send(await signIn(options, request.body, request.ip));
    });
  };
}
