import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { Cache } from '../../adapters/cache/port.ts';
import { canonicalJson } from '../../contracts/canonical-json.ts';

/**
 * Every paid call's answer, kept for a bounded time so a payer who lost it (a dropped
 * connection, our crash after settlement was sent) gets it back by presenting the same payment
 * again, or the x402 `payment-identifier` id it was paid under, instead of "already used".
 *
 * Stored in the cache (Redis in production, so it outlives a crash) under a key derived from a
 * secret only the payer holds, encrypted (AES-256-GCM) with another key derived from the same
 * secret: the payment's signature, or the payer's address with their payment id. Whoever reads
 * the cache learns neither the response nor whose it is.
 */

const Entry = z.object({
  /** sha256 of the tool and its canonical arguments: the same id for another request is a conflict. */
  fingerprint: z.string(),
  identity: z.object({ network: z.string(), asset: z.string(), payer: z.string(), nonce: z.string() }),
  tool: z.string(),
  response: z.record(z.string(), z.unknown()),
  storedAt: z.string(),
});
export type PaidResponse = z.infer<typeof Entry>;

/** Over canonical JSON: two requests with the same arguments in another order match. */
export function requestFingerprint(tool: string, input: unknown): string {
  return createHash('sha256')
    .update(`${tool}\n${canonicalJson(input)}`)
    .digest('hex');
}

/** What a stored response is found by. */
export type PaidResponseKey =
  | { kind: 'signature'; signature: string }
  | { kind: 'payment_id'; payer: string; id: string };

function secretOf(key: PaidResponseKey): string {
  return key.kind === 'signature'
    ? `sig|${key.signature.toLowerCase()}`
    : `pid|${key.payer.toLowerCase()}|${key.id}`;
}

function derive(label: string, secret: string): Buffer {
  return createHash('sha256').update(`x402-paid-response|${label}|${secret}`).digest();
}

export class PaidResponseStore {
  constructor(
    private readonly cache: Cache,
    private readonly ttlMs: number,
  ) {}

  private cacheKey(secret: string): string {
    return `x402:paid:${derive('key', secret).toString('hex')}`;
  }

  async put(keys: PaidResponseKey[], entry: Omit<PaidResponse, 'storedAt'>): Promise<void> {
    const plain = Buffer.from(JSON.stringify({ ...entry, storedAt: new Date().toISOString() }), 'utf8');
    await Promise.all(
      keys.map((key) => {
        const secret = secretOf(key);
        const iv = randomBytes(12);
        const cipher = createCipheriv('aes-256-gcm', derive('enc', secret), iv);
        const sealed = Buffer.concat([cipher.update(plain), cipher.final()]);
        const value = Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64');
        return this.cache.set(this.cacheKey(secret), value, { ttlMs: this.ttlMs });
      }),
    );
  }

  async get(key: PaidResponseKey): Promise<PaidResponse | null> {
    const secret = secretOf(key);
    const value = await this.cache.get(this.cacheKey(secret));
    if (value === null) return null;
    try {
      const raw = Buffer.from(value, 'base64');
      const decipher = createDecipheriv('aes-256-gcm', derive('enc', secret), raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      const plain = Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]);
      return Entry.parse(JSON.parse(plain.toString('utf8')));
    } catch {
      // Unreadable (tampered with, or a format from another version): as if never stored.
      return null;
    }
  }
}
