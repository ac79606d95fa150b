import { randomUUID } from 'node:crypto';
import { jetstreamManager, StorageType } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deleteStream, NATS_URL, requireNats } from '../../test/nats-server.ts';
import { freePort } from '../../test/ports.ts';
import { busContract, bytes, waitFor } from './contract.ts';
import { connectNatsBus, type NatsBus } from './nats.ts';

const reachable = await requireNats(NATS_URL);
const run = randomUUID().slice(0, 8);
const logger = pino({ level: 'silent' });
let n = 0;

busContract(
  'nats',
  async () => {
    const id = `${run}_${++n}`;
    const stream = `BUSTEST_${id}`;
    const prefix = `bt${id}`;
    const bus = await connectNatsBus({ url: NATS_URL, stream, subjectPrefix: prefix, logger });
    return {
      bus,
      prefix,
      cleanup: async () => {
        await bus.close();
        await deleteStream(stream);
      },
    };
  },
  { skip: !reachable },
);

describe.skipIf(!reachable)('NatsBus specifics', () => {
  const stream = `BUSTEST_${run}_x`;
  const prefix = `bt${run}_x`;
  let bus: NatsBus;

  beforeAll(async () => {
    bus = await connectNatsBus({
      url: NATS_URL,
      stream,
      subjectPrefix: prefix,
      logger,
      duplicateWindowMs: 90_000,
    });
  });

  afterAll(async () => {
    await bus?.close();
    await deleteStream(stream);
  });

  it('creates a file-backed stream over the prefix with the duplicate window', async () => {
    const nc = await connect({ servers: NATS_URL });
    const info = await (await jetstreamManager(nc)).streams.info(stream);
    await nc.close();
    expect(info.config.subjects).toEqual([`${prefix}.>`]);
    expect(info.config.storage).toBe('file');
    expect(info.config.duplicate_window).toBe(90_000 * 1_000_000);
  });

  it('opens an existing stream again, and a durable resumes on a new connection', async () => {
    await bus.publish(`${prefix}.events.A`, bytes('1'), { msgId: 'r1' });
    const seen: string[] = [];
    const consumer = await bus.consume(
      { durable: 'survivor', filterSubject: `${prefix}.events.>` },
      async (m) => {
        seen.push(m.msgId);
        await m.ack();
      },
    );
    await waitFor(() => seen.length === 1, 'the first message');
    await consumer.stop();

    const other = await connectNatsBus({ url: NATS_URL, stream, subjectPrefix: prefix, logger });
    await other.publish(`${prefix}.events.A`, bytes('2'), { msgId: 'r2' });
    const resumed = await other.consume(
      { durable: 'survivor', filterSubject: `${prefix}.events.>` },
      async (m) => {
        seen.push(m.msgId);
        await m.ack();
      },
    );
    await waitFor(() => seen.length === 2, 'the second message on the new connection');
    await resumed.stop();
    await other.close();
    expect(seen).toEqual(['r1', 'r2']);
  });

  it('unconfirmed acks have all reached the server once the consumer stopped', async () => {
    const subject = `${prefix}.events.Unconfirmed`;
    const count = 40;
    for (let i = 0; i < count; i++) await bus.publish(subject, bytes(String(i)), { msgId: `u${run}${i}` });
    let seen = 0;
    const consumer = await bus.consume(
      { durable: 'unconfirmed', filterSubject: subject, maxInFlight: 8, confirmAck: false },
      async (m) => {
        seen++;
        await m.ack();
      },
    );
    await waitFor(() => seen === count, 'every message');
    await consumer.stop();
    const nc = await connect({ servers: NATS_URL });
    try {
      const info = await (await jetstreamManager(nc)).consumers.info(stream, 'unconfirmed');
      expect(info.num_ack_pending).toBe(0);
      expect(info.num_redelivered).toBe(0);
      expect(info.ack_floor.consumer_seq).toBe(count);
    } finally {
      await nc.close();
    }
  });

  it('makes the stream again when the server has lost it, and a durable consumer goes on', async () => {
    // A server restarted without its JetStream store: the stream is gone while the bus is connected.
    const id = `${run}_lost`;
    const lostStream = `BUSTEST_${id}`;
    const lostPrefix = `bt${id}`;
    const lines: { msg: string; stream?: string }[] = [];
    const lone = await connectNatsBus({
      url: NATS_URL,
      stream: lostStream,
      subjectPrefix: lostPrefix,
      logger: pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) }),
    });
    try {
      const seen: string[] = [];
      const consumer = await lone.consume(
        { durable: 'after-loss', filterSubject: `${lostPrefix}.events.>` },
        async (m) => {
          seen.push(m.msgId);
          await m.ack();
        },
      );
      await lone.publish(`${lostPrefix}.events.A`, bytes('1'), { msgId: 'before' });
      await waitFor(() => seen.length === 1, 'the message before the loss');
      await deleteStream(lostStream);
      expect((await lone.health()).ok).toBe(false);

      await lone.publish(`${lostPrefix}.events.A`, bytes('2'), { msgId: 'after' });
      expect((await lone.health()).ok).toBe(true);
      expect(lines.map((l) => [l.msg, l.stream])).toContainEqual([
        'stream not found on the NATS server (its store lost, or the stream deleted): created it again',
        lostStream,
      ]);
      // The consumer finds its durable gone with the stream, makes it again, and takes what came.
      await waitFor(() => seen.includes('after'), 'the message after the stream was made again');
      await consumer.stop();
    } finally {
      await lone.close();
      await deleteStream(lostStream);
    }
  });

  it('rejects a subject outside the prefix without sending it', async () => {
    await expect(bus.publish('elsewhere.events.A', bytes('x'), { msgId: 'x' })).rejects.toThrow(/outside/);
  });

  it('refuses to adopt an existing stream that does not capture the prefix', async () => {
    await expect(
      connectNatsBus({ url: NATS_URL, stream, subjectPrefix: `${prefix}_other`, logger }),
    ).rejects.toThrow(/without subject/);
  });

  it('on a lone server, keeps the copies there are when more are asked for, and says why', async () => {
    const lone = await connectNatsBus({
      url: NATS_URL,
      stream,
      subjectPrefix: prefix,
      logger,
      duplicateWindowMs: 90_000,
      replicas: 3,
    });
    try {
      const [raise, ...others] = (await lone.health()).drift ?? [];
      expect(others).toEqual([]);
      expect(raise).toMatchObject({ setting: 'replicas', wanted: 3, found: 1, updated: false });
      expect(raise?.error).toMatch(/not in a cluster/);
      // The stream is left as it was (NATS 2.9 would accept the raise and still keep one copy),
      // and the bus is ready on it.
      const nc = await connect({ servers: NATS_URL });
      const info = await (await jetstreamManager(nc)).streams.info(stream);
      await nc.close();
      expect(info.config.num_replicas).toBe(1);
      expect(await lone.health()).toMatchObject({ ok: true, replicas: { wanted: 1, current: 1 } });
    } finally {
      await lone.close();
    }
  });

  it('keeps a message for the configured age only, and brings an existing stream to the age of the latest start', async () => {
    const aged = `BUSTEST_${run}_age`;
    const agedPrefix = `bt${run}_age`;
    const nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    try {
      // A stream as an earlier version created it: every message kept. (Its duplicate window is as
      // short as the age set below: JetStream refuses a window longer than the age.)
      const keepAll = await connectNatsBus({
        url: NATS_URL,
        stream: aged,
        subjectPrefix: agedPrefix,
        logger,
        duplicateWindowMs: 1_000,
      });
      await keepAll.close();
      expect((await jsm.streams.info(aged)).config.max_age).toBe(0);

      const bounded = await connectNatsBus({
        url: NATS_URL,
        stream: aged,
        subjectPrefix: agedPrefix,
        logger,
        maxAgeMs: 1_000,
        duplicateWindowMs: 1_000,
      });
      try {
        expect((await bounded.health()).drift).toEqual([
          { setting: 'max_age', wanted: 1_000_000_000, found: 0, updated: true },
        ]);
        expect((await jsm.streams.info(aged)).config.max_age).toBe(1_000_000_000);
        await bounded.publish(`${agedPrefix}.events.A`, bytes('old'), { msgId: `age${run}` });
        expect((await jsm.streams.info(aged)).state.messages).toBe(1);
        // Acknowledged or not, a message older than the age leaves the store.
        let left = 1;
        // waitFor's check is synchronous: read the count between its polls.
        const poll = setInterval(() => {
          void jsm.streams.info(aged).then((i) => {
            left = i.state.messages;
          });
        }, 100);
        await waitFor(() => left === 0, 'the message to age out').finally(() => clearInterval(poll));
      } finally {
        await bounded.close();
      }
    } finally {
      await nc.close();
      await deleteStream(aged);
    }
  });

  it('starts on an existing stream that refuses the age, and says why', async () => {
    // JetStream refuses a duplicate window longer than the age: a stream made elsewhere with a
    // two-hour window cannot take an hour's age, and the start goes on without it.
    const refusing = `BUSTEST_${run}_agerefused`;
    const refusingPrefix = `bt${run}_agerefused`;
    const nc = await connect({ servers: NATS_URL });
    const jsm = await jetstreamManager(nc);
    try {
      await jsm.streams.add({
        name: refusing,
        subjects: [`${refusingPrefix}.>`],
        storage: StorageType.File,
        duplicate_window: 2 * 3_600_000_000_000,
      });
      const bus = await connectNatsBus({
        url: NATS_URL,
        stream: refusing,
        subjectPrefix: refusingPrefix,
        logger,
        maxAgeMs: 3_600_000,
      });
      try {
        const drift = (await bus.health()).drift?.find((d) => d.setting === 'max_age');
        expect(drift).toMatchObject({
          setting: 'max_age',
          wanted: 3_600_000_000_000,
          found: 0,
          updated: false,
        });
        expect(drift?.error).toMatch(/duplicate/i);
        expect((await jsm.streams.info(refusing)).config.max_age).toBe(0);
      } finally {
        await bus.close();
      }
    } finally {
      await nc.close();
      await deleteStream(refusing);
    }
  });

  it('rejects invalid durable and stream names', async () => {
    await expect(
      bus.consume({ durable: 'a.b', filterSubject: `${prefix}.>` }, async () => {}),
    ).rejects.toThrow(/durable/);
    await expect(connectNatsBus({ url: NATS_URL, stream: 'bad.name', logger })).rejects.toThrow(
      /stream name/,
    );
  });

  it('fails to connect when nothing listens at the URL', async () => {
    const port = await freePort();
    // A refused connection counts as transient (a restarting server), so the start retries until its
    // startup timeout; a short one keeps this test from waiting out the 60 s default.
    await expect(
      connectNatsBus({
        // The password is masked in the failure, as every URL the service prints is.
        url: `nats://u:SECRETPW2@127.0.0.1:${port}`,
        stream: 'NOPE',
        logger,
        requestTimeoutMs: 2_000,
        startupTimeoutMs: 1_000,
      }),
    ).rejects.toThrow(
      new RegExp(`^NATS at nats://u:\\*\\*\\*@127\\.0\\.0\\.1:${port} not usable within 1000 ms`),
    );
  });
});
