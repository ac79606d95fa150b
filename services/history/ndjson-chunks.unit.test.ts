import type { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import type { HistoryRow } from '../../contracts/history.ts';
import { syntheticVerdict } from '../../test/history-harness.ts';
import { historyRow } from './rows.ts';
import { historyStream, type RowSource } from './writers.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;

/** 3,000 rows of about 2 KB (the engine's inputs): a dozen 512 KB chunks, in pages of 128. */
const rows: HistoryRow[] = Array.from({ length: 3_000 }, (_v, i) => {
  const verdict: Verdict = {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    type: 'VerdictRecorded',
    stream: 'verdicts-OKX-C0-1h',
    revision: i,
    position: i + 1,
    recordedAt: '2025-10-01T00:00:00.000Z',
    correlationId: 'c',
    causationId: null,
    data: syntheticVerdict(0, i, 3_000, null, true),
  };
  return historyRow(verdict, null, Number.MAX_SAFE_INTEGER);
});
const expected = rows.map((row) => `${JSON.stringify(row)}\n`).join('');

/** The rows in pages, each a turn of the event loop apart (as the scan gives them). */
const source: RowSource = <T>() =>
  (async function* () {
    for (let i = 0; i < rows.length; i += 128) {
      await new Promise((resolve) => setImmediate(resolve));
      yield rows.slice(i, i + 128) as T[];
    }
  })();

/** Each chunk as the stream gives it ('data': one per write), copied at once as a socket would take it. */
async function chunks(
  stream: Readable,
): Promise<{ text: string; buffers: Set<ArrayBufferLike>; count: number }> {
  const copies: Buffer[] = [];
  const buffers = new Set<ArrayBufferLike>();
  stream.on('data', (chunk: Buffer) => {
    buffers.add(chunk.buffer);
    copies.push(Buffer.from(chunk));
  });
  await new Promise((resolve, reject) => stream.on('end', resolve).on('error', reject));
  return { text: Buffer.concat(copies).toString(), buffers, count: copies.length };
}

describe('NDJSON chunks', () => {
  it('writes into a chunk already sent once its reader says every byte has left', async () => {
    const { text, buffers, count } = await chunks(historyStream('ndjson', source, null, () => true));
    expect(text).toBe(expected);
    expect(count).toBeGreaterThan(6);
    // The first chunk, then two written in turn.
    expect(buffers.size).toBeLessThanOrEqual(3);
  });

  it('never writes into a chunk its reader may still hold', async () => {
    const { text, buffers, count } = await chunks(historyStream('ndjson', source, null, () => false));
    expect(text).toBe(expected);
    expect(buffers.size).toBe(count);
    const unprobed = await chunks(historyStream('ndjson', source, null));
    expect(unprobed.text).toBe(expected);
    expect(unprobed.buffers.size).toBe(unprobed.count);
  });
});
