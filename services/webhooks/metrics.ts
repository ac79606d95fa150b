import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { BreakerState } from './circuit-breaker.ts';
import type { WebhookState } from './webhook-projection.ts';

/** What the delivery worker reports as it goes; the dispatcher role wires it to prom-client. */
export interface DeliveryObserver {
  attempt(trigger: string): void;
  /** `held`: not sent, the endpoint's breaker was open; `gone`: 410, the subscription is disabled. */
  outcome(
    outcome: 'succeeded' | 'failed' | 'held' | 'gone',
    latencyMs: number | null,
    queuedMs: number | null,
  ): void;
}

export interface DeliverySources {
  /** Deliveries queued or sending, by the breaker state of their endpoint. */
  queueDepth(): Record<BreakerState, number>;
  /** Bytes of bodies kept by attempts waiting past their endpoint's queue limit. */
  keptBytes(): number;
  endpoints(): Record<BreakerState, number>;
  state(): WebhookState;
}

/**
 * Prometheus metrics of webhook delivery, on the process's registry: attempts by trigger,
 * outcomes, request latency and queue time, queue depth per endpoint (breaker) state, the bytes
 * kept by attempts queued past their endpoint's limit, endpoints per breaker state, and
 * subscriptions per status (disabled ones included).
 */
export function webhookMetrics(registry: Registry, sources: () => DeliverySources | null): DeliveryObserver {
  const attempts = new Counter({
    name: 'webhook_delivery_attempts_total',
    help: 'Delivery attempts claimed, by trigger (event, retry, stale, digest, recover, resend)',
    labelNames: ['trigger'] as const,
    registers: [registry],
  });
  const outcomes = new Counter({
    name: 'webhook_delivery_outcomes_total',
    help: 'Delivery attempt outcomes: succeeded, failed, held (breaker open, not sent), gone (410)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  const latency = new Histogram({
    name: 'webhook_delivery_latency_seconds',
    help: 'Request latency of sent delivery attempts',
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
    registers: [registry],
  });
  const queued = new Histogram({
    name: 'webhook_delivery_queue_seconds',
    help: 'Time a delivery attempt waited in its endpoint queue before it was sent',
    buckets: [0.001, 0.01, 0.1, 0.5, 1, 5, 15, 60, 300],
    registers: [registry],
  });
  // One gauge per breakdown, read from the live sources at scrape time (none before they exist).
  const countGauge = (
    name: string,
    help: string,
    label: string,
    counts: (s: DeliverySources) => Record<string, number>,
  ) =>
    new Gauge({
      name,
      help,
      labelNames: [label],
      registers: [registry],
      collect() {
        const s = sources();
        if (!s) return;
        for (const [value, n] of Object.entries(counts(s))) this.set({ [label]: value }, n);
      },
    });
  countGauge(
    'webhook_endpoint_queue_depth',
    'Delivery attempts queued or sending, by the circuit-breaker state of their endpoint',
    'breaker_state',
    (s) => s.queueDepth(),
  );
  new Gauge({
    name: 'webhook_queue_kept_bytes',
    help: "Bytes of delivery bodies kept in memory by attempts waiting past their endpoint's queue limit, counted at two per character (at most WEBHOOK_QUEUE_BYTES_LIMIT)",
    registers: [registry],
    collect() {
      const s = sources();
      if (s) this.set(s.keptBytes());
    },
  });
  countGauge(
    'webhook_endpoints',
    "Endpoints (an API key's origin: each key's subscriptions on a host have their own breaker) with a circuit breaker that is not closed, by state",
    'breaker_state',
    (s) => {
      const { closed: _closed, ...open } = s.endpoints();
      return open;
    },
  );
  countGauge('webhook_subscriptions', 'Webhook subscriptions by status (active, disabled)', 'status', (s) => {
    const counts = { active: 0, disabled: 0 };
    for (const sub of Object.values(s.state().subscriptions.subs)) counts[sub.status]++;
    return counts;
  });
  return {
    attempt(trigger) {
      attempts.inc({ trigger });
    },
    outcome(outcome, latencyMs, queuedMs) {
      outcomes.inc({ outcome });
      if (latencyMs !== null) latency.observe(latencyMs / 1_000);
      if (queuedMs !== null) queued.observe(queuedMs / 1_000);
    },
  };
}
