import type { CandleClose, Timeframe } from '../../contracts/market.ts';
import { CandleCloseEmitter } from './candle-close.ts';

export interface ReplayClockOptions {
  /** Feed time at which the replay starts (Unix ms). */
  start: number;
  /** End of the data (Unix ms): the clock never goes past it. */
  end: number;
  /** Feed milliseconds per wall millisecond; 0 pauses (manual stepping only). Default 1. */
  speed?: number;
  /** Wall clock, injectable for tests. */
  wallNow?: () => number;
  /** How often a running clock looks for candle closes, wall ms. Default 250. */
  pollMs?: number;
  onListenerError?: (error: unknown, close: CandleClose) => void;
  /**
   * Wall time at which feed time was `start`. Given, the clock is a pure function of the wall
   * clock: every process with the same anchor reads the same time, and a restart does not rewind.
   */
  anchor?: number;
}

/**
 * The replay feed's clock. It runs at wall speed × `speed` once started, can be stepped by
 * hand, and emits candle-close ticks for every boundary it passes, in order.
 *
 * At `end` it stops (now() stays there, `ended` turns true). A looping replay passes an
 * infinite end and serves its data again shifted forward (replay-laps.ts): feed time itself
 * never moves backwards, which verdicts, hash chains and regime projections all assume.
 */
export class ReplayClock {
  readonly start: number;
  readonly end: number;
  readonly speed: number;
  readonly #wallNow: () => number;
  readonly #pollMs: number;
  readonly #emitter: CandleCloseEmitter;
  /** Feed time at wall time `#wallBase`; moved by manual steps. */
  #base: number;
  #wallBase: number;
  #running = false;
  #timer: NodeJS.Timeout | undefined;
  readonly #anchored: boolean;
  /** Feed time up to which closes have been emitted. */
  #emittedTo: number;

  constructor(options: ReplayClockOptions) {
    if (!(options.end >= options.start)) {
      throw new RangeError(`replay clock: end ${options.end} is before start ${options.start}`);
    }
    const speed = options.speed ?? 1;
    if (!(speed >= 0) || !Number.isFinite(speed)) throw new RangeError(`replay clock: bad speed ${speed}`);
    this.start = options.start;
    this.end = options.end;
    this.speed = speed;
    this.#wallNow = options.wallNow ?? Date.now;
    this.#pollMs = options.pollMs ?? 250;
    this.#emitter = new CandleCloseEmitter(
      options.onListenerError ??
        ((error) => {
          throw error;
        }),
    );
    this.#base = options.start;
    this.#anchored = options.anchor !== undefined;
    this.#wallBase = options.anchor ?? this.#wallNow();
    // Anchored, the clock may start far past `start`: closes before now are history, not ticks.
    this.#emittedTo = this.#anchored ? this.#anchoredNow() : options.start;
  }

  #anchoredNow(): number {
    const t = this.#base + (this.#wallNow() - this.#wallBase) * this.speed;
    return Math.max(this.start, Math.min(this.end, Math.floor(t)));
  }

  now(): number {
    if (!this.#running) return this.#anchored ? this.#emittedTo : this.#base;
    const t = this.#base + (this.#wallNow() - this.#wallBase) * this.speed;
    return Math.min(this.end, Math.floor(t));
  }

  get ended(): boolean {
    return this.now() >= this.end;
  }

  get running(): boolean {
    return this.#running;
  }

  /** Runs the clock at `speed` from the current feed time and emits closes as they pass. */
  run(): void {
    if (this.#running) return;
    if (!this.#anchored) this.#wallBase = this.#wallNow();
    this.#running = true;
    if (this.speed > 0) {
      this.#timer = setInterval(() => this.pump(), this.#pollMs);
      this.#timer.unref();
    }
  }

  /** Freezes feed time where it is. */
  pause(): void {
    if (!this.#running) return;
    this.#base = this.now();
    this.#running = false;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Moves feed time forward by `ms` (clamped to the end) and emits the closes passed. */
  advance(ms: number): number {
    if (!(ms >= 0)) throw new RangeError(`replay clock: cannot step by ${ms} ms`);
    return this.setTime(this.now() + ms);
  }

  /** Moves feed time to `t` (never backwards, clamped to the end) and emits the closes passed. */
  setTime(t: number): number {
    const current = this.now();
    if (t < current) throw new RangeError(`replay clock: time only moves forward (${t} < ${current})`);
    this.#base = Math.min(this.end, t);
    this.#wallBase = this.#wallNow();
    this.pump();
    return this.#base;
  }

  /** Emits every close between the last emitted time and now(); stops the timer at the end. */
  pump(): void {
    const now = this.now();
    const from = this.#emittedTo;
    this.#emittedTo = Math.max(from, now);
    this.#emitter.emitBetween(from, now);
    if (now >= this.end && this.#timer !== undefined) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }

  onCandleClose(timeframe: Timeframe, listener: (close: CandleClose) => void): () => void {
    return this.#emitter.on(timeframe, listener);
  }

  stop(): void {
    this.pause();
  }
}
