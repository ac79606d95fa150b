import { randomUUID } from 'node:crypto';
import { type Database, type RootDatabase, type RootDatabaseOptions, TransactionFlags } from 'lmdb';
import type { Logger } from 'pino';
import { putAppend } from '../../adapters/event-store/lmdb-append.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { isStorageFull, lowOnSpaceSync } from '../../adapters/event-store/storage-full.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { type FeedMember, feedOf } from '../../projections/log-feed.ts';
import { FoldProgress } from '../../projections/position-waiters.ts';
import {
  knowsTemplate,
  learnTemplate,
  type StoredRows,
  type StoredVerdictEntry,
  storedOutcome,
  storedVerdict,
  templateBytes,
  templateIdOf,
} from './export-rows.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

/** Bump when what export-rows.ts stores changes: a store of another version is rebuilt. */
const EXPORT_ROWS_VERSION = 6;
/**
 * Each version has databases of its own (version 2 also began writing the verdicts in append
 * mode; version 3 stores a verdict's inputs once, export-rows.ts; version 4 adds the lean and
 * its would-be outcome to the outcome's record; version 5 the outcome's chain link and position;
 * version 6 a verdict's head as a template shared by the records, `templateKey`). Versions never share a
 * database, so a process of another version on the same directory cannot empty this one's; the
 * older ones are emptied when this version's store is built.
 */
export const VERDICTS_DB = 'history-export-verdicts-6';
export const OUTCOMES_DB = 'history-export-outcomes-6';
export const OLD_DBS = [
  'history-export-verdicts',
  'history-export-outcomes',
  'history-export-verdicts-2',
  'history-export-outcomes-2',
  'history-export-verdicts-3',
  'history-export-outcomes-3',
  'history-export-verdicts-4',
  'history-export-outcomes-4',
  'history-export-verdicts-5',
  'history-export-outcomes-5',
];
const EXPORT_ROWS_NAME = 'history-export-rows';
/** Bytes per slab the records read back are copied into. */
const SLAB_BYTES = 256 * 1024;
let slab = Buffer.allocUnsafe(0);
let slabAt = 0;
/**
 * The memory a `verdictsAfter` read copies its records into from its start, when its caller
 * passes one (`into`); records past its end go to the slabs. Every slab filled is fresh memory
 * outside the JS heap, and V8 starts a full collection for each 64 MB of it: an NDJSON export,
 * done with a page's records before it reads the next, read 1.1 KB a row into slabs.
 */
let page: Buffer | null = null;
let pageAt = 0;

/**
 * Stored bytes in, stored bytes out, as the 'binary' encoding, but a record read back is a view
 * of a shared slab instead of a buffer of its own. With 'binary', lmdb-js copies every value
 * into a new ArrayBuffer: a Parquet export spent 11-15 % of its main thread in that constructor,
 * and a range read of 300,000 records of 1.4 KB took 545 ms against 223 ms this way. lmdb-js
 * hands a decoder that says it copies (no `needsStableBuffer`) its reused read buffer, whose
 * `length` it sets to the value's size. A slab is never written again once full: it is freed
 * when the last record viewing it is, so a record stays valid for as long as it is held.
 */
const slabCodec = {
  encode: (value: Buffer): Buffer => value,
  decode(bytes: Uint8Array, size?: unknown): Buffer {
    const n = typeof size === 'number' ? size : bytes.length;
    if (page !== null && pageAt + n <= page.length) {
      page.set(new Uint8Array(bytes.buffer, bytes.byteOffset, n), pageAt);
      const record = page.subarray(pageAt, pageAt + n);
      pageAt += n;
      return record;
    }
    if (slabAt + n > slab.length) {
      slab = Buffer.allocUnsafe(Math.max(SLAB_BYTES, n));
      slabAt = 0;
    }
    // A view of exactly n bytes: the read buffer's own length is larger than the `length` set on it.
    slab.set(new Uint8Array(bytes.buffer, bytes.byteOffset, n), slabAt);
    const record = slab.subarray(slabAt, slabAt + n);
    slabAt += n;
    return record;
  },
};

/** lmdb-js documents `encoder` for every database; its types declare it on the root's options only. */
const slabbed = (name: string): RootDatabaseOptions & { name: string } => ({ name, encoder: slabCodec });

