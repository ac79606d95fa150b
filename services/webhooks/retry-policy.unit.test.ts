import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { parseSchedule } from '../../contracts/setting-lists.ts';
import { classifyFailure, nextAttemptAt, parseRetryAfter } from './retry-policy.ts';
import { generateWebhookSecret, SecretBox, secretBoxFromConfig } from './secret-box.ts';
import { addressPolicyFromConfig, webhookSettings } from './settings.ts';

const policy = {
  schedule: parseSchedule('0,5s,5m,30m,2h,5h,10h,10h'),
  jitter: 0.2,
  retryAfterMaxMs: 3_600_000,
};

describe('retry schedule', () => {
  it('follows the Svix schedule, 8 attempts, then stops', () => {
    const delays = [1, 2, 3, 4, 5, 6, 7].map((a) =>
      nextAttemptAt(policy, a, { due: 0, now: 0 }, null, () => 0.5),
    );
    expect(delays).toEqual([5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000]);
    expect(nextAttemptAt(policy, 8, { due: 0, now: 0 }, null)).toBeNull();
  });

  it('varies each delay by at most the jitter', () => {
    expect(nextAttemptAt(policy, 1, { due: 0, now: 0 }, null, () => 0)).toBe(4_000);
    expect(nextAttemptAt(policy, 1, { due: 0, now: 0 }, null, () => 1)).toBe(6_000);
  });

  it('honours Retry-After when it is later, up to the cap', () => {
    expect(nextAttemptAt(policy, 1, { due: 0, now: 0 }, 60_000, () => 0.5)).toBe(60_000);
    expect(nextAttemptAt(policy, 1, { due: 0, now: 0 }, 1_000, () => 0.5)).toBe(5_000);
    expect(nextAttemptAt(policy, 1, { due: 0, now: 0 }, 86_400_000, () => 0.5)).toBe(3_600_000);
    expect(parseRetryAfter('120', 0)).toBe(120_000);
    expect(parseRetryAfter(new Date(30_000).toUTCString(), 0)).toBe(30_000);
    expect(parseRetryAfter('soon', 0)).toBeNull();
    expect(parseRetryAfter(undefined, 0)).toBeNull();
  });

  it('counts each delay from when the failed attempt was due, not from when its failure was recorded', () => {
    const due = 1_000_000;
    // Recorded 4 s late (a slow receiver, a busy loop): the next attempt keeps its place.
    expect(nextAttemptAt(policy, 2, { due, now: due + 4_000 }, null, () => 0.5)).toBe(due + 300_000);
    // Ended after the next attempt was due: due again at once, never in the past.
    const late = due + 400_000;
    expect(nextAttemptAt(policy, 2, { due, now: late }, null, () => 0.5)).toBe(late);
    // Retry-After counts from the answer.
    expect(nextAttemptAt(policy, 1, { due, now: due + 2_000 }, 10_000, () => 0.5)).toBe(due + 12_000);
  });

  it('treats 410 as gone and everything else as retryable', () => {
    expect(classifyFailure(410)).toBe('gone');
    for (const status of [301, 400, 404, 429, 500, null]) expect(classifyFailure(status)).toBe('retry');
  });
});

describe('webhook configuration', () => {
  it('refuses the test-only SSRF exemption in production', () => {
    expect(() =>
      loadConfig({
        NODE_ENV: 'production',
        WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
        WEBHOOK_MASTER_KEY: 'a'.repeat(64),
      }),
    ).toThrow(/WEBHOOK_TEST_ALLOW_CIDRS/);
    const dev = loadConfig({ WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32' });
    expect(addressPolicyFromConfig(dev).allow).toHaveLength(1);
    expect(addressPolicyFromConfig({ ...dev, NODE_ENV: 'production' }).allow).toHaveLength(0);
  });

  it('requires an explicit master key in production', () => {
    const prod = loadConfig({ NODE_ENV: 'production' });
    expect(() => secretBoxFromConfig(prod)).toThrow(/WEBHOOK_MASTER_KEY/);
    expect(() => secretBoxFromConfig({ ...prod, WEBHOOK_MASTER_KEY: 'b'.repeat(64) })).not.toThrow();
    expect(secretBoxFromConfig(loadConfig({}))).toBeInstanceOf(SecretBox);
  });

  it('defaults to port 443 only and the Svix schedule', () => {
    const settings = webhookSettings(loadConfig({}));
    expect(settings.urlPolicy.ports(443)).toBe(true);
    expect(settings.urlPolicy.ports(8443)).toBe(false);
    expect(settings.retry.schedule).toHaveLength(8);
  });
});

describe('secret box', () => {
  const box = new SecretBox('c'.repeat(64));
  it('round-trips a secret bound to its subscription, never storing it in clear', () => {
    const secret = generateWebhookSecret();
    expect(secret).toMatch(/^whsec_[0-9a-f]{48}$/);
    const sealed = box.seal(secret, 'wh_1');
    expect(JSON.stringify(sealed)).not.toContain(secret.slice(6));
    expect(box.open(sealed, 'wh_1')).toBe(secret);
    expect(() => box.open(sealed, 'wh_2')).toThrow();
    expect(() => new SecretBox('d'.repeat(64)).open(sealed, 'wh_1')).toThrow(/master key/);
  });
});
