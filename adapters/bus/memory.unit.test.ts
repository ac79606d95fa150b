import { describe, expect, it } from 'vitest';
import { busContract, bytes, sleep, waitFor } from './contract.ts';
import { MemoryBus } from './memory.ts';
import type { BusMessage } from './port.ts';

busContract('memory', async () => {
  const bus = new MemoryBus();
  return { bus, prefix: 'sig', cleanup: () => bus.close() };
});

describe('MemoryBus specifics', () => {
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
