import { setBounded } from '../shared/bounded-map.ts';
import { identityKey, type PaymentIdentity } from './payment-state.ts';

/** Broadcast hashes remembered for replays, at most (the oldest is dropped first). */
const MAX_SENT = 10_000;

/**
 * Tells a paid call the hash of its settlement transaction as soon as it is broadcast, before
 * the receipt: the answer carries it and the receipt wait goes on in the background. Only the
 * in-process facilitator can tell (it signs the transaction); with a remote one the call
 * answers without a hash and the receipt is looked up by presenting the payment again.
 */
export class SubmissionWatch {
  private readonly waiting = new Map<string, (hash: `0x${string}`) => void>();
  private readonly sentHashes = new Map<string, `0x${string}`>();

  /** Resolves with the hash once broadcast, or null after `timeoutMs` or when `cancel` runs. */
  expect(id: PaymentIdentity, timeoutMs: number): { hash: Promise<`0x${string}` | null>; cancel(): void } {
    const key = identityKey(id);
    let cancel: () => void = () => undefined;
    const hash = new Promise<`0x${string}` | null>((resolve) => {
      const timer = setTimeout(() => finish(null), timeoutMs);
      const finish = (value: `0x${string}` | null) => {
        clearTimeout(timer);
        if (this.waiting.get(key) === done) this.waiting.delete(key);
        resolve(value);
      };
      const done = (value: `0x${string}`) => finish(value);
      this.waiting.set(key, done);
      cancel = () => finish(null);
    });
    return { hash, cancel };
  }

  /**
   * The last transaction broadcast for this payment by this process, if any: a replay reads it
   * while the settle call that sent it still waits for its receipt (the log names the hash only
   * once that call ends). A settle that failed with nothing recorded here sent nothing.
   */
  sent(id: PaymentIdentity): `0x${string}` | null {
    return this.sentHashes.get(identityKey(id)) ?? null;
  }

  /**
   * Called by the facilitator's signer with every transferWithAuthorization it broadcast, or may
   * have broadcast (its send got no answer).
   */
  broadcast(id: PaymentIdentity, hash: `0x${string}`): void {
    const key = identityKey(id);
    setBounded(this.sentHashes, key, hash, MAX_SENT);
    this.waiting.get(key)?.(hash);
  }
}
