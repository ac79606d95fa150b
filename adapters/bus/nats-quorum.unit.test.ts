import { describe, expect, it } from 'vitest';
import { publicChecks } from '../../services/shared/readiness-public.ts';
import { streamHealth } from './nats.ts';

/** Bus readiness from stream info: ready only while a majority of the stream's copies is current. */
describe('streamHealth', () => {
  const peer = (current: boolean, offline = false) => ({ current, offline });

  it('a standalone server (no cluster) with one copy is ready', () => {
    expect(streamHealth({ config: { num_replicas: 1 } })).toEqual({
      ok: true,
      replicas: { wanted: 1, current: 1 },
    });
  });

  it('a standalone server is ready on its one copy, whatever copies the stream config names', () => {
    expect(streamHealth({ config: { num_replicas: 3 } })).toEqual({
      ok: true,
      replicas: { wanted: 3, current: 1 },
    });
  });

  it('three copies: ready with the leader and one current peer, not with the leader alone', () => {
    const led = (peers: ReturnType<typeof peer>[]) =>
      streamHealth({ config: { num_replicas: 3 }, cluster: { leader: 'n1', replicas: peers } });
    expect(led([peer(true), peer(true)])).toMatchObject({ ok: true, replicas: { current: 3 } });
    expect(led([peer(true), peer(false, true)])).toMatchObject({ ok: true, replicas: { current: 2 } });
    // Two of three nodes gone: the one left still answers stream info, naming itself leader.
    expect(led([peer(false, true), peer(false, true)])).toEqual({
      ok: false,
      detail: 'the stream has lost its quorum: 1 of 3 copies current, 2 needed',
      replicas: { wanted: 3, current: 1 },
      logged: { leader: 'n1' },
    });
    expect(led([peer(true, true), peer(false)])).toMatchObject({ ok: false });
  });

  it("keeps the leader's server name off /readyz, for the log: it is often the node's host name", () => {
    // A server_name as a StatefulSet or compose names its nodes: the host a peer reaches it on.
    const health = streamHealth({
      config: { num_replicas: 3 },
      cluster: { leader: 'nats-internal-2', replicas: [peer(true), peer(true)] },
    });
    expect(health.replicas).toEqual({ wanted: 3, current: 3 });
    const shown = publicChecks({ bus: { kind: 'nats', ...health } });
    expect(shown.checks.bus).toEqual({ kind: 'nats', ok: true, replicas: { wanted: 3, current: 3 } });
    expect(JSON.stringify(shown.checks)).not.toContain('nats-internal-2');
    // The log line of the check's full result names it, once per change of leader.
    expect(shown.hidden).toEqual(['bus']);
    expect(shown.keys.bus).toContain('nats-internal-2');
  });

  it('a clustered stream without a leader is not ready, whatever its peers say', () => {
    expect(
      streamHealth({ config: { num_replicas: 3 }, cluster: { replicas: [peer(true), peer(true)] } }),
    ).toMatchObject({ ok: false, detail: expect.stringMatching(/no leader$/) });
  });
});
