/**
 * Child process for the LMDB crash and multi-process tests. Prints one JSON line per
 * acknowledged append, so the parent knows exactly what the store promised to keep.
 *
 *   crash <path>                        appends batches of 1..5 events to 5 streams until killed, their
 *                                       ids in turn random (version 4), time-ordered (version 7, which
 *                                       the id index keys behind a prefix) and left to the store
 *   contend <path> <stream> <count> <w>  appends <count> events to one stream with expected revisions
 *   hold <path>                         opens a write transaction, prints {holding: true} and never
 *                                       ends it: the environment's write lock stays taken until the
 *                                       process dies (a writer stopped or hung mid-write)
 */
import { randomUUID } from 'node:crypto';
import type { NewEvent } from '../../contracts/envelope.ts';
import { newEventId } from '../../contracts/event-id.ts';
import { openLmdbEventStore } from './lmdb.ts';
import { WrongExpectedRevisionError } from './port.ts';

const [mode, path, ...rest] = process.argv.slice(2);
if (!path || (mode !== 'crash' && mode !== 'contend' && mode !== 'hold')) {
  process.stderr.write('usage: lmdb-crash-writer.ts crash|contend|hold <path> [...]\n');
  process.exit(2);
}

const store = await openLmdbEventStore({ path });
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);

if (mode === 'hold') {
  // A sub-database of its own: nothing the log's readers look at is touched.
  const scratch = store.root.openDB<number, string>({ name: 'hold-test' });
  store.root.transactionSync(() => {
    scratch.putSync('held-at', Date.now());
    process.stdout.write(`${JSON.stringify({ holding: true })}\n`);
    // Blocks this thread inside the transaction for good (a pipe write above is synchronous).
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
  });
} else if (mode === 'crash') {
  const streams = Array.from({ length: 5 }, (_, i) => `crash-${i}`);
  for (let batch = 0; ; batch++) {
    const stream = streams[batch % streams.length]!;
    const size = 1 + (batch % 5);
    const batchId = randomUUID();
    // Every kind of id the id index keys: the caller's random ones, the caller's time-ordered ones
    // and the store's own (time-ordered too), each kind in every stream.
    const idKind = (['random', 'ordered', 'store'] as const)[Math.floor(batch / streams.length) % 3]!;
    const events: NewEvent[] = Array.from({ length: size }, (_, index) => ({
      ...(idKind === 'store' ? {} : { id: idKind === 'random' ? randomUUID() : newEventId() }),
      type: 'CrashTick',
      // A payload of a few KB makes a batch span several pages, so a kill can land mid-commit.
      data: { batchId, size, index, pad: 'x'.repeat(2048) },
    }));
    const expectedRevision = (await store.streamRevision(stream)) ?? 'no_stream';
    const result = await store.append(stream, events, { expectedRevision });
    // The ids the store chose are read back from what it acknowledged (nothing else writes the stream).
    const ids =
      idKind === 'store'
        ? (await store.readStream(stream, { fromRevision: result.nextRevision - size + 1 })).map((e) => e.id)
        : events.map((e) => e.id);
    process.stdout.write(`${JSON.stringify({ ...result, stream, batchId, idKind, ids })}\n`);
  }
} else {
  const [stream, countText, writer] = rest;
  const count = Number(countText);
  let done = 0;
  let conflicts = 0;
  while (done < count) {
    const current = await store.streamRevision(stream!);
    const id = randomUUID();
    try {
      const result = await store.append(stream!, [{ id, type: 'Contended', data: { writer, seq: done } }], {
        expectedRevision: current ?? 'no_stream',
      });
      process.stdout.write(`${JSON.stringify({ ...result, id, writer, seq: done })}\n`);
      done++;
    } catch (error) {
      if (!(error instanceof WrongExpectedRevisionError)) throw error;
      conflicts++;
    }
  }
  process.stdout.write(`${JSON.stringify({ finished: true, conflicts })}\n`);
  await store.close();
}
