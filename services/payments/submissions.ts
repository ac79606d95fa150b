import { identityKey, type PaymentIdentity } from './payment-state.ts';

/**
 * Tells a paid call the hash of its settlement transaction as soon as it is broadcast, before
 * the receipt: the answer carries it and the receipt wait goes on in the background. Only the
 * in-process facilitator can tell (it signs the transaction); with a remote one the call
 * answers without a hash and the receipt is looked up by presenting the payment again.
 */
export class SubmissionWatch {
  private readonly waiting = new Map<string, (hash: `0x${string}`) => void>();

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

  /** Called by the facilitator's signer with every transferWithAuthorization it broadcast. */
  broadcast(id: PaymentIdentity, hash: `0x${string}`): void {
    this.waiting.get(identityKey(id))?.(hash);
  }
}
