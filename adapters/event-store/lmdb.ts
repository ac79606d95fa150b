import { type Database, open, type RootDatabase } from 'lmdb';
import type { Logger } from 'pino';
import type { AppendResult, ExpectedRevision, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { AppendSignal, catchUpSubscription } from './catch-up.ts';
import { findIdempotentAppend, freshEventIds } from './idempotency.ts';
import { putAppend } from './lmdb-append.ts';
import {
  decodeStoredEvent,
  encodeStoredEvent,
  type IdIndex,
  KNOWN_TYPE_CODES,
  newerCodeError,
  openIdIndex,
  type StoredId,
  storedId,
  typeCodeOf,
} from './lmdb-codec.ts';
import { LmdbProjectionStore } from './lmdb-snapshots.ts';
import { requireWritableEnvironment } from './lmdb-writable.ts';
import {
  checkExpected,
  type EventStore,
  type HealthReport,
  IdempotencyConflictError,
  recordEvent,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';
import {
  commitCause,
  ignoreStrayCommitRejections,
  isStorageFull,
  lowOnSpace,
  StorageFullState,
} from './storage-full.ts';

export interface LmdbEventStoreOptions {
  /** Directory of the LMDB environment (created when missing). */
  path: string;
  /** How often a live subscription looks for appends made by other processes. */
  pollMs?: number;
  /** Told once when the disk fills up and once when it has room again. */
  logger?: Logger;
  /**
   * false: MDB_NORDAHEAD on one map of the file instead of lmdb-js's chunked maps (config
   * LMDB_READ_AHEAD). Default true.
   */
  readAhead?: boolean;
}

type StreamKey = [stream: string, revision: number];

/** An append waiting in its turn's group; `outcome` is set inside the group's transaction. */
interface PendingAppend {
  stream: string;
  events: NewEvent[];
  expected: ExpectedRevision;
  resolve: (result: AppendResult) => void;
  reject: (err: unknown) => void;
  outcome: Written | { error: unknown } | null;
  /** What a pass wrote of it before a read did not find it on the log (see lostAfterCommit). */
  suspect?: Written | undefined;
}

/** An append done inside a group's transaction; `recorded`: what it wrote, when it wrote. */
type Written =
  | { result: AppendResult; wrote: false }
  | {
      result: AppendResult;
      wrote: true;
      recorded: RecordedEvent[];
      /** The first recorded event's id in stored form, for the read-back (`notOnLog`). */
      firstId: StoredId;
    };

const LAST_REVISION = Number.MAX_SAFE_INTEGER;

/** The events an append wrote in its last pass; undefined when it wrote nothing (yet). */
function recordedBy(pending: PendingAppend): RecordedEvent[] | undefined {
  const outcome = pending.outcome;
  return outcome !== null && 'recorded' in outcome ? outcome.recorded : undefined;
}

/**
 * Events are msgpack records: the field names of each shape (the envelope, each event type's
 * data, a verdict's inputs) are stored once, in shared structures, instead of in every event,
 * which about halves the bytes per event and the time to decode one. The structures live at
 * key 0 of the events database, a position no event takes (positions start at 1), so reads by
 * position never meet them. Entries written before (plain msgpack maps) still decode as they were.
 */
export const EVENT_ENCODING = { sharedStructuresKey: 0, maxSharedStructures: 1_000 } as const;

/** The part of lmdb-js's msgpackr encoder that holds the shared structures it writes with. */
interface StructuresEncoder {
  structures: unknown[] & { uninitialized?: boolean };
}
/** Streams whose last revision is remembered between appends (see `revisionHints`). */
const MAX_REVISION_HINTS = 10_000;
/** Times an append found missing from the log after its commit is written, in all, before it fails. */
const MAX_WRITES = 3;

export async function openLmdbEventStore(options: LmdbEventStoreOptions): Promise<LmdbEventStore> {
  const store = new LmdbEventStore(options);
  // A log a newer version wrote a type to is refused here, before anything reads it: reading on
  // would fail at its first such event (in the quota rebuild, a projection...), never ready.
  const code = store.typeCode();
  if (code > KNOWN_TYPE_CODES) {
    await store.close();
    throw newerCodeError(code, `the event log at ${options.path}`);
  }
  return store;
}

/**
 * The embedded event store. One LMDB environment holds three sub-databases written in the same
 * transaction: `events` (position → event), `streams` ([stream, revision] → position) and `ids`
 * (event id → position). The expected-revision check, the idempotency check and the writes all
 * run inside one LMDB write transaction, and LMDB admits one writer at a time across every
 * process that opens the directory, so concurrent appenders are serialized and exactly one wins.
 * An append is acknowledged only after its transaction is committed and flushed to disk, and a
 * read after the flush finds it on the log (see `notOnLog`).
 */
export class LmdbEventStore implements EventStore {
  readonly kind = 'lmdb' as const;
  readonly densePositions = true;
  readonly root: RootDatabase;
  private readonly events: Database<RecordedEvent, number>;
  private readonly streams: Database<number, StreamKey>;
  private readonly ids: IdIndex;
  private readonly signal = new AppendSignal();
  private readonly pollMs: number;
  private readonly space: StorageFullState;
  private readonly path: string;
  private readonly logger: Logger | undefined;
  private closed = false;
  /**
   * The head and each stream's last revision as this process last wrote or read them. Hints
   * only: another process may have appended since, or a batch may have rolled back, so each is
   * checked with two point reads (the hinted key is there, the next one is not) inside the
   * transaction that relies on it; a reverse range scan, several times dearer, runs only when
   * the check fails. Positions and revisions are dense, so the check is exact.
   */
  private headHint = 0;
  private readonly revisionHints = new Map<string, number>();
  /**
   * Within one write transaction: whether `headHint` is checked (or written) by it, and the
   * revisions of the streams it wrote. Exact, not hints: no other writer commits while the
   * transaction holds LMDB's write lock, and a rolled-back transaction is run again from cleared
   * values. The appends of a group after its first skip the two point reads of each check (a group
   * of keyed calls of one key appends to one quota stream, and each point read inside the write
   * transaction measured 2–4 µs under the profiler).
   */
  private headExactInTxn = false;
  private readonly txnRevisions = new Map<string, number>();
  /** A notify of subscribers is scheduled for the end of this turn of the event loop. */
  private notifyScheduled = false;
  /**
   * The positions each group of this process wrote and has not handed to its listeners yet (set
   * inside its write transaction, before the commit can be seen; removed when it is handed over or
   * fails). Readers see a commit before its flush ends and it is handed over, and a doorbell that
   * rang for it then (`appended`) made the log feed read and decode events it was about to be
   * handed anyway (in the webhooks bench's single layout, two thirds of every event were so read,
   * 5 % of the process's CPU).
   */
  private readonly unannounced = new Map<PendingAppend[], { first: number; last: number }>();
  /**
   * The byte length of the shared structures (key 0) as this process's last write transaction
   * left them; -1 before the first. msgpackr adds a structure to its table in memory and stores
   * the table in the write transaction of the event that needed it; when that transaction does
   * not commit (a full disk, a rolled-back pass), the table in memory keeps the structure the
   * disk does not have. The next events of that shape were then written with its id and, once
   * another new shape took that id on disk, read back as that shape or not at all ("Data read,
   * but end of buffer not reached"), in this process and after a restart. So each transaction
   * compares the stored table with what the last one left, before it encodes anything (see
   * `syncStructures`).
   */
  private structuresBytes = -1;
  /**
   * The highest type code the log is known to record (`IdIndex.typeCode`), as this process last
   * read or committed it: an append records a higher one in its own transaction (`writeInTxn`),
   * taken here only once that transaction commits. `txnTypeCode`: what the running one recorded.
   */
  private typeCodeRecorded = 0;
  private txnTypeCode = 0;

  constructor(options: LmdbEventStoreOptions) {
    this.pollMs = options.pollMs ?? 250;
    // overlappingSync (lmdb-js's default off Windows) is off: with two processes appending to one
    // directory (roles sharing DATA_DIR), it lost an acknowledged append in 4 of 75 runs of four
    // writers x 200 contended appends (800 acknowledged, 799 on the log: a commit built on a
    // state without the other process's last one), and 0 of 150 without it. Without it the flush
    // happens inside the commit, under the write lock; `flushed` is still awaited before an
    // append is acknowledged. noSubdir: false keeps `path` a directory even with a dot in its name.
    // remapChunks: the file is mapped in chunks that are unmapped again, rather than in one map
    // that lmdb-js doubles as the file grows while keeping every older map alive. Without it,
    // every page a process ever read stayed resident, in each map it was read through: the first
    // boot on a 1M-event log (every projection folding the whole log, the export rows written
    // beside it) peaked at 3.2-3.4 GB RSS, 2.3-2.4 GB of it pages of data.mdb in three maps
    // (1.3 GB with it; restarts, the rebuild and read-all benches no slower within their noise).
    // readAhead false: one map advised MADV_RANDOM (noReadAhead). lmdb-js advises only that map,
    // never its chunks, so noReadAhead with remapChunks changes nothing. Under a 1 GiB memory limit
    // the read-ahead of each fault (the device's window, 8 MB here) was what filled the cgroup.
    const readAhead = options.readAhead ?? true;
    // lmdb-js reads noReadAhead (open.js) but its types do not declare it.
    const advice = { noReadAhead: !readAhead };
    requireWritableEnvironment(options.path);
    this.root = open({
      path: options.path,
      noSubdir: false,
      maxDbs: 16,
      overlappingSync: false,
      remapChunks: readAhead,
      ...advice,
    });
    this.events = this.root.openDB<RecordedEvent, number>({ name: 'events', ...EVENT_ENCODING });
    this.streams = this.root.openDB<number, StreamKey>({ name: 'streams' });
    this.ids = openIdIndex(this.root, () => !this.events.doesExist(1));
    this.typeCodeRecorded = this.ids.typeCode();
    this.path = options.path;
    this.logger = options.logger;
    this.space = new StorageFullState(`LMDB at ${options.path}`, options.logger);
    ignoreStrayCommitRejections(options.logger);
    // Reader slots of processes that were killed would otherwise pin old pages forever.
    this.root.readerCheck();
  }

  /** The highest event type code the log records (a newer version's may be above KNOWN_TYPE_CODES). */
  typeCode(): number {
    return this.ids.typeCode();
  }

  /** Projection snapshots in the same environment, so one data directory holds both. */
  projectionStore(): LmdbProjectionStore {
    return new LmdbProjectionStore(this.root, false, {
      path: this.path,
      ...(this.logger ? { logger: this.logger } : {}),
    });
  }

  /**
   * Appends queued and not yet written: they share one child transaction (see `append`). Null
   * once the group's transaction callback has taken them.
   */
  private group: PendingAppend[] | null = null;
  /** A group's write is under way (its transaction, commit, flush and read-back). */
  private writing = false;
  /** The group gathering while another is written; written when that one completes. */
  private nextGroup: PendingAppend[] | null = null;

  /**
   * The appends made in one turn of the event loop are written in one child transaction, one
   * after another, and share one commit and one flush (group commit: each is still acknowledged
   * only once on disk). One group is written at a time: appends made while a group's commit and
   * flush are under way gather into the next group, written when that one completes, so a group
   * grows with the load instead of each turn paying a commit (400-480 µs of the process's CPU,
   * lmdb-js's write thread included), and a lone append waits for one commit at most before its
   * own. A child transaction per append cost a nested LMDB transaction, a promise
   * and a flush wait each; a webhook delivery makes three appends. An append whose check fails
   * (expected revision, idempotency) writes nothing and fails alone; one whose write throws may
   * have written part of itself, so the group is rolled back and written again without it (it
   * fails alone too). A commit that fails fails the whole group, none of which was acknowledged.
   */
  append(
    stream: string,
    events: NewEvent[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResult> {
    const expected = options.expectedRevision ?? 'any';
    return new Promise<AppendResult>((resolve, reject) => {
      const pending: PendingAppend = { stream, events, expected, resolve, reject, outcome: null };
      if (this.group !== null) {
        this.group.push(pending);
        return;
      }
      const group = [pending];
      this.group = group;
      if (this.writing) this.nextGroup = group;
      else this.startGroup(group);
    });
  }

  private startGroup(group: PendingAppend[]): void {
    this.writing = true;
    void this.writeGroup(group).finally(() => {
      this.writing = false;
      const next = this.nextGroup;
      this.nextGroup = null;
      if (next !== null) this.startGroup(next);
    });
  }

  private async writeGroup(group: PendingAppend[]): Promise<void> {
    let left = group;
    let writes = 1;
    while (left.length > 0) {
      const writing = left;
      let culprit: PendingAppend | null = null;
      try {
        // Runs when LMDB starts the group's write transaction; appends made after that join the next.
        await this.root.childTransaction(() => {
          if (this.group === group) this.group = null;
          this.headExactInTxn = false;
          this.txnRevisions.clear();
          this.txnTypeCode = this.typeCodeRecorded;
          const recordedAt = new Date().toISOString();
          for (const pending of writing) pending.outcome = null;
          this.syncStructures();
          try {
            for (const pending of writing) {
              try {
                pending.outcome = this.writeInTxn(pending, recordedAt);
              } catch (err) {
                pending.outcome = { error: err };
                // A check failed before anything of this append was written: it fails alone.
                if (err instanceof WrongExpectedRevisionError || err instanceof IdempotencyConflictError)
                  continue;
                // Anything else may have left part of this append written: the group is rolled back.
                culprit = pending;
                throw err;
              }
            }
          } finally {
            // Read inside the transaction, so a structure it stored counts even when it then
            // throws: if it does not commit, the next transaction finds the table shorter.
            this.structuresBytes = this.storedStructuresBytes();
          }
          this.markUnannounced(group, writing);
        });
        if (writing.some((p) => recordedBy(p) !== undefined)) {
          await this.root.flushed;
        }
        this.typeCodeRecorded = Math.max(this.typeCodeRecorded, this.txnTypeCode);
      } catch (err) {
        if (this.group === group) this.group = null;
        // Nothing of this pass is on the log: no position of it to wait for.
        this.unannounced.delete(group);
        const mapped = await this.writeFailure(err);
        if (culprit === null) {
          // The commit failed: nothing of this pass is on disk. Appends of an earlier pass of the
          // group (found on the log, see below) keep their outcome.
          for (const pending of writing) pending.outcome = { error: mapped };
          left = [];
        } else {
          // The append that threw fails alone; the others are written again without it.
          (culprit as PendingAppend).outcome = { error: mapped };
          left = writing.filter((p) => p !== culprit);
          for (const pending of left) pending.outcome = null;
        }
        continue;
      }
      left = this.lostAfterCommit(writing, writes);
      writes++;
    }
    let wrote = false;
    // The group's events go to the listeners before any append is answered, so a reader that
    // waits for an answered position (read-your-writes) finds it folded already.
    if (this.listeners.size > 0) this.handOver(group);
    this.unannounced.delete(group);
    for (const pending of group) {
      const outcome = pending.outcome;
      if (outcome === null) pending.reject(new Error('lmdb event store: append not written'));
      else if ('error' in outcome) pending.reject(outcome.error);
      else {
        wrote ||= outcome.wrote;
        pending.resolve(outcome.result);
      }
    }
    if (wrote) {
      this.space.succeeded();
      this.notifySoon();
    }
  }

  /**
   * The appends of a committed and flushed pass that a read does not find on the log, made ready
   * to be written again (their outcome cleared, the one they were given kept as `suspect`); after
   * the last of MAX_WRITES writes they fail instead. An append written again that turns out to be
   * on the log after all (its ids are found: a false alarm) gets back the outcome it had, so its
   * caller and the listeners see it as written once.
   */
  private lostAfterCommit(writing: PendingAppend[], writes: number): PendingAppend[] {
    for (const pending of writing) {
      const suspect = pending.suspect;
      pending.suspect = undefined;
      const outcome = pending.outcome;
      if (suspect !== undefined && outcome !== null && 'wrote' in outcome && !outcome.wrote) {
        if (outcome.result.position === suspect.result.position) pending.outcome = suspect;
      }
    }
    if (!writing.some((p) => recordedBy(p) !== undefined)) return [];
    let lost: PendingAppend[];
    try {
      lost = writes === 1 ? this.lostOfFirstPass(writing) : writing.filter((p) => this.notOnLog(p));
      // The check renewed this handle's read snapshot, which lmdb-js then keeps until a timer
      // fires; left so, a read right after another handle's (or process's) commit would miss
      // it, where after a commit of ours the next read has always taken a fresh snapshot.
      this.root.resetReadTxn();
    } catch (err) {
      // The check could not be made (the store closing, say): the commit stands as lmdb-js told it.
      this.logger?.error({ err }, 'lmdb event store: could not read back committed appends');
      return [];
    }
    if (lost.length === 0) return [];
    const last = writes >= MAX_WRITES;
    this.logger?.error(
      { appends: lost.length, write: writes },
      last
        ? 'lmdb event store: a committed append is not on the log; failing it'
        : 'lmdb event store: a committed append is not on the log; writing it again',
    );
    for (const pending of lost) {
      if (last) {
        pending.outcome = { error: new Error('lmdb event store: a committed append is not on the log') };
      } else {
        pending.suspect = pending.outcome as Written;
        pending.outcome = null;
      }
    }
    return last ? [] : lost;
  }

  /**
   * Whether an append this group wrote is missing from the log once its commit is flushed: its
   * first event's id does not point at the position it was written at. lmdb-js now and then
   * resolves a group whose writes did not reach the log: under a full suite's load, the contention
   * loop (four processes x 200 appends to one stream with expected revisions) lost one in about 90
   * runs, a lone writer's append at position 180 followed on the log by its next append at that same
   * position, and this check, made right after the flush, found such a loss before it was
   * acknowledged. The read sees the commit: lmdb-js renews its read snapshot after every commit of
   * this handle. A missing append is written again from its checks on, so its expected revision
   * decides afresh and it is acknowledged only once it is on the log. It narrows the loss, it does
   * not end it: beside two suites the loop still lost 2 appends in 288 runs, each found here and
   * then overwritten by the same process's next transaction, built on a state without it. Several
   * processes must not write to one directory (deploy/README, LMDB).
   */
  private notOnLog(pending: PendingAppend): boolean {
    const outcome = pending.outcome;
    if (outcome === null || !('recorded' in outcome)) return false;
    const first = outcome.recorded[0];
    if (first === undefined) return false;
    return this.ids.getStored(first.id, outcome.firstId) !== first.position;
  }

  /**
   * The read-back of a group's first pass: its first and its last append written are looked up,
   * and when both are on the log the ones between them are taken to be too. A pass writes its
   * appends in one transaction, and the losses seen (notOnLog) took whole transactions; looking at
   * both ends also finds a loss of a transaction's first appends or of its last. Two look-ups
   * instead of one per append: a group of the webhooks bench holds about 40 appends. When either
   * is missing, every append is looked up.
   * Passes that write appends again look each up: they follow a loss, and their appends may be
   * answered with what an earlier pass wrote (false alarms).
   */
  private lostOfFirstPass(writing: PendingAppend[]): PendingAppend[] {
    let first = -1;
    let last = -1;
    for (let i = 0; i < writing.length; i++) {
      if (recordedBy(writing[i]!)?.[0] === undefined) continue;
      if (first < 0) first = i;
      last = i;
    }
    if (first === last) return writing.filter((p) => this.notOnLog(p));
    // Each looked up once: a second look-up could answer otherwise than the first did.
    const firstLost = this.notOnLog(writing[first]!);
    const lastLost = this.notOnLog(writing[last]!);
    if (!firstLost && !lastLost) return [];
    return writing.filter((p, i) => (i === first ? firstLost : i === last ? lastLost : this.notOnLog(p)));
  }

  private readonly listeners = new Set<(events: readonly RecordedEvent[]) => void>();

  onAppended(listener: (events: readonly RecordedEvent[]) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Hands a committed group's events, in position order (the order they were written), to the listeners. */
  private handOver(group: PendingAppend[]): void {
    const events: RecordedEvent[] = [];
    for (const pending of group) {
      const recorded = recordedBy(pending);
      if (recorded !== undefined) events.push(...recorded);
    }
    if (events.length === 0) return;
    // An append written again after the others of its group has a later position than they do.
    events.sort((a, b) => a.position - b.position);
    for (const listener of this.listeners) {
      try {
        listener(events);
      } catch (err) {
        // A listener's failure is its own: the appends are committed and answered all the same.
        this.logger?.error({ err }, 'lmdb event store: an append listener failed');
      }
    }
  }

  /** A failed write or commit as the caller sees it: a full disk is StorageFullError. */
  private async writeFailure(err: unknown): Promise<unknown> {
    try {
      const cause = await commitCause(err);
      return isStorageFull(cause) || isStorageFull(err) || (cause !== err && (await this.lowOnSpace()))
        ? this.space.failed(cause)
        : err;
    } catch (checkErr) {
      return checkErr;
    }
  }

  /** One append inside the group's write transaction; throws a failed check before writing anything. */
  private writeInTxn(pending: PendingAppend, recordedAt: string): Written {
    const { stream, events, expected } = pending;
    // A caller's first id in stored form (its 16 bytes, for a UUID), parsed once for its look-up,
    // its event, its index entry and the read-back after the flush.
    const givenId = events[0]?.id;
    const givenStored = givenId === undefined ? undefined : storedId(givenId);
    const prior = findIdempotentAppend(stream, events, (id) =>
      id === givenId && givenStored !== undefined ? this.lookup(id, givenStored) : this.lookup(id),
    );
    if (prior) return { result: prior, wrote: false };
    const inTxn = this.txnRevisions.get(stream);
    const current = inTxn !== undefined ? inTxn : this.currentRevision(stream);
    checkExpected(stream, expected, current);
    const head = this.headExactInTxn ? this.headHint : this.headInTxn();
    this.headExactInTxn = true;
    if (events.length === 0)
      return { result: { nextRevision: current ?? -1, position: head, written: false }, wrote: false };
    // findIdempotentAppend just found the first id unstored: no second lookup of it.
    const ids = freshEventIds(stream, events, (id) => id !== givenId && this.ids.doesExist(id));
    const firstStored = givenStored ?? storedId(ids[0]!);
    const firstRevision = (current ?? -1) + 1;
    const written: RecordedEvent[] = [];
    for (let i = 0; i < events.length; i++) {
      const id = ids[i]!;
      const position = head + i + 1;
      const revision = firstRevision + i;
      const recorded = recordEvent(events[i]!, { id, stream, revision, position, recordedAt });
      written.push(recorded);
      const stored = i === 0 ? encodeStoredEvent(recorded, firstStored) : encodeStoredEvent(recorded);
      putAppend(this.events, position, stored as RecordedEvent, 'lmdb event store: event');
      // The first event of a type code above the recorded one records it (once per code and log).
      const code = typeCodeOf(stored);
      if (code > this.txnTypeCode) {
        this.ids.recordTypeCode(code);
        this.txnTypeCode = code;
      }
      this.streams.putSync([stream, revision], position);
      this.ids.putStored(id, stored.id, position);
    }
    this.headHint = head + events.length;
    this.hintRevision(stream, firstRevision + events.length - 1);
    this.txnRevisions.set(stream, firstRevision + events.length - 1);
    return {
      result: {
        nextRevision: firstRevision + events.length - 1,
        position: head + events.length,
        written: true,
      },
      wrote: true,
      recorded: written,
      firstId: firstStored,
    };
  }

  async readStream(stream: string, options: { fromRevision?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;
    if (maxCount <= 0) return [];
    const out: RecordedEvent[] = [];
    const range = this.streams.getRange({
      start: [stream, options.fromRevision ?? 0],
      end: [stream, LAST_REVISION],
      ...(Number.isFinite(maxCount) ? { limit: maxCount } : {}),
    });
    for (const { value: position } of range) {
      const recorded = this.events.get(position);
      if (!recorded)
        throw new Error(`lmdb event store: stream index of ${stream} points at missing position ${position}`);
      out.push(decodeStoredEvent(recorded, position));
    }
    return out;
  }

  async readAll(options: { after?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;
    if (maxCount <= 0) return [];
    const out: RecordedEvent[] = [];
    const range = this.events.getRange({
      start: (options.after ?? 0) + 1,
      ...(Number.isFinite(maxCount) ? { limit: maxCount } : {}),
    });
    for (const { key, value } of range) out.push(decodeStoredEvent(value, key));
    return out;
  }

  subscribeToAll(options: { after?: number } = {}): Subscription {
    return catchUpSubscription((after, maxCount) => this.readAll({ after, maxCount }), this.signal, {
      ...options,
      pollMs: this.pollMs,
    });
  }

  /** Other processes' appends are otherwise seen at the next poll (`pollMs`). */
  wake(): void {
    this.wakes++;
    this.signal.notify();
  }

  /** Calls of `wake` so far: a doorbell rung by one always rings (see `appended`). */
  private wakes = 0;

  /**
   * Rings for a head past `after` that is not all this process's own commits, handed over or
   * about to be: those reach a follower through `onAppended`, so a bell for them would only make
   * it read and decode what it was handed (or is about to be). The end of a commit notifies once
   * for all waiters, and a waiter already past that commit waits on; `wake()` and the timeout
   * always ring. In the webhooks bench's single layout the log feed so read two thirds of every
   * event a second time, 5 % of the process's CPU.
   */
  appended(after: number, timeoutMs: number): { promise: Promise<void>; cancel: () => void } {
    const deadline = performance.now() + timeoutMs;
    let resolve!: () => void;
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    let current: { cancel: () => void } | null = null;
    let done = false;
    const finish = () => {
      done = true;
      current = null;
      resolve();
    };
    // `look`: read the head first (a waiter arming); re-armed right after a notify it was checked.
    const arm = (look: boolean) => {
      const wakes = this.wakes;
      // Registered before the head is looked at, so an append in between is not missed.
      const wait = this.signal.wait(Math.max(0, deadline - performance.now()));
      current = wait;
      if (this.closed || (look && this.unseenAfter(after, this.headInTxn()))) {
        wait.cancel();
        finish();
        return;
      }
      void wait.promise.then(() => {
        if (done || current !== wait) return;
        // Not woken and not timed out, so notified by a commit of this process: the head its
        // write transaction saw (exact there, another process's appends before it included) is
        // the head to look past, with no read of the log.
        if (
          this.closed ||
          this.wakes !== wakes ||
          performance.now() >= deadline ||
          this.unseenAfter(after, this.headHint)
        )
          finish();
        else arm(false);
      });
    };
    arm(true);
    return {
      promise,
      cancel: () => {
        if (done) return;
        const wait = current;
        finish();
        wait?.cancel();
      },
    };
  }

  /** Inside the group's write transaction: the positions this pass wrote, to be handed over. */
  private markUnannounced(group: PendingAppend[], writing: PendingAppend[]): void {
    let first = Number.POSITIVE_INFINITY;
    let last = 0;
    for (const pending of writing) {
      const recorded = recordedBy(pending);
      if (recorded === undefined || recorded.length === 0) continue;
      first = Math.min(first, recorded[0]!.position);
      last = Math.max(last, recorded[recorded.length - 1]!.position);
    }
    if (last > 0) this.unannounced.set(group, { first, last });
    else this.unannounced.delete(group);
  }

  /**
   * Whether the log holds a position past `after` that no group of this process will hand over:
   * another process's append (or one of ours already handed over, which the caller has seen).
   */
  private unseenAfter(after: number, head: number): boolean {
    let next = after + 1;
    while (next <= head) {
      let covered = false;
      for (const range of this.unannounced.values()) {
        if (range.first <= next && next <= range.last) {
          next = range.last + 1;
          covered = true;
          break;
        }
      }
      if (!covered) return true;
    }
    return false;
  }

  async streamRevision(stream: string) {
    return this.currentRevision(stream);
  }

  async headPosition() {
    return this.headInTxn();
  }

  async health(): Promise<HealthReport> {
    if (this.closed) return { ok: false, detail: 'closed' };
    // While appends fail for lack of space, the free space of the disk tells when there is room
    // again, so a replica taken out of rotation (no writes reach it) still comes back.
    if (this.space.full) {
      if (await this.lowOnSpace()) return this.space.health()!;
      this.space.succeeded();
    }
    try {
      const head = this.headInTxn();
      return { ok: true, detail: `head position ${head}` };
    } catch (error) {
      return { ok: false, detail: (error as Error).message, cause: error };
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    this.signal.notify();
    await this.root.close();
  }

  /**
   * One wake-up of subscribers for every append that completes in this turn of the event loop.
   * The appends of one commit resolve one after another, and a subscriber woken by the first
   * reads them all, waits again, and would be woken by the next to read nothing: a range read
   * (cursor, snapshot, poll timer) per append for nothing, several per webhook delivery.
   */
  private notifySoon(): void {
    if (this.notifyScheduled) return;
    this.notifyScheduled = true;
    setImmediate(() => {
      this.notifyScheduled = false;
      this.signal.notify();
    });
  }

  /**
   * A failed commit on a nearly full disk is a full disk, whatever errno it came with: writes to
   * a full file system also surface as EIO.
   */
  private lowOnSpace(): Promise<boolean> {
    return lowOnSpace(this.path);
  }

  /** The byte length of the stored shared structures; 0 when none are stored yet. */
  private storedStructuresBytes(): number {
    return this.events.getBinaryFast(EVENT_ENCODING.sharedStructuresKey)?.length ?? 0;
  }

  /**
   * Inside the write transaction, before any event is encoded: when the stored structures are not
   * what the last write transaction left (it did not commit, or another process added some),
   * msgpackr's table is dropped and read again from the disk on its next use. The table only
   * grows, so a lost structure always makes the stored one shorter. One point read per
   * transaction; the reload, rare, decodes the table once.
   */
  private syncStructures(): void {
    const stored = this.storedStructuresBytes();
    if (stored === this.structuresBytes) return;
    if (this.structuresBytes !== -1) {
      const encoder = (this.events as unknown as { encoder: StructuresEncoder }).encoder;
      const reload: StructuresEncoder['structures'] = [];
      reload.uninitialized = true;
      encoder.structures = reload;
    }
    this.structuresBytes = stored;
  }

  /** Reads through the write transaction when called inside one, else a fresh read snapshot. */
  private headInTxn(): number {
    const hint = this.headHint;
    // Key 0 holds the shared structures, so with no hint only position 1 is checked.
    if ((hint === 0 || this.events.doesExist(hint)) && !this.events.doesExist(hint + 1)) return hint;
    let head = 0;
    for (const key of this.events.getKeys({ reverse: true, limit: 1 })) {
      head = key;
      break;
    }
    this.headHint = head;
    return head;
  }

  private currentRevision(stream: string): number | null {
    // -1: no stream, which the absence of revision 0 confirms (a new delivery stream, mostly).
    const hint = this.revisionHints.get(stream) ?? -1;
    if ((hint < 0 || this.streams.doesExist([stream, hint])) && !this.streams.doesExist([stream, hint + 1])) {
      return hint < 0 ? null : hint;
    }
    let revision: number | null = null;
    for (const [, last] of this.streams.getKeys({
      start: [stream, LAST_REVISION],
      end: [stream],
      reverse: true,
      limit: 1,
    })) {
      revision = last;
      break;
    }
    if (revision !== null) this.hintRevision(stream, revision);
    return revision;
  }

  private hintRevision(stream: string, revision: number): void {
    // Bounded: one delivery stream per delivery would otherwise grow it without end.
    if (this.revisionHints.size >= MAX_REVISION_HINTS && !this.revisionHints.has(stream)) {
      this.revisionHints.clear();
    }
    this.revisionHints.set(stream, revision);
  }

  private lookup(id: string, storedForm?: StoredId): RecordedEvent | undefined {
    const position = storedForm === undefined ? this.ids.get(id) : this.ids.getStored(id, storedForm);
    if (position === undefined) return undefined;
    const stored = this.events.get(position);
    return stored === undefined ? undefined : decodeStoredEvent(stored, position);
  }
}
