import { describe, expect, it } from 'vitest';
import type { AppendResult } from '../../contracts/envelope.ts';
import { GroupWriter, type PendingAppend } from './group-writer.ts';

function append(stream: string, size = 1): Omit<PendingAppend, 'resolve' | 'reject'> {
  return {
    stream,
    expected: 'any',
    ids: Array.from({ length: size }, (_, i) => `${stream}-${i}`),
    events: Array.from({ length: size }, () => ({ type: 'E', data: {} })),
    flushed: true,
  };
}

/** A round trip the test ends by hand, answering every member with its group's number. */
function harness(options: ConstructorParameters<typeof GroupWriter>[1]) {
  const groups: { members: PendingAppend[]; end: (fail?: Error) => void }[] = [];
  const writer = new GroupWriter(
    (members) =>
      new Promise<void>((resolve, reject) => {
        const n = groups.length;
        groups.push({
          members,
          end: (fail) => {
            if (fail) return reject(fail);
            for (const m of members) m.resolve({ nextRevision: n, position: n } satisfies AppendResult);
            resolve();
          },
        });
      }),
    options,
  );
  return { writer, groups };
}

const tick = () => new Promise((r) => setImmediate(r));
/** After the writer's end-of-tick pump (queued before this). */
const endOfTick = () => new Promise((r) => process.nextTick(r));

describe('the group writer', () => {
  it('sends the appends of one tick together when idle, and gathers what arrives meanwhile into the next round trip', async () => {
    const { writer, groups } = harness({ maxInFlight: 1 });
    const first = writer.submit(append('a'));
    expect(groups).toHaveLength(0);
    await endOfTick();
    expect(groups.map((g) => g.members.length)).toEqual([1]);
    const later = ['b', 'c', 'd'].map((s) => writer.submit(append(s)));
    await endOfTick();
    expect(writer.depth).toEqual({ waiting: 3, inFlight: 1 });
    groups[0]!.end();
    expect(await first).toEqual({ nextRevision: 0, position: 0 });
    await tick();
    expect(groups.map((g) => g.members.map((m) => m.stream))).toEqual([['a'], ['b', 'c', 'd']]);
    groups[1]!.end();
    expect(await Promise.all(later)).toEqual([1, 1, 1].map((n) => ({ nextRevision: n, position: n })));
    expect(writer.depth).toEqual({ waiting: 0, inFlight: 0 });
  });

  it('sends the appends of one tick in one round trip, not one per free slot', async () => {
    const { writer, groups } = harness({ maxInFlight: 4 });
    const all = ['a', 'b', 'c', 'd', 'e'].map((s) => writer.submit(append(s)));
    await endOfTick();
    expect(groups.map((g) => g.members.map((m) => m.stream))).toEqual([['a', 'b', 'c', 'd', 'e']]);
    groups[0]!.end();
    await Promise.all(all);
  });

  it('keeps at most maxInFlight round trips out and bounds a group by appends and events', async () => {
    const { writer, groups } = harness({ maxInFlight: 2, maxAppends: 3, maxEvents: 5 });
    const all = [
      writer.submit(append('a')),
      writer.submit(append('b')),
      writer.submit(append('c', 2)),
      writer.submit(append('d', 2)),
      writer.submit(append('e', 2)),
      writer.submit(append('f')),
      writer.submit(append('g')),
      writer.submit(append('h')),
      // Larger than a group's event bound: it still goes, alone.
      writer.submit(append('big', 9)),
    ];
    await endOfTick();
    // a, b, c (3 appends, 4 events); d, e, f (3 appends, 5 events).
    expect(groups.map((g) => g.members.map((m) => m.stream))).toEqual([
      ['a', 'b', 'c'],
      ['d', 'e', 'f'],
    ]);
    groups[0]!.end();
    await tick();
    // g, h and not big (11 > 5).
    expect(groups[2]!.members.map((m) => m.stream)).toEqual(['g', 'h']);
    groups[1]!.end();
    await tick();
    expect(groups[3]!.members.map((m) => m.stream)).toEqual(['big']);
    expect(groups).toHaveLength(4);
    groups[2]!.end();
    groups[3]!.end();
    await Promise.all(all);
  });

  it('rejects every member of a round trip that failed, and goes on with the next', async () => {
    const { writer, groups } = harness({ maxInFlight: 1 });
    const failed = writer.submit(append('a'));
    await endOfTick();
    const next = writer.submit(append('b'));
    groups[0]!.end(new Error('connection lost'));
    await expect(failed).rejects.toThrow('connection lost');
    await tick();
    groups[1]!.end();
    await expect(next).resolves.toEqual({ nextRevision: 1, position: 1 });
  });
});
