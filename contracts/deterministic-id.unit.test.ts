import { describe, expect, it } from 'vitest';
import { deterministicId } from './deterministic-id.ts';

describe('deterministicId', () => {
  // Ids already in event logs were made by these inputs: the same inputs must keep giving them.
  it('derives the ids logs already hold', () => {
    expect(deterministicId('webhook-delivery', '0f8e7a8c-1b2d-4c3e-9f0a-1234567890ab', 'sub-1')).toBe(
      '5b4e190a-32e7-534e-b1a2-8164deeeb862',
    );
    expect(deterministicId('webhook-seq', 42, 'é')).toBe('3d7537f7-73f3-5ea3-b358-d3b59e9f91f0');
  });
});
