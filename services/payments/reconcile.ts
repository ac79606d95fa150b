import type { SettleResponse } from '@x402/core/types';
import type { Logger } from 'pino';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { EventData } from '../../contracts/events.ts';
import type { Projection } from '../../projections/projection.ts';
import { beforeStopDeadline, ProjectionRunner } from '../../projections/runner.ts';
import type { ChainReader } from './chain-reader.ts';
import { type PaymentHandle, PaymentLedger, type PaymentStep } from './ledger.ts';
import { evolveRecorded, isOpen, PAYMENT_EVENT_TYPES, type PaymentState } from './payment-state.ts';

/** Unfinished payments by stream: what reconciliation may have to finish. */
export type OpenPayments = Record<string, PaymentState>;

export const openPaymentsProjection: Projection<OpenPayments> = {
  name: 'open-payments',
  // 2: a payment's state says whether its answer was served (and keeps no answer here).
  version: 2,
  // An event of another type leaves every payment as it is: the runner passes those over unread.
  eventTypes: PAYMENT_EVENT_TYPES,
  initial: () => ({}),
  evolve(state, event) {
    if (!event.stream.startsWith('payment-')) return state;
    const next = evolveRecorded(state[event.stream] ?? null, event);
    // The answer is not reconciliation's business: not held for every open payment.
    if (next && isOpen(next)) state[event.stream] = next.answer === null ? next : { ...next, answer: null };
    else delete state[event.stream];
    return state;
  },
};

export interface ReconcileSummary {
  examined: number;
  settled: number;
  released: number;
  /** Served payments whose settlement never landed, broadcast again. */
  rebroadcast: number;
  /**
   * Served payments whose authorisation expired before any settlement landed, or was spent
   * (cancelled, its nonce used for another transfer) without paying: the seller's loss.
   */
  lost: number;
  stillPending: number;
  /** Payments on a network no chain reader covers. */
  unreadable: number;
}

/**
 * Asks the facilitator to settle a served payment again from its recorded authorisation (it
 * verifies and simulates the transfer before it broadcasts, so a transfer that cannot land is
 * refused without gas). Resolves with the facilitator's answer; throws when it refuses outright.
 */
export type Resettle = (
  authorization: EventData<'PaymentAuthorized'> & { signature: string },
) => Promise<SettleResponse>;

export interface ReconcilerOptions {
  store: EventStore;
  /** Chain readers keyed by CAIP-2 network. */
  chains: Map<string, ChainReader>;
  /** Only payments whose last step is older than this are touched (others may still be in flight). */
  olderThanMs: number;
  /**
   * A payment handed to settlement whose answer was served is touched once its last step is older
   * than this instead (the request's settle wait and a margin; at most olderThanMs): its
   * authorisation lapses within the quote's maxTimeoutSeconds (120 s by default), so a settlement
   * the node lost can only be broadcast again if it is looked at before then.
   */
  servedPendingAfterMs?: number;
  logger?: Logger;
  now?: () => number;
  /** Where the open-payments projection keeps its snapshots; without it, in this process only. */
  projections?: ProjectionStore;
  snapshotEvery?: number;
  /** How to broadcast a settlement again; without it a lost settlement waits for its expiry. */
  resettle?: Resettle;
}

const CATCH_UP_TIMEOUT_MS = 60_000;

