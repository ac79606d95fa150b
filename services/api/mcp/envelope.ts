/**
 * The JSON-RPC envelope of a POST to the MCP path, checked before any transport and before the
 * rate limit debits a batch (a batch refused here counts as one request), so valid JSON that is
 * not a JSON-RPC message is Invalid Request, never a parse error, and batches follow the
 * revision. Alike with or without a session:
 * - a message that is not a JSON-RPC 2.0 request, notification or response is -32600 Invalid
 *   Request (HTTP 400), its id echoed when it is a string or a number, else null;
 * - a request id must be a string or an integer (MCP: "a string or integer ID"; JSON-RPC 2.0
 *   allows any number), on every method alike;
 * - a request or notification carries no member but jsonrpc, id, method and params, a response
 *   none but jsonrpc, id and result or error (the SDKs' schemas are strict);
 * - a request or notification carries no `result` or `error`; a response's `result` is an
 *   object, its `error` an object with an integer code and a string message (the SDK transports
 *   called these a parse error, -32700 with id null);
 * - a batch is refused whole (-32600, id null) when it is empty (JSON-RPC 2.0) or on revision
 *   2025-06-18 and later (MCP removed JSON-RPC batching there); one holding initialize is refused
 *   with that message's id (the handshake is sent alone);
 * - in a batch that is served, a message refused as above or by its params (params-check.ts:
 *   params not an object, a `_meta` MCP does not define) gets its own -32600 in the answer array,
 *   named by its index, and the other messages are served (JSON-RPC 2.0 §6: checkEnvelope's faults);
 * - an empty body is not JSON: the catalog's INVALID_JSON (-32700, data.code INVALID_JSON, as a
 *   malformed body is answered), id null.
 */

import { ERRORS, type ErrorCode } from '../../../contracts/errors.ts';
import { MCP_INVALID_REQUEST } from './error-codes.ts';
import { isPlainObject, kindOf } from './json-shape.ts';
import { metaIssue, type ParamsRefusal } from './params-check.ts';

/** The first revision without JSON-RPC batching (revisions are dates: later ones sort after). */
export const NO_BATCH_REVISION = '2025-06-18';

const isRequestId = (id: unknown): id is string | number =>
  typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id));

const REQUEST_MEMBERS = new Set(['jsonrpc', 'id', 'method', 'params']);
const RESPONSE_MEMBERS = new Set(['jsonrpc', 'id', 'result', 'error']);

/** A member of `message` that is not in `members` (the SDKs' schemas are strict), or null. */
function otherMember(message: Record<string, unknown>, members: ReadonlySet<string>): string | null {
  // for-in over the parsed body's own keys (JSON.parse makes no inherited enumerable ones).
  for (const key in message) if (!members.has(key)) return key;
  return null;
}

/** What is wrong with one message, in words; null when it is a JSON-RPC request, notification or response. */
function messageFault(message: unknown): string | null {
  if (!isPlainObject(message)) return `a JSON-RPC message is an object, not ${kindOf(message)}`;
  if (message.jsonrpc !== '2.0') return 'jsonrpc must be "2.0"';
  if ('method' in message) {
    if (typeof message.method !== 'string') return 'method must be a string';
    if ('result' in message || 'error' in message)
      return `a request or notification (it has a method) carries no ${'result' in message ? 'result' : 'error'}`;
    const other = otherMember(message, REQUEST_MEMBERS);
    if (other !== null)
      return `a request or notification has no member ${JSON.stringify(other)} (only jsonrpc, id, method, params)`;
    // A notification carries no id at all; a request's is a string or an integer, never null.
    if ('id' in message && !isRequestId(message.id))
      return `id must be a string or an integer, not ${kindOf(message.id)}${typeof message.id === 'number' ? ` (${message.id})` : ''}`;
    return null;
  }
  // A response to the server's request: a result or an error, for a request id (an error may name none).
  const error = 'error' in message;
  if (!error && !('result' in message))
    return 'a message without method must be a response (result or error)';
  if (error && 'result' in message) return 'a response carries a result or an error, not both';
  const other = otherMember(message, RESPONSE_MEMBERS);
  if (other !== null)
    return `a response has no member ${JSON.stringify(other)} (only jsonrpc, id, result or error)`;
  if (!isRequestId(message.id) && !(error && (message.id === null || message.id === undefined)))
    return `a response's id must be a string or an integer, not ${kindOf(message.id)}`;
  if (!error)
    return isPlainObject(message.result)
      ? null
      : `a response's result must be an object, not ${kindOf(message.result)}`;
  const e = message.error;
  if (!isPlainObject(e)) return `a response's error must be an object, not ${kindOf(e)}`;
  if (typeof e.code !== 'number' || !Number.isSafeInteger(e.code))
    return `a response's error.code must be an integer, not ${kindOf(e.code)}`;
  if (typeof e.message !== 'string')
    return `a response's error.message must be a string, not ${kindOf(e.message)}`;
  return null;
}

