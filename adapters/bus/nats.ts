import { setTimeout as delay } from 'node:timers/promises';
import {
  AckPolicy,
  type ConsumerConfig,
  type ConsumerMessages,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
  jetstream,
  jetstreamManager,
  RetentionPolicy,
  StorageType,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { type Logger, pino } from 'pino';
import { maskUrlCredentials } from '../../contracts/mask-url.ts';
import { splitList } from '../../contracts/setting-lists.ts';
import { beforeAbort } from '../before-abort.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { ConsumeLoop } from './consume-loop.ts';
import {
  type Bus,
  type BusHealth,
  type BusMessage,
  type BusSettingDrift,
  type ConsumeOptions,
  type Consumer,
  consumeSettings,
  DEFAULT_DUPLICATE_WINDOW_MS,
  type PublishAck,
} from './port.ts';
import { assertSubjectPrefix, DEFAULT_SUBJECT_PREFIX, streamSubjects, subjectMatches } from './subjects.ts';

export interface NatsBusOptions {
  url: string;
  /** JetStream stream holding every subject under `subjectPrefix`; created when missing. */
  stream: string;
  subjectPrefix?: string;
  logger?: Logger;
  duplicateWindowMs?: number;
  /** Timeout for a publish's PubAck and for JetStream API calls. */
  requestTimeoutMs?: number;
  /** Lifetime of one pull request; also sets the idle-heartbeat interval (half of it). */
  pullExpiresMs?: number;
  /** Messages buffered per consumer beyond those being handled. */
  pullBatch?: number;
  /** Connection name shown by the server's monitoring. */
  name?: string;
  /**
   * Copies of the stream across a JetStream cluster, used when the stream is created (1 on a lone
   * server). An existing stream with fewer is raised to this many; one with more is left alone.
   */
  replicas?: number;
  /**
   * How a refused raise of the stream's replicas is tried again in the background: the first
   * pause, the longest one (each pause doubles) and how long after the start it stops trying.
   * Default 1 s, 15 s, 10 minutes.
   */
  replicaRaiseRetry?: Partial<RaiseRetry>;
  /** Copies of each durable consumer's state; 0 (default) inherits the stream's replicas. */
  consumerReplicas?: number;
  /**
   * How long the stream keeps a message (JetStream's `max_age`); 0 (default) keeps every message.
   * Set on creation and brought in line on an existing stream at start: acknowledged messages stay
   * in a limits-retention stream, so without an age its store grows with every relayed event.
   */
  maxAgeMs?: number;
  /**
   * How long the first connect (and the stream check after it) keeps retrying while the servers
   * are unreachable or JetStream does not answer yet, e.g. a node still down or a cluster electing
   * its leader after a crash. Past it, the start fails with the last error. Default 60 s.
   */
  startupTimeoutMs?: number;
  /**
   * Ends the first connect's wait when it aborts (the process asked to stop while starting): the
   * try in flight is left (a connection it still makes is closed), no other is made, and the
   * signal's reason is thrown.
   */
  signal?: AbortSignal;
}

const NAME = /^[A-Za-z0-9_-]+$/;

/**
 * NATS_URL's servers: one, or a cluster's comma-separated, split as every list setting (splitList:
 * trimmed, empty entries dropped); throws on a list of none.
 */
export function natsServers(url: string): string[] {
  const servers = splitList(url);
  if (servers.length === 0) throw new Error('NATS_URL names no server');
  return servers;
}

/** Connects, makes sure the stream exists and returns the JetStream bus. */
export async function connectNatsBus(options: NatsBusOptions): Promise<NatsBus> {
  const subjectPrefix = options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
  assertSubjectPrefix(subjectPrefix);
  if (!NAME.test(options.stream)) throw new Error(`invalid stream name "${options.stream}"`);
  const servers = natsServers(options.url);
  const logger = (options.logger ?? pino({ name: 'bus' })).child({ bus: 'nats', stream: options.stream });
  const requestTimeoutMs = options.requestTimeoutMs ?? 5_000;
  const startupTimeoutMs = options.startupTimeoutMs ?? 60_000;
  const where = `NATS at ${maskUrlCredentials(options.url)}`;
  let gaveUp: DependencyRefusedError | null = null;
  try {
    // Awaited here, so a failure's stack names connectNatsBus (the start-failure log shows it).
    return await retryTransient(
      () =>
        beforeAbort(
          openOnce(options, servers, subjectPrefix, logger, requestTimeoutMs, startupTimeoutMs),
          options.signal,
          (bus) => bus.close(),
        ),
      startupTimeoutMs,
      // Each try's line names the servers it tried (password masked): a role cannot reach NATS
      // while it starts is diagnosed from this line alone, as readiness is not served yet.
      logger.child({ natsUrl: maskUrlCredentials(options.url) }),
      'NATS not usable yet; retrying',
      (attempt, err) => {
        // The remedy in the same line: this is the one line an operator sees of a start that waited.
        // A server that does not answer is an expected failure, told with no stack, as a refused one.
        gaveUp = new DependencyRefusedError(
          `${where} not usable within ${startupTimeoutMs} ms (${attempt} tries): ${describe(err)}. ` +
            'Start nats-server with JetStream (-js) or correct NATS_URL; NATS_STARTUP_TIMEOUT_MS sets how long a start waits for it',
          { cause: err },
        );
        return gaveUp;
      },
      options.signal,
    );
  } catch (err) {
    // A refusal that names its setting (a stream's subjects held by another) is told as it is.
    if (err === gaveUp || options.signal?.aborted || err instanceof DependencyRefusedError) throw err;
    // Failed at once (not an outage that waiting could end): name the server and the setting, as
    // the driver's own words (`getaddrinfo ENOTFOUND nats-1`, `Authorization Violation`) do not.
    const hint = hasCode(err, 'ENOTFOUND')
      ? ": its host name does not resolve; correct NATS_URL's host"
      : hasName(err, 'AuthorizationError')
        ? ': the server refused the login; put its user and password in NATS_URL (nats://user:password@host:4222)'
        : '';
    throw new DependencyRefusedError(`${where} (NATS_URL) cannot be used: ${describe(err)}${hint}`, {
      cause: err,
    });
  }
}

/** An error and the causes it wraps, five deep at most (the driver wraps the socket's error). */
function causeChain(err: unknown): Error[] {
  const chain: Error[] = [];
  for (let e: unknown = err; e instanceof Error && chain.length < 5; e = e.cause) chain.push(e);
  return chain;
}

function hasCode(err: unknown, code: string): boolean {
  return causeChain(err).some((e) => (e as { code?: unknown }).code === code);
}

function hasName(err: unknown, name: string): boolean {
  return causeChain(err).some((e) => e.name === name);
}

/**
 * Runs `op` until it resolves, tried again after a transient failure (isTransient: an outage, a
 * leader election, a JetStream request timed out on a loaded host) with pauses doubling from
 * 250 ms to 5 s for `withinMs`; past that, the error `giveUp` makes of the last failure is thrown.
 * Any other failure is thrown at once, so a wrong setting is not hidden behind a minute of retries;
 * so is the last failure once `signal` aborts (the bus closed while a role was starting).
 */
async function retryTransient<T>(
  op: () => Promise<T>,
  withinMs: number,
  logger: Logger,
  retrying: string,
  giveUp: (attempt: number, err: unknown) => Error,
  signal?: AbortSignal,
): Promise<T> {
  const deadline = Date.now() + withinMs;
  let pauseMs = 250;
  for (let attempt = 1; ; attempt++) {
    try {
      return await op();
    } catch (err) {
      if (!isTransient(err) || signal?.aborted) throw err;
      const left = deadline - Date.now();
      if (left <= 0) throw giveUp(attempt, err);
      // Readiness is not served yet while a role starts: the log is where an operator sees the wait.
      logger.warn({ attempt, err: describe(err), retryInMs: pauseMs }, retrying);
      if (!(await pause(Math.min(pauseMs, left), signal))) throw err;
      pauseMs = Math.min(pauseMs * 2, 5_000);
    }
  }
}

const TRANSIENT_NAMES = new Set([
  'TimeoutError',
  'ConnectionError',
  'ClosedConnectionError',
  'NoResponders',
  'RequestError',
  'JetStreamNotEnabled',
]);
const TRANSIENT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'EPIPE',
  // A resolver that did not answer (not a name that does not exist: that is ENOTFOUND, final).
  'EAI_AGAIN',
]);

