import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack } from './webhooks-harness.ts';
import { selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const script = fileURLToPath(new URL('./webhooks-crash-dispatcher.ts', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'webhooks-crash-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function startChild(args: string[]): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on('line', (line) => {
      if (line.includes('"ready"')) resolve(child);
    });
    child.on('exit', (code) => reject(new Error(`dispatcher exited (${code}) before ready: ${stderr}`)));
  });
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });
}

describe.runIf(reachable)('dispatcher killed mid-delivery', () => {
  it('delivers every delivery at least once, with the same delivery_id, after a restart', async () => {
    const tls = selfSignedCert();
    const caFile = join(root, 'ca.pem');
    writeFileSync(caFile, tls.cert);
    const store = await openLmdbEventStore({ path: join(root, 'events'), pollMs: 50 });
    const stack = await startWebhookStack({
      store,
      projections: new MemoryProjectionStore(),
      dispatcher: false,
      settings: { tls: { ca: tls.cert } },
    });
    const receiver = await startReceiver(tls);
    let crashed = false;
    // Before the crash every request hangs: the dispatcher dies with all of them in flight.
    receiver.behave = () => (crashed ? { status: 200 } : 'hang');
    const args = [join(root, 'events'), stack.stream, stack.prefix, caFile];
    let child = await startChild(args);
    try {
      const key = await stack.issue();
      const created = await stack.request('POST', '/api/webhooks', key, {
        url: receiver.url,
        events: ['trade_call'],
        assets: ['CRASHA'],
      });
      expect(created.status).toBe(201);
      for (let i = 0; i < 6; i++)
        await appendVerdict(store, { coin: 'CRASHA', call: 'BUY', confidence: 40 + i });
      await receiver.waitFor(4, 30_000); // the endpoint's 4 slots are busy and hanging
      await kill(child);
      const before = new Set(receiver.received.map((r) => r.headers['x-service-delivery']));
      crashed = true;
      child = await startChild(args);
      // Generous: only a condition that never comes ends this wait (the machine may be under load 10-30).
      const deadline = Date.now() + 120_000;
      const answered = () =>
        new Set(receiver.received.filter((r) => r.at > 0).map((r) => r.headers['x-service-delivery']));
      for (;;) {
        const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries`, key);
        const all = log.body.deliveries as { delivery_id: string; status: string }[];
        if (all.length === 6 && all.every((d) => d.status === 'succeeded')) {
          const ids = answered();
          expect(ids.size).toBe(6);
          for (const id of before) expect(ids.has(id)).toBe(true);
          for (const d of all) expect(ids.has(d.delivery_id)).toBe(true);
          // Those in flight at the crash came again with the same id.
          for (const id of before) {
            expect(
              receiver.received.filter((r) => r.headers['x-service-delivery'] === id).length,
            ).toBeGreaterThanOrEqual(2);
          }
          break;
        }
        if (Date.now() > deadline)
          throw new Error(`not all delivered: ${JSON.stringify(all.map((d) => d.status))}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await kill(child);
      await receiver.close();
      await stack.close();
      await store.close();
    }
  });
});
