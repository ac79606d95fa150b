import type { x402ResourceServer } from '@x402/core/server';
import {
  FacilitatorTimeoutError,
  type PaymentPayload,
  type PaymentRequirements,
  type ResourceInfo,
  SettleError,
  type SettleResponse,
  VerifyError,
} from '@x402/core/types';
import type { Logger } from 'pino';
import { WrongExpectedRevisionError } from '../../../adapters/event-store/port.ts';
import type { PaymentHandle, PaymentLedger } from '../../payments/ledger.ts';
import { decideReservation } from '../../payments/payment-state.ts';
import { v1NetworkName } from '../../payments/rails.ts';
import type { PaymentReceipt } from '../service-meta.ts';
import type { DecodedPayment } from './codecs.ts';
import { describeMismatch, describeReason } from './reasons.ts';

export interface Refusal {
  status: number;
  body: Record<string, unknown>;
}

export type PaidOutcome =
  /** Payment refused before anything was reserved: 402 with a fresh quote and the reason. */
  | { kind: 'payment_rejected'; reason: string; message: string }
  /** The facilitator could not be asked; nothing was reserved. */
  | { kind: 'unavailable'; reason: string; message: string }
  /** The request failed after the payment was reserved; the payment was released, nothing charged. */
  | { kind: 'refused'; refusal: Refusal }
  /** Settlement failed for certain: the result is discarded, nothing charged. */
  | { kind: 'settlement_failed'; reason: string; message: string; settle: SettleResponse | null }
  | { kind: 'served'; result: unknown; receipt: PaymentReceipt; settle: SettleResponse };

export interface PaidCall {
  payment: DecodedPayment;
  requirements: PaymentRequirements[];
  resource: ResourceInfo;
  requestId: string;
  tool: string;
  /** A problem with the request found only once paid for (e.g. its Content-Type). */
  precheck(): Refusal | null;
  handler(): Promise<unknown>;
  /** How a handler error leaves: its status and body. */
  describe(err: unknown): Refusal;
}

export interface PaymentFlowDeps {
  server: x402ResourceServer;
  ledger: PaymentLedger;
  logger: Logger;
  /**
   * Why no payment can be settled here (quotes are still served), or null when one can. Checked
   * first, so such a payment is neither verified nor reserved.
   */
  cannotSettle: string | null;
}

function matchRequirement(
  server: x402ResourceServer,
  payment: DecodedPayment,
  requirements: PaymentRequirements[],
): PaymentRequirements | undefined {
  if (payment.version === 2) return server.findMatchingRequirements(requirements, payment.payload);
  return requirements.find(
    (r) => r.scheme === payment.scheme && v1NetworkName(r.network) === payment.network,
  );
}

/**
 * One paid call, in the only safe order: verify the authorisation, reserve its nonce in the
 * event store, run the handler, and settle only when the handler succeeded. Each step is
 * recorded before the next begins, so a crash leaves a record that reconciliation can finish.
 * Transport-agnostic: the HTTP routes and the MCP tool channel both map its outcome.
 */
export async function runPaidCall(deps: PaymentFlowDeps, call: PaidCall): Promise<PaidOutcome> {
  const { payment } = call;
  if (deps.cannotSettle !== null) {
    return { kind: 'unavailable', reason: 'facilitator_not_configured', message: deps.cannotSettle };
  }
  const requirement = matchRequirement(deps.server, payment, call.requirements);
  if (!requirement) {
    return { kind: 'payment_rejected', ...describeMismatch(payment, call.requirements) };
  }
  // v1 carries no `accepted`; the matched quote stands in for it, so one verify path serves both.
  const payload: PaymentPayload =
    payment.version === 2
      ? payment.payload
      : { x402Version: 2, accepted: requirement, payload: payment.eip3009, resource: call.resource };
  const auth = payment.eip3009.authorization;

  // A replay is refused from the log at once, before the facilitator is asked; the reservation
  // below, appended at the revision read here, stays the guard that decides races.
  const known = decideReservation(await deps.ledger.state(auth.nonce));
  if (!known.ok) return { kind: 'payment_rejected', reason: known.reason, message: known.message };

  try {
    const verified = await deps.server.verifyPayment(payload, requirement);
    if (!verified.isValid) {
      const reason = verified.invalidReason ?? 'invalid_payment';
      return { kind: 'payment_rejected', reason, message: describeReason(reason, verified.invalidMessage) };
    }
  } catch (err) {
    if (err instanceof VerifyError && err.invalidReason) {
      return {
        kind: 'payment_rejected',
        reason: err.invalidReason,
        message: describeReason(err.invalidReason, err.invalidMessage),
      };
    }
    deps.logger.warn({ err, requestId: call.requestId }, 'payment verification could not run');
    return {
      kind: 'unavailable',
      reason: 'facilitator_unavailable',
      message: 'the payment could not be verified right now; nothing was charged, retry shortly',
    };
  }

  const reserved = await deps.ledger.reserve(
    {
      nonce: auth.nonce.toLowerCase(),
      network: requirement.network,
      asset: requirement.asset,
      payer: auth.from,
      payTo: requirement.payTo,
      amount: requirement.amount,
      resource: call.resource.url,
      x402Version: payment.version,
      validAfter: auth.validAfter,
      validBefore: auth.validBefore,
      requestId: call.requestId,
      tool: call.tool,
    },
    known.expectedRevision,
  );
  if (!reserved.ok) return { kind: 'payment_rejected', reason: reserved.reason, message: reserved.message };
  const handle = reserved.handle;

  const early = call.precheck();
  if (early) {
    await deps.ledger.record(handle, 'PaymentReleased', {
      reason: `request refused: ${String(early.body.code)}`,
    });
    return { kind: 'refused', refusal: early };
  }

  let result: unknown;
  try {
    result = await call.handler();
  } catch (err) {
    const refusal = call.describe(err);
    await deps.ledger.record(handle, 'PaymentReleased', {
      reason: `handler failed with ${refusal.status} ${String(refusal.body.code)}`,
    });
    return { kind: 'refused', refusal };
  }

  return settle(deps, call, handle, payload, requirement, result);
}

