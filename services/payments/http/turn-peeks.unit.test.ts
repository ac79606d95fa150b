import { describe, expect, it } from 'vitest';
import type { Caller } from '../../metering/caller.ts';
import type { QuotaMeter } from '../../metering/quota-meter.ts';
import type { QuotaSnapshot } from '../../metering/snapshot.ts';
import { TurnPeeks } from './turn-peeks.ts';

const snapshot = (used: number): QuotaSnapshot => {
  const window = { used, total: 10, remaining: 10 - used, resets_at: '2026-12-01T00:00:00.000Z' };
  return { ...window, monthly: window };
};

/** A meter whose count moves between reads, as other calls of the same address would move it. */
function meter() {
  let used = 0;
  let reads = 0;
  const quota = {
    peek: async () => {
      reads++;
      return snapshot(used);
    },
  } as unknown as QuotaMeter;
  return {
    quota,
    spend: () => {
      used++;
    },
    reads: () => reads,
  };
}

const anonymous = (id: string, presented = false): Caller => ({
  auth: presented
    ? { outcome: 'MALFORMED', presented: true, tier: 'free', detail: 'not a Bearer token' }
    : { outcome: 'ABSENT', presented: false, tier: 'free' },
  subject: { id, kind: 'anonymous', plan: 'free' },
  keyId: null,
});

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('TurnPeeks', () => {
  it('reads a caller once per turn of the event loop, and afresh in the next turn', async () => {
    const m = meter();
    const peeks = new TurnPeeks(m.quota);
    const [a, b] = await Promise.all([peeks.of(anonymous('a')), peeks.of(anonymous('a'))]);
    expect(m.reads()).toBe(1);
    expect(b).toBe(a);
    expect(JSON.parse(a.json)).toEqual(a.service);
    expect(a.service).toEqual({ auth: anonymous('a').auth, quota: snapshot(0) });

    m.spend();
    await nextTurn();
    const later = await peeks.of(anonymous('a'));
    expect(m.reads()).toBe(2);
    expect(later.service.quota?.used).toBe(1);
  });

  it('reads each caller for itself, and a caller that presented a credential every time', async () => {
    const m = meter();
    const peeks = new TurnPeeks(m.quota);
    await Promise.all([peeks.of(anonymous('a')), peeks.of(anonymous('b'))]);
    expect(m.reads()).toBe(2);
    const [x, y] = await Promise.all([peeks.of(anonymous('c', true)), peeks.of(anonymous('c', true))]);
    expect(m.reads()).toBe(4);
    expect(x.service.auth).toEqual(anonymous('c', true).auth);
    expect(y).not.toBe(x);
  });

  it('answers a null quota when the counters cannot be read, and reads again next turn', async () => {
    let fail = true;
    const quota = {
      peek: async () => {
        if (fail) throw new Error('cache down');
        return snapshot(3);
      },
    } as unknown as QuotaMeter;
    const peeks = new TurnPeeks(quota);
    expect((await peeks.of(anonymous('a'))).service.quota).toBeNull();
    fail = false;
    await nextTurn();
    expect((await peeks.of(anonymous('a'))).service.quota?.used).toBe(3);
  });

  it('hands out a block read in this turn without a promise, and none once the turn has ended', async () => {
    const m = meter();
    const peeks = new TurnPeeks(m.quota);
    const caller = anonymous('a');
    expect(peeks.settled(caller)).toBeUndefined();
    const pending = peeks.of(caller);
    // Asked for, not yet read.
    expect(peeks.settled(caller)).toBeUndefined();
    const block = await pending;
    expect(peeks.settled(caller)).toBe(block);
    expect(m.reads()).toBe(1);
    // A credential presented: its block is never shared, so never handed out this way.
    await peeks.of(anonymous('b', true));
    expect(peeks.settled(anonymous('b', true))).toBeUndefined();

    m.spend();
    await nextTurn();
    expect(peeks.settled(caller)).toBeUndefined();
    const later = await peeks.of(caller);
    expect(peeks.settled(caller)).toBe(later);
    expect(later.service.quota?.used).toBe(1);
  });

  it('does not keep a read that settles after its turn ended', async () => {
    let release: (() => void) | undefined;
    const quota = {
      peek: () =>
        new Promise<QuotaSnapshot>((resolve) => {
          release = () => resolve(snapshot(0));
        }),
    } as unknown as QuotaMeter;
    const peeks = new TurnPeeks(quota);
    const pending = peeks.of(anonymous('a'));
    await nextTurn();
    release!();
    await pending;
    expect(peeks.settled(anonymous('a'))).toBeUndefined();
  });
});
