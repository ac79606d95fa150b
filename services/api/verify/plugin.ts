import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { ServiceError } from '../../../contracts/errors.ts';
import { type EventData, parseDomainEvent, VerdictRecorded } from '../../../contracts/events.ts';
import { REVEAL_AFTER_CANDLES } from '../../../contracts/history.ts';
import { Exchange, TIMEFRAME_MS, Timeframe } from '../../../contracts/market.ts';
import { verdictHash } from '../../../contracts/verdict-hash.ts';
import { verdictVerifyUrl } from '../../../contracts/verify-url.ts';
import { JSON_UTF8 } from '../../shared/media-types.ts';
import { openToAnyOrigin } from '../cors.ts';
import { errorHandler } from '../errors.ts';
import { declared, refusal } from '../openapi.ts';

/** After this many candles of its timeframe the outcome is known and the content is public. */
export { REVEAL_AFTER_CANDLES };

const NOT_DECIMAL = 'revision must be a decimal integer';
const Params = z.object({
  stream: z
    .string()
    .regex(/^verdicts-[A-Z_]+-[A-Z0-9]+-[0-9]+[mhd]$/, 'not a verdict stream')
    .describe('A verdict stream: verdicts-<EXCHANGE>-<COIN>-<timeframe>'),
  // Decimal digits only: Number('0x10') would read a hex or exponent form as another revision,
  // and the remembered answers are keyed by the revision's text.
  revision: z.preprocess(
    (value) => (typeof value === 'string' && /^(0|[1-9][0-9]{0,14})$/.test(value) ? Number(value) : value),
    z
      .number({ error: NOT_DECIMAL })
      .int({ error: NOT_DECIMAL })
      .min(0, { error: NOT_DECIMAL })
      .max(Number.MAX_SAFE_INTEGER, { error: NOT_DECIMAL }),
  ),
});

const VerifyAnswer = z.object({
  verdictId: z.uuid(),
  stream: z.string(),
  revision: z.number().int(),
  position: z.number().int().describe('Position in the whole log'),
  recordedAt: z.iso.datetime(),
  exchange: Exchange,
  coin: z.string(),
  timeframe: Timeframe,
  candleCloseTime: z
    .number()
    .int()
    .describe('Close of the candle the verdict is for, Unix milliseconds (as hashed in the chain)'),
  engineVersion: z.string(),
  hash: z.string().describe('sha256 of the canonical content, chained to prevHash'),
  prevHash: z.string().nullable().describe('null for the first verdict of its stream'),
  hashValid: z.boolean(),
  previous: z.string().nullable().describe('Verify link of the verdict before this one'),
  revealAt: z.iso.datetime(),
  content: VerdictRecorded.omit({ hash: true }).nullable().describe('null until revealAt'),
});

const verifyRoute = declared({
  summary: 'Public proof that a verdict was recorded, and when; its content once the outcome is known',
  tags: ['verify'],
  sends: ['Cache-Control', 'ETag'],
  params: Params,
  codes: { fields: { stream: 'invalid_verdict_ref', revision: 'invalid_verdict_ref' } },
  responses: {
    200: {
      description: 'The chain link (and the content after revealAt)',
      schema: VerifyAnswer,
      headers: {
        ETag: 'The verdict hash (sealed until revealAt)',
        'Cache-Control': 'immutable once revealed',
      },
    },
    304: { description: 'If-None-Match matched' },
    400: refusal(
      ['invalid_verdict_ref'],
      'Not a verdict stream, or a revision that is not a decimal integer',
    ),
    404: refusal(['verdict_not_found']),
  },
});

/** Answers kept in memory: a verify link is fetched again and again (shared, embedded in webhooks). */
const CACHED_ANSWERS = 10_000;

interface Answer {
  /** The JSON body, serialised and encoded once. */
  body: Buffer;
  etag: string;
  revealAt: number;
  revealed: boolean;
}

/** A revealed answer never changes: a day in any cache, and no revalidation while fresh. */
const IMMUTABLE = 'public, max-age=86400, immutable';

/**
 * GET /verify/:stream/:revision — public proof that a verdict was recorded, and when. Before its
 * outcome is known it shows only the chain (hash, previous hash, recording time), which a holder
 * of the verdict checks by hashing what they received; once REVEAL_AFTER_CANDLES candles have
 * closed, the content is shown too, so anyone can audit the track record.
 *
 * A recorded verdict never changes, so its answer is computed once (two reads, a hash check, the
 * JSON) and served from memory after that: for good once revealed (`immutable`, with an ETag for
 * revalidation), or until its reveal time before that. Unknown refs are never cached: the verdict
 * may be recorded a moment later.
 */
