import { randomUUID } from 'node:crypto';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { CacheUnavailableError } from '../../../adapters/cache/port.ts';
import { ERRORS, type ErrorCode, isErrorCode } from '../../../contracts/errors.ts';
import type { ToolName } from '../../../contracts/tools.ts';
import { describeFailure, invalidInput } from '../../engine/operation-errors.ts';
import { type Caller, type CallerRejectedError, undebitedService } from '../../metering/caller.ts';
import { CallCancelledError, QuotaUnavailableError, serveMetered } from '../../metering/metered-call.ts';
import type { QuotaMeter } from '../../metering/quota-meter.ts';
import type { PaidServiceMeta, PaymentReceipt, ServiceMeta } from '../../metering/service-meta.ts';
import { refusingResetsAt } from '../../metering/snapshot.ts';
import { argumentsText, recall, remember } from '../remembered-input.ts';
import { answerJson, answerJsonWithService, answerRevision } from '../served-answers.ts';
import type { ResultJson } from './answer-json.ts';
import { MCP_INVALID_PARAMS } from './error-codes.ts';
import { isPlainObject, kindOf } from './json-shape.ts';
import { metaIssue } from './params-check.ts';
import type { ToolRegistry } from './tool-registry.ts';

/**
 * What an exhausted caller can pay instead: the x402 payment requirements for this call
 * (`{x402Version, accepts, resource, ...}`, priced for these arguments), or null when the tool
 * is not sold per call.
 */
export type PaymentRequirementsFor = (
  tool: ToolName | string,
  args: unknown,
) => Promise<Record<string, unknown> | null> | Record<string, unknown> | null;

/** One tool call paid for with `_meta["x402/payment"]` (x402 MCP transport). */
export interface PaidToolCall {
  tool: string;
  /** Validated arguments: they price the call. */
  args: unknown;
  /** The `_meta["x402/payment"]` value as sent. */
  payment: unknown;
  requestId: string;
}

export type PaidToolOutcome =
  | {
      kind: 'served';
      value: Record<string, unknown>;
      receipt: PaymentReceipt;
      /** The settlement response for `_meta["x402/payment-response"]`. */
      settlement: Record<string, unknown>;
      /** The answer this payment bought before, given again: nothing more was charged. */
      replayed?: boolean;
    }
  /** Not paid (refused payment or failed settlement): the requirements to pay again; nothing charged. */
  | {
      kind: 'payment_refused';
      code: string;
      message: string;
      paymentRequired: Record<string, unknown>;
      settlement?: Record<string, unknown>;
    }
  | { kind: 'unavailable'; code: ErrorCode; message: string; retryable: boolean }
  /** The tool failed after the payment was reserved; the payment was released, nothing charged. */
  | { kind: 'failed'; error: unknown };

/** Runs a paid tool call: verify, reserve the nonce, run, settle only after success. */
export type PayPerCall = (call: PaidToolCall) => Promise<PaidToolOutcome>;

export interface ToolCallDeps {
  registry: ToolRegistry;
  quota: QuotaMeter;
  logger: Logger;
  paymentRequirements?: PaymentRequirementsFor;
  payPerCall?: PayPerCall;
}

