import { describe, expect, it } from 'vitest';
import { connectNatsBus, natsServers } from './nats.ts';

describe('natsServers (NATS_URL as the bus connects to it)', () => {
  it('splits the list as every list setting: trimmed, an empty entry (a trailing comma) dropped', () => {
    expect(natsServers('nats://127.0.0.1:4222')).toEqual(['nats://127.0.0.1:4222']);
    expect(natsServers(' nats://n1:4222, ,tls://n2:4222,')).toEqual(['nats://n1:4222', 'tls://n2:4222']);
  });

  it('refuses a list of no server, naming the variable, before any connection is tried', async () => {
    for (const empty of ['', ',', ' , '])
      expect(() => natsServers(empty)).toThrow(/^NATS_URL names no server$/);
    await expect(connectNatsBus({ url: ',', stream: 'S', startupTimeoutMs: 60_000 })).rejects.toThrow(
      /^NATS_URL names no server$/,
    );
  });
});
