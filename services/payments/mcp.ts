import type { ResourceInfo } from '@x402/core/types';
import type { Logger } from 'pino';
import { ERRORS, type ErrorCode } from '../../contracts/errors.ts';
import type { PaymentRequirementsFor, PayPerCall } from '../api/mcp/tool-call.ts';
import { decodeMcpPayment, settlementResponse } from './codecs.ts';
import { type PaymentFlowDeps, runPaidCall } from './payment-flow.ts';
import type { Quoter } from './quote.ts';
import type { PaidTool } from './tools.ts';

export interface McpPaymentsOptions {
  tools: PaidTool[];
  quoter: Quoter;
  flow: PaymentFlowDeps;
  logger: Logger;
}

/**
 * The x402 MCP transport over the same flow and ledger as the HTTP routes: requirements priced
 * for the call's arguments (a 1m trade call quotes the 1m price), the payment read from
 * `_meta["x402/payment"]`, settled only after the tool succeeded.
 */
export function mcpPayments(options: McpPaymentsOptions): {
  paymentRequirements: PaymentRequirementsFor;
  payPerCall: PayPerCall;
} {
  const tools = new Map(options.tools.map((tool) => [tool.name as string, tool]));
  const resourceOf = (tool: PaidTool): ResourceInfo => ({
    url: `mcp://tool/${tool.name}`,
    description: tool.description,
    mimeType: 'application/json',
  });
  const required = async (tool: PaidTool, args: unknown, message: string) =>
    (await options.quoter.paymentRequired(tool.price(args), resourceOf(tool), message)) as unknown as Record<
      string,
      unknown
    >;

  return {
    async paymentRequirements(name, args) {
      // A rail that cannot settle (no facilitator: the embedded defaults) is not offered to an
      // exhausted caller: its signed payment would only be refused facilitator_not_configured.
      if (options.flow.cannotSettle !== null) return null;
      const tool = tools.get(name);
      return tool ? required(tool, args, `payment required: ${tool.name}`) : null;
    },

    async payPerCall(call) {
      const tool = tools.get(call.tool);
      if (tool === undefined) {
        return {
          kind: 'unavailable',
          code: 'payment_not_accepted',
          message: `${call.tool} is not sold per call`,
          retryable: false,
        };
      }
      const decoded = decodeMcpPayment(call.payment);
      if (!decoded.ok) {
        return {
          kind: 'payment_refused',
          code: decoded.reason,
          message: decoded.message,
          paymentRequired: await required(tool, call.args, decoded.message),
        };
      }
      const outcome = await runPaidCall(options.flow, {
        payment: decoded.payment,
        requirements: await options.quoter.requirements(tool.price(call.args)),
        url: resourceOf(tool).url,
        requestId: call.requestId,
        tool,
        input: call.args,
        refusal: null,
      });
      switch (outcome.kind) {
        case 'served':
          return {
            kind: 'served',
            value: outcome.result as Record<string, unknown>,
            receipt: outcome.receipt,
            settlement: settlementResponse(2, outcome.settle),
            ...(outcome.replayed ? { replayed: true } : {}),
          };
        case 'payment_rejected':
          return {
            kind: 'payment_refused',
            code: outcome.reason,
            message: outcome.message,
            paymentRequired: await required(tool, call.args, outcome.message),
          };
        case 'settlement_failed': {
          const message = `settlement failed: ${outcome.message}`;
          return {
            kind: 'payment_refused',
            code: 'settlement_failed' satisfies ErrorCode,
            message,
            paymentRequired: await required(tool, call.args, message),
            ...(outcome.settle ? { settlement: settlementResponse(2, outcome.settle) } : {}),
          };
        }
        // Whether a retry may pass is the catalog's word for the code, as on HTTP.
        case 'unavailable':
        case 'conflict':
          return {
            kind: 'unavailable',
            code: outcome.reason,
            message: outcome.message,
            retryable: ERRORS[outcome.reason].retryable,
          };
        case 'refused':
          return { kind: 'failed', error: outcome.error ?? outcome.refusal };
      }
    },
  };
}