export interface ToolCallRequest {
  /** `params.name` as sent: anything but a string is refused in words (-32602), as an unknown tool is. */
  name: unknown;
  /** `params.arguments` as sent: absent, or an object; anything else is refused in words (-32602). */
  args: unknown;
  /**
   * `params` as sent when it is not an object (a string, number, boolean, null or an array; name
   * and args are then undefined): refused in words (-32602) as a call naming no tool; undefined
   * when params is an object or absent.
   */
  params?: unknown;
  /** `params._meta` as sent, when the channel has not checked it: one MCP does not define is refused in words (-32602). */
  meta?: unknown;
  /** `_meta["x402/payment"]` of the call; undefined when none was attached. */
  payment?: unknown;
  /**
   * Who the caller hook in front of the route identified (`request.caller`, or the OAuth token's
   * caller on the sign-in path). A key it refused never comes here: the route answers every
   * request carrying one with refusedKeyError before any dispatch (plugin.ts).
   */
  caller?: Caller;
  /**
   * The id the call is known by (its debit, the events it records); the HTTP request's own id
   * when the channel has one, so the access line and the call share it. Else one is made here.
   */
  requestId?: string;
  /** The origin the call came to (requestOrigin), passed to the tool (ToolContext.origin). */
  origin?: string;
  /**
   * Whether the client cancelled this call (notifications/cancelled on its session): asked before
   * the tool runs and before the debit, so a cancelled call is not counted.
   */
  cancelled?: () => boolean;
}

/** JSON-RPC's code for a request its client cancelled (the answer is sent, and ignored, over HTTP). */
const MCP_REQUEST_CANCELLED = -32800;

/**
 * A JSON-RPC error of the tool channel. Not the SDK's McpError: that one prefixes its message
 * with "MCP error <code>: ", which the server sends on and a client SDK prefixes again
 * ("MCP error -32003: MCP error -32003: …"). The SDK server sends `code`, `message` and `data`
 * of any error it is given, so the message goes out once, as written here.
 */
export class ChannelError extends Error {
  override readonly name = 'ChannelError';
  constructor(
    readonly code: number,
    message: string,
    /** Left out, the error carries no data (as the other refusals of the channel without any). */
    readonly data?: Record<string, unknown>,
  ) {
    super(message);
  }
}

/**
 * A refusal of the tool channel sent as a JSON-RPC error (-32003, -32004): its catalog entry gives
 * the number, and `data` carries the code and `retryable` as a tool error's structuredContent does,
 * so a client reads one field for the reason whichever way the refusal came.
 */
function channelError(
  code: 'unknown_key' | 'key_unverifiable' | 'quota_unavailable',
  message: string,
  data: Record<string, unknown>,
): ChannelError {
  const spec = ERRORS[code];
  return new ChannelError(spec.rpc, message, { code, retryable: spec.retryable, ...data });
}

/**
 * The JSON-RPC error of a presented key that is not served: -32003 unknown_key (never issued, or
 * revoked), -32004 key_unverifiable (it cannot be checked right now: retryable), with the
 * refusal's `_service`. Every request at /mcp carrying such a key is answered with it, initialize
 * and tools/list as tools/call (plugin.ts), so a host learns its key is bad at connect.
 */
export async function refusedKeyError(
  deps: Pick<ToolCallDeps, 'quota'>,
  refused: CallerRejectedError,
): Promise<ChannelError> {
  return channelError(refused.reason === 'unknown' ? 'unknown_key' : 'key_unverifiable', refused.message, {
    _service: await undebitedService(deps.quota, refused.caller),
  });
}

/**
 * What a tool gives back when its result is thrown away because the call lost the race for the
 * plan's last call, or its debit could not be made: the unit chat_knowledge took of the chat quota.
 */
const releases = new WeakMap<object, () => Promise<void>>();

/** Registers how to undo what produced `result` if it is never served; returns `result`. */
export function releaseIfDiscarded<T extends object>(result: T, release: () => Promise<void>): T {
  releases.set(result, release);
  return result;
}

async function discarded(result: Record<string, unknown> | undefined): Promise<void> {
  if (result !== undefined) await releases.get(result)?.();
}

/** `_meta` keys of the x402 MCP transport: the payment in a call, the settlement in its result. */
export const MCP_PAYMENT_META = 'x402/payment';
const MCP_PAYMENT_RESPONSE_META = 'x402/payment-response';
/** Ours, as HTTP's `x-payment-replayed`: true on the answer a payment already bought, given again. */
const MCP_PAYMENT_REPLAYED_META = 'x402/payment-replayed';

