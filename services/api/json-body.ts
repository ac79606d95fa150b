import type { FastifyInstance } from 'fastify';
import { ServiceError } from '../../contracts/errors.ts';

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
 * The app's JSON parser: Fastify's own (prototype-poisoning checks included) behind a depth check
 * made on the text, before anything parses or echoes it. An empty body is no body, so a bodiless
 * POST or DELETE that still names `application/json` reaches its route; a route that needs a
 * body refuses the missing one through its own schema.
 */
export function registerJsonParser(app: FastifyInstance): void {
  const parse = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string;
    if (text.trim() === '') return done(null, undefined);
    if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
      return done(new ServiceError('JSON_TOO_DEEP', { max: MAX_JSON_DEPTH }), undefined);
    }
    parse(request, text, done);
  });
}