async function settle(
  deps: PaymentFlowDeps,
  call: PaidCall,
  handle: PaymentHandle,
  payload: PaymentPayload,
  requirement: PaymentRequirements,
  result: unknown,
): Promise<PaidOutcome> {
  const auth = call.payment.eip3009.authorization;
  try {
    // Recorded before the facilitator is asked: a crash mid-settlement leaves a pending record.
    await deps.ledger.record(handle, 'PaymentSettlementPending', { submittedAt: new Date().toISOString() });
  } catch (err) {
    if (!(err instanceof WrongExpectedRevisionError)) throw err;
    return {
      kind: 'unavailable',
      reason: 'payment_state_changed',
      message:
        'the payment was reconciled while the request ran; nothing was charged, retry with a new authorisation',
    };
  }

  const receipt = (status: PaymentReceipt['status'], transaction: string | null): PaymentReceipt => ({
    status,
    network: requirement.network,
    asset: requirement.asset,
    amount: requirement.amount,
    payer: auth.from,
    transaction,
  });

  let settled: SettleResponse;
  try {
    settled = await deps.server.settlePayment(payload, requirement);
  } catch (err) {
    if (err instanceof SettleError && !(err instanceof FacilitatorTimeoutError)) {
      const reason = err.errorReason ?? 'settlement_failed';
      await deps.ledger.record(handle, 'PaymentSettlementFailed', {
        reason,
        ...(err.transaction ? { txHash: err.transaction as `0x${string}` } : {}),
      });
      return {
        kind: 'settlement_failed',
        reason,
        message: describeReason(reason, err.errorMessage),
        settle: null,
      };
    }
    // Timed out or cut off mid-call: the facilitator may still settle. Serve the paid-for result
    // (never charged and unanswered) and leave the outcome to reconciliation.
    deps.logger.warn({ err, requestId: call.requestId }, 'settlement outcome unknown; recorded as pending');
    await deps.ledger.record(handle, 'PaymentSettlementPending', {
      submittedAt: new Date().toISOString(),
      reason: err instanceof Error ? err.message.slice(0, 200) : 'settlement outcome unknown',
    });
    const pending: SettleResponse = {
      success: false,
      errorReason: 'settlement_pending',
      transaction: '',
      network: requirement.network,
      payer: auth.from,
    };
    return { kind: 'served', result, receipt: receipt('pending', null), settle: pending };
  }

  if (settled.success) {
    await deps.ledger.record(handle, 'PaymentSettled', {
      payer: auth.from,
      amount: requirement.amount,
      txHash: settled.transaction as `0x${string}`,
    });
    return { kind: 'served', result, receipt: receipt('settled', settled.transaction), settle: settled };
  }
  if (settled.errorReason === 'settlement_pending' && settled.transaction) {
    await deps.ledger.record(handle, 'PaymentSettlementPending', {
      submittedAt: new Date().toISOString(),
      txHash: settled.transaction as `0x${string}`,
      reason: 'broadcast; receipt not confirmed in time',
    });
    return { kind: 'served', result, receipt: receipt('pending', settled.transaction), settle: settled };
  }
  const reason = settled.errorReason ?? 'settlement_failed';
  await deps.ledger.record(handle, 'PaymentSettlementFailed', {
    reason,
    ...(settled.transaction ? { txHash: settled.transaction as `0x${string}` } : {}),
  });
  return {
    kind: 'settlement_failed',
    reason,
    message: describeReason(reason, settled.errorMessage),
    settle: settled,
  };
}
