import type { Logger } from 'pino';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { ChainReader } from './chain-reader.ts';
import { type PaymentHandle, PaymentLedger, type PaymentStep } from './ledger.ts';
import {
  evolveRecorded,
  isOpen,
  PAYMENT_EVENT_TYPES,
  type PaymentState,
  UNKNOWN_TX_HASH,
} from './payment-state.ts';

/** Unfinished payments by stream: what reconciliation may have to finish. */
export type OpenPayments = Record<string, PaymentState>;

export const openPaymentsProjection: Projection<OpenPayments> = {
  name: 'open-payments',
  version: 1,
  // An event of another type leaves every payment as it is: the runner passes those over unread.
  eventTypes: PAYMENT_EVENT_TYPES,
  initial: () => ({}),
  evolve(state, event) {
    if (!event.stream.startsWith('payment-')) return state;
    const next = evolveRecorded(state[event.stream] ?? null, event);
    if (next && isOpen(next)) state[event.stream] = next;
    else delete state[event.stream];
    return state;
  },
};

export interface ReconcileSummary {
  examined: number;
  settled: number;
  failed: number;
  released: number;
  stillPending: number;
  /** Payments on a network no chain reader covers. */
  unreadable: number;
}

export interface ReconcilerOptions {
  store: EventStore;
  /** Chain readers keyed by CAIP-2 network. */
  chains: Map<string, ChainReader>;
  /** Only payments whose last step is older than this are touched (others may still be in flight). */
  olderThanMs: number;
  logger?: Logger;
  now?: () => number;
  /** Where the open-payments projection keeps its snapshots; without it, in this process only. */
  projections?: ProjectionStore;
  snapshotEvery?: number;
}

const CATCH_UP_TIMEOUT_MS = 60_000;

/**
 * A processor over the open-payments projection: settles the record of unfinished payments against the chain, never the chain itself: it
 * submits nothing, so a payment cannot be settled twice. A pending settlement becomes
 * PaymentSettled when the token reports the authorisation used (the transaction is found from
 * its AuthorizationUsed log), PaymentSettlementFailed when it can no longer land (reverted, or
 * past validBefore unused); an authorisation reserved but never submitted (the process stopped
 * before settling, so the caller got no answer either) is released.
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
      failed: 0,
      released: 0,
      stillPending: 0,
      unreadable: 0,
    };
    const cutoff = (this.options.now ?? Date.now)() - this.options.olderThanMs;
    for (const [stream, state] of Object.entries(this.openPayments.state)) {
      if (Date.parse(state.lastAt) > cutoff || !state.authorized) continue;
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
  ): Promise<'settled' | 'failed' | 'released' | 'stillPending' | 'unreadable'> {
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

    if (await chain.authorizationUsed(asset, payer, nonce)) {
      const known =
        state.txHash && (await chain.receiptStatus(state.txHash)) === 'success' ? state.txHash : null;
      const txHash = known ?? (await chain.findAuthorizationTx(asset, payer, nonce)) ?? UNKNOWN_TX_HASH;
      await record({
        kind: 'settle',
        payer,
        amount: auth.amount,
        txHash,
        reconciled: true,
      });
      return 'settled';
    }
    if (state.status === 'authorized') {
      await record({
        kind: 'release',
        reason: 'the request stopped before settlement; nothing was charged',
      });
      return 'released';
    }
    if (state.txHash && (await chain.receiptStatus(state.txHash)) === 'reverted') {
      await record({
        kind: 'fail',
        reason: 'settlement transaction reverted',
        txHash: state.txHash,
        reconciled: true,
      });
      return 'failed';
    }
    if ((await chain.chainTime()) >= BigInt(auth.validBefore)) {
      await record({
        kind: 'fail',
        reason: 'the authorisation expired unused; nothing was charged',
        ...(state.txHash ? { txHash: state.txHash } : {}),
        reconciled: true,
      });
      return 'failed';
    }
    return 'stillPending';
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
    await this.running?.catch(() => undefined);
    if (this.openPayments.running) await this.openPayments.stop();
  }
}
