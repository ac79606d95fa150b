import {
  type FastifyBaseLogger,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import { type Bindings, type ChildLoggerOptions, type Logger, stdTimeFunctions, symbols } from 'pino';
import { hasKeyText, isCredentialParam, KEY_TEXT } from '../shared/credential-params.ts';
import { REDACTED } from '../shared/logger.ts';

/**
 * One log line per request instead of Fastify's two. Profiled under load, the default pair
 * ("incoming request" with the serialised request, then "request completed") was the largest
 * single cost of a bare route after the socket writes: two redacted JSON lines written
 * synchronously per call. The completion line carries what the pair did (method, URL, status,
 * time, request id); the incoming line is kept at debug, for following a request that hangs.
 * Errors are logged by the default controller, unchanged.
 *
 * The completion line of a request that succeeded is the access log, and the one log line every
 * request pays for (the 402 quote is answered in ~50 µs, of which pino's generic path over the
 * line's object and a write(2) of its own took ~8): it is built here from the logger's own parts
 * (level, time and bindings exactly as pino writes them) and the lines of one event-loop turn
 * are written to the logger's stream together, once the turn's I/O callbacks have run. Every
 * line is still written, with its own time; what a kill -9 can lose is the access lines of the
 * turn in progress, for requests already answered. Lines that report a failure (the error
 * path, and everything logged through `request.log`) still go through pino at once.
 */
export class OneLinePerRequest extends LogController {
  override incomingRequest(request: FastifyRequest): void {
    request.log.debug({ req: loggedRequest(request) }, 'incoming request');
  }

  // Fastify's own lines that name the request's URL: the same, with the URL as loggedUrl gives it.
  override defaultErrorLog(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if (this.isLogDisabled(request)) return;
    if (reply.statusCode >= 500) {
      reply.log.error({ req: loggedRequest(request), res: reply, err: error }, error?.message);
    } else {
      reply.log.info({ res: reply, err: error }, error?.message);
    }
  }

  override writeHeadError(error: Error, request: FastifyRequest, reply: FastifyReply): void {
    if (this.isLogDisabled(request)) return;
    reply.log.warn({ req: loggedRequest(request), res: reply, err: error }, error?.message);
  }

  override routeNotFound(request: FastifyRequest): void {
    if (this.isLogDisabled(request)) return;
    request.log.info(`Route ${request.raw.method}:${loggedUrl(request.raw.url ?? '')} not found`);
  }

  override requestCompleted(
    error: Error | null | undefined,
    request: FastifyRequest,
    reply: FastifyReply,
  ): void {
    if (error) {
      super.requestCompleted(error, request, reply);
      return;
    }
    const requestLog = reply.log as RequestLogger | Logger;
    const url = loggedUrl(request.url);
    if (isProbe(url)) {
      // Probes every few seconds from each balancer would be most of the access log at info:
      // an answered /readyz is logged at debug (a failed one still went through pino above).
      if (requestLog.isLevelEnabled('debug')) {
        (requestLog as Logger).debug(
          {
            method: request.method,
            url,
            statusCode: reply.statusCode,
            responseTime: toMicroseconds(reply.elapsedTime),
          },
          'request completed',
        );
      }
      return;
    }
    if (!requestLog.isLevelEnabled('info')) return;
    // The request's own logger when it was built; else its parent, with the request's bindings
    // written as the child would write them.
    const lazy = requestLog instanceof RequestLogger ? requestLog.pending() : null;
    const log = lazy?.parent ?? (requestLog instanceof RequestLogger ? requestLog.logger : requestLog);
    const stream = plainStream(log);
    const fields = {
      method: request.method,
      url,
      statusCode: reply.statusCode,
      responseTime: reply.elapsedTime,
    };
    if (stream === null || (lazy !== null && lazy.chindings === null)) {
      // Through pino: the same time to the microsecond as a line written here.
      (requestLog as Logger).info(
        { ...fields, responseTime: toMicroseconds(fields.responseTime) },
        'request completed',
      );
      return;
    }
    const parts = log as unknown as PinoParts;
    accessLines.add(
      stream,
      `${parts[symbols.lsCacheSym][INFO]}${timeOf(parts[symbols.timeSym])}${parts[symbols.chindingsSym]}${lazy?.chindings ?? ''}` +
        `,"method":${jsonString(fields.method)},"url":${jsonString(fields.url)}` +
        `,"statusCode":${fields.statusCode},"responseTime":${milliseconds(fields.responseTime)}` +
        `,"msg":"request completed"${parts[symbols.endSym]}`,
    );
  }
}

const INFO = 30;

/**
 * The request URL as logged: the value of each query parameter named like a secret, or holding a
 * key, replaced by [redacted], and key text in the path too. A key sent in the query string (which
 * the API refuses: keys go in Authorization) was written whole to the access log. A URL without a
 * query and without key text is returned as it is: the check is two searches of a short string.
 */
export function loggedUrl(url: string): string {
  const q = url.indexOf('?');
  const rawPath = q === -1 ? url : url.slice(0, q);
  const path = hasKeyText(rawPath) ? rawPath.replace(KEY_TEXT, REDACTED) : rawPath;
  if (q === -1) return path;
  const params = url.slice(q + 1).split('&');
  for (let i = 0; i < params.length; i++) {
    const param = params[i]!;
    if (!isCredentialParam(param)) continue;
    const eq = param.indexOf('=');
    params[i] = eq === -1 ? REDACTED : `${param.slice(0, eq)}=${REDACTED}`;
  }
  return `${path}?${params.join('&')}`;
}

/**
 * The request as Fastify's `req` serializer reads it (method, url, headers, host, ip, socket),
 * with the URL as loggedUrl gives it.
 */
function loggedRequest(request: FastifyRequest) {
  return {
    method: request.method,
    url: loggedUrl(request.url),
    headers: request.headers,
    host: request.host,
    ip: request.ip,
    socket: request.socket,
  };
}

/**
 * The readiness probe (/readyz, with or without a query), polled every few seconds by each load
 * balancer and orchestrator: answered, it is logged at debug. /healthz keeps its info line (the
 * HTTP bench measures every request's floor on it, access line included).
 */
function isProbe(url: string): boolean {
  return url.startsWith('/readyz') && (url.length === 7 || url.charCodeAt(7) === 0x3f);
}

type LogArgs = unknown[];
type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/**
 * Fastify's per-request logger (`request.log`), which builds the pino child with the request id
 * only when something logs through it. Fastify made that child for every request (pino's child
 * copies the parent's formatters and stringifies the bindings: ~0.9 µs of a /verify at 36 µs under
 * perf), while a request that succeeds logs only its access line, which OneLinePerRequest
 * writes from the parent's parts and the request's bindings. Methods below the level return
 * without building anything, as pino's own do.
 */
export class RequestLogger implements FastifyBaseLogger {
  #child: Logger | undefined;

  constructor(
    readonly parent: Logger,
    private readonly ownBindings: Bindings,
  ) {}

  /** The pino child, built on first use. */
  get logger(): Logger {
    if (this.#child === undefined) this.#child = this.parent.child(this.ownBindings);
    return this.#child;
  }

  /**
   * While no child was built: the parent, and the child's part of a line (its bindings as pino
   * would write them); chindings null when pino would write them some other way (a serializer or
   * redaction of a binding), which only the child itself can. null once the child exists.
   */
  pending(): { parent: Logger; chindings: string | null } | null {
    if (this.#child !== undefined) return null;
    return { parent: this.parent, chindings: chindingsOf(this.parent, this.ownBindings) };
  }

  get level(): string {
    return (this.#child ?? this.parent).level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  isLevelEnabled(level: string): boolean {
    return (this.#child ?? this.parent).isLevelEnabled(level);
  }

  /** A line at `level`, through the child (built now) when the level is enabled. */
  private write(level: LogLevel, args: LogArgs): void {
    if (this.isLevelEnabled(level)) (this.logger[level] as (...a: LogArgs) => void)(...args);
  }

  fatal(...args: LogArgs): void {
    this.write('fatal', args);
  }

  error(...args: LogArgs): void {
    this.write('error', args);
  }

  warn(...args: LogArgs): void {
    this.write('warn', args);
  }

  info(...args: LogArgs): void {
    this.write('info', args);
  }

  debug(...args: LogArgs): void {
    this.write('debug', args);
  }

  trace(...args: LogArgs): void {
    this.write('trace', args);
  }

  silent(): void {}

  child(bindings: Bindings, options?: ChildLoggerOptions): Logger {
    return this.logger.child(bindings, options);
  }

  bindings(): Bindings {
    return this.logger.bindings();
  }

  flush(cb?: (err?: Error) => void): void {
    this.parent.flush(cb);
  }
}

/** Binding keys pino leaves out of a line (they configure the child instead). */
const BINDING_OPTIONS = new Set(['level', 'serializers', 'formatters', 'customLevels']);

/**
 * Per parent logger, per binding key: what a child of it writes before a plain string value of
 * that key (`,"reqId":`), or null where it would write the value some other way (a serializer, a
 * redaction, a key pino takes as an option). A logger's serializers and redaction are fixed when it
 * is made, so this is worked out once, not on every request.
 */
const keyPrefixes = new WeakMap<Logger, Map<string, string | null>>();

function keyPrefix(parent: Logger, key: string): string | null {
  let prefixes = keyPrefixes.get(parent);
  if (prefixes === undefined) {
    prefixes = new Map();
    keyPrefixes.set(parent, prefixes);
  }
  let prefix = prefixes.get(key);
  if (prefix === undefined) {
    const parts = parent as unknown as Record<symbol, unknown>;
    const serializers = parts[symbols.serializersSym] as Record<string, unknown> | undefined;
    const stringifiers = parts[symbols.stringifiersSym] as Record<string | symbol, unknown> | undefined;
    const plain =
      !BINDING_OPTIONS.has(key) &&
      !serializers?.[key] &&
      !stringifiers?.[key] &&
      stringifiers?.[symbols.wildcardFirstSym] === undefined;
    prefix = plain ? `,${JSON.stringify(key)}:` : null;
    prefixes.set(key, prefix);
  }
  return prefix;
}

/** The bindings as pino's child of `parent` would write them; null where only the child can. */
function chindingsOf(parent: Logger, bindings: Bindings): string | null {
  let out = '';
  for (const key in bindings) {
    const value: unknown = bindings[key];
    if (value === undefined) continue;
    const prefix = keyPrefix(parent, key);
    if (prefix === null || typeof value !== 'string') return null;
    out += prefix + jsonString(value);
  }
  return out;
}

/**
 * JSON.stringify of a string, without the call for the common case (an id, a path: printable
 * ASCII with no quote or backslash). A loop rather than a regular expression: under perf the
 * test of the request URL went through V8's runtime on every request (1.7 % of GET /healthz).
 */
function jsonString(value: string): string {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return JSON.stringify(value);
  }
  return `"${value}"`;
}

/**
 * Fastify's childLoggerFactory: a RequestLogger, or the logger's own child where the route asks
 * for a level or other options of its own, or the logger is not pino's.
 */
export const requestLoggers: NonNullable<FastifyServerOptions['childLoggerFactory']> = (
  logger,
  bindings,
  options,
) => {
  if (hasOwnKeys(options) || typeof (logger as Partial<Logger>).isLevelEnabled !== 'function') {
    return logger.child(bindings, options);
  }
  return new RequestLogger(logger as unknown as Logger, bindings);
};
/** Whether `value` has any own key; Object.keys would build an array on every request. */
function hasOwnKeys(value: object): boolean {
  for (const key in value) if (Object.hasOwn(value, key)) return true;
  return false;
}

/** Not in pino's typings, though exported beside the others. */
const MSG_PREFIX = (symbols as unknown as Record<string, symbol>).msgPrefixSym!;

/**
 * A duration in milliseconds as JSON, to the microsecond (`0.812`), from integers: the elapsed
 * time is a double with a dozen digits past the point, and writing one out took V8's slow
 * double-to-string path on every access line (about a quarter of the line's cost under perf).
 * Not finite (pino writes null for that) or past 2^31 µs: written as pino would.
 */
export function milliseconds(value: number): string {
  if (!toTheMicrosecond(value)) return Number.isFinite(value) ? String(value) : 'null';
  const us = Math.round(value * 1_000);
  const whole = Math.floor(us / 1_000);
  const part = us - whole * 1_000;
  if (part === 0) return `${whole}`;
  // The fraction's digits without trailing zeros, as a number prints them (0.81, not 0.810).
  if (part % 100 === 0) return `${whole}.${part / 100}`;
  if (part % 10 === 0) return `${whole}.${part < 100 ? '0' : ''}${part / 10}`;
  return `${whole}.${part < 10 ? '00' : part < 100 ? '0' : ''}${part}`;
}
/** `value` rounded to the microsecond where milliseconds() writes it so; else as it is. */
function toMicroseconds(value: number): number {
  return toTheMicrosecond(value) ? Math.round(value * 1_000) / 1_000 : value;
}
/** Whether a duration is written to the microsecond: its microseconds stay small integers. */
function toTheMicrosecond(value: number): boolean {
  return value >= 0 && value < MAX_SMALL_MS;
}
/** Microseconds that stay small integers (V8 keeps their decimal text cached). */
const MAX_SMALL_MS = 2 ** 31 / 1_000;

/**
 * pino's time part of a line. Its default (epochTime, `,"time":<ms>`) is remembered for the
 * millisecond it was made in: the lines of one millisecond share it, where each wrote the 13-digit
 * number out again (a double to V8, so its slow path). Any other time function is called per line.
 */
function timeOf(time: () => string): string {
  if (time !== stdTimeFunctions.epochTime) return time();
  const now = Date.now();
  if (now !== lastMs) {
    lastMs = now;
    // pino's own function writes it (it reads the clock again: at most a millisecond later).
    lastTime = time();
  }
  return lastTime;
}
let lastMs = -1;
let lastTime = '';

interface LineStream {
  write(chunk: string): unknown;
  [key: symbol]: unknown;
}

type PinoParts = Record<symbol, unknown> & {
  [symbols.lsCacheSym]: Record<number, string>;
  [symbols.timeSym]: () => string;
  [symbols.chindingsSym]: string;
  [symbols.endSym]: string;
};

/**
 * The stream a pino logger writes its lines to, when the line can be built without pino and
 * mean the same: no mixin, hooks, log formatter, nested key or message prefix, the default
 * message key, and a stream that does not ask for each line's metadata (pino.multistream).
 * null for anything else (another logger, or a pino configured otherwise), which is logged
 * through the logger itself.
 */
function plainStream(log: Logger): LineStream | null {
  let stream = plainStreams.get(log);
  if (stream === undefined) {
    stream = findPlainStream(log);
    plainStreams.set(log, stream);
  }
  return stream;
}

/** plainStream's answers: a logger's stream, hooks and formatters are fixed when it is made. */
const plainStreams = new WeakMap<Logger, LineStream | null>();

function findPlainStream(log: Logger): LineStream | null {
  const parts = log as unknown as Record<symbol, unknown>;
  const stream = parts[symbols.streamSym] as LineStream | undefined;
  if (stream === undefined || typeof stream.write !== 'function') return null;
  if (stream[symbols.needsMetadataGsym] === true) return null;
  const hooks = parts[symbols.hooksSym] as { streamWrite?: unknown; logMethod?: unknown } | undefined;
  const formatters = parts[symbols.formattersSym] as { log?: unknown } | undefined;
  if (
    parts[symbols.mixinSym] ||
    hooks?.streamWrite ||
    hooks?.logMethod ||
    formatters?.log ||
    parts[symbols.nestedKeySym] ||
    parts[MSG_PREFIX] ||
    parts[symbols.messageKeySym] !== 'msg' ||
    typeof (parts[symbols.lsCacheSym] as Record<number, string> | undefined)?.[INFO] !== 'string' ||
    typeof parts[symbols.timeSym] !== 'function' ||
    typeof parts[symbols.chindingsSym] !== 'string' ||
    typeof parts[symbols.endSym] !== 'string'
  ) {
    return null;
  }
  return stream;
}

/** Lines past this many characters are written at once rather than at the end of the turn. */
const BATCH_CHARS = 64 * 1024;

/**
 * Access lines waiting for the end of the turn, per stream. Written in one write per stream and
 * turn, on process exit too (an orderly shutdown loses none).
 */
export class TurnLines {
  private readonly pending = new Map<LineStream, string>();
  private scheduled = false;
  private readonly flushTurn = () => {
    this.scheduled = false;
    this.flush();
  };

  add(stream: LineStream, line: string): void {
    const text = (this.pending.get(stream) ?? '') + line;
    if (text.length >= BATCH_CHARS) {
      this.pending.delete(stream);
      stream.write(text);
      return;
    }
    this.pending.set(stream, text);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.flushTurn);
    }
  }

  flush(): void {
    for (const [stream, text] of this.pending) {
      this.pending.delete(stream);
      stream.write(text);
    }
  }
}

const accessLines = new TurnLines();

/**
 * Hands the access lines of the turn in progress to their streams now: on process exit, and for a
 * process about to SIGKILL itself (main's killSelf), which no exit hook outlives.
 */
export function flushAccessLines(): void {
  accessLines.flush();
}
process.once('exit', flushAccessLines);