/** JetStream's err_code for "error creating store for stream". */
const STORE_CREATE_FAILED = 10077;

/** True for failures that a server coming back or a leader being elected would end. */
export function isTransient(err: unknown): boolean {
  for (const e of causeChain(err)) {
    if (TRANSIENT_NAMES.has(e.name)) return true;
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && TRANSIENT_CODES.has(code)) return true;
    // JetStream's "temporarily unavailable" and "no leader" answers are 503s.
    if (e.name === 'JetStreamApiError' && (e as { status?: unknown }).status === 503) return true;
    // "error creating store for stream": the server could not make the stream's directory. Seen
    // when another client deleted the account's last stream at that moment (the server removes the
    // emptied account directory); a lasting cause (a full or read-only disk) still fails at the
    // startup timeout, with this error as its cause.
    if (e.name === 'JetStreamApiError' && (e as { code?: unknown }).code === STORE_CREATE_FAILED) return true;
  }
  return false;
}

function describe(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

async function openOnce(
  options: NatsBusOptions,
  servers: string[],
  subjectPrefix: string,
  logger: Logger,
  requestTimeoutMs: number,
  startupTimeoutMs: number,
): Promise<NatsBus> {
  const nc = await connect({
    // NATS_URL may list a cluster's servers, comma-separated; the client takes them as an array.
    servers,
    name: options.name ?? 'signal-bus',
    // The bus must outlive server restarts: never stop trying to reconnect.
    maxReconnectAttempts: -1,
    reconnectTimeWait: 500,
    timeout: requestTimeoutMs,
    // Otherwise every publish and ackAck builds an Error (with a stack) up front, in case it
    // times out: a measurable share of the CPU per message under load, for a nicer trace only.
    noAsyncTraces: true,
  });
  try {
    const jsm = await jetstreamManager(nc, { timeout: requestTimeoutMs });
    const wanted = wantedStream(options, subjectPrefix);
    const drift = await ensureStream(jsm, wanted);
    if (drift.length > 0) {
      // Once per process start: an operator reading the log (or /readyz, /metrics) sees the stream
      // is not what the configuration describes, e.g. one copy where three were asked for.
      logger.warn({ drift }, 'existing stream has other settings than configured');
    }
    const bus = new NatsBus(nc, jsm, {
      stream: options.stream,
      wanted,
      subjectPrefix,
      logger,
      requestTimeoutMs,
      startupTimeoutMs,
      pullExpiresMs: options.pullExpiresMs ?? 5_000,
      pullBatch: options.pullBatch ?? 64,
      consumerReplicas: options.consumerReplicas ?? 0,
      drift,
    });
    bus.retryRefusedRaise({ ...DEFAULT_RAISE_RETRY, ...options.replicaRaiseRetry });
    return bus;
  } catch (err) {
    await nc.close();
    throw err;
  }
}

function wantedStream(options: NatsBusOptions, subjectPrefix: string) {
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5) {
    throw new Error(`stream replicas must be an integer from 1 to 5, got ${replicas}`);
  }
  return {
    name: options.stream,
    subjects: [streamSubjects(subjectPrefix)],
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    duplicate_window: nanos(options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS),
    max_age: nanos(options.maxAgeMs ?? 0),
    num_replicas: replicas,
  };
}

