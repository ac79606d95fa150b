import { type FastifyReply, type FastifyRequest, LogController } from 'fastify';
import { type Logger, symbols } from 'pino';

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
    request.log.debug({ req: request }, 'incoming request');
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
    const log = reply.log as Logger;
    if (!log.isLevelEnabled('info')) return;
    const stream = plainStream(log);
    const fields = {
      method: request.method,
      url: request.url,
      statusCode: reply.statusCode,
      responseTime: reply.elapsedTime,
    };
    if (stream === null) {
      log.info(fields, 'request completed');
      return;
    }
    const parts = log as unknown as PinoParts;
    accessLines.add(
      stream,
      `${parts[symbols.lsCacheSym][INFO]}${parts[symbols.timeSym]()}${parts[symbols.chindingsSym]}` +
        `,"method":${JSON.stringify(fields.method)},"url":${JSON.stringify(fields.url)}` +
        `,"statusCode":${fields.statusCode},"responseTime":${finite(fields.responseTime)}` +
        `,"msg":"request completed"${parts[symbols.endSym]}`,
    );
  }
}

const INFO = 30;
/** Not in pino's typings, though exported beside the others. */
const MSG_PREFIX = (symbols as unknown as Record<string, symbol>).msgPrefixSym!;

/** pino writes a number that is not finite as null. */
function finite(value: number): string {
  return Number.isFinite(value) ? String(value) : 'null';
}

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
process.once('exit', () => accessLines.flush());
