import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { z } from 'zod';
import { type Cache, CacheUnavailableError } from '../../../adapters/cache/port.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../../adapters/event-store/port.ts';
import { ServiceError } from '../../../contracts/errors.ts';
import { issueKey, KeyRuleError } from '../../keys/key-commands.ts';
import type { PlanTable } from '../../quota/plans.ts';
import { corsHeaders, type GuardConfig, hostAllowed, originAllowed } from '../mcp/request-guard.ts';
import { documented, error } from '../openapi.ts';
import { consumeNonce, issueNonce } from './nonces.ts';
import { checkSignIn } from './siwe-check.ts';

export interface KeyRoutesOptions {
  store: EventStore;
  cache: Cache;
  plans: PlanTable;
  guard: GuardConfig;
  siweDomain: string;
  nonceTtlMs: number;
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

const nonceDoc = documented({
  summary: 'A single-use nonce for Sign-In with Ethereum',
  tags: ['keys'],
  responses: {
    200: { description: 'Nonce to put in the EIP-4361 message', schema: NonceAnswer },
    503: error('SERVICE_UNAVAILABLE: the nonce store cannot be reached'),
  },
});

const signInDoc = documented({
  summary: 'One free API key per wallet, for a signed EIP-4361 message',
  tags: ['keys'],
  body: SignInBody,
  responses: {
    201: { description: 'The key (shown once)', schema: IssuedKeyAnswer },
    400: error('INVALID_REQUEST (the body is not {message, signature}), INVALID_SIWE_MESSAGE'),
    401: error('SIWE_* : the message, signature, domain, time or nonce does not check'),
    409: error('KEY_ALREADY_ISSUED: this address already has its free key'),
    503: error('SERVICE_UNAVAILABLE'),
  },
});

function walletStream(address: string): string {
  return `wallet-${address.toLowerCase()}`;
}

const KEYS_METHODS = 'GET, POST';

/**
 * The free sign-in: GET /api/keys/nonce, then POST /api/keys with a signed EIP-4361 message.
 * One free key per address, decided by the event store: the key's first event goes to stream
 * `wallet-<address>` expecting no stream, so a second sign-in (here or on any replica) fails.
 */
export function keyRoutes(options: KeyRoutesOptions): FastifyPluginAsync {
  const unavailable = () =>
    new ServiceError('SERVICE_UNAVAILABLE', { detail: 'sign-in is unavailable right now; retry shortly' });

  return async (app) => {
    app.addHook('onRequest', async (request: FastifyRequest, reply: FastifyReply) => {
      if (!request.url.startsWith('/api/keys')) return;
      if (!hostAllowed(options.guard, request.headers.host)) throw new ServiceError('FORBIDDEN_HOST');
      const origin = request.headers.origin;
      if (!originAllowed(options.guard, origin)) throw new ServiceError('FORBIDDEN_ORIGIN');
      reply.headers(corsHeaders(origin, KEYS_METHODS));
    });
    app.options('/api/keys', async (_request, reply) => reply.code(204).send());
    app.options('/api/keys/nonce', async (_request, reply) => reply.code(204).send());

    app.get('/api/keys/nonce', { config: nonceDoc }, async (_request, reply) => {
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
          throw unavailable();
        }
        throw err;
      }
    });

    app.post('/api/keys', { config: signInDoc }, async (request, reply) => {
      reply.header('cache-control', 'no-store');
      const body = SignInBody.safeParse(request.body);
      if (!body.success) {
        const text = body.error.issues.map((i) => `${i.path.join('.') || '(body)'}: ${i.message}`).join('; ');
        throw new ServiceError('INVALID_REQUEST', { detail: text });
      }
      const check = await checkSignIn({
        message: body.data.message,
        signature: body.data.signature as `0x${string}`,
        domain: options.siweDomain,
        now: new Date(),
      });
      if (!check.ok) throw new ServiceError(check.code, { detail: check.message });

      try {
        if (!(await consumeNonce(options.cache, check.nonce, options.nonceTtlMs))) {
          throw new ServiceError('SIWE_NONCE_INVALID');
        }
        const issued = await issueKey(options.store, {
          plan: 'free',
          owner: check.address,
          via: 'siwe',
          stream: walletStream(check.address),
        });
        await options
          .registryCaughtUp(issued.position)
          .catch((err: unknown) =>
            options.logger.warn({ err, keyId: issued.keyId }, 'key registry slow to fold a new key'),
          );
        const limits = options.plans.free;
        return reply.code(201).send({
          key: issued.key,
          key_id: issued.keyId,
          prefix: issued.prefix,
          plan: issued.plan,
          owner: issued.owner,
          limits: { monthly: limits.monthly, daily: limits.daily },
          note: 'Store this key now: it is shown only once. Send it as "Authorization: Bearer <key>".',
        });
      } catch (err) {
        if (
          err instanceof WrongExpectedRevisionError ||
          (err instanceof KeyRuleError && err.code === 'key_exists')
        ) {
          throw new ServiceError('KEY_ALREADY_ISSUED', { address: check.address });
        }
        if (err instanceof CacheUnavailableError) {
          throw unavailable();
        }
        throw err;
      }
    });
  };
}
