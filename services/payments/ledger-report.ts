import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { parseDomainEvent } from '../../contracts/events.ts';
import { csvField } from '../shared/csv.ts';
import { evolveRecorded, type PaymentState, type PaymentStatus } from './payment-state.ts';
import { NONCE_ALREADY_USED } from './reasons.ts';
import { usdc } from './usdc.ts';

/**
 * The operator's payments ledger: one row per x402 payment the log holds, what was sold, to whom,
 * for how much, and where the money is (its status and settlement transaction), to reconcile the
 * revenue against the chain (`npm run keys -- payments`). The status comes from the payments'
 * own fold (evolveRecorded); the times, reasons and flags beside it from the events that set them.
 */
export interface LedgerRow {
  authorized_at: string;
  status: PaymentStatus;
  /** The answer was handed to a caller (PaymentAnswerServed, or a hand-off recorded before it existed). */
  served: boolean;
  tool: string;
  resource: string;
  network: string;
  asset: string;
  payer: string;
  pay_to: string;
  nonce: string;
  /** Atomic units of the asset, as the authorisation signs them. */
  amount_atomic: string;
  /** The same in USDC (6 decimals: every rail this service prices is USDC). */
  amount_usdc: string;
  tx_hash: string | null;
  /** When the outcome (settled, failed or released) was recorded; null while open. */
  closed_at: string | null;
  /** Why it failed or was released; null otherwise. */
  reason: string | null;
  /** Settled or failed by reconciliation rather than by the request that carried it. */
  reconciled: boolean;
  /** Failed after its answer was served: the seller's loss. */
  seller_loss: boolean;
  payment_id: string | null;
  request_id: string;
}

export const LEDGER_COLUMNS: readonly (keyof LedgerRow)[] = [
  'authorized_at',
  'status',
  'served',
  'tool',
  'resource',
  'network',
  'asset',
  'payer',
  'pay_to',
  'nonce',
  'amount_atomic',
  'amount_usdc',
  'tx_hash',
  'closed_at',
  'reason',
  'reconciled',
  'seller_loss',
  'payment_id',
  'request_id',
];

export const PAYMENT_STATUSES: readonly PaymentStatus[] = [
  'authorized',
  'pending',
  'settled',
  'failed',
  'released',
];

interface Folding {
  state: PaymentState | null;
  authorizedAt: string;
  closedAt: string | null;
  reason: string | null;
  reconciled: boolean;
  sellerLoss: boolean;
}

const PAGE = 5_000;

/** Every payment of the log, in the order they were authorised. */
export async function readLedger(store: EventStore): Promise<LedgerRow[]> {
  const payments = new Map<string, Folding>();
  for (let after = 0; ; ) {
    const page = await store.readAll({ after, maxCount: PAGE });
    for (const raw of page) foldInto(payments, raw);
    if (page.length < PAGE) break;
    after = page[page.length - 1]!.position;
  }
  const rows: LedgerRow[] = [];
  for (const folding of payments.values()) {
    const row = toRow(folding);
    if (row) rows.push(row);
  }
  return rows;
}

function foldInto(payments: Map<string, Folding>, raw: RecordedEvent): void {
  // Payment streams only: the payment-id claims (x402-payment-id-…) are not payments.
  if (!raw.stream.startsWith('payment-')) return;
  const event = parseDomainEvent(raw);
  if (!event) return;
  let folding = payments.get(raw.stream);
  if (event.type === 'PaymentAuthorized') {
    // A released payment may be reserved again: the row is the new reservation's, from its own
    // time, with nothing of the release before it (the fold's status starts over the same way).
    folding = {
      state: folding?.state ?? null,
      authorizedAt: raw.recordedAt,
      closedAt: null,
      reason: null,
      reconciled: false,
      sellerLoss: false,
    };
    payments.set(raw.stream, folding);
  }
  if (!folding) return;
  folding.state = evolveRecorded(folding.state, raw);
  switch (event.type) {
    case 'PaymentSettled':
      folding.closedAt = raw.recordedAt;
      folding.reason = null;
      folding.reconciled = event.data.reconciled === true;
      break;
    case 'PaymentSettlementFailed':
      folding.closedAt = raw.recordedAt;
      folding.reason = event.data.reason;
      folding.reconciled = event.data.reconciled === true;
      folding.sellerLoss = event.data.sellerLoss === true;
      break;
    case 'PaymentReleased':
      folding.closedAt = raw.recordedAt;
      folding.reason = event.data.reason;
      break;
    default:
      break;
  }
}

