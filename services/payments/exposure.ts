/**
 * What each payer may still take before their earlier calls settle. The answer goes out before
 * the settlement confirms, so a payer with 0.05 USDC could otherwise start ten 0.02 calls at once:
 * all are served, the surplus settlements revert on chain, and our facilitator pays their gas.
 * Before a call is served, the payer's on-chain balance minus what is already in flight for them
 * must cover it; the amount stays in flight until its settlement is final either way.
 *
 * Per process: replicas each bound their own in-flight sum, so across N replicas a payer can
 * have at most N times one balance in flight (the surplus is refused by the pre-settlement
 * verify of whichever replica settles second, which submits nothing).
 */

type Task<T> = () => Promise<T>;

/** A queue per key: tasks on one key run one at a time, in order; other keys run freely. */
export class KeyedSerialiser {
  private readonly tails = new Map<string, Promise<unknown>>();

  run<T>(key: string, task: Task<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const next = previous.then(task, task);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }

  /** Keys with a task queued or running (for tests and metrics). */
  get busy(): number {
    return this.tails.size;
  }
}

export type ExposureDecision =
  | { ok: true; release: () => void }
  | { ok: false; balance: bigint; inFlight: bigint };

export class PayerExposure {
  private readonly inFlight = new Map<string, bigint>();
  private readonly checks = new KeyedSerialiser();

  /**
   * Admits `amount` for `account` (one payer on one rail: `network|asset|payer`) when `balance()` minus what is in flight covers it. The check and
   * the admission are serialised per payer, so two concurrent calls cannot both pass on the same
   * balance; `release` (once the settlement is final) frees the amount.
   */
  admit(account: string, amount: bigint, balance: () => Promise<bigint>): Promise<ExposureDecision> {
    const key = account.toLowerCase();
    return this.checks.run(key, async () => {
      const available = await balance();
      const held = this.inFlight.get(key) ?? 0n;
      if (available - held < amount) return { ok: false, balance: available, inFlight: held };
      this.inFlight.set(key, held + amount);
      let released = false;
      return {
        ok: true,
        // Serialised like the check: a balance read in progress either saw this settlement's
        // transfer or still counts it in flight, never neither.
        release: () => {
          if (released) return;
          released = true;
          void this.checks.run(key, async () => {
            const left = (this.inFlight.get(key) ?? 0n) - amount;
            if (left > 0n) this.inFlight.set(key, left);
            else this.inFlight.delete(key);
          });
        },
      };
    });
  }

  /** Sum in flight for one account (`network|asset|payer`). */
  held(account: string): bigint {
    return this.inFlight.get(account.toLowerCase()) ?? 0n;
  }
}
