import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { open } from 'lmdb';
import { afterAll, describe, expect, it } from 'vitest';
import { newEventId } from '../../contracts/event-id.ts';
import { runServiceProcess } from '../../test/service-process.ts';
import { event, uniqueStream } from './contract.ts';
import { EVENT_ENCODING, openLmdbEventStore } from './lmdb.ts';
import {
  encodeStoredEvent,
  KNOWN_TYPE_CODES,
  openIdIndex,
  storedTypeCode,
  TYPE_NAMES,
} from './lmdb-codec.ts';
import { NewerLogError } from './port.ts';

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'lmdb-newer-log-'));
let dirs = 0;
const freshDataDir = () => join(root, `data-${++dirs}`);

afterAll(() => rmSync(root, { recursive: true, force: true }));

/** The code a newer build gives the first event type it adds. */
const NEWER = KNOWN_TYPE_CODES + 1;

/**
 * Appends at the head what a newer build writes for an event of a type this one does not know:
 * the event under type code NEWER, its stream and id entries, and (`record`) the log's record of
 * the highest code, which a build with this one's append writes in the same transaction.
 */
function appendNewerEvent(path: string, record: boolean): Promise<void> {
  return appendRaw(path, 'newer-stream', storedTypeCode(NEWER), { added: 'by a newer version' }, record);
}

/**
 * Appends at the head an event whose type is stored as `type` (a code's stored form, or a name as
 * text), with its stream and id entries, and (`record`) NEWER as the log's highest code.
 */
async function appendRaw(
  path: string,
  stream: string,
  type: unknown,
  data: Record<string, unknown>,
  record: boolean,
): Promise<void> {
  const env = open({ path, noSubdir: false, maxDbs: 16, overlappingSync: false, remapChunks: true });
  try {
    const events = env.openDB<unknown, number>({ name: 'events', ...EVENT_ENCODING });
    const streams = env.openDB<number, [string, number]>({ name: 'streams' });
    const ids = openIdIndex(env, () => false);
    await env.transaction(() => {
      let head = 0;
      for (const key of events.getKeys({ reverse: true, limit: 1 })) head = key;
      const id = newEventId();
      const stored = encodeStoredEvent({
        id,
        type: 'ReplayClockAnchored',
        stream,
        revision: 0,
        position: head + 1,
        recordedAt: new Date().toISOString(),
        correlationId: id,
        causationId: null,
        data,
      });
      events.putSync(head + 1, { ...stored, type });
      streams.putSync([stream, 0], head + 1);
      ids.putSync(id, head + 1);
      if (record) ids.recordTypeCode(NEWER);
    });
  } finally {
    await env.close();
  }
}

/** A DATA_DIR whose log this build wrote (a known type code among its events), then a newer one. */
async function logWithNewerEvent(record: boolean): Promise<string> {
  const dataDir = freshDataDir();
  const path = join(dataDir, 'events');
  const store = await openLmdbEventStore({ path });
  await store.append(uniqueStream('old'), [event('ApiKeyIssued', { n: 1 }), event('PlainText', { n: 2 })]);
  await store.close();
  await appendNewerEvent(path, record);
  return dataDir;
}

const REFUSAL = new RegExp(
  `holds event type code ${NEWER}, which this build does not know \\(it knows 1-${KNOWN_TYPE_CODES}\\): ` +
    'the log was written by a newer version of the service, and this version refuses it. Run that newer ' +
    'version, or roll back by restoring a backup taken before the upgrade \\(deploy/README.md, Upgrades\\)$',
);

