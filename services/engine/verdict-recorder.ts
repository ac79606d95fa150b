import { backoff } from '../../adapters/event-store/command.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { KeyedLock } from '../../adapters/keyed-lock.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import type { NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { type EventData, newEvent } from '../../contracts/events.ts';
import { EXCHANGES, type MarketKey, TIMEFRAMES } from '../../contracts/market.ts';
import { type VerdictContent, verdictHash } from '../../contracts/verdict-hash.ts';
import { recordedVolatility } from './recorded-volatility.ts';
import { riskShiftOf } from './risk-shift.ts';

export type VerdictDraft = Omit<VerdictContent, 'prevHash'>;
export type RecordedVerdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;

const VERDICT_STREAM_PREFIX = 'verdicts-';

export function verdictStream(market: MarketKey): string {
  return `${VERDICT_STREAM_PREFIX}${market.exchange}-${market.coin}-${market.timeframe}`;
}

/**
 * The market of a verdict stream, as `verdictStream` names it; undefined for any other stream.
 * No venue (EXCHANGES: BINANCE_SPOT joins with '_') or timeframe holds a '-', so the venue is the
 * known name after the prefix and the timeframe the last part, and the coin whatever lies between:
 * a coin with a '-' of its own (the Coin contract allows none, MarketKey any string) still reads back.
 */
export function parseVerdictStream(stream: string): MarketKey | undefined {
  if (!stream.startsWith(VERDICT_STREAM_PREFIX)) return undefined;
  const rest = stream.slice(VERDICT_STREAM_PREFIX.length);
  const exchange = EXCHANGES.find((venue) => rest.startsWith(`${venue}-`));
  const cut = rest.lastIndexOf('-');
  if (exchange === undefined || cut <= exchange.length + 1) return undefined; // no coin
  const timeframe = TIMEFRAMES.find((tf) => tf === rest.slice(cut + 1));
  if (timeframe === undefined) return undefined;
  return { exchange, coin: rest.slice(exchange.length + 1, cut), timeframe };
}

// Recorders in one process take turns per stream: the scheduler and on-demand calls for the
// same market otherwise race each other for its revision, and with candles closing faster than a
// loaded process turns round (a replay at speed) the losing call ran out of tries and answered 503.
// Per store, because a process may hold several (tests); other processes still meet the retries.
const turns = new WeakMap<EventStore, KeyedLock>();

/**
 * Appends a verdict to its market's stream, chained to the previous verdict's hash, and in the
 * same atomic append, after it: a RegimeShifted when the regime differs from the previous call's,
 * and a RiskShifted when the forecast volatility entered or left its top or bottom decile.
 *
 * One verdict per (market, candle close, engine version): its event id is derived from those,
 * and the stream's expected revision makes concurrent recorders agree on one chain. A caller
 * that loses the race gets the verdict that won, which is the same computation on the same
 * candles.
 */
export function recordVerdict(
  store: EventStore,
  draft: VerdictDraft,
  options: { correlationId?: string; maxAttempts?: number } = {},
): Promise<RecordedVerdict> {
  let lock = turns.get(store);
  if (!lock) {
    lock = new KeyedLock();
    turns.set(store, lock);
  }
  return lock.run(verdictStream(draft), () => recordInTurn(store, draft, options));
}

async function recordInTurn(
  store: EventStore,
  draft: VerdictDraft,
  options: { correlationId?: string; maxAttempts?: number },
): Promise<RecordedVerdict> {
  const stream = verdictStream(draft);
  const maxAttempts = options.maxAttempts ?? 5;
  for (let attempt = 1; ; attempt++) {
    const { last, revision } = await lastVerdict(store, stream);
    if (
      last &&
      (last.data.candleCloseTime > draft.candleCloseTime ||
        (last.data.candleCloseTime === draft.candleCloseTime &&
          last.data.engineVersion === draft.engineVersion))
    ) {
      // Already recorded for this candle, or superseded by a later one: serve what is on record.
      // A later candle on record wins whatever engine version recorded it, so a chain never steps
      // back in time: a clock behind the log (a replay started again at its data's start, on a log
      // recorded before the replay clock was kept in it) would otherwise chain a new engine's
      // verdicts for earlier candles after the older engine's later ones. A new engine version may
      // still record the candle on record (one verdict per candle and engine version).
      return last;
    }
    const content: VerdictContent = { ...draft, prevHash: last?.data.hash ?? null };
    const hash = verdictHash(content);
    const verdictId = deterministicId('verdict', stream, draft.candleCloseTime, draft.engineVersion);
    const events: NewEvent[] = [
      newEvent(
        'VerdictRecorded',
        { ...content, hash },
        { id: verdictId, correlationId: options.correlationId },
      ),
    ];
    if (last && last.data.regime !== draft.regime) {
      events.push(
        newEvent(
          'RegimeShifted',
          {
            exchange: draft.exchange,
            coin: draft.coin,
            timeframe: draft.timeframe,
            from: last.data.regime,
            to: draft.regime,
            confidence: draft.confidence,
            price: draft.price,
            candleCloseTime: draft.candleCloseTime,
            feed: draft.feed,
            verdictEventId: verdictId,
          },
          {
            id: deterministicId('regime-shift', verdictId),
            causationId: verdictId,
            correlationId: options.correlationId,
          },
        ),
      );
    }
    const risk = last ? riskShiftDraft(last.data, draft, verdictId) : null;
    if (risk) {
      events.push(
        newEvent('RiskShifted', risk, {
          id: deterministicId('risk-shift', verdictId),
          causationId: verdictId,
          correlationId: options.correlationId,
        }),
      );
    }
    try {
      await store.append(stream, events, { expectedRevision: revision ?? 'no_stream' });
      const written = await store.readStream(stream, {
        fromRevision: revision === null ? 0 : revision + 1,
        maxCount: 1,
      });
      return written[0] as RecordedVerdict;
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError) || attempt >= maxAttempts) throw err;
      // Writers in other processes lost the same race in step: a random pause lets one win.
      await backoff(attempt);
    }
  }
}

