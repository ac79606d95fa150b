import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { z } from 'zod';
import {
  type Config,
  ConfigError,
  DEVELOPMENT_WEBHOOK_MASTER_KEY,
  webhookPreviousMasterKeys,
} from '../../contracts/config.ts';
import type { EncryptedSecret } from '../../contracts/events.ts';

type Sealed = z.infer<typeof EncryptedSecret>;

/** A new subscription secret: `whsec_` + 48 hex (24 random bytes). */
export function generateWebhookSecret(): string {
  return `whsec_${randomBytes(24).toString('hex')}`;
}

/**
 * AES-256-GCM for subscription secrets at rest. The subscription id is the associated data, so
 * a ciphertext copied onto another subscription does not decrypt. `keyVersion` names a master
 * key by a digest prefix, so the key a secret was sealed with is found by name, and a key not
 * configured is detected instead of producing garbage. The first key seals; every key opens what
 * was sealed under it (the keys before a rotation, until every secret is re-sealed).
 */
export class SecretBox {
  private readonly keys: Map<string, Buffer>;
  /** The version of the key that seals. */
  readonly keyVersion: string;
  /** Every configured key's version, the sealing one first. */
  readonly keyVersions: readonly string[];

  constructor(masterKeyHex: string, previousKeysHex: readonly string[] = []) {
    this.keys = new Map();
    for (const hex of [masterKeyHex, ...previousKeysHex]) {
      const key = Buffer.from(hex, 'hex');
      if (key.length !== 32) throw new Error('the webhook master key must be 32 bytes (64 hex)');
      const version = `k${createHash('sha256').update(key).digest('hex').slice(0, 8)}`;
      if (!this.keys.has(version)) this.keys.set(version, key);
    }
    this.keyVersions = [...this.keys.keys()];
    this.keyVersion = this.keyVersions[0]!;
  }

  /** Whether the secret is sealed under the sealing key (a re-seal would change nothing). */
  isCurrent(sealed: Sealed): boolean {
    return sealed.keyVersion === this.keyVersion;
  }

  seal(secret: string, subscriptionId: string): Sealed {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.keys.get(this.keyVersion)!, iv);
    cipher.setAAD(Buffer.from(subscriptionId, 'utf8'));
    const ciphertext = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final()]);
    return {
      keyVersion: this.keyVersion,
      iv: iv.toString('base64'),
      tag: cipher.getAuthTag().toString('base64'),
      ciphertext: ciphertext.toString('base64'),
    };
  }

  open(sealed: Sealed, subscriptionId: string): string {
    const key = this.keys.get(sealed.keyVersion);
    if (!key) {
      throw new Error(
        `secret sealed with master key ${sealed.keyVersion}, configured keys are ${this.keyVersions.join(', ')}`,
      );
    }
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(sealed.iv, 'base64'));
    decipher.setAAD(Buffer.from(subscriptionId, 'utf8'));
    decipher.setAuthTag(Buffer.from(sealed.tag, 'base64'));
    return Buffer.concat([
      decipher.update(Buffer.from(sealed.ciphertext, 'base64')),
      decipher.final(),
    ]).toString('utf8');
  }
}

export function secretBoxFromConfig(
  config: Pick<Config, 'WEBHOOK_MASTER_KEY' | 'WEBHOOK_MASTER_KEYS_PREVIOUS' | 'NODE_ENV'>,
): SecretBox {
  if (!config.WEBHOOK_MASTER_KEY && config.NODE_ENV === 'production') {
    // A configuration mistake, reported like one: a line naming the variable, no stack trace.
    throw new ConfigError(
      'invalid configuration:\n  WEBHOOK_MASTER_KEY: required when NODE_ENV=production by the api and dispatcher roles (64 hex characters, e.g. `openssl rand -hex 32`)',
    );
  }
  // Outside production only: the config refuses this key in production, and the line above its absence.
  return new SecretBox(
    config.WEBHOOK_MASTER_KEY ?? DEVELOPMENT_WEBHOOK_MASTER_KEY,
    webhookPreviousMasterKeys(config.WEBHOOK_MASTER_KEYS_PREVIOUS),
  );
}
