import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import { SessionTable } from './sessions.ts';

const tables: SessionTable[] = [];
afterEach(async () => {
  await Promise.all(tables.splice(0).map((t) => t.closeAll()));
});

function tableOf(options: { maxSessions?: number; maxPerOwner?: number }): SessionTable {
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
    const table = tableOf({ maxSessions: 3 });
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

  it('closes nothing while there is room, and forgets a closed session', async () => {
    const table = tableOf({ maxSessions: 2, maxPerOwner: 2 });
    open(table, 'a', 'o');
    expect(await table.makeRoom('o')).toBe(0);
    await table.close('a');
    expect(table.touch('a')).toBeUndefined();
    expect(table.size).toBe(0);
  });
});
