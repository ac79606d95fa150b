import { Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parquetReadObjects } from 'hyparquet';
import { afterEach, describe, expect, it } from 'vitest';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { HISTORY_COLUMNS, type HistoryRow, outcomeStream } from '../../contracts/history.ts';
import { syntheticOutcome, syntheticVerdict } from '../../test/history-harness.ts';
import { shownStoredLabel, storedOutcome, storedVerdict } from './export-rows.ts';
import { ParquetEncoders } from './parquet-encoders.ts';
import { parquetModuleBytes } from './parquet-input.mjs';
import { historyRow } from './rows.ts';
import { STORED_PLAN, type StoredRef } from './stored-columns.ts';
import { parquetStream, storedParquetStream } from './writers.ts';

/** Rows of every column kind, nulls included, enough for several 8,192-row groups. */
function rows(n: number): HistoryRow[] {
  return Array.from({ length: n }, (_, i) => {
    const row = Object.fromEntries(HISTORY_COLUMNS.map((c) => [c, null])) as Record<string, unknown>;
    Object.assign(row, {
      position: i + 1,
      verdict_id: `id-${i}`,
      stream: `verdicts-binance-C${i % 7}-1h`,
      revision: i,
      recorded_at: new Date(1_700_000_000_000 + i * 1000).toISOString(),
      exchange: i % 2 ? 'binance' : 'bybit',
      coin: `C${i % 7}`,
      timeframe: '1h',
      hash: `h${i}`,
      prev_hash: i === 0 ? null : `h${i - 1}`,
      reveal_at: new Date(1_700_000_000_000 + i * 1000).toISOString(),
      revealed: i % 5 !== 0,
      call: i % 5 === 0 ? null : 'BUY',
      confidence: i % 5 === 0 ? null : 40 + (i % 30),
      score: i % 5 === 0 ? null : i / n,
      price: 100 + i,
      candle_close_time: 1_700_000_000_000 + i * 3_600_000,
      inputs_json: i % 5 === 0 ? null : `{"rsi":${i % 100},"note":"é ✓"}`,
      return_6: i % 3 === 0 ? i / 1e4 : null,
      net_centi_bps: i % 3 === 0 ? i * 3 : null,
    });
    return row as unknown as HistoryRow;
  });
}

/** Pages of 500 rows, as a scan gives them, noting whether the source was closed early. */
function pages(all: HistoryRow[], seen = { closed: false, given: 0 }) {
  return {
    seen,
    iterable: (async function* () {
      try {
        for (let i = 0; i < all.length; i += 500) {
          seen.given += 500;
          yield all.slice(i, i + 500);
        }
      } finally {
        seen.closed = true;
      }
    })(),
  };
}

async function bytesOf(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const read = (bytes: Buffer) =>
  parquetReadObjects({
    file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer,
  });

const pools: ParquetEncoders[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
});
function pool(size: number, idleMs = 30_000) {
  const p = new ParquetEncoders(size, idleMs);
  pools.push(p);
  return p;
}

function recorded<T extends string, D>(type: T, data: D, position: number, stream: string, revision: number) {
  return {
    id: deterministicId('parquet-test', position),
    type,
    stream,
    revision,
    position,
    recordedAt: new Date(1_700_000_000_000 + position).toISOString(),
    correlationId: 'parquet-test',
    causationId: null,
    data,
  } satisfies RecordedEvent<D, T>;
}

/**
 * Stored rows of every kind (commitments, revealed with and without an outcome) in one range,
 * and the same rows as the log scan makes them.
 */
function storedRows(n: number): { refs: StoredRef[]; rows: HistoryRow[] } {
  const refs: StoredRef[] = [];
  const rows: HistoryRow[] = [];
  let prev: string | null = null;
  for (let i = 0; i < n; i++) {
    const data: EventData<'VerdictRecorded'> = syntheticVerdict(i % 8, i, n, prev);
    prev = data.hash;
    const verdict = recorded('VerdictRecorded', data, 2 * i + 1, 'verdicts-x', i);
    const outcome =
      i % 3 === 0
        ? recorded(
            'VerdictOutcomeResolved',
            syntheticOutcome(data, verdict.id, verdict.stream, i),
            2 * i + 2,
            outcomeStream(verdict.id),
            0,
          )
        : null;
    // Every fifth row is read before its reveal time: only its commitment is shown.
    const now = i % 5 === 0 ? 0 : Date.now();
    const v = storedVerdict(verdict);
    refs.push({
      position: verdict.position,
      v,
      label: shownStoredLabel(v, outcome && storedOutcome(outcome), now),
    });
    rows.push(historyRow(verdict, outcome, now));
  }
  return { refs, rows };
}

