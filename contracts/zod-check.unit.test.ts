import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { eventMix } from '../bench/rebuild-event-mix.ts';
import type { RecordedEvent } from './envelope.ts';
import { EVENT_CATALOG, EVENT_TYPES, type EventType, parseDomainEvent } from './events.ts';
import { CLEAN, compileCheck, INVALID } from './zod-check.ts';

/** Values that sit on the edges of zod's checks: types, bounds, formats, code points. */
const ODD: unknown[] = [
  undefined,
  null,
  '',
  'x',
  ' ',
  '0',
  '12',
  '2026-11',
  '2026-11-23',
  '2026-11-23T00:00:00Z',
  '2026-11-23T00:00:00.123Z',
  '2026-02-30T00:00:00Z',
  '2026-11-23T00:00:00+01:00',
  '0x',
  '0xZZ',
  '0xabcDEF09',
  'a'.repeat(64),
  'f'.repeat(64),
  'F'.repeat(64),
  '0'.repeat(63),
  '00000000-0000-0000-0000-000000000000',
  '123e4567-e89b-42d3-a456-426614174000',
  '123e4567-e89b-92d3-a456-426614174000',
  'https://hooks.example.com/x',
  'not a url',
  'BUY',
  'SELL',
  'HOLD',
  'buy',
  'BINANCE',
  'replay',
  'ranging',
  'request',
  '1h',
  'starter',
  'key',
  'hit',
  '😀',
  '😀'.repeat(600),
  'y'.repeat(1024),
  'y'.repeat(1025),
  'é'.repeat(513),
  0,
  -0,
  1,
  -1,
  1.5,
  -1.5,
  0.5,
  100,
  101,
  Number.MAX_SAFE_INTEGER,
  Number.MAX_SAFE_INTEGER + 2,
  2 ** 60,
  Number.NaN,
  Number.POSITIVE_INFINITY,
  Number.NEGATIVE_INFINITY,
  true,
  false,
  {},
  [],
  ['trade_call'],
  { a: 1 },
  { a: Number.NaN },
  { a: 'x', b: null, c: true },
  { a: [] },
  Object.create(null),
  1n,
];

function* mutations(data: Record<string, unknown>, pick: (n: number) => number) {
  yield data;
  yield { ...data, extra: 1 };
  for (const key of Object.keys(data)) {
    const { [key]: _, ...without } = data;
    yield without;
    for (const odd of ODD) yield { ...data, [key]: odd };
    const nested = data[key];
    if (nested && typeof nested === 'object' && !Array.isArray(nested)) {
      const inner = nested as Record<string, unknown>;
      const keys = Object.keys(inner);
      const k = keys[pick(keys.length)];
      if (k) {
        yield { ...data, [key]: { ...inner, [k]: ODD[pick(ODD.length)] } };
        yield { ...data, [key]: { ...inner, extra: 'x' } };
      }
    }
  }
}

describe('compiled checks of the event catalog', () => {
  it('accept exactly what zod accepts, and call a value clean only when zod returns it unchanged', async () => {
    const mix = await eventMix({ markets: 10, keys: 5 });
    const samples = new Map<EventType, Record<string, unknown>[]>();
    for (let i = 0; i < 3_000; i++) {
      const [, event] = mix.next();
      const list = samples.get(event.type as EventType) ?? [];
      if (list.length < 3)
        samples.set(event.type as EventType, [...list, event.data as Record<string, unknown>]);
    }
    let seed = 7;
    const pick = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % Math.max(n, 1);
    };
    let compared = 0;
    let accepted = 0;
    for (const type of EVENT_TYPES) {
      const schema = EVENT_CATALOG[type];
      const check = compileCheck(schema);
      // Every catalog type but the two holding arrays is compiled: keep it that way.
      if (type === 'SubscriptionCreated' || type === 'SubscriptionUpdated') expect(check).toBeNull();
      else expect(check, type).not.toBeNull();
      if (!check) continue;
      // Samples of every type: the mix's, and for the rest a shape filled from the odd values,
      // which zod refuses and accepts in turn.
      const bases = samples.get(type) ?? [];
      const keys = Object.keys((schema as unknown as { shape: Record<string, unknown> }).shape);
      const generated: Record<string, unknown>[] = [...bases];
      for (let i = 0; i < 1_500; i++) {
        const candidate: Record<string, unknown> = {};
        for (const key of keys) {
          const odd = ODD[pick(ODD.length)];
          if (odd !== undefined || pick(2) === 0) candidate[key] = odd;
        }
        generated.push(candidate);
      }
      for (const base of generated.slice(0, bases.length + 20)) {
        for (const value of mutations(base, pick)) generated.push(value);
      }
      for (const value of [...generated, ...ODD]) {
        const verdict = check(value);
        const zod = schema.safeParse(value);
        compared++;
        if ((verdict !== INVALID) !== zod.success) {
          const shown = JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? `${v}n` : v));
          expect.fail(`${type}: compiled ${verdict}, zod ${zod.success} for ${shown?.slice(0, 400)}`);
        }
        if (zod.success) accepted++;
        if (verdict === CLEAN) expect(zod.data).toStrictEqual(value);
      }
    }
    // The comparison means something only if both answers occur often.
    expect(accepted).toBeGreaterThan(500);
    expect(compared - accepted).toBeGreaterThan(500);
  });

  it('parseDomainEvent hands back the event itself when zod would not change it, zod’s copy otherwise', async () => {
    const mix = await eventMix({ markets: 2, keys: 2 });
    const [stream, event] = mix.next();
    const recorded: RecordedEvent = {
      id: '123e4567-e89b-42d3-a456-426614174000',
      type: event.type,
      stream,
      revision: 0,
      position: 1,
      recordedAt: '2026-11-23T00:00:00.000Z',
      correlationId: 'c',
      causationId: null,
      data: event.data,
    };
    expect(parseDomainEvent(recorded)).toBe(recorded);
    const extra = { ...recorded, data: { ...(event.data as object), unknownField: 1 } };
    const parsed = parseDomainEvent(extra);
    expect(parsed).not.toBe(extra);
    expect(parsed?.data).toStrictEqual(event.data);
    expect(parseDomainEvent({ ...recorded, data: { ...(event.data as object), coin: 42 } })).toBeNull();
    expect(parseDomainEvent({ ...recorded, type: 'NotInCatalog' })).toBeNull();
  });

  it('leaves to zod what it does not compile', () => {
    expect(compileCheck(z.object({ a: z.array(z.string()) }))).toBeNull();
    expect(compileCheck(z.object({ a: z.string() }).catchall(z.number()))).toBeNull();
    expect(compileCheck(z.object({ a: z.string().default('x') }))).toBeNull();
    expect(compileCheck(z.object({ a: z.string().transform((s) => s.length) }))).toBeNull();
  });
});