type WantedStream = ReturnType<typeof wantedStream>;

/** The refusal of a raise on a server outside a cluster: final, not tried again. */
const NOT_CLUSTERED = 'the server is not in a cluster: one copy only';

const SAME_BUS_SETTINGS =
  'every role of one deployment takes the same NATS_STREAM and NATS_SUBJECT_PREFIX (another deployment on this server takes other values of both)';

/**
 * Why `stream` cannot be created when another stream of the server already takes its subjects
 * (JetStream refuses overlapping subjects): a role whose NATS_STREAM differs from the one its
 * deployment's other roles created. Left to run, it would read a stream no role publishes to.
 * Null when no other stream holds them (the add failed for another reason).
 */
async function otherStreamRefusal(
  jsm: JetStreamManager,
  stream: string,
  subject: string,
): Promise<DependencyRefusedError | null> {
  const holder = await jsm.streams.find(subject).catch(() => null);
  if (holder === null || holder === stream) return null;
  return new DependencyRefusedError(
    `stream ${stream} (NATS_STREAM) cannot be created: its subject ${subject} belongs to stream ${holder} ` +
      `on this server: ${SAME_BUS_SETTINGS}; set NATS_STREAM=${holder} if that is this deployment's`,
  );
}

/**
 * Creates the stream, or compares the one found with it. Replicas are only ever raised (a JetStream
 * cluster copies the stream to the new peers online), so processes started with different settings
 * during a rolling change converge instead of undoing each other; the age is set to the wanted one
 * (where JetStream takes it); every other difference is reported, not changed: storage and
 * retention cannot be changed in place, and a wider subject filter or a shorter duplicate window
 * may be another deployment's deliberate choice.
 */
