import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, revealTime } from '../../contracts/history.ts';
import { syntheticOutcome, syntheticVerdict } from '../../test/history-harness.ts';
import {
  F_ID,
  F_STREAM,
  fieldOf,
  headOf,
  NO_OUTCOME_TAIL,
  revealAtOf,
  revisionOf,
  shownStoredLabel,
  storedOutcome,
  storedVerdict,
  tailOf,
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
const line = (v: Buffer, tail: Uint8Array) => `${headOf(v).toString()}${Buffer.from(tail).toString()}`;

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
});
