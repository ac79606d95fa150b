import type { Logger } from 'pino';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { ChainReader } from './chain-reader.ts';
import { type PaymentHandle, PaymentLedger } from './ledger.ts';
import { evolvePayment, isOpen, type PaymentState } from './payment-state.ts';

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
}

/**
 * Settles the record of unfinished payments against the chain, never the chain itself: it
 * submits nothing, so a payment cannot be settled twice. A pending settlement becomes
 * PaymentSettled when the token reports the authorisation used (the transaction is found from
 * its AuthorizationUsed log), PaymentSettlementFailed when it can no longer land (reverted, or
 * past validBefore unused); an authorisation reserved but never submitted (the process stopped
 * before settling, so the caller got no answer either) is released.
 */
export class PaymentReconciler {
  private readonly ledger: PaymentLedger;
  private readonly open = new Map<string, PaymentState>();
  private checkpoint = 0;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<ReconcileSummary> | null = null;

  constructor(private readonly options: ReconcilerOptions) {
    this.ledger = new PaymentLedger(options.store);
  }

  /** Folds new payment events into the set of open payments, from the last checkpoint. */
  private async catchUp(): Promise<void> {
    const states = new Map<string, PaymentState | null>();
    for (;;) {
      const page = await this.options.store.readAll({ after: this.checkpoint, maxCount: 1000 });
      if (page.length === 0) break;
      for (const event of page) {
        this.checkpoint = event.position;
        if (!event.stream.startsWith('payment-') || !event.type.startsWith('Payment')) continue;
        const prior = states.has(event.stream)
          ? states.get(event.stream)!
          : (this.open.get(event.stream) ?? null);
        states.set(event.stream, evolvePayment(prior, event));
      }
    }
    for (const [stream, state] of states) {
      if (state && isOpen(state)) this.open.set(stream, state);
      else this.open.delete(stream);
    }
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
    for (const [stream, state] of [...this.open]) {
      if (Date.parse(state.lastAt) > cutoff || !state.authorized) continue;
      summary.examined++;
      try {
        const outcome = await this.reconcileOne(stream, state);
        summary[outcome]++;
        if (outcome !== 'stillPending' && outcome !== 'unreadable') this.open.delete(stream);
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
    const handle: PaymentHandle = {
      ref: { nonce, network: auth.network, asset },
      payer,
      stream,
      revision: state.revision,
      correlationId: auth.requestId,
    };

    if (await chain.authorizationUsed(asset, payer, nonce)) {
      const known =
        state.txHash && (await chain.receiptStatus(state.txHash)) === 'success' ? state.txHash : null;
      const txHash = known ?? (await chain.findAuthorizationTx(asset, payer, nonce)) ?? '0x';
      await this.ledger.record(handle, 'PaymentSettled', {
        payer,
        amount: auth.amount,
        txHash,
        reconciled: true,
      });
      return 'settled';
    }
    if (state.status === 'authorized') {
      await this.ledger.record(handle, 'PaymentReleased', {
        reason: 'the request stopped before settlement; nothing was charged',
      });
      return 'released';
    }
    if (state.txHash && (await chain.receiptStatus(state.txHash)) === 'reverted') {
      await this.ledger.record(handle, 'PaymentSettlementFailed', {
        reason: 'settlement transaction reverted',
        txHash: state.txHash,
        reconciled: true,
      });
      return 'failed';
    }
    if ((await chain.chainTime()) >= BigInt(auth.validBefore)) {
      await this.ledger.record(handle, 'PaymentSettlementFailed', {
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
  }
}
