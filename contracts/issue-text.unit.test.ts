import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { queryInt } from './http.ts';
import { issueText } from './issue-text.ts';
import { Coin } from './market.ts';

/** The words of the first issue zod raises for `input` under `schema`. */
function said(schema: z.ZodType, input: unknown): string {
  const parsed = schema.safeParse(input);
  if (parsed.success) throw new Error('accepted');
  const issue = parsed.error.issues[0]!;
  return issueText(issue, issue.path.map(String).join('.') || '(body)', schema, input);
}

describe('issueText: what the field must be and what was sent, from the schema', () => {
  it.each([
    [
      z.object({ n: z.number().int().min(0).max(100) }),
      { n: 50.5 },
      'n must be a whole number from 0 to 100; got 50.5',
    ],
    [
      z.object({ n: queryInt(0, Number.MAX_SAFE_INTEGER) }),
      { n: 'abc' },
      'n must be a whole number ≥ 0; got "abc"',
    ],
    // Past the safe-integer bound the schema sets: the bound the value broke is named.
    [
      z.object({ n: queryInt(0, Number.MAX_SAFE_INTEGER) }),
      { n: '99999999999999999999' },
      'n must be a whole number from 0 to 9007199254740991; got "99999999999999999999"',
    ],
    // Only the bound the value broke: below, the safe-integer bound above is no news.
    [
      z.object({ n: queryInt(0, Number.MAX_SAFE_INTEGER) }),
      { n: '-1' },
      'n must be a whole number ≥ 0; got "-1"',
    ],
    // A body's whole number past 2^53 - 1 breaks the bound int() sets, named as queryInt's is.
    [
      z.object({ n: z.number().int().min(0) }),
      { n: 2 ** 60 },
      'n must be a whole number from 0 to 9007199254740991; got 1152921504606847000',
    ],
    [z.object({ n: z.number().gt(0).lt(1) }), { n: 2 }, 'n must be a number > 0 and < 1; got 2'],
    [z.object({ n: z.number().nullable() }), { n: 'x' }, 'n must be a number, or null; got "x"'],
    [z.object({ e: z.enum(['a', 'b']).optional() }), { e: 'c' }, 'e must be one of a, b; got "c"'],
    [
      z.object({ u: z.union([z.string(), z.number()]) }),
      { u: true },
      'u must be a string, or a number; got true',
    ],
    [z.object({ s: z.string().min(2) }), { s: 'x' }, 's must be a string of at least 2 characters; got "x"'],
    [
      z.object({ l: z.array(z.number()).max(1) }),
      { l: [1, 2] },
      'l must be a list of at most 1 item, each a number; got [1,2]',
    ],
    [z.object({ s: z.string() }), {}, 's is required: it must be a string'],
    [
      z.object({ s: z.string().regex(/^x/, 'text starting with x') }),
      { s: 'y' },
      's must be text starting with x; got "y"',
    ],
    [
      z.object({ coin: Coin }),
      { coin: 'BTC-USDT' },
      'coin must be letters and digits only, a coin symbol such as BTC (the market is its USDT pair); got "BTC-USDT"',
    ],
    [z.object({ n: z.number().refine((v) => v !== 3, 'anything but 3') }), { n: 3 }, 'n: anything but 3'],
    [
      z.object({ l: z.array(z.number()).refine((v) => new Set(v).size === v.length, 'l must not repeat') }),
      { l: [1, 1] },
      'l must not repeat',
    ],
    [z.strictObject({}), { a: 1 }, 'unknown field "a"'],
  ])('%#: %j', (schema, input, message) => {
    const text = said(schema, input);
    expect(text).toBe(message);
    expect(text).not.toMatch(/NaN|received|expected|Invalid input/);
  });

  it("without the input, a pattern's words stand alone, never showing what was sent", () => {
    const parsed = z.object({ s: z.string().regex(/^0x/, '0x-prefixed hex') }).safeParse({ s: 'secret' });
    expect(issueText(parsed.error!.issues[0]!, 's')).toBe('s: 0x-prefixed hex');
  });

  it('without the schema or the input, words the issue alone', () => {
    const parsed = z.object({ n: z.number().int() }).safeParse({ n: 1.5 });
    expect(issueText(parsed.error!.issues[0]!, 'n')).toBe('n must be a whole number');
  });
});
