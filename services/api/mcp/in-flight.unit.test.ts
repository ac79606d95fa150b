import { describe, expect, it } from 'vitest';
import { HeldIds, InFlightIds, releaseId, requestIds } from './in-flight.ts';

const held = (claim: ReturnType<InFlightIds['claim']>): HeldIds => {
  if (!(claim instanceof HeldIds)) throw new Error(`conflict on ${JSON.stringify(claim.conflict)}`);
  return claim;
};

describe('InFlightIds: a JSON-RPC id is in flight once per session', () => {
  it('refuses an id already in flight on the session until its request is answered', () => {
    const ids = new InFlightIds();
    const first = held(ids.claim('s1', [7]));
    expect(ids.claim('s1', [7])).toEqual({ conflict: 7 });
    // Another session, and the same digits as a string, are other ids.
    held(ids.claim('s2', [7]));
    const text = held(ids.claim('s1', ['7']));
    expect(ids.claim('s1', ['7'])).toEqual({ conflict: '7' });
    first.release();
    held(ids.claim('s1', [7]));
    text.release();
    held(ids.claim('s1', ['7']));
  });

  it('claims every id of a batch or none, and refuses an id repeated within it', () => {
    const ids = new InFlightIds();
    held(ids.claim('s', ['b']));
    expect(ids.claim('s', ['a', 'b', 'c'])).toEqual({ conflict: 'b' });
    // Nothing of the refused batch was taken.
    held(ids.claim('s', ['a'])).release();
    held(ids.claim('s', ['c'])).release();
    expect(ids.claim('s', [1, 2, 1])).toEqual({ conflict: 1 });
    held(ids.claim('s', [1, '1', 2])).release();
  });

  it('releases once: a second release does not free a later request that claimed the same id', () => {
    const ids = new InFlightIds();
    const first = held(ids.claim('s', ['x']));
    first.release();
    const second = held(ids.claim('s', ['x']));
    first.release();
    expect(ids.claim('s', ['x'])).toEqual({ conflict: 'x' });
    second.release();
    held(ids.claim('s', ['x']));
  });

  it('holds nothing for a body without ids, and forgets a closed session (a late release is harmless)', () => {
    const ids = new InFlightIds();
    const none = held(ids.claim('s', []));
    none.release();
    const late = held(ids.claim('s', [1]));
    ids.forget('s');
    held(ids.claim('s', [1]));
    late.release();
    expect(ids.claim('s', [1])).toEqual({ conflict: 1 });
  });

  it("claims a single request's one id: refused while in flight under either claim, free once released", () => {
    const ids = new InFlightIds();
    const one = ids.claimOne('s', 7);
    expect(one).not.toBeNull();
    expect(ids.claimOne('s', 7)).toBeNull();
    expect(ids.claim('s', [7])).toEqual({ conflict: 7 });
    // The same digits as a string, and another session, are other ids.
    const text = ids.claimOne('s', '7');
    expect(text).not.toBeNull();
    expect(ids.claimOne('t', 7)).not.toBeNull();
    const batch = held(ids.claim('s', [8, 9]));
    expect(ids.claimOne('s', 9)).toBeNull();
    releaseId(one!, 7);
    expect(ids.claimOne('s', 7)).not.toBeNull();
    expect(ids.claimOne('s', '7')).toBeNull();
    batch.release();
    expect(ids.claimOne('s', 9)).not.toBeNull();
    // Releasing an id no longer held takes nothing else with it.
    releaseId(text!, 'absent');
    expect(ids.claimOne('s', '7')).toBeNull();
  });
});

describe('requestIds', () => {
  it('names the ids of requests, not of notifications or responses, in a single message or a batch', () => {
    expect(requestIds({ jsonrpc: '2.0', id: 3, method: 'tools/call' })).toEqual([3]);
    expect(requestIds({ jsonrpc: '2.0', method: 'notifications/initialized' })).toEqual([]);
    expect(
      requestIds([
        { jsonrpc: '2.0', id: 'a', method: 'tools/list' },
        { jsonrpc: '2.0', id: 'b', result: {} },
        { jsonrpc: '2.0', id: null, method: 'ping' },
        null,
        { jsonrpc: '2.0', id: 2, method: 'ping' },
      ]),
    ).toEqual(['a', 2]);
  });
});