async function ensureStream(jsm: JetStreamManager, wanted: WantedStream): Promise<BusSettingDrift[]> {
  const subject = wanted.subjects[0]!;
  let existing = await streamInfo(jsm, wanted.name);
  if (!existing) {
    try {
      await jsm.streams.add(wanted);
      return [];
    } catch (err) {
      // Another process created it between our info and add.
      existing = await streamInfo(jsm, wanted.name);
      if (!existing) throw (await otherStreamRefusal(jsm, wanted.name, subject)) ?? err;
    }
  }
  const found = existing.config;
  if (!found.subjects?.includes(subject)) {
    // A role of the deployment whose NATS_SUBJECT_PREFIX differs: it would publish or read where
    // the others do not.
    throw new DependencyRefusedError(
      `stream ${wanted.name} (NATS_STREAM) exists without subject ${subject} (has ${found.subjects}): ` +
        `${SAME_BUS_SETTINGS}; correct NATS_SUBJECT_PREFIX`,
    );
  }
  const drift: BusSettingDrift[] = [];
  const compare = (setting: BusSettingDrift['setting'], want: string | number, have: string | number) => {
    if (want !== have) drift.push({ setting, wanted: want, found: have, updated: false });
  };
  compare('subjects', subject, (found.subjects ?? []).join(','));
  compare('retention', wanted.retention, found.retention);
  compare('storage', wanted.storage, found.storage);
  compare('discard', wanted.discard, found.discard);
  compare('duplicate_window', wanted.duplicate_window, found.duplicate_window);
  if (found.max_age !== wanted.max_age) {
    // The age is the operator's choice of how long a stopped consumer can catch up: the setting
    // of the latest start holds, in either direction (JetStream changes it in place).
    const age = { setting: 'max_age', wanted: wanted.max_age, found: found.max_age } as const;
    try {
      await jsm.streams.update(wanted.name, { max_age: wanted.max_age });
      drift.push({ ...age, updated: true });
    } catch (err) {
      // Refused (the stream's duplicate window longer than the age, an account without the
      // update permission): the stream goes on with its own age, and the health says why.
      drift.push({ ...age, updated: false, error: err instanceof Error ? err.message : String(err) });
    }
  }
  if (found.num_replicas < wanted.num_replicas) {
    const raise = { setting: 'replicas', wanted: wanted.num_replicas, found: found.num_replicas } as const;
    if (existing.cluster === undefined) {
      // NATS 2.9 accepts the raise on a server outside a cluster and keeps one copy: the stream
      // would then claim copies that do not exist, for every process that opens it.
      drift.push({ ...raise, updated: false, error: NOT_CLUSTERED });
    } else {
      try {
        await jsm.streams.update(wanted.name, { num_replicas: wanted.num_replicas });
        drift.push({ ...raise, updated: true });
      } catch (err) {
        // Too few peers current (one down or lagging under load), or the leader busy: keep running
        // on the copies there are, say why, and try again in the background (retryRefusedRaise).
        drift.push({ ...raise, updated: false, error: err instanceof Error ? err.message : String(err) });
      }
    }
  } else {
    compare('replicas', wanted.num_replicas, found.num_replicas);
  }
  return drift;
}

async function streamInfo(jsm: JetStreamManager, stream: string) {
  try {
    return await jsm.streams.info(stream);
  } catch (err) {
    if (err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound) return null;
    throw err;
  }
}

export interface RaiseRetry {
  firstPauseMs: number;
  maxPauseMs: number;
  /** Past this long after the first refusal, no new try starts: the stream keeps its copies. */
  forMs: number;
}

const DEFAULT_RAISE_RETRY: RaiseRetry = { firstPauseMs: 1_000, maxPauseMs: 15_000, forMs: 10 * 60_000 };

/** What retryReplicaRaise reads and changes of the stream. */
export interface ReplicaRaiseTarget {
  replicas(): Promise<number>;
  raise(replicas: number): Promise<void>;
}

/**
 * Tries a refused raise of the stream's replicas again, with pauses doubling from firstPauseMs to
 * maxPauseMs, until it takes, the stream has the copies already (another process raised it, or a
 * try that timed out here took on the server), `signal` aborts (the bus closed) or `forMs` has
 * passed. The refusal ensureStream met is mostly passing: a peer down for a restart, or one that
 * lagged on a loaded host when the meta leader placed the copies. Without a retry the stream kept
 * one copy until some process started again, and a node's loss then lost its messages. `entry` is
 * the drift health() reports: updated once the raise took, else the last refusal in `error`.
 * Resolves true once the stream has the copies.
 */