/**
 * One tools/call of an identified caller (a refused key was answered by the route), channel rules
 * included: the arguments (-32602 as a tool result with isError), then the metered run. Every
 * result carries `_service`.
 */
export async function callTool(deps: ToolCallDeps, request: ToolCallRequest): Promise<CallToolResult> {
  if (request.caller === undefined)
    throw new Error('tools/call without a caller: the caller hook (callerPlugin) runs before every route');
  const caller: Caller = request.caller;

  const malformed = malformedParams(request.name, request.args, request.params, request.meta);
  if (malformed !== null) {
    return toolError(`${MCP_INVALID_PARAMS} invalid params: ${malformed.message}`, {
      code: malformed.code,
      issues: [{ path: malformed.path, message: malformed.message }],
      _service: await undebitedService(deps.quota, caller),
    });
  }
  const tool = deps.registry.get(request.name as string);
  if (tool === undefined) {
    return toolError(`${MCP_INVALID_PARAMS} unknown tool ${JSON.stringify(request.name)}`, {
      code: 'unknown_tool' satisfies ErrorCode,
      _service: await undebitedService(deps.quota, caller),
    });
  }
  const args = request.args ?? {};
  // Arguments this tool accepted before are not parsed again (remembered-input.ts).
  const text = argumentsText(args);
  const known = text === null ? undefined : recall(tool.input, text);
  const parsed = known !== undefined ? { success: true as const, data: known } : tool.input.safeParse(args);
  if (parsed.success && known === undefined && text !== null) remember(tool.input, text, parsed.data);
  if (!parsed.success) {
    const { issues, message: text } = invalidInput(parsed.error, tool.input, args, '(arguments)');
    return toolError(`${MCP_INVALID_PARAMS} invalid arguments for ${tool.name}: ${text}`, {
      code: 'invalid_arguments' satisfies ErrorCode,
      issues,
      _service: await undebitedService(deps.quota, caller),
    });
  }

  const requestId = request.requestId ?? randomUUID();
  if (request.payment !== undefined) {
    return paidToolCall(deps, caller, {
      tool: tool.name,
      args: parsed.data,
      payment: request.payment,
      requestId,
    });
  }
  let outcome: Awaited<ReturnType<typeof serveMetered<Record<string, unknown>>>>;
  try {
    // The tool's own promise, not an async wrapper around it: one frame and promise less a call.
    // A result made and then thrown away comes back on the refusal (`ran`) to be released.
    outcome = await serveMetered(
      deps.quota,
      caller,
      { tool: tool.name },
      () => tool.run(parsed.data, { requestId, caller, origin: request.origin }),
      request.cancelled,
    );
  } catch (err) {
    if (err instanceof QuotaUnavailableError) {
      await discarded(err.ran as Record<string, unknown> | undefined);
      throw channelError('quota_unavailable', err.message, { _service: err.service });
    }
    throw err;
  }

  if (outcome.ok) {
    // A tool may add figures of its own to `_service` (the chat quota); auth and quota stay ours.
    // Without figures of its own, the meter's block as it is (made for this call), not a copy.
    const own = outcome.value._service;
    const service =
      typeof own === 'object' && own !== null ? { ...own, ...outcome.service } : outcome.service;
    // The value's own fields as one remembered start (a value with `_service` of its own is
    // serialised whole: serialiseWith falls back for it).
    return servedResult(
      { ...outcome.value, _service: service },
      answerJsonWithService(tool.name, outcome.value, service),
    );
  }
  if (outcome.reason === 'quota_exhausted') {
    await discarded(outcome.ran);
    const payment = (await deps.paymentRequirements?.(tool.name, parsed.data)) ?? null;
    const message = quotaExhaustedMessage(caller, outcome, payment !== null);
    const structured = {
      ...(payment ?? {}),
      error: message,
      code: 'quota_exhausted' satisfies ErrorCode,
      window: outcome.window,
      ...quotaResets(outcome.service.quota, outcome.window),
      _service: outcome.service,
    };
    if (payment === null) return toolError(message, structured);
    // The x402 MCP transport: content[0].text is the JSON of the requirements, for clients that
    // read only text; without `extensions` (the bazaar's recorded example answer, ~10 KB, is no
    // answer to this call), which structuredContent keeps.
    const { extensions: _example, ...text } = structured as Record<string, unknown>;
    return toolError(JSON.stringify(text), structured);
  }
  if (outcome.error instanceof CallCancelledError) {
    await discarded(outcome.error.ran as Record<string, unknown> | undefined);
    throw new ChannelError(MCP_REQUEST_CANCELLED, outcome.error.message, { _service: outcome.service });
  }
  return failedCall(deps, outcome.error, { tool: tool.name, requestId }, outcome.service);
}

