import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionTable } from './sessions.ts';

const tables: SessionTable[] = [];
afterEach(async () => {
  await Promise.all(tables.splice(0).map((t) => t.closeAll()));
});

function tableOf(options: {
  maxSessions?: number;
  maxPerOwner?: number;
  maxAnonymous?: number;
}): SessionTable {
  const table = new SessionTable({ idleMs: 60_000, ...options });
  tables.push(table);
  return table;
}

function open(table: SessionTable, id: string, owner: string): void {
  const server = new Server({ name: 'test', version: '0' }, { capabilities: {} });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => id });
  table.add(id, server, transport, owner);
}

describe('MCP session table', () => {
  it('evicts the least recently used session for the total cap, uses in one millisecond included', async () => {
    const table = tableOf({ maxSessions: 6 });
    for (const id of ['a', 'b', 'c']) open(table, id, id);
    // Touched in the same millisecond as they were opened, most likely: the order still holds.
    expect(table.touch('a')).toBeDefined();
    expect(table.touch('b')).toBeDefined();
    expect(await table.makeRoom('d')).toBe(1);
    open(table, 'd', 'd');
    expect(table.touch('c')).toBeUndefined();
    expect(await table.makeRoom('e')).toBe(1);
    expect(table.touch('a')).toBeUndefined();
    for (const id of ['b', 'd']) expect(table.touch(id)).toBeDefined();
    expect(table.size).toBe(2);
  });

  it("evicts an owner's own least recently used sessions for the per-owner cap, nobody else's", async () => {
    const table = tableOf({ maxPerOwner: 2 });
    open(table, 'x1', 'x');
    open(table, 'other', 'y');
    open(table, 'x2', 'x');
    table.touch('x1');
    expect(await table.makeRoom('x')).toBe(1);
    expect(table.touch('x2')).toBeUndefined();
    expect(table.touch('x1')).toBeDefined();
    expect(table.touch('other')).toBeDefined();
    expect(table.countOf('x')).toBe(1);
  });

  it('a flood of anonymous owners evicts only anonymous sessions; keyed ones only keyed ones', async () => {
    const table = tableOf({ maxSessions: 5, maxAnonymous: 2, maxPerOwner: 2 });
    expect(table.pools).toEqual([2, 3]);
    open(table, 'k1', 'key:a');
    open(table, 'k2', 'key:b');
    // Many addresses, one session each: each new one pushes out the oldest anonymous session only.
    for (let i = 0; i < 20; i++) {
      await table.makeRoom(`anonymous:${i}`);
      open(table, `a${i}`, `anonymous:${i}`);
    }
    expect(table.touch('k1')).toBeDefined();
    expect(table.touch('k2')).toBeDefined();
    expect(table.size).toBe(4);
    expect(table.touch('a17')).toBeUndefined();
    for (const id of ['a18', 'a19']) expect(table.touch(id)).toBeDefined();
    // The keyed pool (3) has room for one more, then evicts its own least recently used.
    expect(await table.makeRoom('key:c')).toBe(0);
    open(table, 'k3', 'key:c');
    expect(await table.makeRoom('key:d')).toBe(1);
    expect(table.touch('k1')).toBeUndefined();
    for (const id of ['k2', 'k3', 'a18', 'a19']) expect(table.touch(id)).toBeDefined();
    // Counts follow closes: the owner's count, and its pool's room.
    expect(table.countOf('anonymous:19')).toBe(1);
    await table.close('a19');
    expect(table.countOf('anonymous:19')).toBe(0);
    expect(await table.makeRoom('anonymous:x')).toBe(0);
  });

  it('splits the total in half without a share set, leaving keyed owners at least one', () => {
    expect(tableOf({ maxSessions: 10_000 }).pools).toEqual([5_000, 5_000]);
    expect(tableOf({ maxSessions: 5 }).pools).toEqual([3, 2]);
    expect(tableOf({ maxSessions: 4, maxAnonymous: 9 }).pools).toEqual([3, 1]);
  });

  it('closes nothing while there is room, and forgets a closed session', async () => {
    const table = tableOf({ maxSessions: 4, maxPerOwner: 2 });
    open(table, 'a', 'o');
    expect(await table.makeRoom('o')).toBe(0);
    await table.close('a');
    expect(table.touch('a')).toBeUndefined();
    expect(table.size).toBe(0);
  });
});
