import { existsSync } from 'node:fs';
import type { StartedTestContainer } from 'testcontainers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventStoreContract } from './contract.ts';
import {
  connectKurrentEventStore,
  fromCurrentState,
  KurrentDbEventStore,
  toPosition,
  toRecorded,
  toStreamState,
} from './kurrentdb.ts';

/**
 * Runs the contract against KURRENTDB_URL when set, else against a KurrentDB container when a
 * Docker engine answers, else says loudly that it did not run (KurrentDB has no other way in).
 */
const url = process.env.KURRENTDB_URL;
const image = process.env.KURRENTDB_IMAGE ?? 'docker.kurrent.io/kurrent-latest/kurrentdb:latest';

async function dockerAvailable(): Promise<boolean> {
  if (
    !existsSync('/var/run/docker.sock') &&
    !process.env.DOCKER_HOST &&
    !process.env.TESTCONTAINERS_HOST_OVERRIDE
  ) {
    return false;
  }
  // Imported only here: testcontainers pulls in an HTTP stack that is dead weight without Docker.
  const { getContainerRuntimeClient } = await import('testcontainers');
  return getContainerRuntimeClient().then(
    () => true,
    () => false,
  );
}

const docker = url ? false : await dockerAvailable();
const source = url ? 'KURRENTDB_URL' : docker ? `testcontainers (${image})` : null;
const skipReason = 'SKIPPED: KURRENTDB_URL is not set and no Docker engine was found';
if (!source) console.warn(`KurrentDB event store contract ${skipReason}`);

describe.skipIf(!source)(`KurrentDB event store via ${source ?? skipReason}`, () => {
  let connectionString = url ?? '';
  let container: StartedTestContainer | undefined;

  beforeAll(async () => {
    if (url) return;
    const { GenericContainer, Wait } = await import('testcontainers');
    container = await new GenericContainer(image)
      .withEnvironment({
        KURRENTDB_INSECURE: 'true',
        KURRENTDB_MEM_DB: 'true',
        KURRENTDB_RUN_PROJECTIONS: 'None',
      })
      .withExposedPorts(2113)
      .withWaitStrategy(Wait.forHttp('/health/live', 2113).forStatusCode(204))
      .withStartupTimeout(120_000)
      .start();
    connectionString = `kurrentdb://${container.getHost()}:${container.getMappedPort(2113)}?tls=false`;
  }, 180_000);

  afterAll(async () => {
    await container?.stop();
  });

  eventStoreContract('kurrentdb', () => connectKurrentEventStore({ connectionString }), {
    globalEventIds: false,
  });
});

describe('KurrentDB mapping (no server needed)', () => {
  const base = {
    streamId: 'orders-1',
    id: '0d6b7a52-6b0f-4a59-9a43-2b8f2f4d9d11',
    isJson: true as const,
    revision: 3n,
    type: 'OrderPlaced',
    created: new Date('2025-01-02T03:04:05.000Z'),
    data: { qty: 2 },
    position: { commit: 5000n, prepare: 4800n },
  };

  it('maps expected revisions onto stream states', () => {
    expect(toStreamState('any')).toBe('any');
    expect(toStreamState('no_stream')).toBe('no_stream');
    expect(toStreamState('stream_exists')).toBe('stream_exists');
    expect(toStreamState(7)).toBe(7n);
  });

  it('maps the actual state of a conflict, treating deleted streams as absent', () => {
    expect(fromCurrentState(4n)).toBe(4);
    expect(fromCurrentState('no_stream')).toBeNull();
    expect(fromCurrentState(-5n)).toBeNull();
  });

  it('uses the prepare position as the port position and reads the envelope from metadata', () => {
    const metadata = {
      $correlationId: 'c-1',
      $causationId: 'cause-1',
      recordedAt: '2025-01-02T03:04:06.000Z',
    };
    expect(toRecorded({ event: { ...base, metadata } })).toEqual({
      id: base.id,
      type: 'OrderPlaced',
      stream: 'orders-1',
      revision: 3,
      position: 4800,
      recordedAt: '2025-01-02T03:04:06.000Z',
      correlationId: 'c-1',
      causationId: 'cause-1',
      data: { qty: 2 },
    });
    expect(toPosition(4800)).toEqual({ commit: 4800n, prepare: 4800n });
  });

  it('falls back to the server timestamp and the event id without envelope metadata', () => {
    expect(toRecorded({ event: { ...base, metadata: undefined } })).toMatchObject({
      recordedAt: '2025-01-02T03:04:05.000Z',
      correlationId: base.id,
      causationId: null,
    });
  });

  it('drops system events and links, and refuses events without a usable position', () => {
    expect(toRecorded({ event: { ...base, type: '$metadata', metadata: undefined } })).toBeNull();
    expect(toRecorded({ event: { ...base, streamId: '$stats-1', metadata: undefined } })).toBeNull();
    expect(toRecorded({})).toBeNull();
    expect(() => toRecorded({ event: { ...base, position: undefined, metadata: undefined } })).toThrow(
      /positions/,
    );
    expect(() =>
      toRecorded({
        event: { ...base, position: { commit: 2n ** 60n, prepare: 2n ** 60n }, metadata: undefined },
      }),
    ).toThrow(/prepare position/);
  });

  it('reports an unreachable server as unhealthy instead of throwing', async () => {
    // Built directly: connecting refuses a server out of reach at once (kurrentdb-start.int), while
    // a server lost after the start is the health check's to report.
    const store = new KurrentDbEventStore({ connectionString: 'kurrentdb://127.0.0.1:1?tls=false' });
    try {
      expect(await store.health()).toMatchObject({ ok: false });
    } finally {
      await store.close();
    }
  });
});
