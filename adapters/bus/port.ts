/**
 * The bus port: at-least-once delivery of events between services. The JetStream adapter is the
 * distributed engine; the in-process adapter serves the embedded single-process deployment.
 */

export interface Bus {
  readonly kind: 'memory' | 'nats';
  /** Publishes and resolves once the bus has acknowledged (persisted) the message. */
  publish(subject: string, payload: Uint8Array, options: { msgId: string }): Promise<PublishAck>;
  /**
   * In-process buses only (absent on the others): publishes `value` itself, acknowledged and
   * de-duplicated as `publish` is. Its bytes (`encode(value)`) are made only if a consumer reads
   * `data`; a consumer finds the value as `message.value`, the publisher's own object, which
   * neither side may change. The relay publishes events so, and the dispatcher in the same process
   * takes the event it would otherwise have parsed back from the JSON made for it.
   */
  publishValue?<T>(
    subject: string,
    value: T,
    encode: (value: T) => Uint8Array,
    options: { msgId: string },
  ): Promise<PublishAck>;
  /**
   * Starts (or resumes) a durable consumer. Messages are handled one at a time per consumer in
   * subject order unless `maxInFlight` > 1; the handler must ack, nak (with an optional delay)
   * or term every message it receives. A handler that throws gets a nak with the default delay.
   */
  consume(options: ConsumeOptions, handler: (message: BusMessage) => Promise<void>): Promise<Consumer>;
  health(): Promise<BusHealth>;
  close(): Promise<void>;
}

export interface BusHealth {
  ok: boolean;
  detail?: string;
  /** The error behind a failure: /readyz shows the reason its code gives, the log its words. */
  cause?: unknown;
  /** Copies of the stream asked for and those up to date now (leader included). */
  replicas?: { wanted: number; current: number };
  /** For the log only, never on /readyz: the server name of the stream's leader (often a host's). */
  logged?: { leader: string };
  /** Settings of the stream found at start that differ from the configured ones. */
  drift?: BusSettingDrift[];
}

/** One setting of an existing stream that differs from what this process would have created. */
export interface BusSettingDrift {
  setting: 'replicas' | 'subjects' | 'retention' | 'storage' | 'discard' | 'duplicate_window' | 'max_age';
  wanted: string | number;
  found: string | number;
  /**
   * True once the stream was brought in line (its age set, or replicas raised at start or by the
   * background retry of a raise refused there); false when only reported, or while that retry has
   * not taken.
   */
  updated: boolean;
  /** Why the raise was refused (a lone server, too few peers): the latest refusal while not updated. */
  error?: string;
}

export interface PublishAck {
  /** True when the bus recognised the msgId as a duplicate and stored nothing. */
  duplicate: boolean;
  sequence: number;
}

export interface ConsumeOptions {
  /** Durable name: a restarted consumer with the same name resumes where it left off. */
  durable: string;
  /** Subject filter, NATS wildcard syntax (`*`, `>`). */
  filterSubject: string;
  /** How long an unacknowledged message waits before redelivery. */
  ackWaitMs?: number;
  maxInFlight?: number;
  /** Delay before redelivering a message whose handler threw. */
  defaultNakDelayMs?: number;
  /**
   * false: ack() sends the ack and resolves without waiting for the bus to confirm it. For
   * handlers whose work is idempotent, where a lost ack costs only a redelivery that finds the
   * work done. Default true: ack() resolves once the bus confirmed it.
   */
  confirmAck?: boolean;
}

export interface BusMessage {
  readonly subject: string;
  readonly msgId: string;
  readonly data: Uint8Array;
  /** What `publishValue` published (never to be changed); undefined for a message published as bytes. */
  readonly value?: unknown;
  /** 1 on first delivery, then 2, 3, ... */
  readonly deliveryCount: number;
  ack(): Promise<void>;
  /** Ask for redelivery, after `delayMs` when given. */
  nak(delayMs?: number): void;
  /** Never redeliver this message. */
  term(): void;
}

export interface Consumer {
  stop(): Promise<void>;
}

/** Defaults both adapters apply; the ack wait and the duplicate window are JetStream's own. */
const DEFAULT_ACK_WAIT_MS = 30_000;
const DEFAULT_NAK_DELAY_MS = 1_000;
export const DEFAULT_DUPLICATE_WINDOW_MS = 120_000;

/** A consumer's options as every adapter reads them: defaults filled in, at least one in flight. */
export function consumeSettings(options: ConsumeOptions) {
  return {
    ackWaitMs: options.ackWaitMs ?? DEFAULT_ACK_WAIT_MS,
    maxInFlight: Math.max(1, options.maxInFlight ?? 1),
    defaultNakDelayMs: options.defaultNakDelayMs ?? DEFAULT_NAK_DELAY_MS,
  };
}
