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
import { extractAndValidatePaymentIdentifier, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import type { Logger } from 'pino';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { KeyedLock } from '../../adapters/keyed-lock.ts';
import { ERRORS, type ErrorCode, type ErrorParams, errorMessage } from '../../contracts/errors.ts';
import type { EventData } from '../../contracts/events.ts';
import { describeFailure } from '../engine/operation-errors.ts';
import type { SignalOperations } from '../engine/operations.ts';
import type { PaymentReceipt } from '../metering/service-meta.ts';
import type { AuthorizationOutcome } from './chain-reader.ts';
import type { DecodedPayment } from './codecs.ts';
import type { PayerExposure } from './exposure.ts';
import type { PaymentHandle, PaymentIdClaim, PaymentLedger, PaymentStep, ReserveResult } from './ledger.ts';
import { withDeadline } from './local-facilitator.ts';
import { requestFingerprint } from './paid-responses.ts';
import {
  decideReservation,
  identityKey,
  PAYMENT_IN_USE_MESSAGE,
  type PaymentIdentity,
  PaymentRuleError,
  type PaymentState,
  paymentStream,
} from './payment-state.ts';
import { quotedResource } from './quote.ts';
import { v1NetworkName } from './rails.ts';
import {
  type ChainFacts,
  describeMismatch,
  describeReason,
  describeSignedAmount,
  describeUnsent,
  describeVerifyRefusal,
  factsReason,
  INSUFFICIENT_BALANCE,
  NONCE_ALREADY_USED,
  REFUSED_BEFORE_SENDING,
  revertReason,
  SIMULATION_FAILED,
  TRANSACTION_FAILED,
  type VerifyAnswer,
} from './reasons.ts';
import type { SubmissionWatch } from './submissions.ts';
import type { PaidTool } from './tools.ts';

export interface Refusal {
  status: number;
  body: Record<string, unknown>;
}

/**
 * A refusal of the catalog: `code` typed against it, its status and message (filled from `params`)
 * read from its entry, so a refusal cannot name a code or status the catalog does not have.
 */
export function catalogRefusal(code: ErrorCode, params: ErrorParams = {}): Refusal {
  return { status: ERRORS[code].status, body: { code, message: errorMessage(code, params) } };
}

/** What the flow logs through: the process's logger, or a request's (`request.log`). */
export type FlowLogger = Pick<Logger, 'info' | 'warn' | 'error'>;

/** How a tool error leaves a paid call: its status and body. */
export function describeError(logger: FlowLogger, err: unknown): Refusal {
  const failure = describeFailure(err);
  if (!failure) {
    logger.error({ err }, 'paid operation failed');
    return {
      status: ERRORS.INTERNAL_ERROR.status,
      body: { code: 'INTERNAL_ERROR' satisfies ErrorCode, message: errorMessage('INTERNAL_ERROR') },
    };
  }
  return {
    status: failure.status,
    body: {
      code: failure.code,
      message: failure.message,
      retryable: failure.retryable,
      ...(failure.issues ? { issues: failure.issues } : {}),
    },
  };
}

export type PaidOutcome =
  /** Payment refused before anything was reserved: 402 with a fresh quote and the reason. */
  | { kind: 'payment_rejected'; reason: string; message: string }
  /** The facilitator could not be asked; nothing was reserved. */
  | { kind: 'unavailable'; reason: ErrorCode; message: string }
  /**
   * The request failed after the payment was reserved; the payment was released, nothing charged.
   * `error` is what the tool threw, for a transport that answers with its own error mapping.
   */
  | { kind: 'refused'; refusal: Refusal; error?: unknown }
  /** Settlement failed for certain before the answer: the result is discarded, nothing charged. */
  | { kind: 'settlement_failed'; reason: string; message: string; settle: SettleResponse | null }
  /** This payment (or payment id) already paid for another request: 409, nothing charged again. */
  | { kind: 'conflict'; reason: ErrorCode; message: string }
  /**
   * Served: the result, its receipt and the settlement response. `replayed` when the result is the
   * one stored for this payment earlier (nothing new was charged).
   */
  | { kind: 'served'; result: unknown; receipt: PaymentReceipt; settle: SettleResponse; replayed: boolean };

export interface PaidCall {
  payment: DecodedPayment;
  requirements: PaymentRequirements[];
  /** Where the call was made (the route's URL, or mcp://tool/<name>): the payment's resource. */
  url: string;
  requestId: string;
  /** The sold tool, as the tool table has it: its description, price and run. */
  tool: PaidTool;
  /** The call's parsed input; null when the body is not trusted (see `refusal`). */
  input: unknown;
  /**
   * A problem with the request that is answered only once the payment is reserved (e.g. its
   * Content-Type), so that the payment is released on the record rather than left unread.
   */
  refusal: Refusal | null;
}

export interface PaymentFlowDeps {
  server: x402ResourceServer;
  /** What the sold tools run on. */
  ops: SignalOperations;
  ledger: PaymentLedger;
  logger: FlowLogger;
  /**
   * Why no payment can be settled here (quotes are still served), or null when one can. Checked
   * once the payment's terms match the quote, before anything is verified or reserved.
   */
  cannotSettle: string | null;
  /** Each payer's balance minus what is in flight must cover a call before it is served. */
  exposure: PayerExposure;
  /**
   * How to read the payer's on-chain balance of the asset (run under the per-payer lock, so a
   * read never starts before a settlement's release it should see), or null when no chain
   * reader covers the network.
   */
  balanceOf(id: PaymentIdentity): (() => Promise<bigint>) | null;
  /**
   * How to read what the chain says of the payment's authorisation (the payer's balance, whether
   * its nonce is used, the chain's time), each null when unread, or null when no chain reader
   * covers the network: a simulated transfer refused for a reason the facilitator did not name
   * is named from them.
   */
  chainFacts(id: PaymentIdentity): (() => Promise<ChainFacts>) | null;
  /**
   * How to read whether an authorisation already used on chain paid the agreed transfer (see
   * chain-reader.ts), or null when no chain reader covers the network.
   */
  authorizationOutcome(
    id: PaymentIdentity,
  ): ((agreed: { payTo: `0x${string}`; amount: bigint }) => Promise<AuthorizationOutcome>) | null;
  /** Settlements of one payer are broadcast one at a time. */
  settlements: KeyedLock;
  /** Settlement hashes as they are broadcast (in-process facilitator only). */
  submissions: SubmissionWatch | null;
  /**
   * Longest wait for the broadcast (with a remote facilitator, for its settle to end) before
   * answering without a transaction hash.
   */
  submitWaitMs: number;
  /** How long an unconfirmed settlement keeps counting against its payer (until reconciliation looks). */
  holdPendingMs: number;
  /** How long past its authorisation's validity a paid answer is given again (X402_PAID_RESPONSE_TTL_MS). */
  paidResponseTtlMs: number;
  /** Background settlements still running; `drain` waits for them (shutdown, tests). */
  background: Set<Promise<void>>;
}

/** The background settlements of a flow, awaited: nothing left half-recorded at shutdown. */
export async function drainSettlements(deps: Pick<PaymentFlowDeps, 'background'>): Promise<void> {
  while (deps.background.size > 0) await Promise.allSettled([...deps.background]);
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

function receiptOf(
  requirement: { network: string; asset: string; amount: string },
  payer: string,
  status: PaymentReceipt['status'],
  transaction: string | null,
): PaymentReceipt {
  return {
    status,
    network: requirement.network,
    asset: requirement.asset,
    amount: requirement.amount,
    payer,
    transaction,
  };
}

/**
 * The receipt of a settlement not yet confirmed. Once its transaction is broadcast the payer is
 * told `success` with that transaction, as the x402 clients read a receipt (`settlement_pending`
 * reads as a failed payment to them); whether it is confirmed yet is `_service.payment.status`.
 * Before a broadcast is known there is no transaction to name, and the receipt says pending.
 */
function unconfirmedResponse(network: string, payer: string, transaction: string | null): SettleResponse {
  if (transaction) {
    return { success: true, transaction, network: network as SettleResponse['network'], payer };
  }
  return {
    success: false,
    errorReason: 'settlement_pending',
    transaction: '',
    network: network as SettleResponse['network'],
    payer,
  };
}

/**
 * How long a settlement refused for a nonce already used waits for the transaction that used it
 * to show in the logs (the state read and the log lookup can answer from different blocks).
 */
const USED_ELSEWHERE_WAIT_MS = 3_000;
const USED_ELSEWHERE_POLL_MS = 250;

/** How often a replay re-reads a settlement whose transaction the log does not name yet. */
const REPLAY_POLL_MS = 200;

/**
 * The payment's state for a replay. A settlement is recorded pending before the facilitator is
 * asked, and its transaction only once the settle call ends (a block later, or the whole receipt
 * wait when the chain is slow), while the first answer already named the broadcast transaction:
 * a replay in between (a client retrying at once after a dropped connection) would read no
 * transaction, and its receipt would say the payment failed. A settlement this process sent is
 * named at once from its broadcast (`submissions`); one sent by another replica (or a remote
 * facilitator, which names nothing before its settle ends) is waited for, within the first
 * answer's own budget (`submitWaitMs`), until the log names the transaction or ends the
 * settlement; past that it answers as the log stands.
 */
async function settledEnough(deps: PaymentFlowDeps, identity: PaymentIdentity): Promise<PaymentState | null> {
  const until = Date.now() + deps.submitWaitMs;
  let state = await deps.ledger.state(identity);
  while (state?.status === 'pending' && !state.txHash) {
    const sent = deps.submissions?.sent(identity) ?? null;
    if (sent) return { ...state, txHash: sent };
    if (Date.now() >= until) break;
    await new Promise((resolve) => setTimeout(resolve, REPLAY_POLL_MS));
    state = await deps.ledger.state(identity);
  }
  return state;
}

/** The answer stored for a payment, with its receipt as the log knows it now. */
function replay(stored: { response: Record<string, unknown> }, state: PaymentState): PaidOutcome | null {
  const auth = state.authorized;
  if (!auth) return null;
  if (state.status === 'settled') {
    return {
      kind: 'served',
      result: stored.response,
      receipt: receiptOf(auth, auth.payer, 'settled', state.txHash),
      settle: {
        success: true,
        transaction: state.txHash ?? '',
        network: auth.network as SettleResponse['network'],
        payer: auth.payer,
      },
      replayed: true,
    };
  }
  if (state.status === 'pending') {
    return {
      kind: 'served',
      result: stored.response,
      receipt: receiptOf(auth, auth.payer, 'pending', state.txHash),
      settle: unconfirmedResponse(auth.network, auth.payer, state.txHash),
      replayed: true,
    };
  }
  // failed or released: the payment paid for nothing, so there is nothing to give back.
  return null;
}

/**
 * The tool a payment's resource URL pays for: <base>/x402/<tool> under any origin and base path
 * (PUBLIC_BASE_URL may carry one, or the Host the client used) or mcp://tool/<tool>, the quote of
 * either channel; null for anything else.
 */
function toolPaidFor(url: string): string | null {
  return /^(?:https?:\/\/[^?#]*\/x402\/|mcp:\/\/tool\/)([a-z_]+)\/?(?:[?#]|$)/i.exec(url)?.[1] ?? null;
}

/** Seconds past the quote's maxTimeoutSeconds that an authorisation's validBefore may reach. */
export const VALID_BEFORE_SKEW_S = 60;
/** The exact scheme's reason for a validBefore it refuses (there: one past or too close). */
const FAR_VALID_BEFORE: ErrorCode = 'invalid_exact_evm_payload_authorization_valid_before';

/** The PaymentAuthorized event that reserves a verified payment's nonce for one request. */
export function reservationOf(
  payment: DecodedPayment,
  requirement: PaymentRequirements,
  request: { url: string; requestId: string; tool: string; paymentId?: string | null; fingerprint?: string },
): EventData<'PaymentAuthorized'> {
  const auth = payment.eip3009.authorization;
  return {
    nonce: auth.nonce.toLowerCase(),
    network: requirement.network,
    asset: requirement.asset,
    payer: auth.from,
    payTo: requirement.payTo,
    amount: requirement.amount,
    resource: request.url,
    x402Version: payment.version,
    validAfter: auth.validAfter,
    validBefore: auth.validBefore,
    requestId: request.requestId,
    tool: request.tool,
    signature: payment.eip3009.signature,
    ...(request.paymentId ? { paymentId: request.paymentId } : {}),
    ...(request.fingerprint ? { fingerprint: request.fingerprint } : {}),
  };
}

/** How often a payment in flight elsewhere (another request, another replica) is read again. */
const IN_FLIGHT_POLL_MS = 200;

/** One payment's request running in this process: a duplicate waits for its outcome. */
interface Running {
  signature: string;
  /** What it asks for (requestFingerprint): only the same request may take its outcome. */
  fingerprint: string;
  outcome: Promise<PaidOutcome>;
}
/** By flow (its ledger: a request's copy of the deps shares it) and payment stream. */
const runningByFlow = new WeakMap<PaymentLedger, Map<string, Running>>();
function runningOf(deps: PaymentFlowDeps): Map<string, Running> {
  let running = runningByFlow.get(deps.ledger);
  if (!running) {
    running = new Map();
    runningByFlow.set(deps.ledger, running);
  }
  return running;
}

/** A duplicate's copy of the first request's outcome: the same answer, marked as given before. */
function asDuplicate(outcome: PaidOutcome): PaidOutcome {
  return outcome.kind === 'served' ? { ...outcome, replayed: true } : outcome;
}

const IN_FLIGHT: PaidOutcome = {
  kind: 'unavailable',
  reason: 'payment_in_use',
  message: PAYMENT_IN_USE_MESSAGE,
};

/** What a request presents beside its payment: what it asks for. */
interface Presented {
  /** This request's own entry among the running ones: never waited for by itself. */
  own: Running;
  call: PaidCall;
  fingerprint: string;
  amount: string;
}

/**
 * A payment already recorded, presented again (the same authorisation, or a new one under its
 * payment id): answered with the answer it paid for, never charged again. A request that asks
 * for something else than the payment's (its fingerprint) is a conflict, in flight or not. In
 * flight (reserved, not yet handed off) the same request waits for it, in this process by its
 * outcome, elsewhere by its record, for the answer's own budget, then is refused as retryable
 * (409 payment_in_use, no quote). Handed off or settled, the answer is the one the log keeps, for
 * X402_PAID_RESPONSE_TTL_MS past the authorisation's validity; a payment handed off before answers
 * were kept, or one past that time, is a conflict. Null when the payment charged nothing
 * (released, failed): the caller goes on as for a new payment.
 */
async function answerAgain(
  deps: PaymentFlowDeps,
  presented: Presented,
  identity: PaymentIdentity,
  by: { kind: 'signature' } | { kind: 'payment_id'; id: string },
): Promise<PaidOutcome | null> {
  const { call } = presented;
  const stream = paymentStream(identity);
  const used = conflictOf(by);
  // The answer comes back only for the request it paid for (its fingerprint: records without one,
  // made before answers were kept, hold no answer to give). A request that asks for something
  // else is a conflict at once, also while the first is in flight: it neither waits for that
  // request nor takes its answer.
  const sameRequest = (state: PaymentState | null) =>
    state?.authorized?.fingerprint !== undefined && state.authorized.fingerprint === presented.fingerprint;
  let current = await deps.ledger.read(identity);
  const until = Date.now() + deps.submitWaitMs;
  while (current.state?.status === 'authorized') {
    // A reservation without a fingerprint (another version's) tells nothing yet: waited for.
    const asked = current.state.authorized?.fingerprint;
    if (asked !== undefined && asked !== presented.fingerprint) return used;
    const running = runningOf(deps).get(stream);
    if (running && running !== presented.own) {
      if (running.fingerprint !== presented.fingerprint) return used;
      return asDuplicate(await running.outcome);
    }
    if (Date.now() >= until) return IN_FLIGHT;
    await new Promise((resolve) => setTimeout(resolve, IN_FLIGHT_POLL_MS));
    current = await deps.ledger.read(identity);
  }
  const state = current.state;
  if (!state?.authorized || (state.status !== 'pending' && state.status !== 'settled')) return null;
  const auth = state.authorized;
  if (!sameRequest(state)) return used;
  // And only for X402_PAID_RESPONSE_TTL_MS past the authorisation's validity: once settled the
  // signature is public on chain, so an answer given for it forever would be given to anyone.
  if (Date.now() > Number(auth.validBefore) * 1000 + deps.paidResponseTtlMs) return used;
  const handle: PaymentHandle = {
    ref: { nonce: auth.nonce as `0x${string}`, network: auth.network, asset: auth.asset as `0x${string}` },
    payer: auth.payer,
    stream,
    known: current,
  };
  const answer = state.answer;
  if (answer === null) return used;
  const sent = (await settledEnough(deps, identity)) ?? state;
  const served = await recordServed(deps, handle, call.requestId, sent.txHash);
  // Released or failed since it was read (the reconciler): it charged nothing, so its answer does
  // not go out; the caller goes on as for a new payment.
  if (served === 'refused') return null;
  if (served === 'unrecorded') return SERVED_UNRECORDED;
  // As the log stood when the hand-over was recorded (settled meanwhile, say), naming the
  // transaction this process saw broadcast when the log does not name one yet.
  const recorded = handle.known.state ?? sent;
  return replay({ response: answer }, { ...recorded, txHash: recorded.txHash ?? sent.txHash });
}

/**
 * A payment (or payment id) presented with another request than the one it paid for: 409, naming
 * nothing of what was bought (a settled signature is public on chain).
 */
function conflictOf(by: { kind: 'signature' } | { kind: 'payment_id'; id: string }): PaidOutcome {
  return {
    kind: 'conflict',
    reason: by.kind === 'payment_id' ? 'payment_identifier_conflict' : 'payment_already_used',
    message:
      by.kind === 'payment_id'
        ? `payment id ${by.id} already paid for another request, or its answer is no longer kept; use a new id`
        : 'this payment already paid for another request, or its answer is no longer kept: sent again it is refused again; sign a new authorisation (a new nonce) for this request',
  };
}

/**
 * Records that a caller has the paid answer (and the transaction it was told), before it is
 * answered: a payment whose authorisation then expires unsettled cost the seller the answer. Not
 * recorded, the reconciler would read the answer as never served, so the answer is not sent.
 *
 * What the decider may answer a `serve`, and what becomes of the answer:
 * - an event, or none (served already: this request's own duplicate or a replay recorded it
 *   first; settled meanwhile, nothing at stake): `recorded`, the answer is given.
 * - `payment_transition_refused`, the one refusal of `serve`: the payment no longer charges (the
 *   reconciler released it or recorded it failed while the request ran, or it was released and
 *   reserved again by another request): `refused`. Its answer must not be given; the caller
 *   refuses (402 payment_state_changed, nothing charged) or, a replay, goes on as for a new payment.
 * - any other rule error (none is a rule of `serve` today) or a write that failed: `unrecorded`,
 *   logged as an error; the answer is kept and not given (409 payment_in_use, retryable).
 */
async function recordServed(
  deps: PaymentFlowDeps,
  handle: PaymentHandle,
  requestId: string,
  txHash: `0x${string}` | null,
  answer?: Record<string, unknown>,
): Promise<'recorded' | 'refused' | 'unrecorded'> {
  try {
    await deps.ledger.transition(
      handle,
      { kind: 'serve', requestId, ...(txHash ? { txHash } : {}), ...(answer ? { answer } : {}) },
      { converge: true },
    );
    return 'recorded';
  } catch (err) {
    if (err instanceof PaymentRuleError && err.reason === 'payment_transition_refused') {
      // The decider's message names the state the payment was found in (released, failed, authorized).
      deps.logger.warn(
        { requestId, reason: err.message },
        'the payment stopped charging before its answer was handed over; not served',
      );
      return 'refused';
    }
    deps.logger.error({ err, requestId }, 'that the paid answer was served could not be recorded');
    return 'unrecorded';
  }
}

/**
 * The answer is kept but could not be recorded as served: it is not sent, since the reconciler
 * would then release an answered payment at its expiry. The same payment presented again gets it.
 */
const SERVED_UNRECORDED: PaidOutcome = {
  kind: 'unavailable',
  reason: 'payment_in_use',
  message:
    'the answer is kept but its hand-over could not be recorded; retry with the same payment and it comes back (nothing is charged twice)',
};

/**
 * A payment reconciled while its request ran (released, or recorded failed, before the answer's
 * hand-over was recorded): it charges nothing, so its answer is not given, and presented again it
 * is refused too; a new authorisation pays for the call.
 */
const STOPPED_CHARGING: PaidOutcome = {
  kind: 'unavailable',
  reason: 'payment_state_changed',
  message:
    'the payment was reconciled (released or failed) while the request ran; nothing was charged and no answer is given: retry with a new authorisation',
};

/** The outcome of a served record that did not record: a refusal, or the answer kept for a retry. */
function notServed(recorded: 'refused' | 'unrecorded'): PaidOutcome {
  return recorded === 'refused' ? STOPPED_CHARGING : SERVED_UNRECORDED;
}

/**
 * The payer's balance of the asset, read for a refusal's words: null when no chain reader covers
 * the network or the read failed (the words then leave it out).
 */
async function heldFor(
  deps: PaymentFlowDeps,
  identity: PaymentIdentity,
  requestId: string,
): Promise<bigint | null> {
  const read = deps.balanceOf(identity);
  if (!read) return null;
  try {
    return await read();
  } catch (err) {
    deps.logger.warn({ err, requestId }, 'payer balance could not be read for the refusal');
    return null;
  }
}

/**
 * One paid call, in the only safe order: look for an answer this payment already paid for,
 * verify the authorisation, check the payer's exposure, reserve the payment in the event store,
 * run the handler, keep the answer, and hand the settlement to the background: the caller is
 * answered once it is broadcast (the answer carries its transaction), the receipt is waited
 * for and recorded afterwards. Each step is recorded before the next begins, so a crash leaves
 * a record that reconciliation can finish. Transport-agnostic: the HTTP routes and the MCP tool
 * channel both map its outcome.
 */
export async function runPaidCall(deps: PaymentFlowDeps, call: PaidCall): Promise<PaidOutcome> {
  const { payment } = call;
  // As the quote named it (a v1 payment's resource, for the facilitator).
  const resource: ResourceInfo = quotedResource({
    url: call.url,
    description: call.tool.description,
    mimeType: 'application/json',
  });
  const fingerprint = requestFingerprint(call.tool.name, call.input);
  const requirement = matchRequirement(deps.server, payment, call.requirements);
  if (!requirement) {
    return { kind: 'payment_rejected', ...describeMismatch(payment, call.requirements) };
  }
  const otherAmount = describeSignedAmount(payment, requirement);
  if (otherAmount) return { kind: 'payment_rejected', ...otherAmount };
  // A v2 payment names what it pays for; the terms alone do not tell two routes of one price apart.
  const paidFor = payment.version === 2 ? payment.payload.resource?.url : undefined;
  if (paidFor !== undefined && toolPaidFor(paidFor) !== call.tool.name) {
    return {
      kind: 'payment_rejected',
      reason: 'terms_mismatch',
      message: `${errorMessage('terms_mismatch')}: it pays for ${paidFor.slice(0, 200)}, not ${call.tool.name}; pay with this request's quote`,
    };
  }
  // v1 carries no `accepted`; the matched quote stands in for it, so one verify path serves both.
  const payload: PaymentPayload =
    payment.version === 2
      ? payment.payload
      : { x402Version: 2, accepted: requirement, payload: payment.eip3009, resource };
  const auth = payment.eip3009.authorization;
  // An authorisation lapses within the quote's maxTimeoutSeconds (a minute more for clocks that
  // differ): one valid for years would keep its nonce reserved, and a settlement that failed
  // retryable, for as long. The exact scheme's clients sign now + maxTimeoutSeconds.
  const latest = Math.floor(Date.now() / 1000) + requirement.maxTimeoutSeconds + VALID_BEFORE_SKEW_S;
  if (BigInt(auth.validBefore) > BigInt(latest)) {
    return {
      kind: 'payment_rejected',
      reason: FAR_VALID_BEFORE,
      message: `validBefore is more than ${requirement.maxTimeoutSeconds + VALID_BEFORE_SKEW_S} s ahead (the quote's maxTimeoutSeconds, ${requirement.maxTimeoutSeconds} s, and a minute for clock skew); sign an authorisation that lapses sooner`,
    };
  }
  // The checks above compare the payment with the quote and need no facilitator, so a payment
  // that is wrong is told how on every rail; only one whose terms hold learns none can settle it.
  if (deps.cannotSettle !== null) {
    return { kind: 'unavailable', reason: 'facilitator_not_configured', message: deps.cannotSettle };
  }
  const identity: PaymentIdentity = {
    network: requirement.network,
    asset: requirement.asset,
    payer: auth.from,
    nonce: auth.nonce,
  };

  // The x402 payment-identifier extension: the client's idempotency key for this purchase.
  let paymentId: string | null = null;
  if (payment.version === 2 && payment.payload.extensions?.[PAYMENT_IDENTIFIER] !== undefined) {
    const extracted = extractAndValidatePaymentIdentifier(payment.payload);
    if (!extracted.validation.valid) {
      return {
        kind: 'payment_rejected',
        reason: 'invalid_payment_identifier',
        message: `payment-identifier: ${(extracted.validation.errors ?? []).join('; ')}`,
      };
    }
    paymentId = extracted.id;
  }
  const stream = paymentStream(identity);
  const signature = payment.eip3009.signature.toLowerCase();
  // The same payment sent again while its first request runs here: that request's outcome.
  const running = runningOf(deps);
  const first = running.get(stream);
  if (first?.signature === signature) {
    // Its outcome is the answer to what it asked: another request under the same payment is not.
    if (first.fingerprint !== fingerprint) return conflictOf({ kind: 'signature' });
    return asDuplicate(await first.outcome);
  }

  const proceed = async (): Promise<PaidOutcome> => {
    const presented: Presented = { own: mine, call, fingerprint, amount: requirement.amount };
    const signedBy = (state: PaymentState | null) =>
      state?.authorized?.signature?.toLowerCase() === signature;

    // The same payment presented again is answered from its record, before verification: its
    // nonce is used, so verification would refuse it. Only the authorisation's own signature
    // opens it (the record keeps it); a payment id is looked up only once a fresh authorisation
    // from the payer has verified, so knowing someone's address and payment id is not enough.
    let current = await deps.ledger.read(identity);
    if (signedBy(current.state)) {
      const again = await answerAgain(deps, presented, identity, { kind: 'signature' });
      if (again) return again;
      current = await deps.ledger.read(identity);
    }

    // A replay is refused from the log at once, before the facilitator is asked; the reservation
    // below, appended at the revision read here, stays the guard that decides races.
    const known = decideReservation(current.state);
    if (!known.ok) return { kind: 'payment_rejected', reason: known.reason, message: known.message };

    /**
     * A verification refused because the authorisation's nonce is used, by a transaction that paid
     * the agreed transfer (the quoted amount from the payer to payTo): the payer's wallet, say,
     * submitted it before presenting it. The seller is paid, so the payment is recorded settled in
     * that transaction, never served: its calldata is public once mined, so whoever presents it
     * may not be the payer (anyone could take the answer). The operator's ledger shows it paid and
     * not served, a refund due; the caller is refused, told so. Used any other way, or unreadable:
     * null, the plain refusal stands and nothing is recorded.
     */
    const paidUnserved = async (reason: string): Promise<PaidOutcome | null> => {
      if (reason !== NONCE_ALREADY_USED) return null;
      const read = deps.authorizationOutcome(identity);
      if (!read) return null;
      let txHash: `0x${string}`;
      try {
        const outcome = await read({
          payTo: requirement.payTo as `0x${string}`,
          amount: BigInt(requirement.amount),
        });
        if (outcome.kind !== 'paid') return null;
        txHash = outcome.txHash;
      } catch (err) {
        deps.logger.warn({ err, requestId: call.requestId }, 'the use of an authorisation could not be read');
        return null;
      }
      const refused: PaidOutcome = {
        kind: 'payment_rejected',
        reason: NONCE_ALREADY_USED,
        message:
          `this authorisation was already used on chain (transaction ${txHash}), paying the seller before this request: ` +
          'nothing was served for it, and it is recorded for the seller to refund; sign a new one',
      };
      const reserved = await deps.ledger.reserve(
        reservationOf(payment, requirement, {
          url: call.url,
          requestId: call.requestId,
          tool: call.tool.name,
        }),
        current,
      );
      // Another request recorded it first (a copy presented at once): its record stands.
      if (!reserved.ok) return refused;
      await deps.ledger.transition(
        reserved.handle,
        { kind: 'settle', payer: auth.from, amount: requirement.amount, txHash, reconciled: true },
        { converge: true },
      );
      deps.logger.warn(
        { requestId: call.requestId, payer: auth.from, amount: requirement.amount, transaction: txHash },
        "an authorisation the payer's own transaction used to pay us before verification: recorded settled, not served (refund due)",
      );
      return refused;
    };

    /**
     * A refused verification, the same reason and words whichever facilitator refused it. A
     * simulated transfer that reverted for a reason the facilitator did not name (a remote one
     * may name none; none compares validAfter with the chain's time) is named from the revert it
     * quoted, else from the chain's facts where a reader covers the network. Its amounts
     * (describeVerifyRefusal): a balance too low names what the payer holds, as the facilitator
     * read it (handed over with its answer, `reads`), else read here.
     */
    const refused = async (answer: VerifyAnswer): Promise<PaidOutcome> => {
      const meanwhile = await recordedMeanwhile();
      if (meanwhile) return meanwhile;
      let reason = answer.invalidReason ?? 'invalid_payment';
      let facts: ChainFacts | null = null;
      if (reason === SIMULATION_FAILED) {
        const named = revertReason(answer.invalidMessage);
        const read = named === null ? deps.chainFacts(identity) : null;
        facts = read ? await read() : null;
        reason = named ?? (facts && factsReason(auth, requirement.amount, facts)) ?? reason;
      }
      const unserved = await paidUnserved(reason);
      if (unserved) return unserved;
      let held = answer.reads?.payerBalance ?? facts?.balance ?? null;
      if (reason === INSUFFICIENT_BALANCE && held === null)
        held = await heldFor(deps, identity, call.requestId);
      return {
        kind: 'payment_rejected',
        reason,
        message: describeVerifyRefusal(reason, answer.invalidMessage, {
          signed: auth.value,
          asked: requirement.amount,
          held,
        }),
      };
    };

    try {
      const verified = await deps.server.verifyPayment(payload, requirement);
      if (!verified.isValid) return await refused(verified);
    } catch (err) {
      if (err instanceof VerifyError && err.invalidReason) {
        return await refused({
          isValid: false,
          invalidReason: err.invalidReason,
          ...(err.invalidMessage === undefined ? {} : { invalidMessage: err.invalidMessage }),
        });
      }
      deps.logger.warn({ err, requestId: call.requestId }, 'payment verification could not run');
      return {
        kind: 'unavailable',
        reason: 'facilitator_unavailable',
        message: 'the payment could not be verified right now; nothing was charged, retry shortly',
      };
    }
    /**
     * A refused verification of a payment another request (on another replica) reserved and
     * settled meanwhile: its nonce is used because it paid, so its answer is this request's too.
     */
    async function recordedMeanwhile(): Promise<PaidOutcome | null> {
      const now = await deps.ledger.read(identity).catch(() => null);
      if (!now || !signedBy(now.state)) return null;
      return answerAgain(deps, presented, identity, { kind: 'signature' });
    }

    // The payment id already bound to a payment that charged (or may charge): that one's answer.
    let claimed: PaymentIdClaim | null = null;
    if (paymentId !== null) {
      claimed = await deps.ledger.readClaim(auth.from, paymentId);
      const again = await answerClaimed(claimed, paymentId);
      if (again) return again;
    }
    async function answerClaimed(read: PaymentIdClaim, id: string): Promise<PaidOutcome | null> {
      const claim = read.claim;
      if (claim === null) return null;
      const named: PaymentIdentity = {
        network: claim.network,
        asset: claim.asset,
        payer: claim.payer,
        nonce: claim.nonce,
      };
      if (identityKey(named) === identityKey(identity)) return null;
      return answerAgain(deps, presented, named, { kind: 'payment_id', id });
    }

    const account = identityKey({ ...identity, nonce: '' });
    let release: () => void = () => undefined;
    const readBalance = deps.balanceOf(identity);
    if (readBalance !== null) {
      let decision: Awaited<ReturnType<PayerExposure['admit']>>;
      try {
        decision = await deps.exposure.admit(account, BigInt(requirement.amount), readBalance);
      } catch (err) {
        deps.logger.warn({ err, requestId: call.requestId }, 'payer balance could not be read');
        return {
          kind: 'unavailable',
          reason: 'facilitator_unavailable',
          message: "the payer's balance could not be read right now; nothing was charged, retry shortly",
        };
      }
      if (!decision.ok) {
        return {
          kind: 'payment_rejected',
          reason: 'insufficient_funds',
          message:
            `the payer's balance (${decision.balance}) minus payments still settling (${decision.inFlight}) ` +
            `does not cover ${requirement.amount}; their settlement takes the same from the balance, so ` +
            'this payment is refused again until the payer holds more: fund it, or pay from another account',
        };
      }
      release = decision.release;
    }

    let reserved: ReserveResult;
    try {
      reserved = await deps.ledger.reserve(
        reservationOf(payment, requirement, {
          url: call.url,
          requestId: call.requestId,
          tool: call.tool.name,
          paymentId,
          fingerprint,
        }),
        current,
      );
    } catch (err) {
      // The store refused the write (full, unavailable): nothing is reserved, so nothing is in flight.
      release();
      throw err;
    }
    if (!reserved.ok) {
      release();
      // Reserved by a request that came first (the same payment sent twice at once): its answer.
      if (reserved.reason === 'payment_in_use') return (await recordedMeanwhile()) ?? IN_FLIGHT;
      return { kind: 'payment_rejected', reason: reserved.reason, message: reserved.message };
    }
    const handle = reserved.handle;

    // The payment id is bound to this payment; one that another took meanwhile (a retry under the
    // same id on another request or replica) releases this reservation and answers with that one.
    if (paymentId !== null && claimed !== null) {
      let bound: boolean;
      try {
        bound = await deps.ledger.claim(claimed, {
          ...handle.ref,
          payer: auth.from,
          paymentId,
          fingerprint,
          tool: call.tool.name,
        });
      } catch (err) {
        release();
        await deps.ledger
          .transition(handle, { kind: 'release', reason: 'the payment id could not be recorded' })
          .catch(() => undefined);
        throw err;
      }
      if (!bound) {
        release();
        await deps.ledger.transition(handle, {
          kind: 'release',
          reason: 'another payment took the same payment id first; nothing was charged',
        });
        const again = await answerClaimed(await deps.ledger.readClaim(auth.from, paymentId), paymentId);
        return again ?? IN_FLIGHT;
      }
    }

    if (call.refusal) {
      release();
      await deps.ledger.transition(handle, {
        kind: 'release',
        reason: `request refused: ${String(call.refusal.body.code)}`,
      });
      return { kind: 'refused', refusal: call.refusal };
    }

    let result: unknown;
    try {
      result = await call.tool.run(deps.ops, call.input, call.requestId);
    } catch (err) {
      release();
      const refusal = describeError(deps.logger, err);
      await deps.ledger.transition(handle, {
        kind: 'release',
        reason: `handler failed with ${refusal.status} ${String(refusal.body.code)}`,
      });
      return { kind: 'refused', refusal, error: err };
    }

    return settle(deps, call, {
      handle,
      payload,
      requirement,
      identity,
      account,
      result,
      release,
      fingerprint,
    });
  };
  let outcomeOfMine: (outcome: Promise<PaidOutcome>) => void = () => undefined;
  const mine: Running = {
    signature,
    fingerprint,
    outcome: new Promise<Promise<PaidOutcome>>((resolve) => {
      outcomeOfMine = resolve;
    }).then((outcome) => outcome),
  };
  // Failing, it fails its duplicates too; this request throws it on.
  mine.outcome.catch(() => undefined);
  if (!first) running.set(stream, mine);
  const outcome = proceed();
  outcomeOfMine(outcome);
  try {
    return await outcome;
  } finally {
    if (running.get(stream) === mine) running.delete(stream);
  }
}

interface Served {
  handle: PaymentHandle;
  payload: PaymentPayload;
  requirement: PaymentRequirements;
  identity: PaymentIdentity;
  account: string;
  result: unknown;
  release(): void;
  /** sha256 of the tool and its parsed input (requestFingerprint): what the payment paid for. */
  fingerprint: string;
}

/**
 * Who answers the caller of a settlement, decided once: the paid result (served, pending, by the
 * broadcast or the answer's budget running out) or a refusal. A branch that refuses claims the
 * refusal before it awaits its record, so an answer due meanwhile is not served on a payment the
 * log then records failed, and the payer's hold freed; once served, nothing can be refused.
 */
interface AnswerClaim {
  /** The caller has the paid result (pending); a failure is left to the chain (servedThenFailed). */
  readonly served: boolean;
  /**
   * Takes the refusal for this settlement: true, and no paid answer is served from then on (the
   * caller waits for the settlement's end); false when the paid answer was served already.
   */
  claimRefusal(): boolean;
  /**
   * Resolves once the record that the caller was served is written, when it was served: the
   * settlement's own record comes after it, so the log tells served before settled.
   */
  servedRecorded(): Promise<void>;
}

/** How a settlement ended, as recorded. */
type Settled =
  | { kind: 'settled'; settle: SettleResponse }
  | { kind: 'failed'; reason: string; message: string; settle: SettleResponse | null }
  | { kind: 'pending'; settle: SettleResponse };

async function settle(deps: PaymentFlowDeps, call: PaidCall, paid: Served): Promise<PaidOutcome> {
  const { handle, requirement, identity } = paid;
  const payer = identity.payer;
  // The answer is kept in the hand-off's record, before settlement is sent: a payer charged by a
  // settlement we sent (or the reconciler sent again) gets it back by presenting the payment again,
  // whatever becomes of this process.
  const answer =
    typeof paid.result === 'object' && paid.result !== null && !Array.isArray(paid.result)
      ? (paid.result as Record<string, unknown>)
      : undefined;
  try {
    // Recorded before the facilitator is asked: a crash mid-settlement leaves a pending record.
    await deps.ledger.transition(handle, {
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      ...(answer ? { answer } : {}),
    });
  } catch (err) {
    // Nothing was sent to the facilitator: the payer's hold is freed whatever stopped the write.
    paid.release();
    if (!(err instanceof WrongExpectedRevisionError)) throw err;
    return {
      kind: 'unavailable',
      reason: 'payment_state_changed',
      message:
        'the payment was reconciled while the request ran; nothing was charged, retry with a new authorisation',
    };
  }

  const answerBy = Date.now() + deps.submitWaitMs;
  const watch = deps.submissions?.expect(identity, deps.submitWaitMs) ?? null;
  // Answer at the first of: the settlement's transaction is broadcast, the settlement ended, or
  // the wait for either ran out. A remote facilitator tells nothing before its settle ends, so
  // the answer waits for that (within the same budget): answered earlier, its receipt could name
  // no transaction and the payer's client would read the payment as failed.
  type First = { kind: 'broadcast'; hash: `0x${string}` | null } | { kind: 'ended'; settled: Settled };
  // Who answers, one state: `undecided` until one of these. `served` once the caller is answered
  // with the paid result before the settlement ended: a failure after that is no refusal; it is
  // left to the chain, or the seller's loss (see settleAndRecord). `refusing` once a refusal is
  // claimed first: it holds the answer back until the settlement ends (its record written),
  // whatever broadcast or budget comes meanwhile: served or refusing, never both. `ended` once the
  // caller is answered with how the settlement ended.
  let state: 'undecided' | 'refusing' | 'served' | 'ended' = 'undecided';
  let markServedRecorded: () => void = () => undefined;
  const servedRecord = new Promise<void>((resolve) => {
    markServedRecorded = resolve;
  });
  const answered: AnswerClaim = {
    get served() {
      return state === 'served';
    },
    claimRefusal() {
      if (state === 'served') return false;
      if (state === 'undecided') state = 'refusing';
      return true;
    },
    servedRecorded: () => (state === 'served' ? servedRecord : Promise.resolve()),
  };
  let signal: (first: First) => void = () => undefined;
  const first = new Promise<First>((resolve) => {
    signal = (first) => {
      if (state === 'served' || state === 'ended') return;
      if (state === 'refusing' && first.kind === 'broadcast') return;
      state = first.kind === 'broadcast' ? 'served' : 'ended';
      resolve(first);
    };
  });
  if (!watch) {
    const timer = setTimeout(() => signal({ kind: 'broadcast', hash: null }), deps.submitWaitMs);
    void first.finally(() => clearTimeout(timer));
  }
  // One payer's settlements are broadcast one at a time: none races another to revert. The
  // queue is held until this one is broadcast (or ended), not until its receipt: the task returns
  // the settlement wrapped, since returning the promise itself would hold the queue until it ends.
  const queued = deps.settlements.run(paid.account, async () => {
    const finished = settleAndRecord(deps, call, paid, answerBy, answered);
    void finished.then(
      (settled) => signal({ kind: 'ended', settled }),
      // Thrown (not a failure the flow returns): served pending as the log may stand, unless a
      // refusal was claimed, which was for a settlement that failed for certain.
      () =>
        signal(
          state === 'refusing'
            ? {
                kind: 'ended',
                settled: {
                  kind: 'failed',
                  reason: 'settlement_failed',
                  message: 'the settlement failed; nothing was charged',
                  settle: null,
                },
              }
            : { kind: 'broadcast', hash: null },
        ),
    );
    if (watch) {
      void watch.hash.then((hash) => signal({ kind: 'broadcast', hash }));
      await Promise.race([watch.hash, finished.catch(() => null)]);
    } else {
      await finished.catch(() => null);
    }
    return { finished };
  });
  const outcome = queued.then(({ finished }) => finished);
  const background = outcome
    .then((settled) => {
      watch?.cancel();
      if (settled.kind === 'pending') setTimeout(paid.release, deps.holdPendingMs).unref();
      else paid.release();
    })
    .catch((err: unknown) => {
      deps.logger.error({ err, requestId: call.requestId }, 'background settlement failed to record');
      setTimeout(paid.release, deps.holdPendingMs).unref();
    });
  deps.background.add(background);
  void background.finally(() => deps.background.delete(background));

  const decided = await first;
  if (decided.kind === 'ended') {
    // Served while it may still be charged: recorded as served, with the transaction named.
    if (decided.settled.kind === 'pending') {
      const sent = (decided.settled.settle.transaction || null) as `0x${string}` | null;
      const recorded = await recordServed(deps, handle, call.requestId, sent);
      if (recorded !== 'recorded') return notServed(recorded);
    }
    return outcomeOf(decided.settled, paid);
  }
  const recorded = await recordServed(deps, handle, call.requestId, decided.hash);
  markServedRecorded();
  if (recorded !== 'recorded') return notServed(recorded);
  return {
    kind: 'served',
    result: paid.result,
    receipt: receiptOf(requirement, payer, 'pending', decided.hash),
    settle: unconfirmedResponse(requirement.network, payer, decided.hash),
    replayed: false,
  };
}

function outcomeOf(settled: Settled, paid: Served): PaidOutcome {
  const { requirement, identity } = paid;
  switch (settled.kind) {
    case 'settled':
      return {
        kind: 'served',
        result: paid.result,
        receipt: receiptOf(requirement, identity.payer, 'settled', settled.settle.transaction),
        settle: settled.settle,
        replayed: false,
      };
    case 'pending':
      return {
        kind: 'served',
        result: paid.result,
        receipt: receiptOf(requirement, identity.payer, 'pending', settled.settle.transaction || null),
        settle: unconfirmedResponse(requirement.network, identity.payer, settled.settle.transaction || null),
        replayed: false,
      };
    case 'failed':
      return {
        kind: 'settlement_failed',
        reason: settled.reason,
        message: settled.message,
        settle: settled.settle,
      };
  }
}

/**
 * Asks the facilitator to settle and records the outcome; another writer's "settled" converges.
 * Returns the settlement's outcome even when recording it fails: the answer follows what the
 * facilitator did, not whether the log took it (the payment then stays open in the log and
 * reconciliation records it from the chain).
 */
async function settleAndRecord(
  deps: PaymentFlowDeps,
  call: PaidCall,
  paid: Served,
  /** When the caller is answered pending whatever the settlement's state (submitWaitMs). */
  answerBy: number,
  /** `served` once the caller was answered with the paid result (pending) before this ended. */
  answered: AnswerClaim,
): Promise<Settled> {
  const { handle, payload, requirement, identity } = paid;
  const payer = identity.payer;
  const record = async (step: PaymentStep): Promise<'recorded' | 'already_settled' | 'unrecorded'> => {
    await answered.servedRecorded();
    try {
      return await deps.ledger.transition(handle, step, { converge: true });
    } catch (err) {
      if (err instanceof PaymentRuleError && err.reason === 'payment_already_served') {
        // Served meanwhile by the same payment presented again (another replica): it stays
        // pending, for reconciliation to settle it from the chain or book the seller's loss.
        deps.logger.warn(
          { requestId: call.requestId, step: step.kind },
          'the payment was served meanwhile; its failure is left to reconciliation',
        );
        return 'unrecorded';
      }
      deps.logger.error(
        { err, requestId: call.requestId, step: step.kind },
        'settlement outcome could not be recorded; left to reconciliation',
      );
      return 'unrecorded';
    }
  };
  /**
   * A settlement the facilitator reports failed. Once the caller was served, see
   * servedThenFailed (and usedElsewhere). Before, terminal (recorded failed: the payer is refused
   * and charged nothing) only when it cannot have been charged: its transaction reverted on
   * chain, or it was refused before any transaction was sent. Otherwise the payer may be charged,
   * so the payment stays pending for reconciliation to read from the chain, and the answer
   * (kept before settling) is the payer's. The refusal is claimed before the failure is recorded:
   * a slow append must not let the answer's budget run out and serve the paid result meanwhile,
   * with the log then saying failed (no sellerLoss) and the payer's hold freed.
   */
  const failed = async (
    reason: string,
    detail: string | undefined,
    transaction: string,
    response: SettleResponse | null,
  ): Promise<Settled> => {
    const sent = ((transaction || null) as `0x${string}` | null) ?? deps.submissions?.sent(identity) ?? null;
    if (sent === null && reason === NONCE_ALREADY_USED) return usedElsewhere(reason, response);
    if (transaction && reason === TRANSACTION_FAILED) {
      if (!answered.claimRefusal()) return servedThenFailed(reason, detail, sent);
      await record({ kind: 'fail', reason, txHash: transaction as `0x${string}` });
      deps.logger.error(
        { requestId: call.requestId, reason, transaction },
        'a broadcast settlement failed on chain',
      );
      return { kind: 'failed', reason, message: describeReason(reason, detail), settle: response };
    }
    // The in-process facilitator reports every transaction it sent, or may have sent (see
    // local-facilitator.ts), so with it nothing seen is nothing sent; a remote one is believed
    // only for the refusals that come before a transaction is built.
    const unsent = sent === null && (deps.submissions !== null || REFUSED_BEFORE_SENDING.has(reason));
    if (unsent) {
      if (!answered.claimRefusal()) return servedThenFailed(reason, detail, sent);
      await record({ kind: 'fail', reason });
      // The balance fell between verification and settlement (the payer spent it meanwhile): named
      // with its figures, as the verification's refusal names them; no facilitator says it here.
      const amounts =
        reason === INSUFFICIENT_BALANCE
          ? {
              signed:
                (payload.payload as { authorization?: { value?: string } }).authorization?.value ??
                requirement.amount,
              asked: requirement.amount,
              held: await heldFor(deps, identity, call.requestId),
            }
          : undefined;
      return { kind: 'failed', reason, message: describeUnsent(reason, detail, amounts), settle: response };
    }
    if (answered.served) return servedThenFailed(reason, detail, sent);
    deps.logger.warn(
      { requestId: call.requestId, reason, detail, transaction: sent },
      'settlement reported failed after its transaction may have been sent; left pending for reconciliation',
    );
    await record({
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      ...(sent ? { txHash: sent } : {}),
      reason: `settle answered ${reason}, but the transaction may have been sent; the chain decides`,
    });
    return { kind: 'pending', settle: unconfirmedResponse(requirement.network, payer, sent) };
  };

  /**
   * The settlement failed after the caller already had the paid answer (it outlasted
   * submitWaitMs): our transaction reverted, or the facilitator refused before sending. Nothing
   * can be refused any more, and the failure alone does not tell whether the seller is paid: a
   * revert may be the payer's own submission of this authorisation landing first (which paid), and
   * an authorisation still unused may yet be settled. So it is left pending, logged at error, for
   * reconciliation to read from the chain: settled when the use paid the agreed transfer, the
   * seller's loss (`sellerLoss`) when it was spent without paying or expired unused, broadcast
   * again meanwhile while it is valid. Recorded failed here, the loss went uncounted (no
   * sellerLoss) and a payment paid by the payer's own transaction was booked unpaid.
   */
  const servedThenFailed = async (
    reason: string,
    detail: string | undefined,
    sent: `0x${string}` | null,
  ): Promise<Settled> => {
    deps.logger.error(
      { requestId: call.requestId, reason, detail, transaction: sent, payer, nonce: identity.nonce },
      "served, then the settlement failed; left pending: reconciliation settles it or records the seller's loss",
    );
    await record({
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      ...(sent ? { txHash: sent } : {}),
      reason: `served, then settle answered ${reason}${sent ? '' : ' before sending'}; the chain decides`,
    });
    return { kind: 'pending', settle: unconfirmedResponse(requirement.network, payer, sent) };
  };

  /**
   * The token refused our settlement because the authorisation was already used, and no
   * transaction of ours used it. The payer decides how it was used: by the agreed transfer (their
   * wallet, say, submitted it), or cancelled (ERC-3009 cancelAuthorization), or its nonce signed
   * again to themselves. Served (pending, for reconciliation to confirm) only when the transaction
   * that used it carries the agreed transfer to payTo; otherwise recorded failed and refused. When
   * that transaction is not visible within a short wait, refused too: the seller is not made to
   * serve on a payment nobody can show, and the payment is recorded failed, not left for a replay
   * of the same authorisation to be served from.
   */
  const usedElsewhere = async (reason: string, response: SettleResponse | null): Promise<Settled> => {
    const read = deps.authorizationOutcome(identity);
    const agreed = { payTo: requirement.payTo as `0x${string}`, amount: BigInt(requirement.amount) };
    let outcome: AuthorizationOutcome = { kind: 'unseen' };
    // Decided before the caller is answered pending regardless (see settle): ended by then, a
    // refusal is a refusal, not an answer served on an unproven payment.
    const until = Math.min(Date.now() + USED_ELSEWHERE_WAIT_MS, answerBy - USED_ELSEWHERE_POLL_MS * 2);
    while (read) {
      try {
        // Each read is bounded by the same deadline as the wait (at least one poll's worth), not
        // only by the chain's budget: one slow read must not run past the answer.
        outcome = await withDeadline(
          read(agreed),
          Math.max(until - Date.now(), USED_ELSEWHERE_POLL_MS),
          "the chain did not answer the authorisation's use",
        );
      } catch (err) {
        deps.logger.warn({ err, requestId: call.requestId }, 'the use of an authorisation could not be read');
      }
      if (outcome.kind !== 'unseen' || Date.now() >= until) break;
      await new Promise((resolve) => setTimeout(resolve, USED_ELSEWHERE_POLL_MS));
    }
    if (outcome.kind === 'paid') {
      await record({
        kind: 'markPending',
        submittedAt: new Date().toISOString(),
        txHash: outcome.txHash,
        reason: `settle answered ${reason}: the authorisation paid by another transaction; the chain decides`,
      });
      return { kind: 'pending', settle: unconfirmedResponse(requirement.network, payer, outcome.txHash) };
    }
    const how =
      outcome.kind === 'unseen'
        ? 'the authorisation was already used on chain, by no transaction of ours and none seen paying the seller'
        : outcome.cancelled
          ? 'the authorisation was cancelled on chain before it could be settled'
          : 'the authorisation was used on chain by another transaction that did not pay the seller';
    const context = { requestId: call.requestId, reason, payer, nonce: identity.nonce, outcome };
    const txHash = outcome.kind === 'unpaid' ? { txHash: outcome.txHash } : {};
    // Refused unless the caller has the paid answer already: claimed before anything is recorded,
    // so an answer due during the append is not served on a payment recorded failed.
    const refused = answered.claimRefusal();
    if (!refused && outcome.kind === 'unseen') {
      // Served already, and the chain shows nothing yet (a read cut short once the answer was
      // out): the reconciler, with its wider window and the authorisation's expiry, decides
      // between settled and the seller's loss, rather than a loss booked on a slow read.
      deps.logger.warn(
        context,
        'served; the use of the authorisation not seen yet; left pending for reconciliation',
      );
      await record({
        kind: 'markPending',
        submittedAt: new Date().toISOString(),
        reason: `settle answered ${reason}; its use not seen yet; the chain decides`,
      });
      return { kind: 'pending', settle: unconfirmedResponse(requirement.network, payer, null) };
    }
    if (!refused) {
      // The caller already has the paid answer (the settlement outlasted submitWaitMs) and the
      // authorisation was spent without paying the seller: nothing can be refused any more, so
      // this is the seller's loss, counted in payments{state="lost"}.
      deps.logger.error(
        { ...context, how },
        "served, not paid: the answer was served pending and the authorisation was spent without paying the seller; recorded as the seller's loss",
      );
      await record({ kind: 'fail', reason, ...txHash, sellerLoss: true });
      return { kind: 'failed', reason, message: `${how}; the answer was already served`, settle: response };
    }
    if (outcome.kind === 'unseen') {
      // If the payer's own transaction did pay us and the logs only lag, the operator refunds it.
      deps.logger.error(
        context,
        'a used authorisation with no visible transaction; refused, recorded failed',
      );
    } else {
      deps.logger.warn(
        context,
        'an authorisation spent elsewhere without paying us; refused, recorded failed',
      );
    }
    await record({ kind: 'fail', reason, ...txHash });
    return {
      kind: 'failed',
      reason,
      message: `${how}; nothing was served and nothing was charged by this service`,
      settle: response,
    };
  };

  let settled: SettleResponse;
  try {
    settled = await deps.server.settlePayment(payload, requirement);
  } catch (err) {
    if (err instanceof SettleError && !(err instanceof FacilitatorTimeoutError)) {
      return failed(err.errorReason ?? 'settlement_failed', err.errorMessage, err.transaction ?? '', null);
    }
    // Timed out or cut off mid-call: the facilitator may still settle. Leave it to reconciliation.
    const sent = deps.submissions?.sent(identity) ?? null;
    deps.logger.warn({ err, requestId: call.requestId }, 'settlement outcome unknown; recorded as pending');
    await record({
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      ...(sent ? { txHash: sent } : {}),
      reason: err instanceof Error ? err.message.slice(0, 200) : 'settlement outcome unknown',
    });
    return { kind: 'pending', settle: unconfirmedResponse(requirement.network, payer, sent) };
  }

  if (settled.success) {
    const recorded = await record({
      kind: 'settle',
      payer,
      amount: requirement.amount,
      txHash: settled.transaction as `0x${string}`,
    });
    if (recorded === 'already_settled') {
      deps.logger.info(
        { requestId: call.requestId, transaction: settled.transaction },
        'settlement already recorded by reconciliation; converged',
      );
    }
    return { kind: 'settled', settle: settled };
  }
  if (settled.errorReason === 'settlement_pending' && settled.transaction) {
    await record({
      kind: 'markPending',
      submittedAt: new Date().toISOString(),
      txHash: settled.transaction as `0x${string}`,
      reason: 'broadcast; receipt not confirmed in time',
    });
    return { kind: 'pending', settle: settled };
  }
  return failed(
    settled.errorReason ?? 'settlement_failed',
    settled.errorMessage,
    settled.transaction,
    settled,
  );
}
