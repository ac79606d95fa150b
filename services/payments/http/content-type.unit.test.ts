import { describe, expect, it } from 'vitest';
import { contentTypeProblem } from './content-type.ts';

describe('contentTypeProblem', () => {
  it.each([
    [['Content-Type', 'application/json'], true],
    [['content-type', 'application/json; charset=utf-8'], true],
    [['content-type', 'application/json; charset="utf-8"; note="a;b/c"'], true],
    [['content-type', 'application/json; note="a,b"'], true],
    [['Host', 'x'], false],
    [['content-type', 'application/json', 'Content-Encoding', 'identity'], true],
    [['content-type', 'application/json', 'Content-Encoding', 'gzip'], false],
  ])('accepts %j (body: %s)', (raw, hasBody) => {
    expect(contentTypeProblem(raw, hasBody)).toBeNull();
  });

  it.each([
    [['Content-Type', 'application/json', 'content-type', 'application/json'], true, /more than once/],
    [['Content-Type', 'application/json, application/json'], true, /joins several media types/],
    [['Content-Type', 'application/json;application/json'], true, /joins several media types/],
    [
      ['Content-Type', 'application/json; charset=utf-8; application/json'],
      true,
      /joins several media types/,
    ],
    [['Content-Type', 'application/json; text/plain'], true, /joins several media types/],
    [['Content-Type', 'text/plain'], true, /"text\/plain" is not accepted/],
    [['Host', 'x'], true, /without Content-Type/],
    [
      ['content-type', 'application/json', 'Content-Encoding', 'gzip'],
      true,
      /^the body is sent with Content-Encoding gzip; send it uncompressed, as application\/json$/,
    ],
    [
      ['content-type', 'application/json', 'content-encoding', 'br', 'content-encoding', 'gzip'],
      true,
      /br, gzip/,
    ],
  ])('refuses %j', (raw, hasBody, message) => {
    expect(contentTypeProblem(raw, hasBody)).toMatch(message);
  });
});