export async function retryReplicaRaise(
  entry: BusSettingDrift & { wanted: number },
  target: ReplicaRaiseTarget,
  retry: RaiseRetry,
  logger: Logger,
  signal: AbortSignal,
): Promise<boolean> {
  const giveUpAt = Date.now() + retry.forMs;
  let pauseMs = retry.firstPauseMs;
  for (let attempt = 1; ; attempt++) {
    const left = giveUpAt - Date.now();
    if (left <= 0) {
      logger.error(
        { wanted: entry.wanted, found: entry.found, tries: attempt - 1, err: entry.error },
        'stream replicas not raised; giving up until the next start: the stream keeps the copies it has',
      );
      return false;
    }
    logger.warn(
      { wanted: entry.wanted, found: entry.found, err: entry.error, retryInMs: Math.min(pauseMs, left) },
      'raising the stream replicas was refused; trying again',
    );
    if (!(await pause(Math.min(pauseMs, left), signal))) return false;
    pauseMs = Math.min(pauseMs * 2, retry.maxPauseMs);
    try {
      if ((await target.replicas()) < entry.wanted) await target.raise(entry.wanted);
      entry.updated = true;
      delete entry.error;
      logger.info({ wanted: entry.wanted, found: entry.found, tries: attempt }, 'stream replicas raised');
      return true;
    } catch (err) {
      if (signal.aborted) return false;
      entry.error = err instanceof Error ? err.message : String(err);
    }
  }
}

/** Waits `ms`; false when `signal` aborted first (node's abortable timer rejects then). */
function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  return delay(ms, true, { signal }).catch(() => false);
}

interface NatsBusConfig {
  stream: string;
  /** The stream as this process creates it: again, should the server lose it (below, publish). */
  wanted: WantedStream;
  subjectPrefix: string;
  logger: Logger;
  requestTimeoutMs: number;
  /** How long a consumer's creation at consume() waits out transient failures (as the connect does). */
  startupTimeoutMs: number;
  pullExpiresMs: number;
  pullBatch: number;
  consumerReplicas: number;
  /** What start found different in the existing stream; reported by health(). */
  drift: BusSettingDrift[];
}

/** The JetStream bus: one file-backed stream, durable pull consumers with explicit acks. */
export class NatsBus implements Bus {
  readonly kind = 'nats' as const;
  private readonly js: JetStreamClient;
  private readonly consumers = new Set<ConsumeLoop>();
  private closed = false;
  /** Ends a background retry of a refused replica raise at close(). */
  private readonly closing = new AbortController();
  private raiseRetry: Promise<boolean> | null = null;
  /** A re-creation of the stream under way, shared by the publishes that found it missing. */
  private recreating: Promise<boolean> | null = null;
  /**
   * Since when, and from which server, the connection is lost (null while connected): health()
   * says so at once rather than wait for a stream-info request that cannot be answered.
   */
  private lost: { since: number; server: string } | null = null;
  /** health() calls waiting on the server, ended by a loss of the connection. */
  private readonly lossWaiters = new Set<() => void>();

  constructor(
    readonly nc: NatsConnection,
    private readonly jsm: JetStreamManager,
    readonly config: NatsBusConfig,
  ) {
    this.js = jetstream(nc, { timeout: config.requestTimeoutMs });
    void this.logConnectionStatus();
  }

  async publish(subject: string, payload: Uint8Array, options: { msgId: string }): Promise<PublishAck> {
    if (!subjectMatches(streamSubjects(this.config.subjectPrefix), subject)) {
      throw new Error(`subject ${subject} is outside the bus prefix ${this.config.subjectPrefix}`);
    }
    const send = () =>
      this.js.publish(subject, payload, { msgID: options.msgId, timeout: this.config.requestTimeoutMs });
    try {
      const ack = await send();
      return { duplicate: ack.duplicate, sequence: ack.seq };
    } catch (err) {
      if (!(await this.recreateIfMissing())) throw err;
      const ack = await send();
      return { duplicate: ack.duplicate, sequence: ack.seq };
    }
  }

  /**
   * Creates the stream again when the server no longer has it: a server restarted without its
   * JetStream store (no persistent volume, a replaced disk or node) answers every publish "no
   * responders" and every stream request "stream not found". The stream is made only at a role's
   * start, so until one restarted the relay failed every publish and the bus check of projections
   * and dispatcher stayed 503, with webhooks stopped. Re-made here, the relay goes on from its
   * checkpoint and the dispatcher makes its durable consumers again (ConsumeLoop). True when it
   * was missing and now exists; false when it exists, or cannot be told (then the caller's error
   * stands).
   */
  private recreateIfMissing(): Promise<boolean> {
    if (this.closed || this.lost !== null) return Promise.resolve(false);
    this.recreating ??= (async () => {
      try {
        if ((await streamInfo(this.jsm, this.config.stream)) !== null) return false;
        await ensureStream(this.jsm, this.config.wanted);
        this.config.logger.warn(
          'stream not found on the NATS server (its store lost, or the stream deleted): created it again',
        );
        return true;
      } catch {
        return false;
      } finally {
        this.recreating = null;
      }
    })();
    return this.recreating;
  }

