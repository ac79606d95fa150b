import { type Config, publicBaseUrl } from '../../contracts/config.ts';
import { parseCidrList, parsePortPolicy, parseSchedule } from '../../contracts/setting-lists.ts';
import type { AddressPolicy } from '../shared/ssrf/address-policy.ts';
import type { UrlPolicy } from '../shared/ssrf/url-policy.ts';
import type { RetryPolicy } from './retry-policy.ts';

/** Everything the dispatcher and the management routes read from configuration, parsed once. */
export interface WebhookSettings {
  retry: RetryPolicy;
  disableAfterFailedDeliveries: number;
  disableAfterMs: number;
  endpointConcurrency: number;
  /** Requests in flight per origin over every key's endpoint there (per process). */
  originConcurrency: number;
  endpointQueueLimit: number;
  queueBytesLimit: number;
  breakerTimeouts: number;
  connectTimeoutMs: number;
  timeoutMs: number;
  stuckAfterMs: number;
  tickMs: number;
  maxPerKey: number;
  /** Deliveries per subscription the in-memory delivery log keeps. */
  deliveryLogRetention: number;
  recoverPerSecond: number;
  rotationOverlapMs: number;
  /** PUBLIC_BASE_URL: verify_url in payloads points at its /verify route. */
  verifyBaseUrl: string;
  urlPolicy: UrlPolicy;
  /** Extra trust for receivers' certificates (tests trust their self-signed receiver here). */
  tls?: { ca?: string | string[] };
}

export function addressPolicyFromConfig(
  config: Pick<Config, 'WEBHOOK_TEST_ALLOW_CIDRS' | 'NODE_ENV'>,
): AddressPolicy {
  // The config schema already refuses this in production; checked again so no other path can.
  if (config.NODE_ENV === 'production') return { allow: [] };
  return { allow: parseCidrList(config.WEBHOOK_TEST_ALLOW_CIDRS) };
}

export function webhookSettings(config: Config): WebhookSettings {
  return {
    retry: {
      schedule: parseSchedule(config.WEBHOOK_RETRY_SCHEDULE),
      jitter: config.WEBHOOK_RETRY_JITTER,
      retryAfterMaxMs: config.WEBHOOK_RETRY_AFTER_MAX_MS,
    },
    disableAfterFailedDeliveries: config.WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES,
    disableAfterMs: config.WEBHOOK_DISABLE_AFTER_MS,
    endpointConcurrency: config.WEBHOOK_ENDPOINT_CONCURRENCY,
    originConcurrency: config.WEBHOOK_ORIGIN_CONCURRENCY,
    endpointQueueLimit: config.WEBHOOK_ENDPOINT_QUEUE_LIMIT,
    queueBytesLimit: config.WEBHOOK_QUEUE_BYTES_LIMIT,
    breakerTimeouts: config.WEBHOOK_BREAKER_TIMEOUTS,
    connectTimeoutMs: config.WEBHOOK_CONNECT_TIMEOUT_MS,
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    stuckAfterMs: config.WEBHOOK_STUCK_AFTER_MS,
    tickMs: config.WEBHOOK_TICK_MS,
    maxPerKey: config.WEBHOOK_MAX_PER_KEY,
    deliveryLogRetention: config.WEBHOOK_DELIVERY_LOG_RETENTION,
    recoverPerSecond: config.WEBHOOK_RECOVER_PER_SECOND,
    rotationOverlapMs: config.WEBHOOK_SECRET_ROTATION_OVERLAP_MS,
    verifyBaseUrl: publicBaseUrl(config),
    urlPolicy: {
      ports: parsePortPolicy(config.WEBHOOK_ALLOWED_PORTS),
      addresses: addressPolicyFromConfig(config),
    },
  };
}
