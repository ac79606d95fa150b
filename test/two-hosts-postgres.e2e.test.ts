import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgresEventStore, type PostgresEventStore } from '../adapters/event-store/postgres.ts';
import { parseDomainEvent } from '../contracts/events.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { dropSchemas, POSTGRES_URL, shouldRunPostgresSuite, uniqueSchema } from './postgres-probe.ts';
import { REDIS_URL, wipePrefix } from './redis-probe.ts';

const run = await shouldRunPostgresSuite('two service processes on one PostgreSQL');
const ROOT = new URL('..', import.meta.url).pathname;

interface Host {
  child: ChildProcess;
  dir: string;
  url: Promise<string>;
  stderr: string;
}

/** One "host": a service process with a DATA_DIR of its own, sharing PostgreSQL and Redis. */
async function startHost(env: Record<string, string>): Promise<Host> {
  const dir = await mkdtemp(join(tmpdir(), 'host-pg-'));
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts', '--role', 'api'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', DATA_DIR: dir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const host: Host = { child, dir, stderr: '', url: Promise.resolve('') };
  host.url = new Promise((resolve, reject) => {
    let buffer = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      for (let nl = buffer.indexOf('\n'); nl >= 0; nl = buffer.indexOf('\n')) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        try {
          const entry = JSON.parse(line) as { msg?: string; url?: string };
          if (entry.msg === 'service started' && entry.url) resolve(entry.url);
        } catch {}
      }
    });
    child.once('exit', (code) => reject(new Error(`host exited with ${code}: ${host.stderr}`)));
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    host.stderr += chunk.toString();
  });
  return host;
}

describe.runIf(run)('two service processes on two DATA_DIRs and one PostgreSQL', () => {
  const schema = uniqueSchema('hosts_test');
  const prefix = `hosts:${randomUUID()}:`;
  const hosts: Host[] = [];
  let urls: string[] = [];
  let store: PostgresEventStore;

  beforeAll(async () => {
    const env = {
      EVENT_STORE: 'postgres',
      POSTGRES_URL,
      POSTGRES_SCHEMA: schema,
      POSTGRES_POOL_SIZE: '4',
      CACHE: 'redis',
      REDIS_URL,
      REDIS_PREFIX: prefix,
      FEED: 'replay',
      REPLAY_SPEED: '0',
      PLAN_STARTER_MONTHLY_CALLS: '5',
    };
    hosts.push(await startHost(env), await startHost(env));
    urls = await Promise.all(hosts.map((h) => h.url));
    store = await openPostgresEventStore({ url: POSTGRES_URL, schema });
  }, 60_000);
  afterAll(async () => {
    for (const h of hosts) h.child.kill('SIGKILL');
    await store?.close();
    for (const h of hosts) await rm(h.dir, { recursive: true, force: true });
    await dropSchemas([schema]);
    await wipePrefix(prefix);
  });

  it('both report the shared PostgreSQL log as ready', async () => {
    for (const url of urls) {
      const res = await fetch(`${url}/readyz`);
      const body = (await res.json()) as { checks: Record<string, { ok: boolean; kind?: string }> };
      expect(body.checks.eventStore).toMatchObject({ ok: true, kind: 'postgres' });
    }
  });

  it('serves a key issued elsewhere on both hosts and holds its quota across them, counted once', async () => {
    const { key } = await issueKey(store, { plan: 'starter', owner: 'two-hosts', via: 'operator' });
    const call = (url: string) =>
      fetch(`${url}/x402/get_market_regime`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ coin: 'ETH' }),
      });
    // One call on each host first: each resolves the key from the shared log and debits it.
    expect((await call(urls[0]!)).status).toBe(200);
    expect((await call(urls[1]!)).status).toBe(200);
    const responses = await Promise.all(Array.from({ length: 10 }, (_, i) => call(urls[i % 2]!)));
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(3);
    expect(statuses.filter((s) => s === 429)).toHaveLength(7);

    const log = await store.readAll();
    const debits = log.map((e) => parseDomainEvent(e)?.type).filter((t) => t === 'QuotaDebited');
    expect(debits).toHaveLength(5);
    expect(new Set(log.map((e) => e.id)).size).toBe(log.length);
    expect(log.map((e) => e.position)).toEqual(log.map((_, i) => i + 1));
  }, 60_000);
});