  async consume(options: ConsumeOptions, handler: (message: BusMessage) => Promise<void>): Promise<Consumer> {
    if (this.closed) throw new Error('nats bus is closed');
    if (!NAME.test(options.durable)) throw new Error(`invalid durable name "${options.durable}"`);
    await retryTransient(
      () => this.ensureConsumer(options),
      this.config.startupTimeoutMs,
      this.config.logger.child({ durable: options.durable }),
      'consumer not created yet; retrying',
      (attempt, err) =>
        new Error(
          `consumer ${options.durable} not created within ${this.config.startupTimeoutMs} ms (${attempt} tries): ${describe(err)}`,
          { cause: err },
        ),
      this.closing.signal,
    );
    return new NatsConsumer(this, options, handler).open(this.consumers);
  }

  /** Creates the durable, or brings its ack wait and filter in line with the options. */
  async ensureConsumer(options: ConsumeOptions): Promise<void> {
    const wanted: Partial<ConsumerConfig> = {
      durable_name: options.durable,
      ack_policy: AckPolicy.Explicit,
      deliver_policy: DeliverPolicy.All,
      ack_wait: nanos(consumeSettings(options).ackWaitMs),
      max_deliver: -1,
      filter_subject: options.filterSubject,
      // 0 inherits the stream's replicas: a consumer whose state lives on one node would forget
      // its acks when that node dies, and redeliver everything to a failed-over dispatcher.
      num_replicas: this.config.consumerReplicas,
    };
    let info: Awaited<ReturnType<JetStreamManager['consumers']['info']>> | null = null;
    try {
      info = await this.jsm.consumers.info(this.config.stream, options.durable);
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
    }
    if (!info) {
      await this.jsm.consumers.add(this.config.stream, wanted);
      return;
    }
    if (info.config.ack_wait !== wanted.ack_wait || info.config.filter_subject !== wanted.filter_subject) {
      await this.jsm.consumers.update(this.config.stream, options.durable, {
        ack_wait: wanted.ack_wait,
        filter_subject: wanted.filter_subject,
      });
    }
  }

  async pull(durable: string): Promise<ConsumerMessages> {
    const consumer = await this.js.consumers.get(this.config.stream, durable);
    return consumer.consume({ max_messages: this.config.pullBatch, expires: this.config.pullExpiresMs });
  }

  /**
   * Ready while the stream answers through its leader: a stream without one (an election after its
   * leader died, or too few peers for a quorum) accepts no publish and no ack.
   */
  async health(): Promise<BusHealth> {
    const drift = this.config.drift.length > 0 ? { drift: this.config.drift } : {};
    if (this.nc.isClosed()) return { ok: false, detail: 'connection closed', ...drift };
    if (this.lost !== null) return { ...this.lostHealth(this.lost), ...drift };
    // A request in flight when the connection drops is not failed by the client: it waits for its
    // timeout. The loss ends the wait instead, so the check says what happened.
    let onLoss = (): void => undefined;
    const lost = new Promise<null>((resolve) => {
      onLoss = () => resolve(null);
      this.lossWaiters.add(onLoss);
    });
    try {
      const info = await Promise.race([this.jsm.streams.info(this.config.stream), lost]);
      if (info === null && this.lost !== null) return { ...this.lostHealth(this.lost), ...drift };
      if (info === null) return { ok: false, detail: 'connection lost', ...drift };
      return { ...streamHealth(info), ...drift };
    } catch (err) {
      if (this.lost !== null) return { ...this.lostHealth(this.lost), ...drift };
      return { ok: false, detail: err instanceof Error ? err.message : String(err), cause: err, ...drift };
    } finally {
      this.lossWaiters.delete(onLoss);
    }
  }

  private lostHealth({ since, server }: { since: number; server: string }): BusHealth {
    return {
      ok: false,
      detail:
        `not connected to NATS since ${new Date(since).toISOString()} (lost ${server}); reconnecting to ` +
        'the servers of NATS_URL every 0.5 s: is nats-server running and reachable?',
    };
  }

