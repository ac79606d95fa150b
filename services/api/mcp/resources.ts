import { randomUUID } from 'node:crypto';
import { TRACK_RECORD_WINDOWS, type TrackRecordWindow } from '../../../contracts/history.ts';
import { TOOLS } from '../../../contracts/tools.ts';
import { keptRevision } from '../../engine/answer-revisions.ts';
import { MCP_INVALID_PARAMS } from './error-codes.ts';
import type { ToolRegistry } from './tool-registry.ts';

/**
 * The MCP resources: the track record per window, the get_track_record tool's answer for that
 * window alone (GET /api/track-record's, its lines without buckets, no series). Reading one is free and unmetered, as the public route is; the tool
 * is what a host calls (and what x402 sells), the resource what a host attaches as context.
 */

/**
 * MCP's code for a resource that does not exist ("Resource not found", 2025 revisions); on the
 * 2026-07-28 revision the SDK sends it as -32602, as that revision says.
 */
export const RESOURCE_NOT_FOUND = -32002;

const TRACK_RECORD_URI = 'track-record://';

export interface McpResource {
  uri: string;
  name: string;
  title: string;
  description: string;
  mimeType: 'application/json';
}

/**
 * What a resource carries, in its own words: a read takes no arguments, so it is the tool's answer
 * asked for the window alone (trackRecordForAgents), never the narrowed one the tool's description
 * goes on to promise for an exchange or timeframe.
 */
const RESOURCE_CARRIES =
  "The service's own track record over the window, as JSON (get_track_record's answer for the window alone, no exchange or timeframe): the overall line and a line per venue and timeframe (calls, hit rate with its 95 % interval beside always-BUY, always-SELL and random calls, mean net bps after the fee, the risk forecast's band coverage and σ served ÷ realised), without their confidence buckets; the free baselines measured out of sample for every cell, the risk baselines at the six-candle horizon only; the shipped funding-carry fit. It carries no day-by-day series. For one venue's or timeframe's confidence buckets and its next-candle and one-day risk baselines, call get_track_record with that exchange or timeframe; for the series, GET /api/track-record.";

export const RESOURCES: McpResource[] = TRACK_RECORD_WINDOWS.map((window) => ({
  uri: `${TRACK_RECORD_URI}${window}`,
  name: `track-record-${window}`,
  title: `${TOOLS.get_track_record.title} (${window === 'all' ? 'all time' : `last ${window}`})`,
  description: `${RESOURCE_CARRIES} Window: ${window === 'all' ? 'all time' : `the last ${window}`}.`,
  mimeType: 'application/json',
}));

export const RESOURCE_TEMPLATES = [
  {
    uriTemplate: `${TRACK_RECORD_URI}{window}`,
    name: 'track-record',
    title: TOOLS.get_track_record.title,
    description: `${RESOURCE_CARRIES} window: ${TRACK_RECORD_WINDOWS.join(', ')}.`,
    mimeType: 'application/json',
  },
];

/**
 * A resources/read refused, as a JSON-RPC error: both SDK generations send a thrown error's code,
 * message and data as they are. Not the 1.x McpError, whose message already reads "MCP error
 * <code>: …", which a client then prefixes again.
 */
export class ResourceReadError extends Error {
  override readonly name = 'ResourceReadError';
  constructor(
    readonly code: number,
    message: string,
    readonly data?: Record<string, unknown>,
  ) {
    super(message);
  }
}

const SERVED = () => RESOURCES.map((r) => r.uri).join(', ');

/** A read of a URI this server does not serve. */
const notFound = (uri: string) =>
  new ResourceReadError(RESOURCE_NOT_FOUND, `no resource ${uri}; resources: ${SERVED()}`, { uri });

/**
 * The params of resources/read: an object with a string `uri`, else -32602 in words (the SDKs'
 * own check of the request answered -32603 with zod's issue list).
 */
function uriOf(params: unknown): string {
  const uri = (params as { uri?: unknown } | undefined)?.uri;
  if (typeof uri === 'string') return uri;
  throw new ResourceReadError(
    MCP_INVALID_PARAMS,
    `resources/read needs params.uri, a string: one of ${SERVED()}`,
  );
}

/** resources/read: the track record of the URI's window, as JSON text. */
export async function readResource(
  registry: ToolRegistry,
  params: unknown,
): Promise<{ contents: { uri: string; mimeType: string; text: string }[] }> {
  const uri = uriOf(params);
  const window = uri.startsWith(TRACK_RECORD_URI) ? uri.slice(TRACK_RECORD_URI.length) : null;
  const tool = registry.get('get_track_record');
  if (window === null || !(TRACK_RECORD_WINDOWS as readonly string[]).includes(window) || !tool) {
    throw notFound(uri);
  }
  const record = await tool.run({ window: window as TrackRecordWindow }, { requestId: randomUUID() });
  return { contents: [{ uri, mimeType: 'application/json', text: textOf(record) }] };
}

/** The JSON of each kept answer read (one the tool hands out again unchanged), made once per answer. */
const texts = new WeakMap<object, string>();

/**
 * `record`'s JSON: for an answer the tool keeps (the track record's, made once per record
 * position: services/history/record-cache.ts), the text made at its first read, which cannot go
 * stale (a kept answer is never changed once handed out); anything else is serialised per read.
 */
function textOf(record: object): string {
  let text = texts.get(record);
  if (text === undefined) {
    text = JSON.stringify(record);
    if (keptRevision(record) !== undefined) texts.set(record, text);
  }
  return text;
}