/**
 * When the window that refused a call serves again: `resets_at` (its reset, UTC midnight of the
 * next day or month) and `retry_after_ms` (the wait until then, as the rate limit's refusal says
 * its own). The catalog's `retryable` is false for it: a day or a month is no wait a client retries
 * through on its own. Nothing when the figures could not be read.
 */
function quotaResets(
  quota: ServiceMeta['quota'],
  window: Parameters<typeof refusingResetsAt>[1],
): { resets_at?: string; retry_after_ms?: number } {
  return resetsFields(refusingResetsAt(quota, window));
}

/** `resets_at` and `retry_after_ms` of a refusal that serves again at `resets`; nothing when unknown. */
function resetsFields(resets: string | undefined): { resets_at?: string; retry_after_ms?: number } {
  if (resets === undefined) return {};
  return { resets_at: resets, retry_after_ms: Math.max(0, Date.parse(resets) - Date.now()) };
}

/**
 * Why a call was refused for its quota and every way on: an anonymous caller's own quota by
 * signing in (a key's, through /mcp/signin or a free key), a key's reset or a larger plan, and
 * paying for the call only when the service can take the payment (requirements were quoted).
 */
function quotaExhaustedMessage(
  caller: Caller,
  refusal: { window: Parameters<typeof refusingResetsAt>[1]; service: ServiceMeta },
  payable: boolean,
): string {
  const resets = refusingResetsAt(refusal.service.quota, refusal.window);
  const ways = caller.keyId
    ? [
        caller.subject.plan === 'pro'
          ? 'wait for the reset'
          : 'wait for the reset, or use a key of a larger plan',
      ]
    : [
        'sign in for a quota of your own: connect to /mcp/signin (OAuth), or get a free key ' +
          '(POST /api/keys with a wallet sign-in) and send it as "Authorization: Bearer <key>"',
      ];
  if (payable) ways.push('or pay for this call: retry with _meta["x402/payment"] for the requirements here');
  return `quota_exhausted: the ${refusal.window} quota of this ${caller.keyId ? 'key' : 'anonymous caller'} is used up (resets ${resets}); ${ways.join('; ')}`;
}

/**
 * A tools/call whose `params` are not an object, whose `name` is not a string or whose
 * `arguments` are not an object (absent is allowed: no arguments): which member, in words. The
 * SDKs' own check of these answered -32603 (or -32602) with zod's issue list as the message, or
 * a parse error for params that are not an object; this is the same -32602 tool error as an
 * unknown tool or bad arguments (contract 7.3), with the invalid-params code of the catalog
 * (`invalid_arguments`): a call that names no tool is malformed, not a call of an unknown one.
 */