  /**
   * Starts trying again, in the background, a replica raise the start found refused (a cluster
   * only: a lone server's refusal is final). Once it takes, health() reports it updated.
   */
  retryRefusedRaise(retry: RaiseRetry): void {
    const refused = this.config.drift.find(
      (d): d is BusSettingDrift & { wanted: number } =>
        d.setting === 'replicas' && !d.updated && typeof d.wanted === 'number' && d.error !== undefined,
    );
    if (!refused || refused.error === NOT_CLUSTERED || this.raiseRetry) return;
    const stream = this.config.stream;
    const target: ReplicaRaiseTarget = {
      replicas: async () => (await this.jsm.streams.info(stream)).config.num_replicas,
      raise: async (replicas) => {
        await this.jsm.streams.update(stream, { num_replicas: replicas });
      },
    };
    this.raiseRetry = retryReplicaRaise(refused, target, retry, this.config.logger, this.closing.signal);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.closing.abort();
    await Promise.all([...this.consumers].map((consumer) => consumer.stop()));
    this.consumers.clear();
    await this.nc.close();
    // A try in flight fails with the connection; the retry then ends on the aborted signal.
    await this.raiseRetry;
  }

  /** Deletes the stream and everything in it: for tests and benchmarks with throwaway streams. */
  async deleteStream(): Promise<void> {
    await this.jsm.streams.delete(this.config.stream);
  }

  private async logConnectionStatus(): Promise<void> {
    for await (const status of this.nc.status()) {
      if (status.type === 'disconnect') {
        this.lost ??= { since: Date.now(), server: status.server };
        for (const wake of this.lossWaiters) wake();
        this.config.logger.warn({ server: status.server }, 'nats disconnected');
      } else if (status.type === 'reconnect') {
        this.lost = null;
        this.config.logger.info({ server: status.server }, 'nats reconnected');
      } else if (status.type === 'error') this.config.logger.error({ err: status.error }, 'nats error');
    }
  }
}

