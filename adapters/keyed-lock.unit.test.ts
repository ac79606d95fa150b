import { describe, expect, it } from 'vitest';
import { KeyedLock } from './keyed-lock.ts';

describe('KeyedLock', () => {
  it('runs one key’s tasks one at a time, in order, and other keys alongside', async () => {
    const serialiser = new KeyedLock();
    const log: string[] = [];
    const task = (name: string, ms: number) => async () => {
      log.push(`start ${name}`);
      await new Promise((r) => setTimeout(r, ms));
      log.push(`end ${name}`);
      return name;
    };
    const results = await Promise.all([
      serialiser.run('k', task('a', 20)),
      serialiser.run('k', task('b', 1)),
      serialiser.run('other', task('c', 1)),
    ]);
    expect(results).toEqual(['a', 'b', 'c']);
    expect(log.indexOf('end a')).toBeLessThan(log.indexOf('start b'));
    expect(log.indexOf('start c')).toBeLessThan(log.indexOf('end a'));
    // A failed task does not block the queue.
    await expect(serialiser.run('k', async () => Promise.reject(new Error('x')))).rejects.toThrow('x');
    expect(await serialiser.run('k', async () => 'after')).toBe('after');
  });
});
