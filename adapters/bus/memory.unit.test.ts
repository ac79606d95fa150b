import { describe, expect, it } from 'vitest';
import { busContract, bytes, sleep, waitFor } from './contract.ts';
import { MemoryBus } from './memory.ts';
import type { BusMessage } from './port.ts';

busContract('memory', async () => {
  const bus = new MemoryBus();
  return { bus, prefix: 'sig', cleanup: () => bus.close() };
});

describe('MemoryBus specifics', () => {
  it('hands a value published with publishValue to its consumer as is, its bytes made only when read, once', async () => {
    const bus = new MemoryBus();
    let encoded = 0;
    const encode = (v: { n: number }) => {
      encoded++;
      return bytes(JSON.stringify(v));
    };
    const value = { n: 1 };
    await bus.publishValue('sig.events.A', value, encode, { msgId: 'v1' });
    expect((await bus.publishValue('sig.events.A', { n: 2 }, encode, { msgId: 'v1' })).duplicate).toBe(true);
    await bus.publish('sig.events.A', bytes('plain'), { msgId: 'p1' });
    const seen: BusMessage[] = [];
    const consumer = await bus.consume({ durable: 'values', filterSubject: 'sig.events.>' }, async (m) => {
      seen.push(m);
      await m.ack();
    });
    await waitFor(() => seen.length === 2, 'both messages');
    await consumer.stop();
    expect(seen[0]!.value).toBe(value);
    expect(encoded).toBe(0);
    expect(new TextDecoder().decode(seen[0]!.data)).toBe('{"n":1}');
    expect(new TextDecoder().decode(seen[0]!.data)).toBe('{"n":1}');
    expect(encoded).toBe(1);
    expect(seen[1]!.value).toBeUndefined();
    expect(new TextDecoder().decode(seen[1]!.data)).toBe('plain');
    await bus.close();
  });

  it('forgets a msgId once the duplicate window has passed', async () => {
    const bus = new MemoryBus({ duplicateWindowMs: 50 });
    const first = await bus.publish('sig.events.A', bytes('a'), { msgId: 'x' });
    expect((await bus.publish('sig.events.A', bytes('a'), { msgId: 'x' })).duplicate).toBe(true);
    await sleep(80);
    const later = await bus.publish('sig.events.A', bytes('a'), { msgId: 'x' });
    expect(later).toEqual({ duplicate: false, sequence: first.sequence + 1 });
    await bus.close();
  });

  it('discards the oldest messages beyond maxMessages and consumers skip past them', async () => {
    const bus = new MemoryBus({ maxMessages: 100 });
    for (let i = 0; i < 150; i++) await bus.publish('sig.events.A', bytes(String(i)), { msgId: `m${i}` });
    const seen: string[] = [];
    const consumer = await bus.consume({ durable: 'late', filterSubject: 'sig.events.>' }, async (m) => {
      seen.push(m.msgId);
      await m.ack();
    });
    await waitFor(() => seen.includes('m149'), 'the newest message');
    await consumer.stop();
    expect(seen.length).toBeGreaterThanOrEqual(100);
    expect(seen.length).toBeLessThan(150);
    expect(seen.at(-1)).toBe('m149');
    await bus.close();
  });

  it('holds a publish back while a running consumer has more than maxBacklog waiting, and loses nothing', async () => {
    const bus = new MemoryBus({ maxBacklog: 10 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const seen: string[] = [];
    const consumer = await bus.consume({ durable: 'slow', filterSubject: 'sig.events.>' }, async (m) => {
      seen.push(m.msgId);
      await gate;
      await m.ack();
    });
    let acked = 0;
    const publishes = Array.from({ length: 30 }, (_, i) =>
      bus.publish('sig.events.A', bytes(String(i)), { msgId: `m${i}` }).then((ack) => {
        acked++;
        return ack;
      }),
    );
    await waitFor(() => seen.length === 1, 'the first delivery');
    // The consumer holds m0 and can take nothing more (one in flight): the 10 publishes within the
    // bound were acked, the 20 past it wait for it.
    expect(acked).toBe(10);
    release();
    const acks = await Promise.all(publishes);
    expect(acks.map((a) => a.sequence)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    await waitFor(() => seen.length === 30, 'every message');
    expect(seen).toEqual(Array.from({ length: 30 }, (_, i) => `m${i}`));
    await consumer.stop();
    await bus.close();
  });

  it('lets held publishes through once the consumer holding them back stops', async () => {
    const bus = new MemoryBus({ maxBacklog: 5 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const consumer = await bus.consume({ durable: 'stuck', filterSubject: 'sig.events.>' }, async (m) => {
      await gate;
      await m.ack();
    });
    const publishes = Array.from({ length: 20 }, (_, i) =>
      bus.publish('sig.events.A', bytes(String(i)), { msgId: `s${i}` }),
    );
    // Its handler still hangs: stop() waits for it, but the publishes need not.
    const stopping = consumer.stop();
    expect((await Promise.all(publishes)).every((ack) => !ack.duplicate)).toBe(true);
    release();
    await stopping;
    await bus.close();
  });

  it('drops what every durable has settled but the newest keepSettled, and a later durable starts after them', async () => {
    const bus = new MemoryBus({ keepSettled: 300 });
    let acked = 0;
    const consumer = await bus.consume({ durable: 'first', filterSubject: 'sig.events.>' }, async (m) => {
      await m.ack();
      acked++;
    });
    for (let i = 0; i < 1_000; i++) await bus.publish('sig.events.A', bytes(String(i)), { msgId: `k${i}` });
    await waitFor(() => acked === 1_000, 'every message settled');
    // Dropped in chunks of at least keepSettled: between 300 and 600 of the settled ones are left.
    await waitFor(() => bus.retained <= 600, 'the settled ones dropped');
    const retained = bus.retained;
    expect(retained).toBeGreaterThanOrEqual(300);
    const late: string[] = [];
    const second = await bus.consume({ durable: 'late', filterSubject: 'sig.events.>' }, async (m) => {
      late.push(m.msgId);
      await m.ack();
    });
    await waitFor(() => late.includes('k999'), 'the newest message');
    expect(late.length).toBe(retained);
    expect(late.at(-1)).toBe('k999');
    await Promise.all([consumer.stop(), second.stop()]);
    await bus.close();
  });

  it('keeps a message some durable has yet to settle, however many settle after it', async () => {
    const bus = new MemoryBus({ keepSettled: 0 });
    let naked = false;
    const seen: string[] = [];
    const consumer = await bus.consume(
      { durable: 'picky', filterSubject: 'sig.events.>', maxInFlight: 4 },
      async (m) => {
        seen.push(m.msgId);
        if (m.msgId === 'h0' && !naked) {
          naked = true;
          m.nak(300);
          return;
        }
        await m.ack();
      },
    );
    for (let i = 0; i < 1_000; i++) await bus.publish('sig.events.A', bytes(String(i)), { msgId: `h${i}` });
    await waitFor(() => seen.filter((id) => id === 'h0').length === 2, 'the redelivery of h0');
    expect(seen.length).toBe(1_001);
    await consumer.stop();
    await bus.close();
  });

  it('copies the payload at publish so later mutation by the caller changes nothing', async () => {
    const bus = new MemoryBus();
    const payload = bytes('abc');
    await bus.publish('sig.events.A', payload, { msgId: 'm' });
    payload[0] = 0;
    let received: BusMessage | null = null;
    const consumer = await bus.consume({ durable: 'd', filterSubject: 'sig.events.A' }, async (m) => {
      received = m;
      await m.ack();
    });
    await waitFor(() => received !== null, 'the delivery');
    expect(new TextDecoder().decode(received!.data)).toBe('abc');
    await consumer.stop();
    await bus.close();
  });

  it('refuses new consumers after close', async () => {
    const bus = new MemoryBus();
    await bus.close();
    await expect(bus.consume({ durable: 'd', filterSubject: 'sig.>' }, async () => {})).rejects.toThrow(
      /closed/,
    );
  });
});