/** The verdict records' database, as every reader and writer must open it. */
export function openVerdictsDb(root: RootDatabase): Database<Buffer, number> {
  return root.openDB<Buffer, number>(slabbed(VERDICTS_DB));
}

/** Key of the meta entry in the verdicts database: positions start at 1. */
const META = 0;
/**
 * Key of a verdict record's head template (export-rows.ts `HeadTemplate`) in the verdicts
 * database: below the meta, so a range read of positions never meets one. A few per version of
 * the engine's inputs, each written with the first record that names it.
 */
const templateKey = (id: number): number => -id - 1;
/** [version, generation, checkpoint, id of the event at the checkpoint]. */
type Meta = [version: number, generation: string, checkpoint: number, checkpointId: string | null];
/** How an I/O failure reads (its code, else lmdb-js's message); isStorageFull takes the rest. */
const IO_FAILURE = /\bEIO\b|Input\/output error/;

/**
 * Whether a write failed for lack of space: a full disk's writes through LMDB also fail as EIO
 * (seen on a full tmpfs), so an I/O failure on a nearly full disk counts; any other error (a
 * fold's own bug) does not, and stops the projection.
 */
function outOfSpace(err: unknown, root: RootDatabase): boolean {
  if (isStorageFull(err)) return true;
  const path = (root as { path?: string }).path;
  return (
    err instanceof Error &&
    path !== undefined &&
    IO_FAILURE.test(`${(err as { code?: string }).code} ${err.message}`) &&
    lowOnSpaceSync(path)
  );
}

/** Synchronous commit, flushed to disk later, abortable: a projection is rebuilt, never lost. */
const TXN_FLAGS =
  TransactionFlags.ABORTABLE | TransactionFlags.SYNCHRONOUS_COMMIT | TransactionFlags.NO_SYNC_FLUSH;

/**
 * The export-rows projection: each verdict's revealed NDJSON line (its head, export-rows.ts) and
 * each outcome's tail, on disk in two sub-databases of the event store's own LMDB environment,
 * written when the verdict is recorded and when its outcome resolves. A history export reads
 * these bytes instead of decoding and serialising every event again.
 *
 * It is a projection like the slice's others (fed by the store's one log feed, checkpointed,
 * rebuilt from position 0 when its version changes or on `rebuild()`), but its state does not
 * fit in memory, so it is not a snapshot: each page's entries and the checkpoint are written in
 * one LMDB transaction, so after a crash the checkpoint never claims a row that is not there.
 * The entries are deterministic functions of the events: re-folding rewrites the same bytes.
 *
 * Several processes on one data directory may run it: each page is applied only past the
 * checkpoint the transaction finds, so a slower process never overwrites a newer outcome with an
 * older state; a generation id, new at each rebuild, tells a process its checkpoint went stale.
 */
export class ExportRowStore extends FoldProgress implements FeedMember, StoredRows {
  readonly name = EXPORT_ROWS_NAME;
  private readonly verdicts: Database<Buffer, number>;
  private readonly outcomes: Database<Buffer, string>;
  /**
   * Templates this process has found or written in the verdicts database since its generation
   * began: cleared with the generation (a rebuild empties the database, templates included).
   */
  private readonly storedTemplates = new Set<number>();
  private positionId: string | null = null;
  private generation = '';
  /** The error of the last write, while it was refused for lack of space (see `receive`). */
  private full: Error | null = null;

  constructor(
    private readonly store: EventStore,
    private readonly root: RootDatabase,
    private readonly options: { logger?: Logger } = {},
  ) {
    super(EXPORT_ROWS_NAME);
    // Bytes, not msgpack: a range read hands each value over as a view of a slab (slabCodec),
    // and the export reads only the fields it needs out of it. Written in append mode, since positions
    // only grow: pages are filled instead of split in half. A record holds a verdict's values
    // alone (its head's names are in a shared template), so three of the largest fit a 4 KB leaf
    // page. Records are not compressed: decompressing each would cost the export more time than
    // the fewer pages save.
    this.verdicts = openVerdictsDb(root);
    this.outcomes = root.openDB<Buffer, string>(slabbed(OUTCOMES_DB));
  }

