import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type AppendResult,
  type NewEvent,
  type RecordedEvent,
  RecordedEventSchema,
} from '../../contracts/envelope.ts';
import {
  type EventStore,
  IdempotencyConflictError,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';

export interface ContractOptions {
  /**
   * Whether the store knows every event id across all streams (memory, LMDB), so reusing an id
   * in another stream is refused. KurrentDB only sees ids within one stream.
   */
  globalEventIds?: boolean;
  /**
   * Whether every append says if it wrote (`written` on its result: memory, LMDB). Others may
   * leave it out (PostgreSQL always, KurrentDB for a write), never say it wrongly.
   */
  tellsWritten?: boolean;
}

/** An append's revision and position, without what it says of having written. */
function placed(result: AppendResult): Pick<AppendResult, 'nextRevision' | 'position'> {
  return { nextRevision: result.nextRevision, position: result.position };
}

/**
 * The behaviour every EventStore adapter must show. Stores may be shared with other data (a
 * KurrentDB server), so every test uses its own streams and positions relative to the head it
 * saw first.
 */
export function eventStoreContract(
  name: string,
  factory: () => Promise<EventStore>,
  options: ContractOptions = {},
): void {
  describe(`EventStore contract: ${name}`, () => {
    /** `result` says it wrote (or, where the store may not tell, says nothing), as `wrote` expects. */
    const expectWritten = (result: AppendResult, wrote: boolean) =>
      options.tellsWritten
        ? expect(result.written).toBe(wrote)
        : expect([wrote, undefined]).toContain(result.written);
    const opened: EventStore[] = [];
    async function store(): Promise<EventStore> {
      const s = await factory();
      opened.push(s);
      return s;
    }
    afterEach(async () => {
      await Promise.all(opened.splice(0).map((s) => s.close()));
    });

    it('round-trips the envelope fields through readStream and readAll', async () => {
      const s = await store();
      const stream = uniqueStream('roundtrip');
      const head = await s.headPosition();
      const first = event('Opened', { nested: { n: 1, list: [1, 'two', null] } });
      const second: NewEvent = {
        id: randomUUID(),
        type: 'Changed',
        data: { value: 'x' },
        correlationId: 'corr-1',
        causationId: first.id!,
      };
      const result = await s.append(stream, [first, second], { expectedRevision: 'no_stream' });
      const read = await s.readStream(stream);
      expect(read).toHaveLength(2);
      for (const recorded of read) RecordedEventSchema.parse(recorded);
      const [a, b] = read as [RecordedEvent, RecordedEvent];
      expect(a).toMatchObject({
        id: first.id,
        type: 'Opened',
        stream,
        revision: 0,
        correlationId: first.id,
        causationId: null,
        data: { nested: { n: 1, list: [1, 'two', null] } },
      });
      expect(b).toMatchObject({
        id: second.id,
        type: 'Changed',
        stream,
        revision: 1,
        correlationId: 'corr-1',
        causationId: first.id,
        data: { value: 'x' },
      });
      expect(a.position).toBeGreaterThan(head);
      expect(b.position).toBeGreaterThan(a.position);
      expect(Date.parse(a.recordedAt)).not.toBeNaN();
      expect(placed(result)).toEqual({ nextRevision: 1, position: b.position });
      expectWritten(result, true);
      const all = (await s.readAll({ after: head })).filter((e) => e.stream === stream);
      expect(all).toEqual(read);
    });

    it('accepts and refuses every expected-revision mode', async () => {
      const s = await store();
      const stream = uniqueStream('expected');

      await expectWrongRevision(s.append(stream, [event('A')], { expectedRevision: 'stream_exists' }), {
        stream,
        expected: 'stream_exists',
        actual: null,
      });
      await expectWrongRevision(s.append(stream, [event('A')], { expectedRevision: 0 }), {
        stream,
        expected: 0,
        actual: null,
      });
      expect(await s.readStream(stream)).toEqual([]);
      expect(await s.streamRevision(stream)).toBeNull();

      expect((await s.append(stream, [event('A')], { expectedRevision: 'no_stream' })).nextRevision).toBe(0);
      await expectWrongRevision(s.append(stream, [event('B')], { expectedRevision: 'no_stream' }), {
        stream,
        expected: 'no_stream',
        actual: 0,
      });
      expect((await s.append(stream, [event('B')], { expectedRevision: 'stream_exists' })).nextRevision).toBe(
        1,
      );
      expect((await s.append(stream, [event('C')], { expectedRevision: 1 })).nextRevision).toBe(2);
      await expectWrongRevision(s.append(stream, [event('D')], { expectedRevision: 1 }), {
        stream,
        expected: 1,
        actual: 2,
      });
      await expectWrongRevision(s.append(stream, [event('D')], { expectedRevision: 7 }), {
        stream,
        expected: 7,
        actual: 2,
      });
      expect((await s.append(stream, [event('D')], { expectedRevision: 'any' })).nextRevision).toBe(3);
      expect((await s.append(stream, [event('E')])).nextRevision).toBe(4);

      const fresh = uniqueStream('expected-any');
      expect((await s.append(fresh, [event('A')], { expectedRevision: 'any' })).nextRevision).toBe(0);

      const types = (await s.readStream(stream)).map((e) => e.type);
      expect(types).toEqual(['A', 'B', 'C', 'D', 'E']);
    });

    it('lets exactly one of 20 concurrent appends with the same expected revision win', async () => {
      const s = await store();
      const stream = uniqueStream('race');
      await s.append(stream, [event('Seed')], { expectedRevision: 'no_stream' });
      const attempts = Array.from({ length: 20 }, (_, i) =>
        s.append(stream, [event('Racer', { i })], { expectedRevision: 0 }),
      );
      const settled = await Promise.allSettled(attempts);
      const won = settled.filter((r) => r.status === 'fulfilled');
      const lost = settled.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(19);
      for (const r of lost) {
        expect(r.reason).toBeInstanceOf(WrongExpectedRevisionError);
        expect((r.reason as WrongExpectedRevisionError).actual).toBe(1);
      }
      const events = await s.readStream(stream);
      expect(events.map((e) => e.revision)).toEqual([0, 1]);
    });

    it('reserves a stream for exactly one of 20 concurrent no_stream appends', async () => {
      const s = await store();
      const stream = uniqueStream('nonce');
      const settled = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) =>
          s.append(stream, [event('PaymentAuthorized', { i })], { expectedRevision: 'no_stream' }),
        ),
      );
      expect(settled.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      for (const r of settled) {
        if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(WrongExpectedRevisionError);
      }
      expect(await s.readStream(stream)).toHaveLength(1);
    });

    it('orders events globally across streams', async () => {
      const s = await store();
      const head = await s.headPosition();
      const streams = [uniqueStream('g-a'), uniqueStream('g-b'), uniqueStream('g-c')];
      const appended: Array<{ stream: string; id: string }> = [];
      for (let i = 0; i < 9; i++) {
        const stream = streams[i % 3]!;
        const e = event('Tick', { i });
        await s.append(stream, [e]);
        appended.push({ stream, id: e.id! });
      }
      const mine = (await s.readAll({ after: head })).filter((e) => streams.includes(e.stream));
      expect(mine.map((e) => e.id)).toEqual(appended.map((a) => a.id));
      expectStrictlyIncreasing(mine.map((e) => e.position));
      for (const stream of streams) {
        expect(mine.filter((e) => e.stream === stream).map((e) => e.revision)).toEqual([0, 1, 2]);
      }
    });

    it('gives events of sequential appends without ids version-7 ids that sort in the order it wrote them', async () => {
      const s = await store();
      const stream = uniqueStream('no-ids');
      const bare = (i: number): NewEvent => ({ type: 'Tick', data: { i } });
      await s.append(stream, [bare(0), bare(1)]);
      await s.append(stream, [bare(2)]);
      await s.append(stream, [bare(3), bare(4), bare(5)]);
      const read = await s.readStream(stream);
      expect(read.map((e) => (e.data as { i: number }).i)).toEqual([0, 1, 2, 3, 4, 5]);
      const ids = read.map((e) => e.id);
      for (const id of ids)
        expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      // Each id new, and in the store's order, so that a store's id index takes them one after another.
      expect(new Set(ids).size).toBe(ids.length);
      expect([...ids].sort()).toEqual(ids);
    });

    it('hands out consecutive positions when it says its positions are dense', async () => {
      const s = await store();
      const head = await s.headPosition();
      await s.append(uniqueStream('dense'), [event('Tick', { i: 0 }), event('Tick', { i: 1 })]);
      await s.append(uniqueStream('dense'), [event('Tick', { i: 2 })]);
      const after = (await s.readAll({ after: head })).map((e) => e.position);
      expect(after.length).toBeGreaterThanOrEqual(3);
      expectStrictlyIncreasing(after);
      // Every event after the head counts, other writers' too: lag is measured as this difference.
      if (s.densePositions) expect(after).toEqual(after.map((_, i) => head + i + 1));
    });

    it('reads a stream from a revision with a max count', async () => {
      const s = await store();
      const stream = uniqueStream('paging');
      await s.append(
        stream,
        Array.from({ length: 10 }, (_, i) => event('Item', { i })),
      );
      const revisions = async (o: { fromRevision?: number; maxCount?: number }) =>
        (await s.readStream(stream, o)).map((e) => e.revision);
      expect(await revisions({})).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(await revisions({ fromRevision: 3, maxCount: 4 })).toEqual([3, 4, 5, 6]);
      expect(await revisions({ fromRevision: 8 })).toEqual([8, 9]);
      expect(await revisions({ maxCount: 2 })).toEqual([0, 1]);
      expect(await revisions({ fromRevision: 10 })).toEqual([]);
      expect(await revisions({ fromRevision: 0, maxCount: 0 })).toEqual([]);
    });

    it('reads all after a position (exclusive) with a max count', async () => {
      const s = await store();
      const head = await s.headPosition();
      const stream = uniqueStream('readall');
      await s.append(
        stream,
        Array.from({ length: 6 }, (_, i) => event('Item', { i })),
      );
      const mine = await s.readAll({ after: head, maxCount: 6 });
      expect(mine.map((e) => e.stream)).toEqual(Array(6).fill(stream));
      expect(mine.map((e) => e.revision)).toEqual([0, 1, 2, 3, 4, 5]);
      const firstThree = await s.readAll({ after: head, maxCount: 3 });
      expect(firstThree.map((e) => e.revision)).toEqual([0, 1, 2]);
      const rest = await s.readAll({ after: firstThree[2]!.position, maxCount: 3 });
      expect(rest.map((e) => e.revision)).toEqual([3, 4, 5]);
      expect(await s.readAll({ after: mine[5]!.position })).toEqual([]);
      expect(await s.readAll({ after: head, maxCount: 0 })).toEqual([]);
    });

    it('treats a re-append of the same event ids as a no-op returning the original result', async () => {
      const s = await store();
      const stream = uniqueStream('idem');
      const batch = [event('A', { n: 1 }), event('B', { n: 2 })];
      const original = await s.append(stream, batch, { expectedRevision: 'no_stream' });
      expectWritten(original, true);
      const head = await s.headPosition();
      const repeat = async (expectedRevision: 'no_stream' | 'any' | number) => {
        const result = await s.append(stream, batch, { expectedRevision });
        expect(placed(result)).toEqual(placed(original));
        // A repeat never says it wrote.
        expectWritten(result, false);
      };

      await repeat('no_stream');
      await repeat('any');
      await repeat(7);
      expect(await s.headPosition()).toBe(head);

      const later = event('C');
      await s.append(stream, [later], { expectedRevision: 1 });
      await repeat('no_stream');
      const again = await s.append(stream, [later], { expectedRevision: 1 });
      expect(placed(again)).toEqual({ nextRevision: 2, position: await s.headPosition() });
      expectWritten(again, false);

      const events = await s.readStream(stream);
      expect(events.map((e) => e.id)).toEqual([batch[0]!.id, batch[1]!.id, later.id]);
    });

    it('refuses a re-append that only partly overlaps an earlier batch', async () => {
      const s = await store();
      const stream = uniqueStream('overlap');
      const batch = [event('A'), event('B'), event('C')];
      await s.append(stream, batch);
      const head = await s.headPosition();
      await expect(s.append(stream, [batch[0]!, batch[1]!, event('D')])).rejects.toBeInstanceOf(
        IdempotencyConflictError,
      );
      await expect(s.append(stream, [batch[1]!, batch[2]!, event('D')])).rejects.toBeInstanceOf(
        IdempotencyConflictError,
      );
      await expect(s.append(stream, [event('D'), batch[2]!])).rejects.toBeInstanceOf(
        IdempotencyConflictError,
      );
      await expect(s.append(stream, [batch[0]!, batch[2]!])).rejects.toBeInstanceOf(IdempotencyConflictError);
      const twice = event('E');
      await expect(s.append(stream, [twice, twice])).rejects.toBeInstanceOf(IdempotencyConflictError);
      expect(await s.headPosition()).toBe(head);
      expect(await s.readStream(stream)).toHaveLength(3);
    });

    if (options.globalEventIds ?? true) {
      it('refuses an event id already used in another stream', async () => {
        const s = await store();
        const reused = event('A');
        await s.append(uniqueStream('owner'), [reused]);
        const other = uniqueStream('thief');
        await expect(s.append(other, [reused])).rejects.toBeInstanceOf(IdempotencyConflictError);
        await expect(s.append(other, [event('B'), reused])).rejects.toBeInstanceOf(IdempotencyConflictError);
        expect(await s.readStream(other)).toEqual([]);
      });
    }

    it('subscribes to all: catches up, then goes live', async () => {
      const s = await store();
      const head = await s.headPosition();
      const stream = uniqueStream('sub');
      const before = [event('Old', { i: 0 }), event('Old', { i: 1 }), event('Old', { i: 2 })];
      await s.append(stream, before);
      const sub = s.subscribeToAll({ after: head });
      try {
        const reader = mineOnly(sub, stream);
        const caughtUp = await take(reader, 3);
        expect(caughtUp.map((e) => e.id)).toEqual(before.map((e) => e.id));

        const live = [event('New', { i: 3 }), event('New', { i: 4 })];
        const pending = take(reader, 2);
        await s.append(stream, live.slice(0, 1));
        await s.append(stream, live.slice(1));
        const received = await pending;
        expect(received.map((e) => e.id)).toEqual(live.map((e) => e.id));
        expect(received.map((e) => e.revision)).toEqual([3, 4]);
        expectStrictlyIncreasing([...caughtUp, ...received].map((e) => e.position));
      } finally {
        await sub.close();
      }
    });

    it('resumes a subscription from a checkpoint with nothing lost or doubled', async () => {
      const s = await store();
      const head = await s.headPosition();
      const stream = uniqueStream('resume');
      for (let i = 0; i < 10; i++) await s.append(stream, [event('Step', { i })]);

      const first = s.subscribeToAll({ after: head });
      const seen = await take(mineOnly(first, stream), 4);
      await first.close();
      const checkpoint = seen[seen.length - 1]!.position;

      for (let i = 10; i < 15; i++) await s.append(stream, [event('Step', { i })]);
      const second = s.subscribeToAll({ after: checkpoint });
      try {
        const reader = mineOnly(second, stream);
        const pending = take(reader, 13);
        for (let i = 15; i < 17; i++) await s.append(stream, [event('Step', { i })]);
        seen.push(...(await pending));
      } finally {
        await second.close();
      }

      const log = (await s.readAll({ after: head })).filter((e) => e.stream === stream);
      expect(log).toHaveLength(17);
      expect(seen.map((e) => e.position)).toEqual(log.map((e) => e.position));
      expect(new Set(seen.map((e) => e.id)).size).toBe(17);
      expect(seen.map((e) => (e.data as { i: number }).i)).toEqual(Array.from({ length: 17 }, (_, i) => i));
    });

    it('ends a subscription that is waiting for live events when it is closed', async () => {
      const s = await store();
      const sub = s.subscribeToAll({ after: await s.headPosition() });
      const iterator = sub[Symbol.asyncIterator]();
      const next = iterator.next();
      await sub.close();
      const result = await next;
      if (!result.done) {
        // A store shared with other writers may hand over one event it already had in flight.
        expect(result.value.position).toBeGreaterThan(0);
        expect((await iterator.next()).done).toBe(true);
      }
    });

    it('reports stream revision and head position', async () => {
      const s = await store();
      const stream = uniqueStream('revision');
      expect(await s.streamRevision(stream)).toBeNull();
      await s.append(stream, [event('A')]);
      expect(await s.streamRevision(stream)).toBe(0);
      const result = await s.append(stream, [event('B'), event('C')]);
      expect(await s.streamRevision(stream)).toBe(2);
      expect(await s.headPosition()).toBe(result.position);
      const other = await s.append(uniqueStream('revision-other'), [event('X')]);
      expect(await s.headPosition()).toBe(other.position);
      expect(await s.streamRevision(stream)).toBe(2);
    });

    it('reads nothing from a stream that does not exist and nothing past the head', async () => {
      const s = await store();
      const missing = uniqueStream('missing');
      expect(await s.readStream(missing)).toEqual([]);
      expect(await s.readStream(missing, { fromRevision: 5, maxCount: 10 })).toEqual([]);
      expect(await s.streamRevision(missing)).toBeNull();
      expect(await s.readAll({ after: await s.headPosition() })).toEqual([]);
    });

    it('reports itself healthy', async () => {
      const s = await store();
      expect((await s.health()).ok).toBe(true);
    });
  });
}

