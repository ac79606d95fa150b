import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { foldLog } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { changeKeyPlan, issueKey, revokeKey } from './key-commands.ts';
import { hashApiKey } from './key-material.ts';
import { findById, keyRegistryProjection } from './key-registry.ts';
import { KeyRevocations, type RevokedKey } from './revocations.ts';

describe('KeyRevocations', () => {
  it('tells of each key the running registry revokes, once it holds it revoked; issues and plan changes not', async () => {
    const store = new MemoryEventStore();
    const revocations = new KeyRevocations();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), revocations.projection);
    const told: { key: RevokedKey; revoked: boolean | undefined }[] = [];
    let toldOnce!: () => void;
    const once = new Promise<void>((resolve) => {
      toldOnce = resolve;
    });
    revocations.onRevoked((key) => {
      told.push({ key, revoked: findById(runner.state, key.keyId)?.revoked });
      toldOnce();
    });
    // A listener that throws stops neither the fold nor the other listeners.
    revocations.onRevoked(() => {
      throw new Error('a listener failing');
    });
    await runner.start();
    try {
      const kept = await issueKey(store, { plan: 'pro', owner: 'o', via: 'operator' });
      const gone = await issueKey(store, { plan: 'pro', owner: 'o', via: 'operator' });
      await changeKeyPlan(store, `apikey-${kept.keyId}`, kept.keyId, 'starter');
      const position = await revokeKey(store, `apikey-${gone.keyId}`, gone.keyId, 'leaked');
      await runner.waitFor(position);
      await once;
      expect(told).toEqual([{ key: { keyId: gone.keyId, keyHash: hashApiKey(gone.key) }, revoked: true }]);
      expect(runner.error).toBeNull();
      // Its state is the key registry's, event for event.
      expect(runner.state).toEqual((await foldLog(store, keyRegistryProjection)).state);
      expect(revocations.projection.name).toBe(keyRegistryProjection.name);
      expect(revocations.projection.version).toBe(keyRegistryProjection.version);
    } finally {
      await runner.stop();
    }
  });
});