/**
 * A processor over the open-payments projection: settles the record of unfinished payments
 * against the chain. A pending settlement becomes PaymentSettled when the token reports the
 * authorisation used and the transaction that used it (found from its AuthorizationUsed log)
 * carries the agreed transfer to payTo; used otherwise (cancelled, or its nonce spent on another
 * transfer) it is recorded failed, the seller's loss once served. Used with no transaction of
 * its use visible, it waits a round for the logs, unless the authorisation expired before the
 * oldest block the log lookback reads (its use can never be seen there): then it is recorded
 * failed as the seller's loss once served (released if its answer reached no one). A pending one
 * was handed off after its answer was kept, so the payer was (or can be) served: while its
 * authorisation is valid and no transaction of it is on its way (none was sent, the node forgot
 * it, or it reverted), it is broadcast again; once the authorisation expired unused it is
 * recorded failed as the seller's loss (`sellerLoss`, counted by the `payments{state="lost"}`
 * gauge). An authorisation reserved but never handed off (the process stopped before settling,
 * so the caller got no answer either) is released once it has expired unused (until then anyone
 * holding it could still settle it; used meanwhile, it is settled or failed as above). Nothing is broadcast twice while a
 * transaction of it may still land, and the token's nonce lets at most one land.
 */
export class PaymentReconciler {
  private readonly ledger: PaymentLedger;
  /** The open payments, folded by the standard runner like every other projection. */
  readonly openPayments: ProjectionRunner<OpenPayments>;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<ReconcileSummary> | null = null;

  constructor(private readonly options: ReconcilerOptions) {
    this.ledger = new PaymentLedger(options.store);
    this.openPayments = new ProjectionRunner(
      options.store,
      options.projections ?? new MemoryProjectionStore(),
      openPaymentsProjection,
      {
        ...(options.snapshotEvery !== undefined ? { snapshotEvery: options.snapshotEvery } : {}),
        ...(options.logger ? { logger: options.logger } : {}),
      },
    );
  }

  /** A round looks at the log as it is when the round starts, its own last writes included. */
  private async catchUp(): Promise<void> {
    if (!this.openPayments.running) await this.openPayments.start();
    if (this.openPayments.error) throw this.openPayments.error;
    await this.openPayments.waitFor(await this.options.store.headPosition(), CATCH_UP_TIMEOUT_MS);
  }

