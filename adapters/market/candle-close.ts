import { type CandleClose, TIMEFRAME_MS, TIMEFRAMES, type Timeframe } from '../../contracts/market.ts';

/**
 * Candle closes with closeTime in (from, to], ordered by time and, at the same instant, finest
 * timeframe first (so a 1h verdict sees the 5m candle that closed with it). Boundaries are UTC
 * epoch-aligned, like the candles themselves.
 */
function closesBetween(from: number, to: number, timeframes: Iterable<Timeframe>): CandleClose[] {
  const out: CandleClose[] = [];
  if (!(to > from)) return out;
  for (const timeframe of timeframes) {
    const ms = TIMEFRAME_MS[timeframe];
    for (let closeTime = from - (from % ms) + ms; closeTime <= to; closeTime += ms) {
      out.push({ timeframe, openTime: closeTime - ms, closeTime });
    }
  }
  const rank = (tf: Timeframe) => TIMEFRAMES.indexOf(tf);
  return out.sort((a, b) => a.closeTime - b.closeTime || rank(a.timeframe) - rank(b.timeframe));
}

type Listener = (close: CandleClose) => void;

/**
 * Fans candle closes out to listeners per timeframe. A throwing listener is reported through
 * `onError` and does not stop the others: one failing verdict must not silence the rest.
 */
export class CandleCloseEmitter {
  readonly #listeners = new Map<Timeframe, Set<Listener>>();

  constructor(private readonly onError: (error: unknown, close: CandleClose) => void) {}

  on(timeframe: Timeframe, listener: Listener): () => void {
    let set = this.#listeners.get(timeframe);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(timeframe, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
    };
  }

  get size(): number {
    let n = 0;
    for (const set of this.#listeners.values()) n += set.size;
    return n;
  }

  /** Emits every close in (from, to] to the listeners subscribed at that moment. */
  emitBetween(from: number, to: number): void {
    const timeframes = [...this.#listeners.entries()].filter(([, s]) => s.size > 0).map(([tf]) => tf);
    for (const close of closesBetween(from, to, timeframes)) {
      for (const listener of [...(this.#listeners.get(close.timeframe) ?? [])]) {
        try {
          listener(close);
        } catch (error) {
          this.onError(error, close);
        }
      }
    }
  }
}
