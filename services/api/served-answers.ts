import { keptRevision } from '../engine/answer-revisions.ts';
import { AnswerJsonCache, joinBytes, type ResultJson } from './mcp/answer-json.ts';

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
 * The UTF-8 of JSON.stringify(`structured`), an answer made of `value` (the tool's own result)
 * and what the channel adds: the start of a revision's answers is encoded once, not per call.
 */
export function answerBytes(
  tool: string,
  value: Record<string, unknown>,
  structured: Record<string, unknown>,
): Buffer {
  const made = answers.serialise(structured, answerRevision(tool, value));
  return made.split ? joinBytes([made.split.head, made.split.tail]) : Buffer.from(made.json);
}