  runOnce(): Promise<ReconcileSummary> {
    this.running ??= this.reconcile().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async reconcile(): Promise<ReconcileSummary> {
    await this.catchUp();
    const summary: ReconcileSummary = {
      examined: 0,
      settled: 0,
      released: 0,
      rebroadcast: 0,
      lost: 0,
      stillPending: 0,
      unreadable: 0,
    };
    const now = (this.options.now ?? Date.now)();
    const { olderThanMs, servedPendingAfterMs = olderThanMs } = this.options;
    for (const [stream, state] of Object.entries(this.openPayments.state)) {
      const after =
        state.status === 'pending' && state.served
          ? Math.min(servedPendingAfterMs, olderThanMs)
          : olderThanMs;
      if (Date.parse(state.lastAt) > now - after || !state.authorized) continue;
      summary.examined++;
      try {
        const outcome = await this.reconcileOne(stream, state);
        summary[outcome]++;
      } catch (err) {
        if (err instanceof WrongExpectedRevisionError) {
          // A request moved the payment meanwhile; the next catch-up sees its new state.
          summary.stillPending++;
          continue;
        }
        this.options.logger?.warn({ err, stream }, 'payment reconciliation failed; retrying next round');
        summary.stillPending++;
      }
    }
    if (summary.examined > 0) this.options.logger?.info(summary, 'payments reconciled');
    return summary;
  }

  private async reconcileOne(
    stream: string,
    state: PaymentState,
  ): Promise<'settled' | 'released' | 'rebroadcast' | 'lost' | 'stillPending' | 'unreadable'> {
    const auth = state.authorized!;
    const chain = this.options.chains.get(auth.network);
    if (!chain) return 'unreadable';
    const asset = auth.asset as `0x${string}`;
    const payer = auth.payer as `0x${string}`;
    const nonce = auth.nonce as `0x${string}`;
    // Decided on the state the projection holds: a request that moved the payment since wins.
    const handle: PaymentHandle = {
      ref: { nonce, network: auth.network, asset },
      payer,
      stream,
      known: { state, revision: state.revision },
    };
    const record = (step: PaymentStep) => this.ledger.transition(handle, step);

    // The chain's clock is read before the authorisation's use: a clock at or past validBefore
    // then means no later block can use it, so an unused one read after it stays unused.
    const expired = (await chain.chainTime()) >= BigInt(auth.validBefore);
    if (await chain.authorizationUsed(asset, payer, nonce)) {
      // Used is not paid: the payer can cancel the authorisation, or use its nonce for a transfer
      // to themselves. Only the agreed transfer in the transaction that used it settles it.
      const outcome = await chain.authorizationOutcome({
        asset,
        authorizer: payer,
        nonce,
        payTo: auth.payTo as `0x${string}`,
        amount: BigInt(auth.amount),
      });
      if (outcome.kind === 'unseen' && BigInt(auth.validBefore) < (await chain.lookbackStartTime())) {
        // Used before it expired, and it expired before the oldest block the log lookup reads:
        // its use can never be seen, so waiting for it would leave the payment pending forever.
        const how =
          'the authorisation was used before the log lookback, by no transaction seen paying the seller';
        const context = { stream, payer, nonce, amount: auth.amount, network: auth.network };
        // Never handed off, or handed off with its answer given to no one: nothing was sold.
        if (state.status === 'authorized' || !state.served) {
          await record({
            kind: 'release',
            reason: `${how}; nothing was charged by this service${state.status === 'pending' ? ', and its answer reached no one' : ''}`,
          });
          this.options.logger?.error(context, `${how}; released`);
          return 'released';
        }
        await record({
          kind: 'fail',
          reason: `${how}: the seller's loss`,
          ...(state.txHash ? { txHash: state.txHash } : {}),
          reconciled: true,
          sellerLoss: true,
        });
        this.options.logger?.error(context, `${how}; a served payment recorded as the seller's loss`);
        return 'lost';
      }
      if (outcome.kind === 'unseen') {
        // The log lookup lags the state read: decided next round.
        this.options.logger?.warn(
          { stream, payer, nonce },
          'an authorisation is used but no transaction of its use or cancellation is visible yet',
        );
        return 'stillPending';
      }
      if (outcome.kind === 'paid') {
        await record({
          kind: 'settle',
          payer,
          amount: auth.amount,
          txHash: outcome.txHash,
          reconciled: true,
        });
        return 'settled';
      }
      const how = outcome.cancelled
        ? 'the payer cancelled the authorisation'
        : 'the authorisation was used by a transaction that did not pay the agreed transfer';
      if (state.status === 'authorized' || !state.served) {
        await record({
          kind: 'release',
          reason: `${how}; nothing was charged${state.status === 'pending' ? ', and its answer reached no one' : ''}`,
        });
        return 'released';
      }
      await record({
        kind: 'fail',
        reason: `${how} (${outcome.txHash}): nothing reached the seller`,
        txHash: outcome.txHash,
        reconciled: true,
        sellerLoss: true,
      });
      this.options.logger?.warn(
        { stream, payer, amount: auth.amount, network: auth.network, transaction: outcome.txHash },
        "a served payment's authorisation was spent without paying; recorded as the seller's loss",
      );
      return 'lost';
    }
    if (state.status === 'authorized') {
      // Released only once its authorisation has expired: until then anyone holding it could
      // still settle it, and the money would move on a payment recorded as given back.
      if (!expired) return 'stillPending';
      await record({
        kind: 'release',
        reason: 'the request stopped before settlement; nothing was charged',
      });
      return 'released';
    }
    // Pending: the settlement was handed off after the answer was kept, so the answer is the payer's.
    if (expired) {
      if (!state.served) {
        // Handed off, and the process stopped before anyone had the answer (nor fetched it since):
        // nothing was charged and nothing was given; the expired authorisation can never charge.
        await record({
          kind: 'release',
          reason:
            'the authorisation expired before a settlement landed and its answer reached no one: nothing charged, nothing lost',
        });
        this.options.logger?.warn(
          { stream, payer, amount: auth.amount, network: auth.network },
          'a handed-off payment expired unsettled, its answer never served; released',
        );
        return 'released';
      }
      await record({
        kind: 'fail',
        reason:
          "the answer was served but the authorisation expired before a settlement landed: the seller's loss",
        ...(state.txHash ? { txHash: state.txHash } : {}),
        reconciled: true,
        sellerLoss: true,
      });
      this.options.logger?.warn(
        { stream, payer, amount: auth.amount, network: auth.network },
        "a served payment's settlement never landed; recorded as the seller's loss",
      );
      return 'lost';
    }
    const status = state.txHash ? await chain.receiptStatus(state.txHash) : null;
    const onItsWay =
      state.txHash !== null && status !== 'reverted' && (await chain.transactionKnown(state.txHash));
    // Broadcast again only what a caller has: an answer that reached no one is not charged for
    // (its payer, whose connection dropped, may have paid again with a new authorisation); it
    // waits for the same payment to be presented again (then served) or for its expiry (released).
    if (onItsWay || !state.served || !this.options.resettle || !auth.signature) return 'stillPending';
    return this.broadcastAgain(handle, { ...auth, signature: auth.signature }, state.txHash);
  }

  private async broadcastAgain(
    handle: PaymentHandle,
    auth: EventData<'PaymentAuthorized'> & { signature: string },
    previous: string | null,
  ): Promise<'rebroadcast' | 'stillPending'> {
    const context = {
      stream: handle.stream,
      payer: auth.payer,
      previous,
      served: handle.known.state?.served,
    };
    let settled: SettleResponse;
    try {
      settled = await this.options.resettle!(auth);
    } catch (err) {
      this.options.logger?.warn({ ...context, err }, 'a lost settlement could not be broadcast again');
      return 'stillPending';
    }
    if (settled.success) {
      await this.ledger.transition(
        handle,
        {
          kind: 'settle',
          payer: auth.payer,
          amount: auth.amount,
          txHash: settled.transaction as `0x${string}`,
          reconciled: true,
        },
        { converge: true },
      );
    } else if (settled.transaction) {
      await this.ledger.transition(handle, {
        kind: 'markPending',
        submittedAt: new Date().toISOString(),
        txHash: settled.transaction as `0x${string}`,
        reason: 'broadcast again by reconciliation; receipt not confirmed in time',
      });
    } else {
      this.options.logger?.warn(
        { ...context, reason: settled.errorReason },
        'the facilitator refused to broadcast a lost settlement again; retrying while it is valid',
      );
      return 'stillPending';
    }
    this.options.logger?.info(
      { ...context, transaction: settled.transaction },
      handle.known.state?.served
        ? 'a served payment whose settlement never landed was broadcast again'
        : 'a handed-off payment whose settlement never landed was broadcast again (its answer is kept for the payer, not yet served)',
    );
    return 'rebroadcast';
  }

  start(intervalMs: number): void {
    if (this.timer) return;
    const tick = () => {
      this.runOnce()
        .catch((err: unknown) => this.options.logger?.warn({ err }, 'payment reconciliation round failed'))
        .finally(() => {
          if (this.timer) this.timer = setTimeout(tick, intervalMs);
        });
    };
    this.timer = setTimeout(tick, 0);
  }

  async stop(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    // A round reads the log (its catch-up alone up to CATCH_UP_TIMEOUT_MS); with the store silent
    // it outlasted SHUTDOWN_TIMEOUT_MS. The shutdown's stop deadline bounds the wait as it bounds
    // the runners': a round left there changes nothing half-way (each step is one append with its
    // expected revision), and the next start's first round looks at the same payments.
    const round = this.running?.catch(() => undefined);
    if (round && !(await beforeStopDeadline(this.options.store, round)))
      this.options.logger?.warn(
        'payment reconciliation round left in flight at the stop deadline: the next start runs it again',
      );
    if (this.openPayments.running) await this.openPayments.stop();
  }
}