export function uniqueStream(prefix: string): string {
  return `${prefix}-${randomUUID()}`;
}

export function event(type: string, data: unknown = {}): NewEvent {
  return { id: randomUUID(), type, data };
}

async function expectWrongRevision(
  attempt: Promise<unknown>,
  fields: Pick<WrongExpectedRevisionError, 'stream' | 'expected' | 'actual'>,
): Promise<void> {
  const error = await attempt.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WrongExpectedRevisionError);
  expect(error).toMatchObject(fields);
}

function expectStrictlyIncreasing(values: number[]): void {
  for (let i = 1; i < values.length; i++) expect(values[i]!).toBeGreaterThan(values[i - 1]!);
}

/** Events of one stream from a subscription, as a pull iterator the test can take from in steps. */
function mineOnly(sub: Subscription, stream: string): AsyncIterator<RecordedEvent> {
  const source = sub[Symbol.asyncIterator]();
  return {
    async next() {
      for (;;) {
        const r = await source.next();
        if (r.done || r.value.stream === stream) return r;
      }
    },
  };
}

async function take(iterator: AsyncIterator<RecordedEvent>, count: number): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  while (out.length < count) {
    const r = await iterator.next();
    if (r.done) throw new Error(`subscription ended after ${out.length} of ${count} events`);
    out.push(r.value);
  }
  return out;
}