describe('a log written by a newer version (an event type code this build does not know)', () => {
  it('an append records the highest type code it writes, in its own transaction, kept across a reopen', async () => {
    const path = join(freshDataDir(), 'events');
    const store = await openLmdbEventStore({ path });
    // A type stored as text records nothing.
    await store.append(uniqueStream('text'), [event('PlainText')]);
    expect(store.typeCode()).toBe(0);
    await store.append(uniqueStream('a'), [event('VerdictRecorded', {}), event('ApiKeyIssued', {})]);
    expect(store.typeCode()).toBe(17);
    await store.append(uniqueStream('b'), [event('QuotaDebited', {})]);
    expect(store.typeCode()).toBe(17);
    await store.append(uniqueStream('c'), [event('RiskShifted', {})]);
    expect(store.typeCode()).toBe(27);
    // Stored as text before they had codes (and so recorded nothing): coded now.
    await store.append(uniqueStream('d'), [event('DeliveryQueued', {})]);
    expect(store.typeCode()).toBe(28);
    await store.append(uniqueStream('e'), [event('HistoryAnchored', {})]);
    expect(store.typeCode()).toBe(29);
    await store.append(uniqueStream('f'), [event(TYPE_NAMES[KNOWN_TYPE_CODES - 1]!, {})]);
    expect(store.typeCode()).toBe(KNOWN_TYPE_CODES);
    await store.close();
    const again = await openLmdbEventStore({ path });
    expect(again.typeCode()).toBe(KNOWN_TYPE_CODES);
    await again.close();
  });

  it('events an older build stored with their type as text (DeliveryQueued, HistoryAnchored) read back by name, the log not refused', async () => {
    const path = join(freshDataDir(), 'events');
    const store = await openLmdbEventStore({ path });
    await store.append(uniqueStream('old'), [event('ApiKeyIssued', { n: 1 })]);
    await store.close();
    // What a build before their codes wrote: the name itself, no record.
    const queued = { deliveryId: 'd-1', n: 2 };
    const anchored = { txHash: `0x${'ab'.repeat(32)}`, n: 3 };
    await appendRaw(path, 'delivery-old', 'DeliveryQueued', queued, false);
    await appendRaw(path, 'anchor-old', 'HistoryAnchored', anchored, false);
    const again = await openLmdbEventStore({ path });
    try {
      expect(again.typeCode()).toBe(17);
      const read = await again.readAll();
      expect(read.map((e) => [e.type, e.stream, e.data])).toEqual([
        ['ApiKeyIssued', expect.any(String), { n: 1 }],
        ['DeliveryQueued', 'delivery-old', queued],
        ['HistoryAnchored', 'anchor-old', anchored],
      ]);
      // Appended now, the same types take their codes, and both forms read back alike.
      await again.append(uniqueStream('new'), [event('DeliveryQueued', { n: 4 })]);
      expect(again.typeCode()).toBe(28);
      expect((await again.readAll()).map((e) => e.type)).toEqual([
        'ApiKeyIssued',
        'DeliveryQueued',
        'HistoryAnchored',
        'DeliveryQueued',
      ]);
    } finally {
      await again.close();
    }
  });

  it('is refused when the store opens, wherever the event lies, naming the code and what to do', async () => {
    const dataDir = await logWithNewerEvent(true);
    const path = join(dataDir, 'events');
    const refused = await openLmdbEventStore({ path }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(NewerLogError);
    expect((refused as Error).message).toMatch(new RegExp(`^the event log at ${path} ${REFUSAL.source}`));
  });

  it('a read that meets such an event says the same, not "unknown event type code"', async () => {
    const dataDir = await logWithNewerEvent(false);
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    try {
      await expect(store.readAll()).rejects.toThrow(REFUSAL);
    } finally {
      await store.close();
    }
  });

  it('the keys command line refuses it in one line, exit 1, no stack', async () => {
    const dataDir = await logWithNewerEvent(true);
    const refused = await run(process.execPath, ['--import', 'tsx', 'services/operator/cli.ts', 'list'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, DATA_DIR: dataDir },
    }).catch((err: { code: number; stderr: string }) => err);
    expect((refused as { code: number }).code).toBe(1);
    const stderr = (refused as { stderr: string }).stderr.trim();
    expect(stderr).toMatch(REFUSAL);
    expect(stderr.split('\n')).toHaveLength(1);
  });

  for (const record of [true, false]) {
    it(`the service refuses to start on it with one fatal line, exit 1 (${record ? 'recorded: before opening anything else' : 'not recorded: at the first read'})`, async () => {
      const dataDir = await logWithNewerEvent(record);
      const run = runServiceProcess({ DATA_DIR: dataDir });
      expect(await run.exit).toBe(1);
      const fatal = run.lines.filter((l) => l.level === 60);
      expect(fatal).toHaveLength(1);
      expect(fatal[0]!.msg).toMatch(new RegExp(`^failed to start: .*${REFUSAL.source}`));
      expect(run.lines.some((l) => String(l.msg).startsWith('Server listening'))).toBe(false);
      // Recorded, it is refused as the log is opened: nothing has read or written anything yet.
      if (record) expect(run.lines.some((l) => l.msg === 'event store: LMDB')).toBe(false);
    }, 120_000);
  }
});
