import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { anonymousCaller, toolCallDeps } from '../../../test/tool-call-harness.ts';
import type { QuotaMeter } from '../../metering/quota-meter.ts';
import { AnswerJsonCache, escapeJson } from './answer-json.ts';
import { callTool, structuredJsonOf } from './tool-call.ts';

/** What JSON.stringify gives, which every answer must equal byte for byte. */
const plain = (value: unknown) => {
  const json = JSON.stringify(value);
  return { json, escaped: JSON.stringify(json).slice(1, -1) };
};

const made = (cache: AnswerJsonCache, value: Record<string, unknown>, revision: string | null) => {
  const out = cache.serialise(value, revision);
  const escaped = out.escaped ?? escapeJson(out.json);
  // The bytes split into a remembered start and the call's own rest are the same JSON, and escape.
  if (out.split) {
    expect(Buffer.concat([out.split.head, Buffer.from(out.split.tail)]).toString('utf8')).toBe(out.json);
    expect(Buffer.concat([out.split.escapedHead, Buffer.from(out.split.escapedTail)]).toString('utf8')).toBe(
      escaped,
    );
  }
  return { json: out.json, escaped };
};

const indicators = { rsi: 57.319119692185474, macd: -194.67996454557579, zero: -0, none: null };
const call = (extra: Record<string, unknown> = {}) => ({
  coin: 'BTC',
  call: 'HOLD',
  confidence: 51,
  reasoning: 'quotes " and \\ backslashes, a tab\t, é, 🚀, a lone surrogate \ud800 and \u2028',
  indicators,
  verdictId: 'v-1',
  signalHash: 'h-1',
  ...extra,
});

describe('AnswerJsonCache', () => {
  it('gives exactly the bytes of JSON.stringify and its escape, first time and when reused', () => {
    const cache = new AnswerJsonCache();
    for (let i = 0; i < 3; i++) {
      const value = { ...call(), skipped: undefined, fn: () => 1, _service: { quota: { used: i } } };
      expect(made(cache, value, 'r1')).toEqual(plain(value));
    }
    const empty = {};
    expect(made(cache, empty, 'r-empty')).toEqual(plain(empty));
    const onlyUndefined = { a: undefined };
    expect(made(cache, onlyUndefined, 'r-undef')).toEqual(plain(onlyUndefined));
    const withDate = { at: new Date(0), n: Number.NaN, big: 1e21, list: [1, undefined, 'x'] };
    expect(made(cache, withDate, 'r-date')).toEqual(plain(withDate));
    expect(made(cache, withDate, 'r-date')).toEqual(plain(withDate));
  });

  it('gives the bytes of the value with a field added after it, without the merged object', () => {
    const cache = new AnswerJsonCache();
    const value = call();
    const other = { ...call(), confidence: 52 };
    const cases: [Record<string, unknown>, unknown, string | null][] = [
      [value, { quota: { used: 1 } }, 'r1'],
      [value, { quota: { used: 2 }, note: 'é "x" 🚀' }, 'r1'],
      // Another object of the same revision (a new track-record line): its own fields, not the last's.
      [other, { quota: { used: 3 } }, 'r1'],
      [value, undefined, 'r1'],
      [value, { quota: null }, null],
      [{ ...call(), _service: { chat: 1 } }, { quota: { used: 4 } }, 'r2'],
      [{}, { quota: { used: 5 } }, 'r3'],
      [{ a: undefined }, { quota: { used: 6 } }, 'r4'],
    ];
    for (let round = 0; round < 2; round++) {
      for (const [v, extra, revision] of cases) {
        const expected = plain({ ...v, _service: extra });
        const out = cache.serialiseWith(v, '_service', extra, revision);
        expect({ json: out.json, escaped: out.escaped ?? escapeJson(out.json) }).toEqual(expected);
        if (out.split) {
          expect(Buffer.concat([out.split.head, Buffer.from(out.split.tail)]).toString('utf8')).toBe(
            expected.json,
          );
          expect(
            Buffer.concat([out.split.escapedHead, Buffer.from(out.split.escapedTail)]).toString('utf8'),
          ).toBe(expected.escaped);
        }
        expect(cache.bytesWith(v, '_service', extra, revision).toString('utf8')).toBe(expected.json);
      }
    }
  });

  it('serialises without remembering anything when there is no revision', () => {
    const cache = new AnswerJsonCache();
    const value = call();
    expect(made(cache, value, null)).toEqual(plain(value));
    expect(cache.size).toBe(0);
  });

  it('never answers a new revision with an old one, even when the objects are the same', () => {
    const cache = new AnswerJsonCache();
    const first = call();
    expect(made(cache, first, 'get_trade_call\0v-1\0h-1')).toEqual(plain(first));
    // The next candle's verdict: new id, hash and figures, reusing nothing.
    const next = call({ verdictId: 'v-2', signalHash: 'h-2', confidence: 64, indicators: { rsi: 70 } });
    expect(made(cache, next, 'get_trade_call\0v-2\0h-2')).toEqual(plain(next));
    // Within a revision, a field that is a different object is serialised afresh.
    const replaced = call({ indicators: { rsi: 1 } });
    expect(made(cache, replaced, 'get_trade_call\0v-1\0h-1')).toEqual(plain(replaced));
    expect(made(cache, first, 'get_trade_call\0v-1\0h-1')).toEqual(plain(first));
  });

  it('follows each call’s own fields and order from one entry (with and without reasoning)', () => {
    const cache = new AnswerJsonCache();
    const { reasoning: _reasoning, ...without } = call();
    const withIt = call();
    for (let i = 0; i < 2; i++) {
      expect(made(cache, { ...without, trackRecord: { calls: i } }, 'r')).toEqual(
        plain({ ...without, trackRecord: { calls: i } }),
      );
      expect(made(cache, { ...withIt, trackRecord: { calls: i } }, 'r')).toEqual(
        plain({ ...withIt, trackRecord: { calls: i } }),
      );
    }
    const reordered = { signalHash: 'h-1', coin: 'BTC', verdictId: 'v-1' };
    expect(made(cache, reordered, 'r')).toEqual(plain(reordered));
  });

  it("encodes the start a revision's calls share once, and again only when it changes", () => {
    const cache = new AnswerJsonCache();
    const shared = call();
    const answer = (used: number, value: Record<string, unknown> = shared) =>
      cache.serialise({ ...value, _service: { quota: { used } } }, 'r');
    // A revision's first call reuses nothing: no start to remember yet.
    expect(answer(1).split).toBeUndefined();
    const second = answer(2).split!;
    expect(second.head.toString()).toBe(JSON.stringify(shared).slice(0, -1));
    expect(second.tail).toBe(',"_service":{"quota":{"used":2}}}');
    const third = answer(3).split!;
    expect(third.head).toBe(second.head);
    expect(third.escapedHead).toBe(second.escapedHead);
    // Other leading fields (a call without the reasoning): another start, encoded for it.
    const { reasoning: _reasoning, ...without } = shared;
    answer(4, without);
    const other = answer(5, without).split!;
    expect(other.head).not.toBe(second.head);
    expect(other.head.toString()).toBe(JSON.stringify(without).slice(0, -1));
    expect(made(cache, { ...shared, _service: { quota: { used: 6 } } }, 'r')).toEqual(
      plain({ ...shared, _service: { quota: { used: 6 } } }),
    );
  });

  it('keeps at most its bound of revisions, dropping the least recently used', () => {
    const cache = new AnswerJsonCache(2);
    const value = call();
    made(cache, value, 'a');
    made(cache, value, 'b');
    made(cache, value, 'a');
    made(cache, value, 'c');
    expect(cache.size).toBe(2);
    expect(made(cache, value, 'b')).toEqual(plain(value));
  });
});