  /** The id of the event at `checkpoint` (null at 0): a resume cursor names both. */
  get checkpointId(): string | null {
    return this.positionId;
  }

  /** Why the projection is not folding: a failed fold, or a full disk until a write succeeds. */
  override get error(): Error | null {
    return this.failure ?? this.full;
  }

  /** The export may read it: started and not stopped by a failed fold. */
  get usable(): boolean {
    return this.joined && !this.failure;
  }

  async start(): Promise<void> {
    if (this.joined) return;
    const meta = this.meta();
    if (meta && meta[0] === EXPORT_ROWS_VERSION) {
      [, this.generation, this.position, this.positionId] = meta;
      this.storedTemplates.clear();
    } else {
      if (meta) {
        this.options.logger?.info(
          { projection: this.name, stored: meta[0], current: EXPORT_ROWS_VERSION },
          'projection version changed: rebuilding from position 0',
        );
      }
      this.reset();
    }
    this.failure = null;
    this.joined = true;
    feedOf(this.store, this.options.logger ? { logger: this.options.logger } : {}).join(this);
  }

  async stop(): Promise<void> {
    if (!this.joined) return;
    this.joined = false;
    await feedOf(this.store).leave(this);
  }

  /** Throws every entry away and folds the whole log again from position 0. */
  async rebuild(): Promise<void> {
    await this.stop();
    this.reset();
    await this.start();
  }

  private reset(): void {
    this.generation = randomUUID();
    this.storedTemplates.clear();
    this.position = 0;
    this.positionId = null;
    // Only those the directory holds (the root database's keys are its databases' names): each one
    // opened takes one of the environment's slots (maxDbs, 16), and the list grows with each version.
    const present = new Set<unknown>(this.root.getKeys());
    const old = OLD_DBS.filter((name) => present.has(name)).map((name) =>
      this.root.openDB({ name, encoding: 'binary' }),
    );
    const stale = old.reduce((n, db) => n + (db.getStats() as { entryCount: number }).entryCount, 0);
    if (stale > 0) {
      this.options.logger?.info(
        { projection: this.name, entries: stale, databases: OLD_DBS },
        'export rows of an older version: emptied, rebuilding from position 0',
      );
    }
    this.root.transactionSync(() => {
      // Cleared, not dropped: a dropped database's handle breaks the environment's read transactions.
      for (const db of old) db.clearSync();
      this.verdicts.clearSync();
      this.outcomes.clearSync();
      this.putMeta([EXPORT_ROWS_VERSION, this.generation, 0, null]);
    }, TXN_FLAGS);
  }

  private meta(): Meta | undefined {
    const bytes = this.verdicts.get(META);
    return bytes ? (JSON.parse(bytes.toString('utf8')) as Meta) : undefined;
  }

  private putMeta(meta: Meta): void {
    this.verdicts.putSync(META, Buffer.from(JSON.stringify(meta)));
  }

  /**
   * Up to `limit` verdicts after position `after` and up to `upTo`, in log order. `into`: memory
   * the records are copied into from its start (what does not fit goes to the shared slabs), for
   * a caller done with the records of its previous read.
   */
  verdictsAfter(after: number, upTo: number, limit: number, into?: Buffer): StoredVerdictEntry[] {
    const out: StoredVerdictEntry[] = [];
    const range = this.verdicts.getRange({ start: after + 1, end: upTo + 1, limit });
    page = into ?? null;
    pageAt = 0;
    try {
      let known = -1;
      for (const entry of range) {
        // A record written by another process may name a template this one has not met yet.
        const id = templateIdOf((entry as StoredVerdictEntry).value);
        if (id !== known && !knowsTemplate(id)) {
          const bytes = this.verdicts.get(templateKey(id));
          if (bytes === undefined) throw new Error(`export rows: template ${id} is not stored`);
          learnTemplate(id, bytes);
        }
        known = id;
        out.push(entry as StoredVerdictEntry);
      }
    } finally {
      page = null;
    }
    return out;
  }

  /** The outcome stored for a verdict, if one has resolved (up to the checkpoint). */
  outcome(verdictId: string): Buffer | undefined {
    return this.outcomes.get(verdictId);
  }

