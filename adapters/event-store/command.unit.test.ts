import { describe, expect, it } from 'vitest';
import { type KeyEvent, KeyRuleError, keyDecider } from '../../services/keys/key-decider.ts';
import { deciderSpec } from '../../test/decider-spec.ts';
import { aggregateStream, handleCommand } from './command.ts';
import { MemoryEventStore } from './memory.ts';
import { WrongExpectedRevisionError } from './port.ts';

const issued: KeyEvent = {
  type: 'ApiKeyIssued',
  data: {
    keyId: 'key_a',
    keyHash: 'a'.repeat(64),
    prefix: 'sk_live_abcd',
    plan: 'starter',
    owner: 'ops',
    via: 'operator',
  },
};

describe('handleCommand and aggregateStream', () => {
  it('appends what the decider decides at the revision it read, and folds it back', async () => {
    const store = new MemoryEventStore();
    const first = await handleCommand(store, 'apikey-a', keyDecider, { kind: 'issue', data: issued.data });
    expect(first.events).toEqual([issued]);
    expect(first.revision).toBe(0);
    expect(first.state).toMatchObject({ keyId: 'key_a', plan: 'starter', revoked: false });
    await handleCommand(store, 'apikey-a', keyDecider, { kind: 'changePlan', keyId: 'key_a', to: 'pro' });
    const folded = await aggregateStream(store, 'apikey-a', keyDecider);
    expect(folded).toEqual({
      revision: 1,
      state: { keyId: 'key_a', plan: 'pro', owner: 'ops', revoked: false },
    });
  });

  it('passes over events of types the fold does not take, but counts their revision', async () => {
    const store = new MemoryEventStore();
    await handleCommand(store, 'apikey-b', keyDecider, { kind: 'issue', data: issued.data });
    await store.append('apikey-b', [{ type: 'SomethingElse', data: { not: 'a key event' } }]);
    const folded = await aggregateStream(store, 'apikey-b', keyDecider);
    expect(folded.revision).toBe(1);
    expect(folded.state?.plan).toBe('starter');
  });

  it('writes nothing when a rule refuses the command', async () => {
    const store = new MemoryEventStore();
    await expect(
      handleCommand(store, 'apikey-c', keyDecider, { kind: 'revoke', keyId: 'key_a', reason: 'x' }),
    ).rejects.toBeInstanceOf(KeyRuleError);
    expect(await store.streamRevision('apikey-c')).toBeNull();
  });

  it("throws a concurrent writer's conflict without retry, and decides again on the newer state with it", async () => {
    const store = new MemoryEventStore();
    await handleCommand(store, 'apikey-d', keyDecider, { kind: 'issue', data: issued.data });
    const stale = await aggregateStream(store, 'apikey-d', keyDecider);
    // Another writer moves the stream after `stale` was read.
    await handleCommand(store, 'apikey-d', keyDecider, { kind: 'changePlan', keyId: 'key_a', to: 'pro' });
    await expect(
      handleCommand(
        store,
        'apikey-d',
        keyDecider,
        { kind: 'revoke', keyId: 'key_a', reason: 'x' },
        { known: stale },
      ),
    ).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    const retried = await handleCommand(
      store,
      'apikey-d',
      keyDecider,
      { kind: 'changePlan', keyId: 'key_a', to: 'free' },
      { known: stale, retry: 1 },
    );
    // Decided again on the newer state: from pro, not from the stale starter.
    expect(retried.events).toEqual([
      { type: 'ApiKeyPlanChanged', data: { keyId: 'key_a', from: 'pro', to: 'free' } },
    ]);
    expect(retried.revision).toBe(2);
  });
});

describe('handleCommand validation', () => {
  it('checks decided events against the catalog, unless the caller vouches they are built from typed values', async () => {
    const store = new MemoryEventStore();
    const bad = { ...issued.data, keyHash: 'not-a-sha256' };
    await expect(
      handleCommand(store, 'apikey-e', keyDecider, { kind: 'issue', data: bad }),
    ).rejects.toThrow();
    expect(await store.streamRevision('apikey-e')).toBeNull();
    // Trusted: appended as decided, with no second check (the delivery hot path).
    const trusted = await handleCommand(
      store,
      'apikey-e',
      keyDecider,
      { kind: 'issue', data: bad },
      { trusted: true },
    );
    expect(trusted.revision).toBe(0);
  });
});

describe('key decider as a spec', () => {
  const spec = deciderSpec(keyDecider);
  it('given nothing, when issue, then issued', () => {
    spec.given([]).when({ kind: 'issue', data: issued.data }).thenEmits([issued]);
  });
  it('given issued, when issue again, then key_exists', () => {
    spec
      .given([issued])
      .when({ kind: 'issue', data: issued.data })
      .thenThrows((err) => err instanceof KeyRuleError && err.code === 'key_exists');
  });
});
