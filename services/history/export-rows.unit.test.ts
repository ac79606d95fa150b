import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, revealTime } from '../../contracts/history.ts';
import { syntheticOutcome, syntheticVerdict } from '../../test/history-harness.ts';
import { encodeCursor } from './cursor.ts';
import {
  F_ID,
  F_STREAM,
  fieldOf,
  inputsBytesAtMost,
  NO_OUTCOME_TAIL,
  revealAtOf,
  revisionOf,
  StoredLine,
  shownStoredLabel,
  storedOutcome,
  storedVerdict,
  tailOf,
  unescapeInputs,
  writeInputs,
} from './export-rows.ts';
import { historyRow } from './rows.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

const data = syntheticVerdict(3, 10, 100, 'f'.repeat(64));
const verdict: Verdict = {
  id: '00000000-0000-4000-8000-000000000007',
  type: 'VerdictRecorded',
  stream: 'verdicts-OKX-C0-1h',
  revision: 10,
  position: 42,
  recordedAt: '2025-10-01T00:00:00.000Z',
  correlationId: 'c',
  causationId: null,
  data: { ...data, inputs: { ...data.inputs, note: 'quote " and \\ and ,"outcome_id":' } } as never,
};
function outcomeOf(hash: string, revision = 0): Outcome {
  return {
    id: '00000000-0000-4000-8000-0000000000aa',
    type: 'VerdictOutcomeResolved',
    stream: outcomeStream(verdict.id),
    revision,
    position: 99,
    recordedAt: '2025-10-02T00:00:00.000Z',
    correlationId: 'c',
    causationId: verdict.id,
    data: { ...syntheticOutcome(verdict.data, verdict.id, verdict.stream, 10), verdictHash: hash },
  };
}
/** The row's line as the export writes it, without its line break. */
const cursor = (v: Verdict) => encodeCursor(v.position, v.id);
const line = (v: Buffer, tail: Uint8Array) =>
  new StoredLine(v, tail, cursor(verdict)).toBuffer().subarray(0, -1).toString();

