import { keptRevision } from '../engine/answer-revisions.ts';
import { AnswerJsonCache, type ResultJson } from './mcp/answer-json.ts';

/**
 * The JSON of served answers, by the revision they were served from: one cache per process,
 * shared by every channel (MCP sessions, one-shot and 2026 calls, keyed HTTP) and every caller.
 */
const answers = new AnswerJsonCache();

/**
 * The revision a tool's value was served from: a recorded verdict's id and hash fix every field
 * the engine gave it; an answer the engine keeps for a candle has a revision of its own (see
 * answer-revisions.ts); null for anything else.
 */
export function answerRevision(tool: string, value: Record<string, unknown>): string | null {
  // The engine hands out one object per revision and never changes it: its name is made once,
  // not spelt (and hashed for the lookup) on every call.
  const known = revisions.get(value);
  if (known !== undefined && known.tool === tool) return known.revision;
  const revision = revisionOf(tool, value);
  revisions.set(value, { tool, revision });
  return revision;
}

const revisions = new WeakMap<object, { tool: string; revision: string | null }>();

function revisionOf(tool: string, value: Record<string, unknown>): string | null {
  const { verdictId, signalHash } = value;
  if (typeof verdictId !== 'string' || typeof signalHash !== 'string') {
    const kept = keptRevision(value);
    return kept === undefined ? null : `${tool}\u0000${kept}`;
  }
  return `${tool}\u0000${verdictId}\u0000${signalHash}`;
}

/** The JSON of an answer built from a value served from `revision` (see AnswerJsonCache). */
export function answerJson(structured: Record<string, unknown>, revision: string | null): ResultJson {
  return answers.serialise(structured, revision);
}

/**
 * The JSON (and escape) of `{...value, _service: service}`, the value as the engine served it
 * and the channel's own block after it, without copying the value (see serialiseWith).
 */
export function answerJsonWithService(
  tool: string,
  value: Record<string, unknown>,
  service: unknown,
): ResultJson {
  return answers.serialiseWith(value, '_service', service, answerRevision(tool, value));
}

/** The UTF-8 of `{...value, _service: service}`, without copying the value (see serialiseWith). */
export function answerBytesWithService(
  tool: string,
  value: Record<string, unknown>,
  service: unknown,
): Buffer {
  return answers.bytesWith(value, '_service', service, answerRevision(tool, value));
}
