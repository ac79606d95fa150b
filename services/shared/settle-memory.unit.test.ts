import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { collectGarbage, settleMemory } from './settle-memory.ts';

const logger = pino({ level: 'silent' });

describe('settleMemory', () => {
  it('collects once, after the start-up work is done and the process is ready', async () => {
    const seen: string[] = [];
    let finishWork!: () => void;
    const work = new Promise<void>((resolve) => {
      finishWork = resolve;
    }).then(() => seen.push('work done'));
    let polls = 0;
    const settled = settleMemory({
      ready: async () => {
        polls++;
        seen.push(`ready? ${polls >= 3}`);
        return polls >= 3;
      },
      work: [work],
      stopping: () => false,
      logger,
      pollMs: 1,
      collect: () => seen.push('collected'),
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(seen).toEqual([]);
    finishWork();
    expect(await settled).toBe(true);
    expect(seen).toEqual(['work done', 'ready? false', 'ready? false', 'ready? true', 'collected']);
  });

  it('waits for failed start-up work as for done work, and collects nothing once stopping', async () => {
    let stopping = false;
    let collected = 0;
    const settled = settleMemory({
      ready: async () => {
        stopping = true;
        return false;
      },
      work: [Promise.reject(new Error('first round failed'))],
      stopping: () => stopping,
      logger,
      pollMs: 1,
      collect: () => collected++,
    });
    expect(await settled).toBe(false);
    expect(collected).toBe(0);
  });

  it('gives up when the process is not ready in time', async () => {
    let collected = 0;
    const settled = settleMemory({
      ready: async () => false,
      work: [],
      stopping: () => false,
      logger,
      pollMs: 1,
      giveUpMs: 5,
      collect: () => collected++,
    });
    expect(await settled).toBe(false);
    expect(collected).toBe(0);
  });
});

describe('collectGarbage', () => {
  it('collects without putting gc on the global object', () => {
    let garbage: object[] | null = Array.from({ length: 200_000 }, (_, i) => ({ i }));
    const held = process.memoryUsage().heapUsed;
    garbage = null;
    collectGarbage();
    expect(garbage).toBeNull();
    expect(process.memoryUsage().heapUsed).toBeLessThan(held);
    expect((globalThis as { gc?: unknown }).gc).toBeUndefined();
  });
});