describe('export rows: stored bytes of a history row', () => {
  const v = storedVerdict(verdict);
  const revealAt = revealTime(verdict.data);

  it('keeps what the export filters and looks up on', () => {
    expect(revealAtOf(v)).toBe(revealAt);
    expect(fieldOf(v, F_ID)).toBe(verdict.id);
    expect(fieldOf(v, F_STREAM)).toBe(verdict.stream);
    expect(revisionOf(v)).toBe(10);
  });

  it('puts back the exact NDJSON line of historyRow, with and without its outcome', () => {
    expect(line(v, NO_OUTCOME_TAIL)).toBe(JSON.stringify(historyRow(verdict, null, revealAt)));
    const outcome = outcomeOf(verdict.data.hash);
    const label = shownStoredLabel(v, storedOutcome(outcome), revealAt);
    expect(label).toBeTruthy();
    expect(line(v, tailOf(label as Buffer))).toBe(JSON.stringify(historyRow(verdict, outcome, revealAt)));
  });

  it('applies the reveal rule: nothing but the commitment before the reveal time', () => {
    expect(shownStoredLabel(v, storedOutcome(outcomeOf(verdict.data.hash)), revealAt - 1)).toBe(false);
    expect(shownStoredLabel(v, null, revealAt - 1)).toBe(false);
    expect(shownStoredLabel(v, null, revealAt)).toBeNull();
  });

  it('attaches only an outcome that names this content, from the first event of its stream', () => {
    const other = storedOutcome(outcomeOf('0'.repeat(64)));
    expect(shownStoredLabel(v, other, revealAt)).toBeNull();
    expect(historyRow(verdict, outcomeOf('0'.repeat(64)), revealAt).outcome_id).toBeNull();
    expect(storedOutcome(outcomeOf(verdict.data.hash, 1))).toBeNull();
  });

  it('stores the inputs once, and writes every line back as JSON.stringify would, whatever its strings hold', () => {
    const marker = 'only-once-marker';
    // Raw control characters, quotes, backslashes, non-ASCII and a lone surrogate reach the
    // writer's escapes only through a column other than the inputs (their JSON has none raw).
    const odd = `\u0000\u0001\b\t\n\f\r\u001f " \\ é 😀 \u2028`;
    const cases: Partial<Verdict['data']>[] = [
      {},
      { engineVersion: `v ${odd}` },
      { engineVersion: `lone \ud800 surrogate ${odd}` },
      { regime: odd as never, feed: `é${odd}` as never },
    ];
    for (const change of cases) {
      const oddVerdict: Verdict = {
        ...verdict,
        data: {
          ...verdict.data,
          ...change,
          inputs: { ...verdict.data.inputs, note: `${marker} ${odd}` },
        } as never,
      };
      const stored = storedVerdict(oddVerdict);
      const expected = `${JSON.stringify(historyRow(oddVerdict, null, revealAt))}\n`;
      expect(stored.toString('utf8').split(marker)).toHaveLength(2);
      const stored2 = new StoredLine(stored, NO_OUTCOME_TAIL, cursor(oddVerdict));
      expect(stored2.toBuffer().toString('utf8')).toBe(expected);
      // Exactly byteLength bytes, at an offset, nothing written around them.
      const out = Buffer.alloc(stored2.byteLength + 20, 0xee);
      expect(stored2.writeTo(out, 10)).toBe(10 + stored2.byteLength);
      expect(out.subarray(10, 10 + stored2.byteLength).toString('utf8')).toBe(expected);
      expect(
        [...out.subarray(0, 10), ...out.subarray(10 + stored2.byteLength)].every((b) => b === 0xee),
      ).toBe(true);
      // Parquet's inputs: written from the texts, the plain JSON the row holds.
      const plain = Buffer.alloc(inputsBytesAtMost(stored) + 4, 0xee);
      const end = writeInputs(stored, plain, 2);
      expect(plain.subarray(2, end).toString('utf8')).toBe(
        historyRow(oddVerdict, null, revealAt).inputs_json,
      );
      expect(plain.subarray(end).every((b) => b === 0xee)).toBe(true);
    }
  });

  it('unescapes what JSON.stringify never writes inside the inputs as JSON would', () => {
    const escaped = Buffer.from('a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00\\/');
    const out = Buffer.alloc(escaped.length);
    const end = unescapeInputs(escaped, 0, escaped.length, out, 0);
    expect(out.subarray(0, end).toString('utf8')).toBe('a"b\\c\né😀/');
  });

  it("keeps three verdicts with the engine's full inputs to a leaf page (4 KB pages, at most 1,340 B a record)", () => {
    // Every input the engine records (signals-3), each at full precision and none null: the
    // largest record a verdict makes, its values alone (the names are in its head's template).
    const engine = syntheticVerdict(3, 10, 100, 'e'.repeat(64), true);
    const inputs = Object.fromEntries(
      Object.entries(engine.inputs).map(([key, value], i) => [
        key,
        typeof value === 'string' || typeof value === 'boolean' ? value : -1234.5678901234567 / (i + 3),
      ]),
    );
    const full: Verdict = {
      ...verdict,
      stream: 'verdicts-BINANCE_USDM-1000SHIB-15m',
      data: {
        ...verdict.data,
        exchange: 'BINANCE_USDM',
        coin: '1000SHIB',
        prevHash: 'e'.repeat(64),
        inputs,
      } as never,
    };
    const stored = storedVerdict(full);
    expect(JSON.stringify(inputs).length).toBeGreaterThan(1_100);
    expect(stored.length).toBeLessThanOrEqual(1_340);
    expect(line(stored, NO_OUTCOME_TAIL)).toBe(JSON.stringify(historyRow(full, null, revealAt)));
  });

  it('writes the cursor from the position and the record id as encodeCursor does, without a string per row', () => {
    const ids = [
      verdict.id,
      'F0E1D2C3-B4A5-4968-8776-655443322110',
      // Not a UUID: encodeCursor tags these from the id without its dashes (the string path).
      'abc',
      '0123456789abcdef0123456789abcdef0123',
      '01234567-89ab-cdef-0123-4567-9abcdef',
      'é1234567-89ab-cdef-0123-456789abcdef',
    ];
    // Positions of 1 to 16 digits: the text's length mod 3 takes each base64url ending.
    const positions = [1, 9, 10, 99, 100, 12_345, 999_999, 2 ** 40 + 7, Number.MAX_SAFE_INTEGER];
    for (const id of ids) {
      for (const position of positions) {
        const v = storedVerdict({ ...verdict, id, position });
        const expected = new StoredLine(v, NO_OUTCOME_TAIL, encodeCursor(position, id));
        const written = new StoredLine(v, NO_OUTCOME_TAIL, null, position);
        expect(written.cursor).toBe(encodeCursor(position, id));
        expect(written.byteLength).toBe(expected.byteLength);
        expect(written.toBuffer().toString()).toBe(expected.toBuffer().toString());
      }
    }
  });
});
