import type { FastifyInstance } from 'fastify';
import secureJson from 'secure-json-parse';
import { ServiceError } from '../../contracts/errors.ts';
import { bodyNotAnObject } from './errors.ts';

/**
 * How deep a JSON body may nest. No request of the service needs more than a handful of levels;
 * a body of thousands of nested arrays parses, but every recursive walk after it (validation,
 * JSON.stringify when it is echoed or forwarded) can overflow the stack and answer 500.
 */
const MAX_JSON_DEPTH = 64;

/** True when `text` opens more than `max` arrays or objects inside each other (strings skipped). */
export function nestsDeeperThan(text: string, max: number): boolean {
  // A text with at most `max` brackets in all (strings' included) cannot nest deeper: counted with
  // indexOf, that settles a request's small body in a fifth of the time of the scan below.
  if (!moreBracketsThan(text, max)) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return false;
}

function moreBracketsThan(text: string, max: number): boolean {
  let n = 0;
  for (let i = text.indexOf('{'); i !== -1; i = text.indexOf('{', i + 1)) if (++n > max) return true;
  for (let i = text.indexOf('['); i !== -1; i = text.indexOf('[', i + 1)) if (++n > max) return true;
  return false;
}

/** Bytes that are not UTF-8 are refused, not read with U+FFFD in their place (RFC 8259 §8.1). */
const utf8 = new TextDecoder('utf-8', { fatal: true });
/** Fastify's own options: a `__proto__` key, or `constructor` with `prototype`, is refused. */
const POISONING = { protoAction: 'error', constructorAction: 'error' } as const;

const notJson = (why?: string) =>
  new ServiceError(
    'INVALID_JSON',
    {},
    undefined,
    why ? { message: `the body is not valid JSON: ${why}` } : {},
  );

/**
 * Requests whose body was the JSON literal `null`. Fastify hands a route's validation `null` for
 * no body as well, so a route that takes no body or an object tells the two apart here
 * (`sentNullBody`); routes whose own schema answers a null body (search, chat, x402) are not touched.
 */
const nullBodies = new WeakSet<object>();

/** True when the request's body was the JSON literal `null` (not an absent or empty body). */
export function sentNullBody(request: object): boolean {
  return nullBodies.has(request);
}

/**
 * preValidation of a route that takes no body or an object (optionalBody): the JSON `null` is
 * neither, and is refused as an array or a string is, rather than read as no body.
 */
export async function noBodyOrObject(request: object): Promise<void> {
  if (sentNullBody(request)) throw bodyNotAnObject();
}

/**
 * The app's JSON parser: a body with a content coding refused as unread, the bytes decoded as strict UTF-8, a depth check made on the text, then
 * secure-json-parse as Fastify's own parser calls it (prototype-poisoning checks included), each
 * refusal saying which it was. An empty body is no body, so a bodiless POST or DELETE that still
 * names `application/json` reaches its route; a route that needs a body refuses the missing one
 * through its own schema.
 */
export function registerJsonParser(app: FastifyInstance): void {
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    // A compressed body (gzip…) is not read: said so, rather than called JSON that is not UTF-8.
    // An empty value or `identity` names no coding.
    const coding = String(request.headers['content-encoding'] ?? '').trim();
    if (coding !== '' && coding.toLowerCase() !== 'identity' && (body as Buffer).length > 0) {
      return done(notJson(`it is sent with Content-Encoding ${coding}; send it uncompressed`), undefined);
    }
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      return done(notJson('it is not UTF-8'), undefined);
    }
    if (text.trim() === '') return done(null, undefined);
    if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
      return done(new ServiceError('JSON_TOO_DEEP', { max: MAX_JSON_DEPTH }), undefined);
    }
    let parsed: unknown;
    try {
      parsed = secureJson.parse(text, undefined, POISONING);
    } catch (err) {
      // secure-json-parse throws a SyntaxError of its own wording for a poisoning key.
      const poisoned = /forbidden prototype property/.test((err as Error).message);
      return done(
        notJson(poisoned ? 'a __proto__ or constructor.prototype key is refused' : undefined),
        undefined,
      );
    }
    if (parsed === null) nullBodies.add(request);
    done(null, parsed);
  });
}

/**
 * For the routes of a context that take no body or an optional one: a body of no bytes whose
 * Content-Type is missing (Node's http.request ended without data sends it chunked) or names a
 * type no parser reads (`curl -X POST -d ''` names application/x-www-form-urlencoded) is no body,
 * as an empty `application/json` one is. Fastify's own answer to both is 415, given before the
 * route's key check, so a keyless caller would be told about its body rather than its key; a body
 * of any bytes under such a type is still 415 UNSUPPORTED_MEDIA_TYPE.
 */
export function emptyBodyIsNoBody(app: FastifyInstance): void {
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => {
    if ((body as Buffer).length === 0) return done(null, undefined);
    done(new ServiceError('UNSUPPORTED_MEDIA_TYPE'), undefined);
  });
}
