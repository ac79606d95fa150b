import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { z } from 'zod';
import type { EventStore } from '../../../adapters/event-store/port.ts';
import { type EventData, parseDomainEvent, VerdictRecorded } from '../../../contracts/events.ts';
import { REVEAL_AFTER_CANDLES } from '../../../contracts/history.ts';
import { queryInt } from '../../../contracts/http.ts';
import { Exchange, TIMEFRAME_MS, Timeframe } from '../../../contracts/market.ts';
import { verdictHash } from '../../../contracts/verdict-hash.ts';
import { verdictVerifyUrl } from '../../../contracts/verify-url.ts';
import { documented, error } from '../openapi.ts';

/** After this many candles of its timeframe the outcome is known and the content is public. */
export { REVEAL_AFTER_CANDLES };

const Params = z.object({
  stream: z.string().regex(/^verdicts-[A-Z_]+-[A-Z0-9]+-[0-9]+[mhd]$/, 'not a verdict stream'),
  // Decimal digits only: Number('0x10') would read a hex or exponent form as another revision.
  revision: z
    .string()
    .regex(/^(0|[1-9][0-9]{0,14})$/, 'revision must be a decimal integer')
    .transform(Number),
});

const VerifyAnswer = z.object({
  verdictId: z.uuid(),
  stream: z.string(),
  revision: z.number().int(),
  position: z.number().int().describe('Position in the whole log'),
  recordedAt: z.string(),
  exchange: Exchange,
  coin: z.string(),
  timeframe: Timeframe,
  candleCloseTime: z.number().int(),
  engineVersion: z.string(),
  hash: z.string().describe('sha256 of the canonical content, chained to prevHash'),
  prevHash: z.string().nullable().describe('null for the first verdict of its stream'),
  hashValid: z.boolean(),
  previous: z.string().nullable().describe('Verify link of the verdict before this one'),
  revealAt: z.iso.datetime(),
  content: VerdictRecorded.omit({ hash: true }).nullable().describe('null until revealAt'),
});

const verifyDoc = documented({
  summary: 'Public proof that a verdict was recorded, and when; its content once the outcome is known',
  tags: ['verify'],
  params: z.object({ stream: z.string(), revision: queryInt(0, Number.MAX_SAFE_INTEGER) }),
  responses: {
    200: { description: 'The chain link (and the content after revealAt)', schema: VerifyAnswer },
    400: error('invalid_verdict_ref: not a verdict stream, or a revision that is not a decimal integer'),
    404: error('verdict_not_found'),
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

const JSON_TYPE = 'application/json; charset=utf-8';
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

  const compute = async (stream: string, revision: number, at: number): Promise<Answer | null> => {
    const [recorded] = await deps.store.readStream(stream, { fromRevision: revision, maxCount: 1 });
    const event = recorded ? parseDomainEvent(recorded) : null;
    if (event?.type !== 'VerdictRecorded' || event.revision !== revision) return null;
    const d: EventData<'VerdictRecorded'> = event.data;
    const { hash, ...content } = d;
    const revealAt = d.candleCloseTime + REVEAL_AFTER_CANDLES * TIMEFRAME_MS[d.timeframe];
    const revealed = at >= revealAt;
    const previous = await previousVerdict(deps.store, stream, revision);
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
      previous: previous !== null ? verdictVerifyUrl(deps.baseUrl, { stream, revision: previous }) : null,
      revealAt: new Date(revealAt).toISOString(),
      content: revealed ? content : null,
    });
    return {
      body: Buffer.from(json, 'utf8'),
      etag: `"${hash}${revealed ? '' : '-sealed'}"`,
      revealAt,
      revealed,
    };
  };

  return async (app) => {
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
      return reply.header('content-type', JSON_TYPE).send(answer.body);
    };

    app.get('/verify/:stream/:revision', { config: verifyDoc }, (request, reply) => {
      const raw = request.params as { stream: string; revision: string };
      const ifNoneMatch = request.headers['if-none-match'];
      // Only validated refs are remembered, under the key their validated form gives (a revision
      // has no leading zeros, so its text and its number agree): a ref found as sent is valid,
      // and a remembered answer goes out without a validation or an asynchronous hop.
      const known = answers.get(`${raw.stream}/${raw.revision}`);
      if (known !== undefined) {
        const at = now();
        // A sealed answer turns into the revealed one at its reveal time (answerSlowly).
        if (known.revealed || at < known.revealAt) {
          // Sent synchronously: a synchronous handler must return nothing, or Fastify sends it too.
          serve(reply, ifNoneMatch, known, at);
          return;
        }
      }
      return answerSlowly(raw, ifNoneMatch, reply);
    });

    const answerSlowly = async (
      params: unknown,
      ifNoneMatch: string | undefined,
      reply: FastifyReply,
    ): Promise<FastifyReply> => {
      const parsed = Params.safeParse(params);
      if (!parsed.success) {
        return reply
          .code(400)
          .send({ code: 'invalid_verdict_ref', message: parsed.error.issues[0]!.message });
      }
      const { stream, revision } = parsed.data;
      const key = `${stream}/${revision}`;
      const at = now();
      let answer = answers.get(key);
      // A sealed answer turns into the revealed one at its reveal time.
      if (answer === undefined || (!answer.revealed && at >= answer.revealAt)) {
        const computed = await compute(stream, revision, at);
        if (computed === null) {
          return reply
            .code(404)
            .send({ code: 'verdict_not_found', message: `no verdict at ${stream}/${revision}` });
        }
        answer = computed;
        remember(key, answer);
      }
      return serve(reply, ifNoneMatch, answer, at);
    };
  };
}

/** The revision of the verdict before this one (regime shifts sit between verdicts). */
async function previousVerdict(store: EventStore, stream: string, revision: number): Promise<number | null> {
  if (revision === 0) return null;
  const before = await store.readStream(stream, { fromRevision: Math.max(0, revision - 2), maxCount: 2 });
  for (let i = before.length - 1; i >= 0; i--) {
    const e = before[i]!;
    if (e.revision < revision && e.type === 'VerdictRecorded') return e.revision;
  }
  return null;
}