  /** Folds the events of a page past the checkpoint; called by the feed, synchronously. */
  receive(page: readonly RecordedEvent[]): void {
    if (!this.joined || this.failure || page.length === 0) return;
    const last = page[page.length - 1]!;
    if (last.position <= this.position) return;
    try {
      const verdicts: [number, Buffer][] = [];
      const outcomes: [number, string, Buffer][] = [];
      for (const event of page) {
        if (event.position <= this.position) continue;
        if (event.type === 'VerdictRecorded') {
          verdicts.push([event.position, storedVerdict(event as Verdict)]);
        } else if (event.type === 'VerdictOutcomeResolved') {
          const stored = storedOutcome(event as Outcome);
          if (stored) outcomes.push([event.position, (event as Outcome).data.verdictId, stored]);
        }
      }
      if (verdicts.length > 0 || outcomes.length > 0) {
        this.write(verdicts, outcomes, last);
        if (this.full !== null) {
          this.options.logger?.info(
            { projection: this.name, position: this.position },
            'projection has space again',
          );
          this.full = null;
        }
      } else {
        // Nothing of ours in the page: the entries already say all the log says up to here.
        this.position = last.position;
        this.positionId = last.id;
      }
    } catch (err) {
      if (outOfSpace(err, this.root)) {
        // A full disk: the page's one transaction did not commit and the checkpoint stays where it
        // was, so the feed reads the page again (at its next poll) and it is written once there is
        // room. Stopping here, as for a fold that throws, kept the projection stopped after space
        // returned and across restarts. /readyz says so meanwhile.
        if (this.full === null) {
          this.options.logger?.error(
            { err, projection: this.name, position: this.position },
            'projection out of space: retrying until space returns',
          );
        }
        this.full = err as Error;
        return;
      }
      // A fold that throws stops this projection (the export falls back to the log, and /readyz
      // shows it) rather than skipping an event the entries would then silently lack.
      this.failure = err instanceof Error ? err : new Error(String(err));
      this.options.logger?.error(
        { err, projection: this.name, position: this.position },
        'projection stopped',
      );
      void feedOf(this.store).leave(this);
      return;
    }
    this.releaseWaiters();
  }

  private write(
    verdicts: readonly [number, Buffer][],
    outcomes: readonly [number, string, Buffer][],
    last: RecordedEvent,
  ): void {
    const added: number[] = [];
    const stale = this.root.transactionSync(() => {
      const meta = this.meta();
      // Rebuilt by another process since: start again from its checkpoint (the feed re-reads).
      if (!meta || meta[0] !== EXPORT_ROWS_VERSION || meta[1] !== this.generation) return meta ?? null;
      const applied = meta[2];
      if (applied >= last.position) return undefined;
      for (const [position, value] of verdicts) {
        if (position <= applied) continue;
        // Its template first, in the same transaction: a reader finding the record finds it.
        const id = templateIdOf(value);
        if (!this.storedTemplates.has(id) && !added.includes(id)) {
          const bytes = templateBytes(id);
          const stored = this.verdicts.get(templateKey(id));
          if (stored === undefined) this.verdicts.putSync(templateKey(id), bytes);
          // Another process stored a different template under this 6-byte id: a record naming it
          // would be written from the wrong template. Stopping the fold sends exports to the log.
          else if (!stored.equals(bytes))
            throw new Error(
              `export rows: template ${id} is stored with other bytes (two templates share an id)`,
            );
          added.push(id);
        }
        putAppend(this.verdicts, position, value, 'export rows: verdict');
      }
      for (const [position, id, value] of outcomes) if (position > applied) this.outcomes.putSync(id, value);
      this.putMeta([EXPORT_ROWS_VERSION, this.generation, last.position, last.id]);
      return undefined;
    }, TXN_FLAGS);
    for (const id of added) this.storedTemplates.add(id);
    if (stale !== undefined) {
      if (stale === null || stale[0] !== EXPORT_ROWS_VERSION)
        throw new Error('export rows store was removed');
      [, this.generation, this.position, this.positionId] = stale;
      this.storedTemplates.clear();
      return;
    }
    this.position = last.position;
    this.positionId = last.id;
  }
}