export async function lastVerdict(
  store: EventStore,
  stream: string,
): Promise<{ last: RecordedVerdict | null; revision: number | null }> {
  const revision = await store.streamRevision(stream);
  if (revision === null) return { last: null, revision };
  // The stream holds verdicts, each followed by at most a regime and a risk shift; walk back to
  // the newest verdict.
  const from = Math.max(0, revision - 2);
  const tail = await store.readStream(stream, { fromRevision: from });
  for (let i = tail.length - 1; i >= 0; i--) {
    if (tail[i]!.type === 'VerdictRecorded') return { last: tail[i] as RecordedVerdict, revision };
  }
  return { last: null, revision };
}

/** The verdict's forecast percentile as recorded in its inputs; null on verdicts without one. */
function percentileOf(inputs: Record<string, unknown>): number | null {
  return typeof inputs.vol_percentile === 'number' ? inputs.vol_percentile : null;
}

/** The RiskShifted this verdict carries after `prior`, or null (see riskShiftOf). */
function riskShiftDraft(
  prior: EventData<'VerdictRecorded'>,
  draft: VerdictDraft,
  verdictId: string,
): EventData<'RiskShifted'> | null {
  const priorPercentile = percentileOf(prior.inputs);
  const percentile = percentileOf(draft.inputs);
  const shift = riskShiftOf(priorPercentile, percentile);
  const vol = recordedVolatility(draft.inputs, draft.timeframe);
  if (!shift || !vol) return null;
  return {
    exchange: draft.exchange,
    coin: draft.coin,
    timeframe: draft.timeframe,
    ...shift,
    percentile: percentile!,
    priorPercentile: priorPercentile!,
    expectedMovePct: vol.expected_move_pct,
    bandLow: vol.band_low,
    bandHigh: vol.band_high,
    bandCoverage: vol.band_coverage,
    horizonCandles: vol.horizon_candles,
    price: draft.price,
    candleCloseTime: draft.candleCloseTime,
    feed: draft.feed,
    verdictEventId: verdictId,
  };
}
