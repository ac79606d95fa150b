/**
 * What each payer may still take before their earlier calls settle. The answer goes out before
 * the settlement confirms, so a payer with 0.05 USDC could otherwise start ten 0.02 calls at once:
 * all are served, the surplus settlements revert on chain, and our facilitator pays their gas.
 * Before a call is served, the payer's on-chain balance minus what is already in flight for them
 * must cover it; the amount stays in flight until its settlement is final either way.
 *
 * With a shared cache (Redis: `CACHE=redis`) the in-flight sum lives there and is added to by
 * the cache's atomic window debit (limit = the balance just read), so every replica bounds one
 * sum per payer. A replica that dies holding an amount frees it when the window expires
 * (`holdMs`, longer than any settlement can stay open); the window's expiry is set when it is
 * created, so holds added late in one window can be dropped early with it — that window of
 * exposure is bounded by one settlement's amounts. Without a shared cache the sum is per process.
 */

import type { Cache } from '../../adapters/cache/port.ts';
import { KeyedLock } from '../../adapters/keyed-lock.ts';

export type ExposureDecision =
  | { ok: true; release: () => void }
  | { ok: false; balance: bigint; inFlight: bigint };

export class PayerExposure {
  private readonly inFlight = new Map<string, bigint>();
  private readonly checks = new KeyedLock();

  constructor(
    private readonly shared: {
      cache: Cache;
      holdMs: number;
      onReleaseError?: (err: unknown) => void;
    } | null = null,
  ) {}

  /**
   * Admits `amount` for `account` (one payer on one rail: `network|asset|payer`) when `balance()` minus what is in flight covers it. The check and
   * the admission are serialised per payer, so two concurrent calls cannot both pass on the same
   * balance; `release` (once the settlement is final) frees the amount.
   */
  admit(account: string, amount: bigint, balance: () => Promise<bigint>): Promise<ExposureDecision> {
    const key = account.toLowerCase();
    if (this.shared) return this.checks.run(key, () => this.admitShared(this.shared!, key, amount, balance));
    return this.checks.run(key, async () => {
      const available = await balance();
      const held = this.inFlight.get(key) ?? 0n;
      if (available - held < amount) return { ok: false, balance: available, inFlight: held };
      this.inFlight.set(key, held + amount);
      return this.admitted(key, async () => {
        const left = (this.inFlight.get(key) ?? 0n) - amount;
        if (left > 0n) this.inFlight.set(key, left);
        else this.inFlight.delete(key);
      });
    });
  }

  /**
   * The admission's `release`: frees the amount once, however often it is called, serialised
   * like the check, so a balance read in progress either saw this settlement's transfer or still
   * counts it in flight, never neither. Across replicas (shared cache) a read a block stale can
   * over-admit by one settlement's amount.
   */
  private admitted(
    key: string,
    free: () => Promise<unknown>,
    onError?: (err: unknown) => void,
  ): ExposureDecision {
    let released = false;
    return {
      ok: true,
      release: () => {
        if (released) return;
        released = true;
        void this.checks.run(key, free).catch((err: unknown) => onError?.(err));
      },
    };
  }

  private async admitShared(
    shared: NonNullable<PayerExposure['shared']>,
    key: string,
    amount: bigint,
    balance: () => Promise<bigint>,
  ): Promise<ExposureDecision> {
    const available = await balance();
    const limit = available > MAX_SAFE ? Number.MAX_SAFE_INTEGER : Number(available);
    const window = { key: windowKey(key), limit, expiresAt: Date.now() + shared.holdMs };
    const debit = await shared.cache.debitWindows([window], Number(amount));
    if (!debit.ok) return { ok: false, balance: available, inFlight: BigInt(debit.counts[0] ?? 0) };
    // A release that fails leaves the amount held until the window expires.
    return this.admitted(
      key,
      () => shared.cache.releaseWindows([window.key], Number(amount)),
      shared.onReleaseError,
    );
  }

  /** Sum in flight for one account (`network|asset|payer`). */
  async held(account: string): Promise<bigint> {
    const key = account.toLowerCase();
    if (this.shared) return BigInt((await this.shared.cache.readWindows([windowKey(key)]))[0] ?? 0);
    return this.inFlight.get(key) ?? 0n;
  }
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const windowKey = (account: string) => `x402:exposure:${account}`;