describe('Parquet encoding on worker threads', () => {
  it('stored rows: the worker lays out the same columns as the calling thread and as the log scan', async () => {
    const { refs, rows: fromLog } = storedRows(20_000);
    const batches = () =>
      pages(refs as unknown as HistoryRow[]).iterable as unknown as AsyncIterable<StoredRef[]>;
    const encoders = pool(1);
    const onWorker = storedParquetStream(batches(), encoders);
    expect(encoders.workers).toBe(1);
    const [a, b, c] = await Promise.all([
      bytesOf(onWorker),
      bytesOf(storedParquetStream(batches(), null)),
      bytesOf(parquetStream(pages(fromLog).iterable, undefined, undefined, null)),
    ]);
    expect(a.equals(b)).toBe(true);
    const back = await read(a);
    expect(back).toHaveLength(20_000);
    expect(back).toEqual(await read(c));
    expect(back[5]).toMatchObject({ revealed: false, call: null, inputs_json: null, return_6: null });
    expect(back[3]).toMatchObject({ revealed: true, result: expect.any(String) });
    expect(back[3]!.outcome_id).not.toBeNull();
    expect(back[4]).toMatchObject({ revealed: true, outcome_id: null });
  });

  it('writes the same bytes on a worker as on the calling thread, over several row groups', async () => {
    const all = rows(20_000);
    const encoders = pool(1);
    const onWorker = parquetStream(pages(all).iterable, undefined, undefined, encoders);
    expect(encoders.workers).toBe(1);
    const here = parquetStream(pages(all).iterable, undefined, undefined, null);
    const [a, b] = await Promise.all([bytesOf(onWorker), bytesOf(here)]);
    expect(a.equals(b)).toBe(true);
    const back = await read(a);
    expect(back).toHaveLength(20_000);
    expect(back[12_346]).toMatchObject({ verdict_id: 'id-12346', inputs_json: '{"rsi":46,"note":"é ✓"}' });
    expect(back[5]).toMatchObject({ call: null, revealed: false, prev_hash: 'h4' });
    // Back in the pool once the export ended: the next export reuses it.
    expect(encoders.workers).toBe(1);
    const again = await bytesOf(parquetStream(pages(all).iterable, undefined, undefined, encoders));
    expect(again.equals(a)).toBe(true);
    expect(encoders.workers).toBe(1);
  });

  it("the writer's WebAssembly memory stays flat however many row groups an export has", async () => {
    // On this thread (encoders: null), where the test can read the module's memory; the worker
    // hands row groups over with the same function. The memory never shrinks, so a first export
    // takes it to what one export needs, and a second, longer one must not add to it.
    const all = rows(8_192 * 4);
    await bytesOf(parquetStream(pages(all).iterable, undefined, undefined, null));
    const before = parquetModuleBytes();
    const many = (async function* () {
      for (let g = 0; g < 30; g++) yield all.slice(0, 8_192);
    })();
    const bytes = await bytesOf(parquetStream(many, undefined, undefined, null));
    expect(await read(bytes)).toHaveLength(30 * 8_192);
    // Without freeing each row group's Table: +1.7 MB of module memory per row group here.
    expect(parquetModuleBytes() - before).toBeLessThan(8 * 1024 * 1024);
  });

  it('an empty export is a valid file with every column, on a worker', async () => {
    const bytes = await bytesOf(parquetStream(pages([]).iterable, undefined, undefined, pool(1)));
    expect(bytes.subarray(0, 4).toString()).toBe('PAR1');
    expect(await read(bytes)).toEqual([]);
  });

  it('waits for a free worker when every worker is busy, in turn, and both files are whole', async () => {
    const all = rows(9_000);
    const encoders = pool(1);
    const firstSource = pages(all);
    const secondSource = pages(all);
    const first = parquetStream(firstSource.iterable, undefined, undefined, encoders);
    const second = parquetStream(secondSource.iterable, undefined, undefined, encoders);
    // One worker: the second export waits for it rather than encode on the event loop.
    expect(encoders.workers).toBe(1);
    expect(encoders.queued).toBe(1);
    const order: string[] = [];
    const collect = async (name: string, stream: NodeJS.ReadableStream) => {
      const chunks: Buffer[] = [];
      for await (const chunk of stream) {
        if (chunks.length === 0) order.push(`${name} first bytes`);
        chunks.push(chunk as Buffer);
      }
      order.push(`${name} end`);
      return Buffer.concat(chunks);
    };
    const [a, b] = await Promise.all([collect('first', first), collect('second', second)]);
    expect(order).toEqual(['first first bytes', 'first end', 'second first bytes', 'second end']);
    expect(a.equals(b)).toBe(true);
    expect(await read(b)).toHaveLength(9_000);
    expect(encoders.workers).toBe(1);
    expect(encoders.queued).toBe(0);
  });

  it("with whenBusy 'here', an export past the busy workers is encoded on the calling thread, whole", async () => {
    const all = rows(9_000);
    const encoders = pool(1);
    encoders.whenBusy = 'here';
    const first = parquetStream(pages(all).iterable, undefined, undefined, encoders);
    const second = parquetStream(pages(all).iterable, undefined, undefined, encoders);
    expect(encoders.workers).toBe(1);
    expect(encoders.queued).toBe(0);
    const [a, b] = await Promise.all([bytesOf(first), bytesOf(second)]);
    expect(a.equals(b)).toBe(true);
    expect(await read(b)).toHaveLength(9_000);
  });

  it('a waiting export whose reader goes away leaves the queue and closes its rows source unread', async () => {
    const encoders = pool(1);
    const first = parquetStream(pages(rows(9_000)).iterable, undefined, undefined, encoders);
    // A scan's iterator, told to return before it gave anything (a generator not yet started
    // would not run its finally).
    const waiting = { nexts: 0, returned: false };
    const source: AsyncIterable<HistoryRow[]> = {
      [Symbol.asyncIterator]: () => ({
        next: async () => {
          waiting.nexts++;
          return { done: false, value: rows(500) };
        },
        return: async () => {
          waiting.returned = true;
          return { done: true, value: undefined };
        },
      }),
    };
    const second = parquetStream(source, undefined, undefined, encoders);
    expect(encoders.queued).toBe(1);
    second.destroy();
    await expect.poll(() => waiting.returned).toBe(true);
    expect(waiting.nexts).toBe(0);
    expect(encoders.queued).toBe(0);
    expect(await read(await bytesOf(first))).toHaveLength(9_000);
    expect(encoders.workers).toBe(1);
  });

  it('closing the encoders fails the exports still waiting, with a clear error', async () => {
    const encoders = pool(1);
    const first = parquetStream(pages(rows(9_000)).iterable, undefined, undefined, encoders);
    const second = parquetStream(pages(rows(10)).iterable, undefined, undefined, encoders);
    const failed = bytesOf(second).catch((err: Error) => err);
    await encoders.close();
    expect(await failed).toMatchObject({ message: 'parquet encoders closed' });
    // The busy one still ends whole, then its worker stops.
    expect(await read(await bytesOf(first))).toHaveLength(9_000);
    await expect.poll(() => encoders.workers).toBe(0);
  });

  it('a failed export hands its place to the next one in line, on a fresh worker', async () => {
    const encoders = pool(1);
    const failing = (async function* () {
      yield rows(10_000);
      throw new Error('the log went away');
    })();
    const first = parquetStream(failing, undefined, undefined, encoders);
    const second = parquetStream(pages(rows(100)).iterable, undefined, undefined, encoders);
    await expect(bytesOf(first)).rejects.toThrow('the log went away');
    expect(await read(await bytesOf(second))).toHaveLength(100);
    expect(encoders.workers).toBe(1);
  });

  it('a reader that goes away stops the worker and closes the rows source', async () => {
    const all = rows(60_000);
    const encoders = pool(1);
    const source = pages(all);
    const stream = parquetStream(source.iterable, undefined, undefined, encoders);
    let taken = 0;
    await expect(
      pipeline(
        stream,
        new Writable({
          write(chunk: Buffer, _enc, done) {
            taken += chunk.length;
            done(taken > 0 ? new Error('client went away') : null);
          },
        }),
      ),
    ).rejects.toThrow('client went away');
    await expect.poll(() => source.seen.closed).toBe(true);
    // Not every row was read: the export stopped with its reader.
    expect(source.seen.given).toBeLessThan(all.length);
    expect(encoders.workers).toBe(0);
    // A new export gets a fresh worker and completes.
    const bytes = await bytesOf(parquetStream(pages(rows(100)).iterable, undefined, undefined, encoders));
    expect(await read(bytes)).toHaveLength(100);
  });

  it('a source that fails mid-export fails the stream, and the worker is not reused', async () => {
    const encoders = pool(1);
    const failing = (async function* () {
      yield rows(10_000);
      throw new Error('the log went away');
    })();
    await expect(bytesOf(parquetStream(failing, undefined, undefined, encoders))).rejects.toThrow(
      'the log went away',
    );
    expect(encoders.workers).toBe(0);
  });

  it('bytes the encoder cannot read fail the stream with a clear error', async () => {
    const encoders = pool(1);
    let given = false;
    const stream = encoders.encode(
      { rowGroupRows: 8_192, dictionary: [], uncompressed: [], withoutStatistics: [], stored: STORED_PLAN },
      async () => {
        if (given) return null;
        given = true;
        return { ipc: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]) };
      },
      async () => {},
    );
    expect(stream).not.toBeNull();
    await expect(bytesOf(stream!)).rejects.toThrow(/parquet encoder/);
    expect(encoders.workers).toBe(0);
  });

  it('stops idle workers after the idle time, and starts them again on demand', async () => {
    const encoders = pool(2, 50);
    await bytesOf(parquetStream(pages(rows(10)).iterable, undefined, undefined, encoders));
    expect(encoders.workers).toBe(1);
    await expect.poll(() => encoders.workers).toBe(0);
    await bytesOf(parquetStream(pages(rows(10)).iterable, undefined, undefined, encoders));
    expect(encoders.workers).toBe(1);
  });
});