describe('callTool answers from a recorded verdict', () => {
  const meters: QuotaMeter[] = [];
  afterEach(async () => {
    await Promise.all(meters.splice(0).map((m) => m.counters.stop()));
  });

  /** A tool serving whatever verdict `current` holds, as the engine serves one revision per candle. */
  function deps(current: { value: Record<string, unknown> }) {
    return toolCallDeps(
      [
        {
          name: 'get_trade_call',
          title: 'Trade call',
          description: 'test',
          input: z.object({}),
          run: async () => ({ ...current.value, trackRecord: { calls: 3 } }),
        },
      ],
      meters,
    );
  }

  it('serves each call its own figures and the current revision, in the bytes JSON.stringify gives', async () => {
    const current = { value: call() as Record<string, unknown> };
    const d = deps(current);
    const request = { name: 'get_trade_call', args: {}, caller: anonymousCaller('10.0.0.1') };
    const texts: string[] = [];
    for (const value of [call(), call(), call({ verdictId: 'v-2', signalHash: 'h-2', call: 'BUY' })]) {
      current.value = value;
      const result = await callTool(d, request);
      const text = (result.content[0] as { text: string }).text;
      expect(text).toBe(JSON.stringify(result.structuredContent));
      // The served result carries its JSON, so the session path splices rather than serialising again.
      expect(structuredJsonOf(result)?.json).toBe(text);
      expect(structuredJsonOf(result)?.escaped ?? escapeJson(text)).toBe(JSON.stringify(text).slice(1, -1));
      // A copy with other content does not: the remembered JSON is no longer its own.
      expect(structuredJsonOf({ ...result, structuredContent: { other: true } })).toBeUndefined();
      expect(structuredJsonOf({ ...result, content: [{ type: 'text', text: '{}' }] })).toBeUndefined();
      expect(structuredJsonOf({ ...result })?.json).toBe(text);
      texts.push(text);
    }
    const parsed = texts.map((t) => JSON.parse(t));
    expect(parsed.map((p) => p._service.quota.used)).toEqual([1, 2, 3]);
    expect(parsed.map((p) => p.verdictId)).toEqual(['v-1', 'v-1', 'v-2']);
    expect(parsed[2].call).toBe('BUY');
  });
});
