import { checkServerIdentity, type PeerCertificate } from 'node:tls';
import { describe, expect, it } from 'vitest';
import { Readiness } from './readiness.ts';
import { publicChecks } from './readiness-public.ts';

const LOGGED = ' (the full error is in the service log)';

describe('the checks /readyz shows', () => {
  it("keeps each check's name and state, and shows a generic reason for words that name where a dependency is", () => {
    const { checks, hidden } = publicChecks({
      eventStore: { ok: false, kind: 'postgres', detail: 'postgres: connect ECONNREFUSED 10.0.0.5:5432' },
      lmdb: {
        ok: false,
        kind: 'lmdb',
        detail: "ENOSPC: no space left on device, open '/var/lib/signals/data.mdb'",
      },
      cache: {
        ok: false,
        kind: 'redis',
        detail:
          'redis at redis://cache.internal:6379 is not connected (status reconnecting, last error: connect ETIMEDOUT)',
      },
      login: { ok: false, detail: 'postgres: password authentication failed for user "signals"' },
      bus: {
        ok: false,
        detail:
          'not connected to NATS since 2026-11-29T21:00:00.000Z (lost 10.0.0.7:4222); reconnecting to the servers of NATS_URL every 0.5 s',
      },
      chain: {
        ok: true,
        degraded: true,
        networks: [{ network: 'base', error: 'request to https://rpc.example/v2/SECRETKEY failed' }],
      },
      kurrent: { ok: false, detail: 'UnavailableError: getaddrinfo ENOTFOUND esdb.internal' },
      compose: { ok: false, detail: 'redis at postgres:6379 is not connected (status wait)' },
      ipv6: {
        ok: false,
        detail: 'not connected to NATS since 2026-11-29T21:00:00.000Z (lost 2001:db8::5:4222)',
      },
      conninfo: { ok: false, detail: 'could not connect with password=hunter2 host=db' },
    });
    expect(checks).toEqual({
      eventStore: { ok: false, kind: 'postgres', detail: `refused${LOGGED}` },
      lmdb: { ok: false, kind: 'lmdb', detail: `out of space${LOGGED}` },
      cache: { ok: false, kind: 'redis', detail: `timed out${LOGGED}` },
      login: { ok: false, detail: `login refused${LOGGED}` },
      bus: { ok: false, detail: `unreachable${LOGGED}` },
      chain: { ok: true, degraded: true, networks: [{ network: 'base', error: `unreachable${LOGGED}` }] },
      kurrent: { ok: false, detail: `unreachable${LOGGED}` },
      compose: { ok: false, detail: `unreachable${LOGGED}` },
      ipv6: { ok: false, detail: `unreachable${LOGGED}` },
      conninfo: { ok: false, detail: `login refused${LOGGED}` },
    });
    expect(hidden).toEqual([
      'eventStore',
      'lmdb',
      'cache',
      'login',
      'bus',
      'chain',
      'kurrent',
      'compose',
      'ipv6',
      'conninfo',
    ]);
  });

  it("keeps the service's own sentences", () => {
    const own = {
      eventStore: {
        ok: true,
        kind: 'postgres',
        detail: 'head position 4210 (listener reconnecting, polling)',
      },
      projectionLag: {
        ok: false,
        detail: 'keys is 1200 events behind the head (PROJECTION_READY_MAX_LAG 1000)',
      },
      appends: {
        ok: false,
        detail: 'an append has waited 9000 ms for the event store and none finished for 5000 ms',
      },
      shutdown: {
        ok: false,
        detail: 'stopping: still serving, the listener closes in 800 ms (SHUTDOWN_DRAIN_MS)',
      },
      slow: { ok: false, detail: 'no answer within 2000 ms' },
      chain: {
        ok: true,
        degraded: true,
        detail: 'eip155:8453: stale, no new block seen for 31 s (block 1200, X402_CHAIN_STALL_MS 30000)',
      },
      bus: {
        ok: false,
        detail: 'the stream has lost its quorum: 1 of 3 copies current, 2 needed, no leader',
      },
    };
    expect(publicChecks(own)).toEqual({ checks: own, hidden: [], keys: {} });
  });

  it("shows a check's error as the reason its code gives: no host, address or URL its words hold", async () => {
    // Words no pattern of a host can tell: a bare host name, a TLS certificate's altnames, an RPC
    // URL written without its scheme.
    const altname = checkServerIdentity('db-primary', {
      subject: { CN: 'other' },
      subjectaltname: 'DNS:rpc.example',
    } as unknown as PeerCertificate);
    const readiness = new Readiness();
    readiness.add('tls', async () => {
      throw altname;
    });
    readiness.add('bare', async () => {
      throw Object.assign(new Error('connection to db-primary lost'), { code: 'ECONNRESET' });
    });
    readiness.add('rpc', async () => {
      throw Object.assign(new Error('request to base-mainnet.example.io/v2/SECRETKEY failed'), {
        code: 'ETIMEDOUT',
      });
    });
    const { checks, hidden } = publicChecks((await readiness.run()).checks);
    expect(checks).toEqual({
      tls: { ok: false, detail: `TLS certificate refused${LOGGED}` },
      bare: { ok: false, detail: `connection reset${LOGGED}` },
      rpc: { ok: false, detail: `timed out${LOGGED}` },
    });
    expect(hidden).toEqual(['tls', 'bare', 'rpc']);
    const shown = JSON.stringify(checks);
    for (const word of ['db-primary', 'rpc.example', 'base-mainnet', 'SECRETKEY']) {
      expect(shown).not.toContain(word);
    }
  });

  it("gives a failing check's cause as its detail, and a passing check's to the log only", () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.9:8545'), { code: 'ECONNREFUSED' });
    const { checks, hidden, keys } = publicChecks({
      store: { ok: false, cause: refused },
      // Work it retries, whose last try failed: the check passes and says so in lastError.
      anchor: { ok: true, anchoring: 'on', lastError: 'refused', cause: refused },
    });
    expect(checks).toEqual({
      store: { ok: false, detail: `refused${LOGGED}` },
      anchor: { ok: true, anchoring: 'on', lastError: 'refused' },
    });
    // Still logged, with its error, once per change of its reason.
    expect(hidden).toEqual(['store', 'anchor']);
    expect(keys.anchor).toContain('refused');
  });

  it('keys the log line on the state and reason of a check, not on its figures', () => {
    const stale = (ageS: number) => ({
      ok: true,
      degraded: true,
      detail: `eip155:8453: stale, no new block seen for ${ageS} s; its head could not be read (refused)`,
      networks: [{ network: 'eip155:8453', ageS, stale: true, error: 'refused' }],
      logged: { 'eip155:8453': 'HTTP request failed.' },
    });
    const first = publicChecks({ chain: stale(31) });
    const later = publicChecks({ chain: stale(33) });
    expect(first.checks.chain).toEqual({
      ok: true,
      degraded: true,
      detail: stale(31).detail,
      networks: stale(31).networks,
    });
    expect(later.keys.chain).toBe(first.keys.chain);
    expect(publicChecks({ chain: { ...stale(33), ok: false } }).keys.chain).not.toBe(first.keys.chain);
  });

  it("keys the log line on a reason's HTTP status: a rate limit turned into a refused key is logged", () => {
    // The RPC's first line of words is the same for every status ('HTTP request failed.'): only
    // the reason shown tells a 429 from a 401.
    const stale = (ageS: number, status: number) => ({
      ok: true,
      degraded: true,
      detail: `eip155:8453: stale, no new block seen for ${ageS} s; its head could not be read (HTTP ${status})`,
      networks: [{ network: 'eip155:8453', ageS, stale: true, error: `HTTP ${status}` }],
      logged: { 'eip155:8453': 'HTTP request failed.' },
    });
    const limited = publicChecks({ chain: stale(31, 429) }).keys.chain;
    expect(publicChecks({ chain: stale(45, 429) }).keys.chain).toBe(limited);
    expect(publicChecks({ chain: stale(47, 401) }).keys.chain).not.toBe(limited);
  });
});
