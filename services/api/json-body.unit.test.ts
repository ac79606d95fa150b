import fc from 'fast-check';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { errorMessage, ServiceError } from '../../contracts/errors.ts';
import { nestsDeeperThan, registerJsonParser, repeatedMemberName, sentNullBody } from './json-body.ts';

describe('the JSON parser and a literal null', () => {
  it('hands null on as it is (search, chat and x402 answer it themselves) and marks only a literal null', async () => {
    const app = Fastify();
    registerJsonParser(app);
    app.post('/echo', async (request) => ({
      body: request.body ?? 'absent',
      literalNull: sentNullBody(request),
    }));
    try {
      const send = async (payload: string | undefined) =>
        (
          await app.inject({
            method: 'POST',
            url: '/echo',
            ...(payload === undefined ? {} : { headers: { 'content-type': 'application/json' }, payload }),
          })
        ).json();
      expect(await send('null')).toEqual({ body: 'absent', literalNull: true });
      expect(await send(' null\n')).toEqual({ body: 'absent', literalNull: true });
      expect(await send('')).toEqual({ body: 'absent', literalNull: false });
      expect(await send(undefined)).toEqual({ body: 'absent', literalNull: false });
      expect(await send('{}')).toEqual({ body: {}, literalNull: false });
      expect(await send('[null]')).toEqual({ body: [null], literalNull: false });
    } finally {
      await app.close();
    }
  });
});

describe('nestsDeeperThan', () => {
  it('counts arrays and objects opened inside each other', () => {
    expect(nestsDeeperThan('[[[]]]', 3)).toBe(false);
    expect(nestsDeeperThan('[[[[]]]]', 3)).toBe(true);
    expect(nestsDeeperThan('{"a":{"b":[1]}}', 3)).toBe(false);
    expect(nestsDeeperThan('{"a":{"b":[{}]}}', 3)).toBe(true);
  });

  it('settles a text with no more brackets than the limit without scanning it, at the border too', () => {
    expect(nestsDeeperThan(`${'['.repeat(64)}${']'.repeat(64)}`, 64)).toBe(false);
    expect(nestsDeeperThan(`${'['.repeat(65)}${']'.repeat(65)}`, 64)).toBe(true);
    expect(
      nestsDeeperThan(`${'{"a":'.repeat(40)}${'['.repeat(25)}${']'.repeat(25)}${'}'.repeat(40)}`, 64),
    ).toBe(true);
  });

  it('counts depth, not brackets: siblings do not add up', () => {
    expect(nestsDeeperThan(`[${'[],'.repeat(1_000)}[]]`, 2)).toBe(false);
  });

  it('skips brackets inside strings, escaped quotes included', () => {
    expect(nestsDeeperThan(`{"q":"${'['.repeat(100)}"}`, 1)).toBe(false);
    expect(nestsDeeperThan(`{"q":"\\"[[[[\\"","r":[]}`, 2)).toBe(false);
    expect(nestsDeeperThan(`{"q":"\\\\","r":[[[]]]}`, 3)).toBe(true);
  });
});

describe('the error catalog', () => {
  it('fills a message template and leaves unknown names as they are', () => {
    expect(errorMessage('SUBSCRIPTION_LIMIT', { max: 25 })).toBe(
      'this key already has 25 webhook subscriptions (the limit; disabled ones count: GET /api/webhooks?status=disabled lists them)',
    );
    expect(errorMessage('JSON_TOO_DEEP')).toBe('the JSON body nests deeper than {max} levels');
  });

  it('gives a thrown error its status and retryability', () => {
    const conflict = new ServiceError('CONFLICT');
    expect(conflict).toMatchObject({ code: 'CONFLICT', statusCode: 409, retryable: true });
    expect(new ServiceError('INVALID_FIELD', { detail: 'x: bad' }, 'x')).toMatchObject({
      statusCode: 400,
      field: 'x',
      message: 'x: bad',
    });
  });
});

