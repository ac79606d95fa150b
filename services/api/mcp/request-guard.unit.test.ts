import { afterEach, describe, expect, it, vi } from 'vitest';
import { logRefusedHost } from './request-guard.ts';

/**
 * Review of a120c97: the warning for a refused Host was said to reach at most 1,000 lines a minute
 * under a flood of made-up names, but the map of names logged was emptied once full and every new
 * name logged on: anyone could write a line per request by sending a new Host each time.
 */
describe('logRefusedHost', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function counting() {
    const hosts: string[] = [];
    return { hosts, log: { warn: (obj: object) => hosts.push((obj as { host: string }).host) } };
  }

  it('logs a name once a minute, and at most 1,000 names a minute however many are made up', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const start = Date.now();
    const { hosts, log } = counting();
    for (let i = 0; i < 1_500; i++) logRefusedHost(log, `flood-${i}.example:443`);
    expect(hosts).toHaveLength(1_000);
    expect(hosts[0]).toBe('flood-0.example');
    logRefusedHost(log, 'flood-0.example');
    expect(hosts).toHaveLength(1_000);

    // A minute on, the names logged then may be logged again, and new ones too.
    vi.setSystemTime(start + 60_000);
    logRefusedHost(log, 'flood-0.example');
    logRefusedHost(log, 'after-the-minute.example');
    expect(hosts.slice(1_000)).toEqual(['flood-0.example', 'after-the-minute.example']);
  });
});
