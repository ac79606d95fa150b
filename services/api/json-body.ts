import type { FastifyInstance } from 'fastify';
import { visit } from 'jsonc-parser';
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

/**
 * The first member name an object of `text` carries twice, or undefined when none does; `parsed`
 * is what JSON.parse made of `text`. RFC 8259 leaves such an object's meaning to the parser
 * (JSON.parse keeps the last value, others the first: a proxy or WAF may read another request
 * than ours), and I-JSON (RFC 7493 §2.3) forbids it, so a body with one is refused.
 *
 * Settled by counting in the common case: outside strings, every `:` of valid JSON text separates
 * a member name from its value, so the text's `:` number the members it writes plus the `:` its
 * strings hold. JSON.parse keeps one member per distinct name, and its strings hold at least the
 * `:` the text's do (a `\u003a` escape adds one), so with no such escape in the text the count
 * matches the parsed value's members and the `:` of its names and strings exactly when no name is
 * repeated (a dropped member takes its `:` with it). A text that writes any escape is read by
 * jsonc-parser's visitor (the scanner VS Code reads JSON with) instead, as is one whose counts differ
 * (to name the key): V8's JSON.parse (Node 24) can read an escaped name as another one once an
 * earlier text has named that one (nodejs/node#63785: after `{"a":0,"\\":0}`,
 * `{"\u0061":1,"\u0061":2}` parses as `{"a":1,"\\":2}`), so its value cannot settle the count.
 */
export function repeatedMemberName(text: string, parsed: unknown): string | undefined {
  if (typeof parsed !== 'object' || parsed === null) return undefined;
  if (!text.includes('\\') && colonsIn(text) === membersAndColons(parsed)) return undefined;
  const name = firstRepeatedName(text);
  if (name !== TOO_DEEP) return name;
  // A text too deep for the visitor (only the paid routes, which read their bodies raw, take
  // one): a dropped member leaves the text more `:` than the value (a `\u003a` only adds to the
  // value's), so a repeated name is refused unnamed, as far as JSON.parse's value tells.
  return colonsIn(text) > membersAndColons(parsed) ? '' : undefined;
}

function colonsIn(text: string): number {
  let n = 0;
  for (let i = text.indexOf(':'); i !== -1; i = text.indexOf(':', i + 1)) n++;
  return n;
}

/** The members of every object in `value`, plus the `:` in their names and in every string. */
function membersAndColons(value: object): number {
  let n = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const item = stack.pop();
    if (typeof item === 'string') {
      if (item.includes(':')) n += colonsIn(item);
    } else if (Array.isArray(item)) {
      for (const element of item) stack.push(element);
    } else if (typeof item === 'object' && item !== null) {
      for (const name in item) {
        n++;
        if (name.includes(':')) n += colonsIn(name);
        stack.push((item as Record<string, unknown>)[name]);
      }
    }
  }
  return n;
}

/** Thrown from the visitor to stop at the first repeated name. */
class Repeated {
  constructor(readonly name: string) {}
}

/** firstRepeatedName's answer for a text that nests too deep for the visitor's recursion. */
const TOO_DEEP = Symbol('too deep');

/**
 * The first name an object of `text` repeats (names compared unescaped, as JSON.parse reads them),
 * undefined when none does, or TOO_DEEP.
 */
function firstRepeatedName(text: string): string | undefined | typeof TOO_DEEP {
  const open: Set<string>[] = [];
  try {
    visit(text, {
      onObjectBegin: () => {
        open.push(new Set());
      },
      onObjectProperty: (name) => {
        const names = open[open.length - 1]!;
        if (names.has(name)) throw new Repeated(name);
        names.add(name);
      },
      onObjectEnd: () => {
        open.pop();
      },
    });
  } catch (err) {
    if (err instanceof Repeated) return err.name;
    if (err instanceof RangeError) return TOO_DEEP;
    throw err;
  }
  return undefined;
}

/** The words of a refusal of a body that repeats a member name (repeatedMemberName). */
export function repeatedMemberWords(name: string): string {
  const which = name === '' ? 'a member name' : `the member name ${JSON.stringify(name)}`;
  return `${which} appears twice in one object; send each name once (I-JSON, RFC 7493)`;
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
 * secure-json-parse as Fastify's own parser calls it (prototype-poisoning checks included), and an
 * object naming a member twice refused (repeatedMemberName), each refusal saying which it was. An empty body is no body, so a bodiless POST or DELETE that still
 * names `application/json` reaches its route; a route that needs a body refuses the missing one
 * through its own schema.
 *
 * JSON is the one media type read: Fastify's own text/plain parser is dropped, so a text/plain
 * body of any bytes is refused as a form or XML is, 415 UNSUPPORTED_MEDIA_TYPE (RFC 9110
 * §15.5.16; search and chat in their own codes), rather than handed on as a string and refused as
 * a body that is not an object. Contexts reading raw bodies (OAuth, x402) set their own parsers.
 */
export function registerJsonParser(app: FastifyInstance): void {
  app.removeContentTypeParser('text/plain');
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
    const repeated = repeatedMemberName(text, parsed);
    if (repeated !== undefined) return done(notJson(repeatedMemberWords(repeated)), undefined);
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