/** What is wrong with a batched request's or notification's params, in words; null when nothing. */
function paramsFault(message: Record<string, unknown>): string | null {
  if (!('method' in message)) return null;
  const params = message.params;
  if (params === undefined) return null;
  if (!isPlainObject(params)) return `params must be an object (or left out), not ${kindOf(params)}`;
  return metaIssue(params._meta)?.message ?? null;
}

const refusal = (message: string, id: string | number | null): ParamsRefusal => ({
  status: 400,
  code: MCP_INVALID_REQUEST,
  message: `Invalid Request: ${message}`,
  id,
});

/** A batch message at fault: its index, its id as far as it reads (else null), and the -32600 it is answered. */
export interface BatchMemberFault {
  index: number;
  id: string | number | null;
  message: string;
}

/**
 * What the envelope check finds in a POST body: the refusal of the whole body, or none and the
 * messages of a batch at fault (not JSON-RPC 2.0, params not an object, a `_meta` MCP does not
 * define), each answered with its own -32600 in the answer array, with its id when it carries a
 * string or a number (as a refused message alone is), while the others are served (JSON-RPC 2.0
 * §6). A body that is not a batch has no members at fault: it is refused whole or not at all.
 */
export interface EnvelopeCheck {
  refusal: (ParamsRefusal & { data?: { code: ErrorCode } }) | null;
  faults: readonly BatchMemberFault[];
}

/** A body with nothing to refuse (a GET's or DELETE's, which has none, included). */
export const ENVELOPE_PASSED: EnvelopeCheck = Object.freeze({ refusal: null, faults: Object.freeze([]) });
const refused = (refusal: NonNullable<EnvelopeCheck['refusal']>): EnvelopeCheck => ({
  refusal,
  faults: ENVELOPE_PASSED.faults,
});

/** A message's id as a refusal echoes it: a string or a number, else null. */
function echoedId(message: unknown): string | number | null {
  const id = isPlainObject(message) ? message.id : undefined;
  return typeof id === 'string' || typeof id === 'number' ? id : null;
}

/**
 * The envelope of a POST body checked as above, in one pass over a batch's messages. `version` is
 * the protocol revision the request speaks: its MCP-Protocol-Version header, else its session's.
 */
export function checkEnvelope(body: unknown, version: string | undefined): EnvelopeCheck {
  if (body === undefined) {
    // Worded as the catalog words a malformed body (json-body.ts), saying what is wrong with it.
    const code = 'INVALID_JSON';
    return refused({
      status: ERRORS[code].status,
      code: ERRORS[code].rpc,
      message: `${ERRORS[code].message}: it is empty; send a JSON-RPC message`,
      id: null,
      data: { code },
    });
  }
  if (!Array.isArray(body)) {
    const fault = messageFault(body);
    return fault === null ? ENVELOPE_PASSED : refused(refusal(fault, echoedId(body)));
  }
  if (body.length === 0) return refused(refusal('an empty batch', null));
  if (version !== undefined && version >= NO_BATCH_REVISION)
    return refused(
      refusal(`JSON-RPC batches are not part of MCP ${version} (removed in ${NO_BATCH_REVISION})`, null),
    );
  const faults: BatchMemberFault[] = [];
  for (let index = 0; index < body.length; index++) {
    const message: unknown = body[index];
    // A message at fault is answered on its own, not the batch refused.
    const fault = messageFault(message) ?? paramsFault(message as Record<string, unknown>);
    if (fault !== null) {
      faults.push({
        index,
        id: echoedId(message),
        message: `Invalid Request: batch message ${index}: ${fault}`,
      });
    } else if ((message as Record<string, unknown>).method === 'initialize') {
      return refused(
        refusal(`batch message ${index}: initialize must be sent alone, not in a batch`, echoedId(message)),
      );
    }
  }
  return faults.length === 0 ? ENVELOPE_PASSED : { refusal: null, faults };
}
