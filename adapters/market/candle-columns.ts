import type { Candle } from '../../contracts/market.ts';

/**
 * A sorted candle series held as six Float64Array columns instead of one object per candle. The
 * replay keeps every candle file it has read for the life of the process; as objects, each candle
 * costs about 150 bytes of heap (the object and its boxed doubles), as columns 48 bytes off the
 * heap. Candle objects are made only for the window a caller asks for (`slice`).
 */
export class CandleColumns {
  readonly length: number;

  private constructor(
    readonly openTime: Float64Array,
    readonly open: Float64Array,
    readonly high: Float64Array,
    readonly low: Float64Array,
    readonly close: Float64Array,
    readonly volume: Float64Array,
  ) {
    this.length = openTime.length;
  }

  static from(candles: readonly Candle[]): CandleColumns {
    const columns = CandleColumns.ofLength(candles.length);
    for (let i = 0; i < candles.length; i++) columns.set(i, candles[i]!);
    return columns;
  }

  /** A series of `length` candles, all zero, for a reader to fill column by column. */
  static ofLength(length: number): CandleColumns {
    const column = () => new Float64Array(length);
    return new CandleColumns(column(), column(), column(), column(), column(), column());
  }

  set(i: number, c: Candle): void {
    this.openTime[i] = c.openTime;
    this.open[i] = c.open;
    this.high[i] = c.high;
    this.low[i] = c.low;
    this.close[i] = c.close;
    this.volume[i] = c.volume;
  }

  at(i: number): Candle {
    return {
      openTime: this.openTime[i]!,
      open: this.open[i]!,
      high: this.high[i]!,
      low: this.low[i]!,
      close: this.close[i]!,
      volume: this.volume[i]!,
    };
  }

  /** Candles [start, end) as objects, like Array.prototype.slice. */
  slice(start = 0, end = this.length): Candle[] {
    const from = Math.max(0, start);
    const to = Math.min(this.length, end);
    const out: Candle[] = [];
    for (let i = from; i < to; i++) out.push(this.at(i));
    return out;
  }
}