/** nc.flush(), failed once `ms` pass without the server's answer (the client waits for it until the connection is found stale). */
async function flushWithin(nc: NatsConnection, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      nc.flush(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer to a flush within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * One consume() call. The library's consume() iterator re-pulls after reconnects; this loop
 * recreates it (and the durable, if the server lost it) whenever the iterator ends for any other
 * reason than stop().
 */
class NatsConsumer extends ConsumeLoop {
  private messages: ConsumerMessages | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  private slotFreed: (() => void) | null = null;
  private wakeFromBackoff: (() => void) | null = null;
  private readonly logger: Logger;
  private readonly settings: ReturnType<typeof consumeSettings>;

  constructor(
    private readonly bus: NatsBus,
    private readonly options: ConsumeOptions,
    private readonly handler: (message: BusMessage) => Promise<void>,
  ) {
    super();
    this.logger = bus.config.logger.child({ durable: options.durable });
    this.settings = consumeSettings(options);
  }

  protected async interrupt(): Promise<void> {
    this.wakeFromBackoff?.();
    this.slotFreed?.();
    await this.messages?.close();
  }

  protected override async stopped(): Promise<void> {
    // Unconfirmed acks of the last messages reach the server before a successor resumes the
    // durable: the server answers a flush only after everything sent before it.
    if (this.options.confirmAck === false && !this.bus.nc.isClosed()) {
      try {
        await flushWithin(this.bus.nc, this.bus.config.requestTimeoutMs);
      } catch (err) {
        // The server away (the flush rejects 'connection disconnected') or silent (no answer within
        // the request timeout): the acks it did not get are redelivered to the successor, as after
        // a crash. Thrown, it ended the stop of the caller (the webhook dispatcher) before its
        // deliveries in flight were waited for; unbounded, a silent server held the stop until
        // SHUTDOWN_TIMEOUT_MS and SIGKILL.
        this.logger.warn(
          { err },
          'acks not confirmed at stop: NATS unreachable; the server redelivers what they acknowledged',
        );
      }
    }
  }

  protected async run(): Promise<void> {
    let attempt = 0;
    while (this.running) {
      try {
        if (attempt > 0) await this.bus.ensureConsumer(this.options);
        const messages = await this.bus.pull(this.options.durable);
        this.messages = messages;
        if (!this.running) {
          await messages.close();
          break;
        }
        void this.watch(messages);
        for await (const message of messages) {
          attempt = 0;
          // Buffered past stop(): hand it back now rather than after the ack wait.
          if (!this.running) {
            message.nak();
            continue;
          }
          await this.dispatch(message);
        }
        if (this.running) this.logger.warn('consume iterator ended; restarting');
      } catch (err) {
        if (this.running) this.logger.warn({ err }, 'consume failed; retrying');
      }
      if (this.running) await this.backoff(attempt++);
    }
    await Promise.all(this.inFlight);
  }

  private async dispatch(message: JsMsg): Promise<void> {
    if (this.settings.maxInFlight === 1) {
      await this.handle(message);
      return;
    }
    while (this.inFlight.size >= this.settings.maxInFlight) {
      await new Promise<void>((resolve) => {
        this.slotFreed = resolve;
      });
    }
    const task = this.handle(message).finally(() => {
      this.inFlight.delete(task);
      this.slotFreed?.();
    });
    this.inFlight.add(task);
  }

  private async handle(m: JsMsg): Promise<void> {
    let settled = false;
    const timeout = this.bus.config.requestTimeoutMs;
    const message: BusMessage = {
      subject: m.subject,
      // Getters: decoding the headers and parsing the reply subject cost a share of a busy
      // consumer's CPU, per message, for fields most handlers never read.
      get msgId() {
        return m.headers?.get('Nats-Msg-Id') ?? '';
      },
      data: m.data,
      get deliveryCount() {
        return m.info.deliveryCount;
      },
      ack: async () => {
        if (settled) return;
        settled = true;
        if (this.options.confirmAck === false) {
          // No reply inbox, timer or round trip per message; a lost ack means a redelivery later.
          m.ack();
          return;
        }
        // ackAck waits for the server's confirmation; a lost ack means a redelivery later.
        const confirmed = await m.ackAck({ timeout });
        if (!confirmed) throw new Error('ack was not confirmed by the server');
      },
      nak: (delayMs?: number) => {
        if (settled) return;
        settled = true;
        m.nak(delayMs && delayMs > 0 ? delayMs : undefined);
      },
      term: () => {
        if (settled) return;
        settled = true;
        m.term();
      },
    };
    try {
      await this.handler(message);
    } catch (err) {
      this.logger.warn({ err, subject: m.subject, seq: m.seq }, 'handler failed; nak');
      message.nak(this.settings.defaultNakDelayMs);
    }
  }

  /** The library resets its pulls after missed heartbeats; persistent trouble recreates the iterator. */
  private async watch(messages: ConsumerMessages): Promise<void> {
    for await (const status of messages.status()) {
      if (status.type === 'heartbeats_missed' && status.count >= 4) {
        this.logger.warn({ count: status.count }, 'heartbeats missed; recreating consumer iterator');
        await messages.close();
      } else if (status.type === 'consumer_not_found' || status.type === 'consumer_deleted') {
        this.logger.warn({ status: status.type }, 'durable consumer missing; recreating it');
        await messages.close();
      }
    }
  }

  private async backoff(attempt: number): Promise<void> {
    const ms = Math.min(5_000, 100 * 2 ** attempt);
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wakeFromBackoff = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.wakeFromBackoff = null;
  }
}

/** What stream info says of a stream's copies (a standalone server has no `cluster`). */
export interface StreamCopies {
  config: { num_replicas: number };
  cluster?: { leader?: string; replicas?: { current: boolean; offline?: boolean }[] };
}

/**
 * The stream is ready while a majority of its copies is up to date, the leader's included: below
 * that quorum it takes no writes (every publish answers "no responders" or times out), even while
 * the one node left still answers stream info. The leader's server name is for the log only
 * (`logged`): a cluster's nodes are most often named as their hosts (a StatefulSet's pods,
 * compose's services), and /readyz names no host.
 */
export function streamHealth(info: StreamCopies): BusHealth {
  // A server outside a cluster holds one copy, whatever the stream's config asks for.
  if (info.cluster === undefined)
    return { ok: true, replicas: { wanted: info.config.num_replicas, current: 1 } };
  const wanted = info.config.num_replicas;
  const leader = info.cluster.leader;
  const current =
    (leader ? 1 : 0) + (info.cluster.replicas ?? []).filter((p) => p.current && !p.offline).length;
  const quorum = Math.floor(wanted / 2) + 1;
  const replicas = { wanted, current };
  const logged = leader ? { logged: { leader } } : {};
  if (current >= quorum && leader) return { ok: true, replicas, ...logged };
  return {
    ok: false,
    detail: `the stream has lost its quorum: ${current} of ${wanted} copies current, ${quorum} needed${leader ? '' : ', no leader'}`,
    replicas,
    ...logged,
  };
}
