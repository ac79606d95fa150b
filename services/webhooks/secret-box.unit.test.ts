import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../contracts/config.ts';
import { generateWebhookSecret, SecretBox, secretBoxFromConfig } from './secret-box.ts';

const OLD = 'a1'.repeat(32);
const NEW = 'b2'.repeat(32);

describe('secret box with previous master keys', () => {
  it('seals under the first key and opens what any listed key sealed', () => {
    const secret = generateWebhookSecret();
    const before = new SecretBox(OLD).seal(secret, 'wh_1');
    const box = new SecretBox(NEW, [OLD]);
    expect(box.keyVersions).toEqual([box.keyVersion, before.keyVersion]);
    expect(box.open(before, 'wh_1')).toBe(secret);
    expect(box.isCurrent(before)).toBe(false);
    const after = box.seal(secret, 'wh_1');
    expect(after.keyVersion).toBe(box.keyVersion);
    expect(box.isCurrent(after)).toBe(true);
    expect(new SecretBox(NEW).open(after, 'wh_1')).toBe(secret);
    // Without the old key, a secret sealed under it does not open: it names both keys.
    expect(() => new SecretBox(NEW).open(before, 'wh_1')).toThrow(before.keyVersion);
  });

  it('fails authentication cleanly when a ciphertext is altered, whatever key it names', () => {
    const box = new SecretBox(NEW, [OLD]);
    const sealed = box.seal(generateWebhookSecret(), 'wh_1');
    const flipped = Buffer.from(sealed.ciphertext, 'base64');
    flipped[0]! ^= 1;
    expect(() => box.open({ ...sealed, ciphertext: flipped.toString('base64') }, 'wh_1')).toThrow();
  });

  it('reads WEBHOOK_MASTER_KEYS_PREVIOUS as a comma list', () => {
    const box = secretBoxFromConfig(
      loadConfig({ WEBHOOK_MASTER_KEY: NEW, WEBHOOK_MASTER_KEYS_PREVIOUS: ` ${OLD.toUpperCase()}, ` }),
    );
    expect(box.keyVersions).toEqual([new SecretBox(NEW).keyVersion, new SecretBox(OLD).keyVersion]);
    expect(secretBoxFromConfig(loadConfig({ WEBHOOK_MASTER_KEYS_PREVIOUS: '' })).keyVersions).toHaveLength(1);
  });

  it('refuses a malformed key list in one line naming the variable', () => {
    for (const raw of ['nothex', `${OLD},${OLD.slice(2)}`, `${OLD};${NEW}`]) {
      let error: unknown;
      try {
        loadConfig({ WEBHOOK_MASTER_KEY: NEW, WEBHOOK_MASTER_KEYS_PREVIOUS: raw });
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(ConfigError);
      const lines = (error as Error).message
        .split('\n')
        .filter((l) => l.includes('WEBHOOK_MASTER_KEYS_PREVIOUS'));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain('64 hex');
      // The keys themselves are not repeated in the message.
      expect((error as Error).message).not.toContain(OLD.slice(0, 16));
    }
  });
});
