import { randomUUID } from 'node:crypto';
import { type CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import type { ToolName } from '../../../contracts/tools.ts';
import { describeFailure } from '../../engine/operation-errors.ts';
import type { KeyResolver } from '../../keys/key-resolver.ts';
import type { QuotaMeter } from '../../quota/quota-meter.ts';
import { type Caller, CallerRejectedError, identifyCaller } from '../caller.ts';
import { QuotaUnavailableError, serveMetered } from '../metered-call.ts';
import type { ServiceMeta } from '../service-meta.ts';
import { MCP_INVALID_PARAMS, MCP_UNKNOWN_KEY, MCP_UNVERIFIABLE } from './error-codes.ts';
import type { ToolRegistry } from './tool-registry.ts';

/**
 * What an exhausted caller can pay instead: the x402 payment requirements for this call
 * (`{x402Version, accepts, resource, ...}`), or null when pay-per-call is not configured.
 */
export type PaymentRequirementsFor = (
  tool: ToolName | string,
  args: unknown,
) => Record<string, unknown> | null;

export interface ToolCallDeps {
  registry: ToolRegistry;
  keys: KeyResolver;
  quota: QuotaMeter;
  logger: Logger;
  paymentRequirements?: PaymentRequirementsFor;
}

export interface ToolCallRequest {
  name: string;
  args: unknown;
  headers: Record<string, string | string[] | undefined>;
  clientAddress: string;
}

/**
 * One tools/call, channel rules included: the caller is identified first (an unknown key is a
 * JSON-RPC error -32003, an unverifiable one -32004: thrown as McpError), then the arguments
 * (-32602 as a tool result with isError), then the metered run. Every result carries `_service`.
 */
export async function callTool(deps: ToolCallDeps, request: ToolCallRequest): Promise<CallToolResult> {
  let caller: Caller;
  try {
    caller = await identifyCaller(deps.keys, request);
  } catch (err) {
    if (err instanceof CallerRejectedError) {
      const code = err.reason === 'unknown' ? MCP_UNKNOWN_KEY : MCP_UNVERIFIABLE;
      throw new McpError(code, err.message, {
        retryable: err.reason === 'indeterminate',
        _service: err.service,
      });
    }
    throw err;
  }

  const tool = deps.registry.get(request.name);
  if (tool === undefined) {
    return toolError(`${MCP_INVALID_PARAMS} unknown tool ${JSON.stringify(request.name)}`, {
      code: 'unknown_tool',
      _service: await peekMeta(deps, caller),
    });
  }
  const parsed = tool.input.safeParse(request.args ?? {});
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => ({
      path: i.path.join('.') || '(arguments)',
      message: i.message,
    }));
    const text = issues.map((i) => `${i.path}: ${i.message}`).join('; ');
    return toolError(`${MCP_INVALID_PARAMS} invalid arguments for ${tool.name}: ${text}`, {
      code: 'invalid_arguments',
      issues,
      _service: await peekMeta(deps, caller),
    });
  }

  const requestId = randomUUID();
  let outcome: Awaited<ReturnType<typeof serveMetered<Record<string, unknown>>>>;
  try {
    outcome = await serveMetered(deps.quota, caller, { tool: tool.name, requestId }, () =>
      tool.run(parsed.data, { requestId }),
    );
  } catch (err) {
    if (err instanceof QuotaUnavailableError) {
      throw new McpError(MCP_UNVERIFIABLE, err.message, { retryable: true, _service: err.service });
    }
    throw err;
  }

  if (outcome.ok) {
    const structured = { ...outcome.value, _service: outcome.service };
    return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
  }
  if (outcome.reason === 'quota_exhausted') {
    const payment = deps.paymentRequirements?.(tool.name, parsed.data) ?? null;
    const message =
      `quota_exhausted: the ${outcome.window} quota of this ${caller.keyId ? 'key' : 'anonymous caller'} is used up` +
      ` (resets ${outcome.window === 'daily' ? outcome.service.quota?.daily?.resets_at : outcome.service.quota?.resets_at})` +
      (payment ? '; pay per call with x402 using the requirements in structuredContent' : '');
    return toolError(message, {
      ...(payment ?? {}),
      error: message,
      code: 'quota_exhausted',
      window: outcome.window,
      _service: outcome.service,
    });
  }
  const failure = describeFailure(outcome.error);
  if (failure === null) {
    deps.logger.error({ err: outcome.error, tool: tool.name, requestId }, 'tool call failed');
    return toolError('internal_error: the call failed on our side; it was not counted', {
      code: 'internal_error',
      retryable: true,
      _service: outcome.service,
    });
  }
  const code = failure.code === 'invalid_input' ? `${MCP_INVALID_PARAMS} ${failure.code}` : failure.code;
  return toolError(`${code}: ${failure.message}`, {
    code: failure.code,
    retryable: failure.retryable,
    ...(failure.issues ? { issues: failure.issues } : {}),
    _service: outcome.service,
  });
}

function toolError(text: string, structured: Record<string, unknown>): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }], structuredContent: structured };
}

/** The caller's figures for an answer that debits nothing; null when they cannot be read. */
async function peekMeta(deps: ToolCallDeps, caller: Caller): Promise<ServiceMeta> {
  const quota = await deps.quota.peek(caller.subject).catch(() => null);
  return { auth: caller.auth, quota };
}