export function verifyRoutes(deps: {
  store: EventStore;
  baseUrl: string;
  now?: () => number;
}): FastifyPluginAsync {
  const now = deps.now ?? Date.now;
  const answers = new Map<string, Answer>();
  const remember = (key: string, answer: Answer) => {
    if (answers.size >= CACHED_ANSWERS) answers.delete(answers.keys().next().value!);
    answers.set(key, answer);
  };

  const compute = (stream: string, revision: number, at: number) =>
    computeAnswer(deps.store, deps.baseUrl, stream, revision, at);

  return async (app) => {
    // Anyone may check a verdict's hash from their own page: public, read-only.
    openToAnyOrigin(app);
    const serve = (
      reply: FastifyReply,
      ifNoneMatch: string | undefined,
      answer: Answer,
      at: number,
    ): FastifyReply => {
      reply
        .header(
          'cache-control',
          answer.revealed
            ? IMMUTABLE
            : `public, max-age=${Math.max(1, Math.min(60, Math.ceil((answer.revealAt - at) / 1000)))}`,
        )
        .header('etag', answer.etag);
      if (ifNoneMatch === answer.etag) return reply.code(304).send();
      return reply.header('content-type', JSON_UTF8).send(answer.body);
    };

    app.setErrorHandler(errorHandler((error) => ({ code: error.code, message: error.message })));
    app
      .withTypeProvider<ZodTypeProvider>()
      .get('/verify/:stream/:revision', verifyRoute, (request, reply) => {
        const { stream, revision } = request.params;
        const ifNoneMatch = request.headers['if-none-match'];
        const key = `${stream}/${revision}`;
        const known = answers.get(key);
        const at = now();
        // A remembered answer goes out without an asynchronous hop; a sealed one turns into the
        // revealed one at its reveal time (computed again below).
        if (known !== undefined && (known.revealed || at < known.revealAt)) {
          // Sent synchronously: a synchronous handler must return nothing, or Fastify sends it too.
          serve(reply, ifNoneMatch, known, at);
          return;
        }
        return compute(stream, revision, at).then((answer) => {
          if (answer === null) throw new ServiceError('verdict_not_found', { ref: key });
          remember(key, answer);
          return serve(reply, ifNoneMatch, answer, at);
        });
      });
  };
}

/** The answer for a verdict ref (two reads, a hash check, the JSON), or null when it names no verdict. */
async function computeAnswer(
  store: EventStore,
  baseUrl: string,
  stream: string,
  revision: number,
  at: number,
): Promise<Answer | null> {
  const [recorded] = await store.readStream(stream, { fromRevision: revision, maxCount: 1 });
  const event = recorded ? parseDomainEvent(recorded) : null;
  if (event?.type !== 'VerdictRecorded' || event.revision !== revision) return null;
  const d: EventData<'VerdictRecorded'> = event.data;
  const { hash, ...content } = d;
  const revealAt = d.candleCloseTime + REVEAL_AFTER_CANDLES * TIMEFRAME_MS[d.timeframe];
  const revealed = at >= revealAt;
  const previous = await previousVerdict(store, stream, revision);
  const json = JSON.stringify({
    verdictId: event.id,
    stream,
    revision,
    position: event.position,
    recordedAt: event.recordedAt,
    exchange: d.exchange,
    coin: d.coin,
    timeframe: d.timeframe,
    candleCloseTime: d.candleCloseTime,
    engineVersion: d.engineVersion,
    hash,
    prevHash: d.prevHash,
    hashValid: verdictHash(content) === hash,
    previous: previous !== null ? verdictVerifyUrl(baseUrl, { stream, revision: previous }) : null,
    revealAt: new Date(revealAt).toISOString(),
    content: revealed ? content : null,
  });
  return {
    body: Buffer.from(json, 'utf8'),
    etag: `"${hash}${revealed ? '' : '-sealed'}"`,
    revealAt,
    revealed,
  };
}

/** The revision of the verdict before this one (a regime and a risk shift may sit between verdicts). */
async function previousVerdict(store: EventStore, stream: string, revision: number): Promise<number | null> {
  if (revision === 0) return null;
  const before = await store.readStream(stream, { fromRevision: Math.max(0, revision - 3), maxCount: 3 });
  for (let i = before.length - 1; i >= 0; i--) {
    const e = before[i]!;
    if (e.revision < revision && e.type === 'VerdictRecorded') return e.revision;
  }
  return null;
}