function toRow(folding: Folding): LedgerRow | null {
  const state = folding.state;
  const authorized = state?.authorized;
  if (!state || !authorized) return null;
  return {
    authorized_at: folding.authorizedAt,
    status: state.status,
    served: state.served,
    tool: authorized.tool ?? '',
    resource: authorized.resource,
    network: authorized.network,
    asset: authorized.asset,
    payer: authorized.payer,
    pay_to: authorized.payTo,
    nonce: authorized.nonce,
    amount_atomic: authorized.amount,
    amount_usdc: usdc(BigInt(authorized.amount)),
    tx_hash: state.txHash,
    closed_at:
      state.status === 'settled' || state.status === 'failed' || state.status === 'released'
        ? folding.closedAt
        : null,
    reason: folding.reason,
    reconciled: folding.reconciled,
    seller_loss: folding.sellerLoss,
    payment_id: authorized.paymentId ?? null,
    request_id: authorized.requestId,
  };
}

export interface LedgerFilter {
  /** Authorised at or after (inclusive), ms since the epoch. */
  from?: number;
  /** Authorised before (exclusive), ms since the epoch. */
  to?: number;
  status?: PaymentStatus;
}

export function filterLedger(rows: LedgerRow[], filter: LedgerFilter): LedgerRow[] {
  return rows
    .filter((row) => {
      const at = Date.parse(row.authorized_at);
      if (filter.from !== undefined && at < filter.from) return false;
      if (filter.to !== undefined && at >= filter.to) return false;
      return filter.status === undefined || row.status === filter.status;
    })
    .sort((a, b) => a.authorized_at.localeCompare(b.authorized_at) || a.nonce.localeCompare(b.nonce));
}

/** Per status: how many payments and their amount, in USDC; then revenue, what is open, and losses. */
export function ledgerTotals(rows: LedgerRow[]): string {
  const lines = PAYMENT_STATUSES.map((status) => {
    const count = rows.filter((row) => row.status === status).length;
    return `${status.padEnd(10)} ${String(count).padStart(6)}  ${usdc(sumOf(rows, status)).padStart(14)} USDC`;
  });
  const losses = rows.filter((row) => row.seller_loss).length;
  // Settled and never served: the payer's own transaction paid before the request (refused, since
  // whoever presents a mined authorisation may not be the payer): the seller owes a refund.
  const unserved = rows.filter((row) => row.status === 'settled' && !row.served);
  const owed = unserved.reduce((total, row) => total + BigInt(row.amount_atomic), 0n);
  const unseen = rows.filter(usedUnseen);
  const toCheck = unseen.reduce((total, row) => total + BigInt(row.amount_atomic), 0n);
  return [
    ...lines,
    `${rows.length} payments; revenue (settled): ${usdc(sumOf(rows, 'settled'))} USDC; ` +
      `open (authorized or pending): ${usdc(sumOf(rows, 'authorized') + sumOf(rows, 'pending'))} USDC; ` +
      `answers served and never paid: ${losses}; ` +
      `paid and never served (refund due): ${unserved.length}, ${usdc(owed)} USDC; ` +
      `refused, their authorisation used on chain by no transaction seen (check each nonce on chain: ` +
      `a refund due if it paid the seller): ${unseen.length}, ${usdc(toCheck)} USDC`,
  ].join('\n');
}

/**
 * Refused because the token showed the authorisation used while no transaction of its use was
 * visible within the settlement's short wait (a node whose logs lag, say): recorded failed with
 * no transaction, nothing served. If the payer's own transaction used it to pay the seller, the
 * money arrived and nothing was sold, and no later round looks at a failed payment again: the
 * operator checks the nonce on chain (its AuthorizationUsed log) and refunds it when it paid.
 */
function usedUnseen(row: LedgerRow): boolean {
  return (
    row.status === 'failed' &&
    !row.served &&
    !row.seller_loss &&
    row.tx_hash === null &&
    row.reason === NONCE_ALREADY_USED
  );
}

function sumOf(rows: LedgerRow[], status: PaymentStatus): bigint {
  return rows
    .filter((row) => row.status === status)
    .reduce((total, row) => total + BigInt(row.amount_atomic), 0n);
}

export function ledgerCsv(rows: LedgerRow[]): string {
  const lines = rows.map((row) => LEDGER_COLUMNS.map((column) => csvField(row[column])).join(','));
  return [LEDGER_COLUMNS.join(','), ...lines].join('\n');
}

export function ledgerNdjson(rows: LedgerRow[]): string {
  return rows.map((row) => JSON.stringify(row)).join('\n');
}