function malformedParams(
  name: unknown,
  args: unknown,
  params: unknown,
  meta: unknown,
): { code: Extract<ErrorCode, 'invalid_arguments'>; path: string; message: string } | null {
  if (params !== undefined) {
    return {
      code: 'invalid_arguments',
      path: 'params',
      message: `params must be an object naming the tool (name) and its arguments, not ${kindOf(params)}`,
    };
  }
  if (typeof name !== 'string') {
    return {
      code: 'invalid_arguments',
      path: 'name',
      message:
        name === undefined
          ? 'params.name is missing: name the tool to call (tools/list names them)'
          : `params.name must be a tool's name, a string, not ${kindOf(name)}`,
    };
  }
  if (args !== undefined && !isPlainObject(args)) {
    return {
      code: 'invalid_arguments',
      path: 'arguments',
      message: `params.arguments must be an object of named arguments (or left out), not ${kindOf(args)}`,
    };
  }
  const issue = metaIssue(meta);
  if (issue !== null) return { code: 'invalid_arguments', ...issue };
  return null;
}

/**
 * A failed call as its tool error. A run that met the quota store out of reach (CacheUnavailableError:
 * a tool's own quota, as chat_knowledge's chat quota, debited while it runs) is thrown instead as
 * the call quota's refusal, -32004 quota_unavailable (retryable), as /api/chat answers 503
 * QUOTA_UNAVAILABLE: the key was verified, nothing was served or counted. `service`: the call
 * quota's figures read before the run.
 */
function failedCall(
  deps: ToolCallDeps,
  error: unknown,
  call: { tool: string; requestId: string },
  service: ServiceMeta,
): CallToolResult {
  if (error instanceof CacheUnavailableError) {
    const unavailable = new QuotaUnavailableError(service, { cause: error });
    throw channelError('quota_unavailable', unavailable.message, { _service: unavailable.service });
  }
  const failure = describeFailure(error);
  if (failure === null) {
    deps.logger.error({ err: error, ...call }, 'tool call failed');
    return toolError('internal_error: the call failed on our side; it was not counted', {
      code: 'internal_error' satisfies ErrorCode,
      _service: service,
    });
  }
  const code = failure.code === 'invalid_input' ? `${MCP_INVALID_PARAMS} ${failure.code}` : failure.code;
  return toolError(`${code}: ${failure.message}`, {
    code: failure.code,
    ...(failure.issues ? { issues: failure.issues } : {}),
    // A window's refusal (CHAT_QUOTA_EXHAUSTED) says when it serves again as quota_exhausted does.
    ...resetsFields(failure.resetsAt),
    // The failure's own figures (the chat quota of CHAT_QUOTA_EXHAUSTED), as HTTP's answer has them.
    _service: failure.service ? { ...failure.service, ...service } : service,
  });
}

/**
 * A call that carries a payment is paid, not metered: no quota is checked or debited, and the
 * result carries the receipt in `_service.payment` and the settlement in
 * `_meta["x402/payment-response"]`. A refused payment answers with fresh requirements.
 */
async function paidToolCall(deps: ToolCallDeps, caller: Caller, call: PaidToolCall): Promise<CallToolResult> {
  if (deps.payPerCall === undefined) {
    return toolError('payment_not_accepted: this server does not sell tool calls per call', {
      code: 'payment_not_accepted' satisfies ErrorCode,
      _service: await undebitedService(deps.quota, caller),
    });
  }
  const outcome = await deps.payPerCall(call);
  const service = await undebitedService(deps.quota, caller);
  switch (outcome.kind) {
    case 'served': {
      const paid: PaidServiceMeta = { ...service, payment: outcome.receipt };
      return {
        ...toolResult({ ...outcome.value, _service: paid }, answerRevision(call.tool, outcome.value)),
        _meta: {
          [MCP_PAYMENT_RESPONSE_META]: outcome.settlement,
          ...(outcome.replayed ? { [MCP_PAYMENT_REPLAYED_META]: true } : {}),
        },
      };
    }
    case 'payment_refused': {
      const structured = {
        ...outcome.paymentRequired,
        error: outcome.message,
        code: outcome.code,
        _service: service,
      };
      return {
        ...toolError(JSON.stringify(structured), structured),
        ...(outcome.settlement ? { _meta: { [MCP_PAYMENT_RESPONSE_META]: outcome.settlement } } : {}),
      };
    }
    case 'unavailable':
      return toolError(`${outcome.code}: ${outcome.message}`, {
        code: outcome.code,
        retryable: outcome.retryable,
        _service: service,
      });
    case 'failed':
      return failedCall(deps, outcome.error, call, service);
  }
}

