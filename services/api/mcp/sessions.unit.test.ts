import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { type SessionPool, SessionTable } from './sessions.ts';

const tables: SessionTable[] = [];
afterEach(async () => {
  await Promise.all(tables.splice(0).map((t) => t.closeAll()));
});

function tableOf(options: {
  maxSessions?: number;
  maxPerOwner?: number;
  maxAnonymous?: number;
  maxFree?: number;
}): SessionTable {
  const table = new SessionTable({ idleMs: 60_000, ...options });
  tables.push(table);
  return table;
}

function open(table: SessionTable, id: string, owner: string, pool: SessionPool = 'paid'): void {
  const server = new Server({ name: 'test', version: '0' }, { capabilities: {} });
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => id });
  table.add(id, server, transport, owner, null, pool);
}

describe('MCP session table', () => {
  it('evicts the least recently used session for the total cap, uses in one millisecond included', async () => {
    const table = tableOf({ maxSessions: 5, maxAnonymous: 1, maxFree: 1 });
    for (const id of ['a', 'b', 'c']) open(table, id, id);
    // Touched in the same millisecond as they were opened, most likely: the order still holds.
    expect(table.touch('a')).toBeDefined();
    expect(table.touch('b')).toBeDefined();
    expect(await table.makeRoom('d', 'paid')).toBe(1);
    open(table, 'd', 'd');
    expect(table.touch('c')).toBeUndefined();
    expect(await table.makeRoom('e', 'paid')).toBe(1);
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
    expect(await table.makeRoom('x', 'paid')).toBe(1);
    expect(table.touch('x2')).toBeUndefined();
    expect(table.touch('x1')).toBeDefined();
    expect(table.touch('other')).toBeDefined();
    expect(table.countOf('x')).toBe(1);
  });

  it('a flood of addresses or of free keys evicts only sessions of its own pool, never a paid one', async () => {
    const table = tableOf({ maxSessions: 7, maxAnonymous: 2, maxFree: 2, maxPerOwner: 2 });
    expect(table.pools).toEqual({ anonymous: 2, free: 2, paid: 3 });
    open(table, 'k1', 'key:a');
    open(table, 'k2', 'key:b');
    open(table, 'f0', 'key:f0', 'free');
    // Many addresses, one session each: each new one pushes out the oldest anonymous session only.
    for (let i = 0; i < 20; i++) {
      await table.makeRoom(`anonymous:${i}`, 'anonymous');
      open(table, `a${i}`, `anonymous:${i}`, 'anonymous');
    }
    // Many free keys: the oldest free session only.
    for (let i = 1; i <= 20; i++) {
      await table.makeRoom(`key:f${i}`, 'free');
      open(table, `f${i}`, `key:f${i}`, 'free');
    }
    for (const id of ['k1', 'k2', 'a18', 'a19', 'f19', 'f20']) expect(table.touch(id)).toBeDefined();
    for (const id of ['a17', 'f0', 'f18']) expect(table.touch(id)).toBeUndefined();
    expect(table.size).toBe(6);
    // The paid pool (3) has room for one more, then evicts its own least recently used.
    expect(await table.makeRoom('key:c', 'paid')).toBe(0);
    open(table, 'k3', 'key:c');
    table.touch('k1');
    expect(await table.makeRoom('key:d', 'paid')).toBe(1);
    expect(table.touch('k2')).toBeUndefined();
    for (const id of ['k1', 'k3', 'a18', 'a19', 'f19', 'f20']) expect(table.touch(id)).toBeDefined();
    // Counts follow closes: the owner's count, and its pool's room.
    expect(table.countOf('anonymous:19')).toBe(1);
    await table.close('a19');
    expect(table.countOf('anonymous:19')).toBe(0);
    expect(await table.makeRoom('anonymous:x', 'anonymous')).toBe(0);
  });

  it('gives anonymous owners and free keys a quarter each without a share set, every pool at least one', () => {
    expect(tableOf({ maxSessions: 10_000 }).pools).toEqual({ anonymous: 2_500, free: 2_500, paid: 5_000 });
    expect(tableOf({ maxSessions: 5 }).pools).toEqual({ anonymous: 2, free: 2, paid: 1 });
    expect(tableOf({ maxSessions: 4, maxAnonymous: 9, maxFree: 9 }).pools).toEqual({
      anonymous: 2,
      free: 1,
      paid: 1,
    });
    // Three pools of at least one each need a total of at least 3.
    expect(tableOf({ maxSessions: 3 }).pools).toEqual({ anonymous: 1, free: 1, paid: 1 });
    expect(() => tableOf({ maxSessions: 2 })).toThrow(/maxSessions must be at least 3/);
  });

  it('closes nothing while there is room, and forgets a closed session', async () => {
    const table = tableOf({ maxSessions: 4, maxPerOwner: 2 });
    open(table, 'a', 'o');
    expect(await table.makeRoom('o', 'paid')).toBe(0);
    await table.close('a');
    expect(table.touch('a')).toBeUndefined();
    expect(table.size).toBe(0);
  });
});