describe('repeatedMemberName', () => {
  const repeated = (text: string) => repeatedMemberName(text, JSON.parse(text));
  it.each([
    ['{"coin":"BTC","coin":"ETH"}', 'coin'],
    ['{"a":{"b":1,"b":2}}', 'b'],
    ['[{"a":1},{"a":1,"a":2}]', 'a'],
    // Names compared as JSON.parse reads them: an escape names the same member.
    ['{"a":1,"\\u0061":2}', 'a'],
    ['{"u:1":"x:y","u:1":"b"}', 'u:1'],
    // A `\u003a` in a string, which the count cannot settle: the visitor reads the text.
    ['{"a":"\\u003a","a":1}', 'a'],
    ['{"__proto__":1,"__proto__":2}', '__proto__'],
  ])('finds the repeated name in %s', (text, name) => {
    expect(repeated(text)).toBe(name);
  });

  it.each([
    '{"a":{"x":1},"b":{"x":1}}',
    '{"u:1":"x:y","a":"b"}',
    '{"a":"\\u003a","b":"\\u003A:"}',
    '{}',
    '[]',
    '"a:b"',
    '{"a":[{"a":{"a":1}}]}',
  ])('finds none in %s', (text) => {
    expect(repeated(text)).toBeUndefined();
  });

  it('counts deep texts without recursion, and says so unnamed when the visitor cannot name it', () => {
    const deep = `${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`;
    expect(repeated(deep)).toBeUndefined();
    expect(repeated(`{"b":1,"b":2,"c":${deep}}`)).toBe('b');
    expect(repeated(`{"c":${deep},"b":1,"b":2}`)).toBe('');
    // Escaped texts too: JSON.parse's value still shows the member it dropped.
    expect(repeated(`{"c":${deep},"b":"\\n","b":2}`)).toBe('');
    expect(repeated(`{"c":${deep},"b":"\\u003a","d":2}`)).toBeUndefined();
  });
});

/** A JSON value as it is written: each object's members in text order, names possibly repeated. */
type Written = null | boolean | string | number | Written[] | { members: [string, Written][] };

/** A string written as JSON: each code unit raw or as a \u escape (lower or upper case hex). */
const writtenString = (value: string, escapes: boolean[]) =>
  `"${[...value]
    .map((char, i) => {
      const code = char.charCodeAt(0);
      if (char.length === 1 && escapes[i % escapes.length]) {
        const hex = code.toString(16).padStart(4, '0');
        return `\\u${i % 2 ? hex.toUpperCase() : hex}`;
      }
      return JSON.stringify(char).slice(1, -1);
    })
    .join('')}"`;

describe('repeatedMemberName on random JSON texts', () => {
  // Few names, so objects repeat them; colons, quotes, backslashes and escapes where the count looks.
  const name = fc.constantFrom('a', 'b', ':', 'a:b', '::', '"', '\\', 'é', '😀', '__proto__', '1', '01', '');
  const text = fc.string({ unit: fc.constantFrom('a', ':', '"', '\\', ' ', '😀', 'é') });
  const escapes = fc.array(fc.boolean(), { minLength: 1, maxLength: 4 });
  const space = fc.constantFrom('', ' ', '\n', '\t ');
  const { value } = fc.letrec<{ value: Written }>((tie) => ({
    value: fc.oneof(
      { depthSize: 'small', withCrossShrink: true },
      fc.constantFrom(null, true, false, 0, -1.5e3, 1e-7),
      text,
      fc.array(tie('value'), { maxLength: 4 }),
      fc.record({ members: fc.array(fc.tuple(name, tie('value')), { maxLength: 5 }) }),
    ),
  }));
  /** The text, and the first name an object repeats in text order (the oracle). */
  const write = (root: Written, escaping: boolean[], ws: string) => {
    let first: string | undefined;
    const go = (v: Written): string => {
      if (v === null || typeof v !== 'object') {
        return typeof v === 'string' ? writtenString(v, escaping) : JSON.stringify(v);
      }
      if (Array.isArray(v)) return `[${ws}${v.map(go).join(`${ws},${ws}`)}${ws}]`;
      const seen = new Set<string>();
      const parts = v.members.map(([n, member]) => {
        if (seen.has(n)) first ??= n;
        seen.add(n);
        return `${writtenString(n, escaping)}${ws}:${ws}${go(member)}`;
      });
      return `{${ws}${parts.join(`${ws},${ws}`)}${ws}}`;
    };
    return { json: go(root), first };
  };

  it('reads an escaped text itself: JSON.parse can name a member another way (nodejs/node#63785)', () => {
    // Once a text has named `a` then `\\`, V8 (Node 24) reads `{"\u0061":1,"\u0061":2}` as
    // {"a":1,"\\":2}: the count of its members would match the text's.
    JSON.parse(String.raw`{"a":0,"\\":0}`);
    const text = String.raw`{"\u0061":1,"\u0061":2}`;
    expect(repeatedMemberName(text, JSON.parse(text))).toBe('a');
  });

  it('names the first repeated name exactly when an object repeats one, as JSON.parse reads the text', () => {
    fc.assert(
      fc.property(value, escapes, space, (root, escaping, ws) => {
        const { json, first } = write(root, escaping, ws);
        expect(repeatedMemberName(json, JSON.parse(json)), json).toBe(first);
      }),
      { numRuns: 5000 },
    );
  });
});
