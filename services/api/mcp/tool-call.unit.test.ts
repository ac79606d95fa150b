import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ERRORS } from '../../../contracts/errors.ts';
import { anonymousCaller, toolCallDeps } from '../../../test/tool-call-harness.ts';
import { OperationError } from '../../engine/operation-errors.ts';
import { CallerRejectedError } from '../../metering/caller.ts';
import type { QuotaMeter } from '../../metering/quota-meter.ts';
import { ChannelError, callTool, refusedKeyError } from './tool-call.ts';
import type { ToolDefinition } from './tool-registry.ts';

const meters: QuotaMeter[] = [];
afterEach(async () => {
  await Promise.all(meters.splice(0).map((m) => m.counters.stop()));
});

const depsFor = (tools: ToolDefinition[]) => toolCallDeps(tools, meters);

const request = (name: string, args: unknown) => ({ name, args, caller: anonymousCaller('10.0.0.2') });

describe('callTool arguments', () => {
  it('gives every call the parse of its own arguments, repeated or not', async () => {
    const seen: unknown[] = [];
    const echo: ToolDefinition = {
      name: 'echo_args',
      title: 'Echo',
      description: 'test',
      input: z.strictObject({
        n: z.union([z.number(), z.string()]),
        mode: z.enum(['a', 'b']).default('a'),
        tags: z.array(z.string()).optional(),
      }),
      run: async (args) => {
        seen.push(args);
        return { args };
      },
    };
    const deps = depsFor([echo]);
    const calls = [
      { n: 1 },
      { n: 1 },
      { n: '1' },
      { n: 1, mode: 'b' },
      { mode: 'b', n: 1 },
      { n: 1, tags: ['x'] },
      { n: 1, tags: ['y'] },
      { n: 1 },
    ];
    const answers = [];
    for (const args of calls) {
      const result = await callTool(deps, request('echo_args', args));
      expect(result.isError).toBeUndefined();
      answers.push((result.structuredContent as { args: unknown }).args);
    }
    expect(answers).toEqual([
      { n: 1, mode: 'a' },
      { n: 1, mode: 'a' },
      { n: '1', mode: 'a' },
      { n: 1, mode: 'b' },
      { n: 1, mode: 'b' },
      { n: 1, mode: 'a', tags: ['x'] },
      { n: 1, mode: 'a', tags: ['y'] },
      { n: 1, mode: 'a' },
    ]);
    // Each call its own object: what one tool run changes, the next call of the same arguments never sees.
    expect(seen[1]).not.toBe(seen[0]);
    (seen[1] as Record<string, unknown>).mode = 'changed';
    const again = await callTool(deps, request('echo_args', { n: 1 }));
    expect((again.structuredContent as { args: unknown }).args).toEqual({ n: 1, mode: 'a' });
  });

  it('refuses invalid arguments on every call, never from an earlier valid one', async () => {
    const tool: ToolDefinition = {
      name: 'strict_args',
      title: 'Strict',
      description: 'test',
      input: z.strictObject({ n: z.number().int() }),
      run: async (args) => ({ args }),
    };
    const deps = depsFor([tool]);
    expect((await callTool(deps, request('strict_args', { n: 2 }))).isError).toBeUndefined();
    for (let i = 0; i < 2; i++) {
      const bad = await callTool(deps, request('strict_args', { n: 2.5 }));
      expect(bad.isError).toBe(true);
      expect(bad.structuredContent).toMatchObject({ code: 'invalid_arguments' });
    }
    const extra = await callTool(deps, request('strict_args', { n: 2, more: true }));
    expect(extra.structuredContent).toMatchObject({ code: 'invalid_arguments' });
  });
});

describe('callTool refusals', () => {
  const free: ToolDefinition = {
    name: 'free_tool',
    title: 'Free',
    description: 'test',
    input: z.strictObject({ n: z.number().int() }),
    run: async (args) => ({ args }),
  };
  const structured = (result: { structuredContent?: unknown }) =>
    result.structuredContent as Record<string, unknown>;

  it('say whether the same call may pass later (the catalog retryable), as the pay-per-call routes do', async () => {
    const deps = depsFor([free]);
    const refusals = [
      // A payment where the server sells no call (payments off): no quote to answer with.
      ['payment_not_accepted', { ...request('free_tool', { n: 1 }), payment: { x402Version: 2 } }],
      ['unknown_tool', request('no_such_tool', {})],
      ['invalid_arguments', request('free_tool', { n: 'one' })],
      ['invalid_arguments', { ...request('free_tool', undefined), name: 7 }],
    ] as const;
    for (const [code, call] of refusals) {
      const result = await callTool(deps, call);
      expect(result.isError, code).toBe(true);
      expect(structured(result), code).toMatchObject({ code, retryable: false });
    }
  });

  it("a tool's failure says what the same failure says over HTTP: the catalog's retryable of its code", async () => {
    const failing = (name: string, error: () => Error): ToolDefinition => ({
      ...free,
      name,
      run: async () => {
        throw error();
      },
    });
    const deps = {
      ...depsFor([
        // A fault of unknown cause: internal_error here, INTERNAL_ERROR (500) on HTTP.
        failing('buggy_tool', () => new TypeError('x is undefined')),
        // A refusal the feature words itself, not retryable in the catalog (a month is no wait to retry through).
        failing('chat_tool', () => new OperationError({ code: 'CHAT_QUOTA_EXHAUSTED', message: 'used up' })),
      ]),
      // The fault is logged, as it is on HTTP.
      logger: pino({ level: 'silent' }),
    };
    const bug = structured(await callTool(deps, request('buggy_tool', { n: 1 })));
    expect(bug).toMatchObject({ code: 'internal_error', retryable: ERRORS.INTERNAL_ERROR.retryable });
    expect(ERRORS.internal_error.retryable).toBe(ERRORS.INTERNAL_ERROR.retryable);
    const quota = structured(await callTool(deps, request('chat_tool', { n: 1 })));
    expect(quota).toMatchObject({ code: 'CHAT_QUOTA_EXHAUSTED', retryable: false });
  });

  it('a quota used up with nothing to pay with is not retryable, and says when its window resets', async () => {
    const deps = toolCallDeps([free], meters, 1);
    expect((await callTool(deps, request('free_tool', { n: 1 }))).isError).toBeUndefined();
    const refused = structured(await callTool(deps, request('free_tool', { n: 1 })));
    expect(refused).toMatchObject({
      code: 'quota_exhausted',
      retryable: false,
      window: 'monthly',
      resets_at: expect.any(String),
      retry_after_ms: expect.any(Number),
    });
    expect(refused).not.toHaveProperty('x402Version');
  });

  it('a key refused as a JSON-RPC error (-32003, -32004) carries data.code and retryable as a tool error does', async () => {
    const deps = depsFor([free]);
    const refusals = [
      ['unknown', -32003, 'unknown_key', false],
      ['indeterminate', -32004, 'key_unverifiable', true],
    ] as const;
    for (const [reason, rpc, code, retryable] of refusals) {
      const refused = new CallerRejectedError(reason, 'the key', 'refused', '10.0.0.2');
      const thrown = await refusedKeyError(deps, refused);
      expect(thrown, code).toBeInstanceOf(ChannelError);
      expect((thrown as ChannelError).code, code).toBe(rpc);
      expect((thrown as ChannelError).data, code).toMatchObject({ code, retryable });
      expect(ERRORS[code].rpc, code).toBe(rpc);
    }
  });
});
