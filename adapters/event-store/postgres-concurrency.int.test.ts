import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  terminateBackends,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { event, uniqueStream } from './contract.ts';
import { openPostgresEventStore } from './postgres.ts';

const run = await shouldRunPostgresSuite('PostgreSQL concurrency and fault suite');
const exec = promisify(execFile);
const schemas: string[] = [];
const fresh = () => {
  const schema = uniqueSchema();
  schemas.push(schema);
  return schema;
};
afterAll(() => dropSchemas(schemas));

describe.runIf(run)('PostgreSQL event store under concurrent writers', () => {
  it('delivers every event of 4 writer processes exactly once, in position order, to a live subscriber', async () => {
    const schema = fresh();
    const reader = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: 5_000 });
    const writers = 4;
    const perWriter = 150;
    const total = writers * perWriter;
    const seen: RecordedEvent[] = [];
    const sub = reader.subscribeToAll();
    const consumed = (async () => {
      for await (const e of sub) {
        seen.push(e);
        if (seen.length === total) return;
      }
    })();
    try {
      const script = join(import.meta.dirname, 'postgres-writer.ts');
      const outputs = await Promise.all(
        Array.from({ length: writers }, (_, w) =>
          exec(
            process.execPath,
            ['--import', 'tsx', script, POSTGRES_URL, schema, String(w), String(perWriter), '6'],
            {
              maxBuffer: 16 * 1024 * 1024,
            },
          ),
        ),
      );
      const acked = outputs.flatMap((o) => JSON.parse(o.stdout) as Array<{ id: string; position: number }>);
      expect(acked).toHaveLength(total);
      await consumed;

      // Seen exactly once each, strictly in position order (positions increase; they come from
      // the writing transactions' ids, so they are not consecutive).
      const positions = seen.map((e) => e.position);
      expect(positions).toEqual([...positions].sort((a, b) => a - b));
      expect(new Set(positions).size).toBe(total);
      expect(new Set(seen.map((e) => e.id)).size).toBe(total);
      const byId = new Map(seen.map((e) => [e.id, e.position]));
      for (const a of acked) expect(byId.get(a.id)).toBe(a.position);
      // The live reader saw what a fresh catch-up read sees.
      expect((await reader.readAll()).map((e) => e.id)).toEqual(seen.map((e) => e.id));
    } finally {
      await sub.close();
      await reader.close();
    }
  }, 60_000);

  it('reserves each payment nonce for exactly one of 3 processes racing through the payment ledger', async () => {
    const schema = fresh();
    const nonces = Array.from({ length: 20 }, () => `0x${randomBytes(32).toString('hex')}`);
    // Migrations first, so the racers measure the reservation, not the schema creation.
    await (await openPostgresEventStore({ url: POSTGRES_URL, schema })).close();
    const script = join(import.meta.dirname, '../../test/postgres-reserver.ts');
    const outputs = await Promise.all(
      [0, 1, 2].map((host) =>
        exec(process.execPath, ['--import', 'tsx', script, POSTGRES_URL, schema, String(host), ...nonces]),
      ),
    );
    const won = outputs.flatMap((o) => JSON.parse(o.stdout) as string[]);
    expect(won.sort()).toEqual([...nonces].sort());
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    try {
      const log = await store.readAll();
      expect(log).toHaveLength(20);
      expect(log.every((e) => e.type === 'PaymentAuthorized' && e.revision === 0)).toBe(true);
    } finally {
      await store.close();
    }
  }, 60_000);

  it('loses nothing acknowledged and doubles nothing when its backends are terminated mid-load', async () => {
    const schema = fresh();
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema, poolSize: 4, pollMs: 200 });
    const acked: Array<{ id: string; stream: string; position: number }> = [];
    let failed = 0;
    let stop = false;
    const lanes = Array.from({ length: 4 }, async (_, lane) => {
      const stream = uniqueStream(`fault-${lane}`);
      while (!stop) {
        const e = event('Load', { lane });
        try {
          const { position } = await store.append(stream, [e]);
          acked.push({ id: e.id!, stream, position });
        } catch {
          failed++;
        }
      }
    });
    const seen: RecordedEvent[] = [];
    const sub = store.subscribeToAll();
    const consuming = (async () => {
      for await (const e of sub) seen.push(e);
    })();
    try {
      // Each kill lands while appends are being acknowledged, and appends go on after the last.
      const more = async () => {
        const at = acked.length;
        await expect.poll(() => acked.length).toBeGreaterThan(at);
      };
      let killed = 0;
      for (let round = 0; round < 5; round++) {
        await more();
        killed += await terminateBackends(schema);
      }
      expect(killed).toBeGreaterThan(0);
      await more();
      stop = true;
      await Promise.all(lanes);

      const log = await store.readAll();
      const positions = new Map(log.map((e) => [e.id, e.position]));
      for (const a of acked) expect(positions.get(a.id)).toBe(a.position);
      expect(new Set(log.map((e) => e.id)).size).toBe(log.length);
      // Every stream stays gap-free 0..n, so no retried append was written twice.
      const streams = new Map<string, number[]>();
      for (const e of log) streams.set(e.stream, [...(streams.get(e.stream) ?? []), e.revision]);
      for (const revisions of streams.values()) {
        expect(revisions).toEqual(revisions.map((_, i) => i));
      }
      // The subscription survived its listener being killed and caught up to the head.
      await expect.poll(() => seen.length).toBe(log.length);
      expect(seen.map((e) => e.id)).toEqual(log.map((e) => e.id));
      expect((await store.health()).ok).toBe(true);
      expect(failed).toBe(0);
    } finally {
      stop = true;
      await Promise.all(lanes);
      await sub.close();
      await consuming;
      await store.close();
    }
  }, 60_000);
});