/**
 * On a result whose text content is the JSON of its structuredContent: that JSON, and the object
 * it was made from. Symbols on the result rather than a WeakMap entry: every served call makes a
 * result, and a WeakMap keyed by short-lived objects costs each an ephemeron that the next
 * scavenge must process (~0.25 µs a call in a microbench). JSON.stringify, Object.keys and the
 * SDK's schemas ignore symbol keys, but a spread copies them: a copy keeps the remembered JSON,
 * which is used only while the copy still holds the same structuredContent and text (see
 * structuredJsonOf).
 */
const STRUCTURED_JSON = Symbol('structuredJson');
const STRUCTURED_FROM = Symbol('structuredFrom');
type MadeResult = CallToolResult & { [STRUCTURED_JSON]?: ResultJson; [STRUCTURED_FROM]?: unknown };

/**
 * The JSON of a served result's structuredContent (and its escape, when made), when the result
 * holds what toolResult made it with (its structuredContent, and as text content that JSON): the
 * session path splices it instead of serialising twice. undefined for any other result, a copy
 * with other content included.
 */
export function structuredJsonOf(result: CallToolResult): ResultJson | undefined {
  const made = (result as MadeResult)[STRUCTURED_JSON];
  if (made === undefined || (result as MadeResult)[STRUCTURED_FROM] !== result.structuredContent) {
    return undefined;
  }
  const content = result.content;
  const only = content.length === 1 ? content[0] : undefined;
  return only?.type === 'text' && only.text === made.json ? made : undefined;
}

/** A served result: the text content carries the same object for clients that ignore structuredContent. */
function toolResult(structured: Record<string, unknown>, revision: string | null): CallToolResult {
  return servedResult(structured, answerJson(structured, revision));
}

/** A served result whose structuredContent's JSON is `made`. */
function servedResult(structured: Record<string, unknown>, made: ResultJson): CallToolResult {
  const result: MadeResult = {
    content: [{ type: 'text', text: made.json }],
    structuredContent: structured,
    [STRUCTURED_JSON]: made,
    [STRUCTURED_FROM]: structured,
  };
  return result;
}

/**
 * A tool error. Every one that is not a quote says whether the same call may pass later (its
 * code's `retryable` in the catalog), as every refusal of the pay-per-call routes does: a caller
 * reads the same thing whichever channel refused it. A quote (x402 payment requirements) answers
 * with the requirements instead, as HTTP's 402 and 429 do. Its words ride in structuredContent's
 * `error` too (the text, where the error names none of its own; a quote's text is the JSON of its
 * structuredContent, which has them): a host that gives the model structuredContent rather than
 * the text reads why the call failed and what to send instead, not a bare code.
 */
function toolError(text: string, structured: Record<string, unknown>): CallToolResult {
  const { code } = structured;
  const worded =
    'error' in structured || 'x402Version' in structured ? structured : withWords(structured, text);
  const says =
    'retryable' in worded || 'x402Version' in worded || typeof code !== 'string' || !isErrorCode(code)
      ? worded
      : { code, retryable: ERRORS[code].retryable, ...worded };
  return { isError: true, content: [{ type: 'text', text }], structuredContent: says };
}

/** The error's fields with its words after them, `_service` last, as a quota's refusal has it. */
function withWords(structured: Record<string, unknown>, text: string): Record<string, unknown> {
  const { _service, ...fields } = structured;
  return _service === undefined ? { ...fields, error: text } : { ...fields, error: text, _service };
}
