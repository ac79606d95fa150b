import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ERRORS, ErrorBody, errorMessage, isErrorCode, ServiceError } from './errors.ts';

const ROOT = join(import.meta.dirname, '..');

function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith('.ts') && !file.endsWith('.test.ts'))
    .map((file) => join(dir, file));
}

/**
 * Where a wire code is written: a `code:` or `reason:` member, or the first argument of a catalog
 * throw. A lower-case literal without an underscore (`reason: 'failed'`) is an internal
 * discriminant, not a code.
 */
const CODE_LITERAL =
  /(?:\b(?:code|reason):\s*|\b(?:ServiceError|HistoryQueryError|refused)\(\s*)'([A-Za-z]+_[A-Za-z_]+|[A-Z]{4,})'/g;

/** Literals in code positions that never leave the process, each with where it stays. */
const NOT_ON_THE_WIRE: Record<string, string> = {
  // KeyRuleError of the key decider: the operator CLI's; sign-in answers KEY_ALREADY_ISSUED.
  key_exists: 'services/keys/key-decider.ts',
};

describe('the error catalog', () => {
  it('is the only place a wire code is spelt: every code literal of the services is a catalog entry', () => {
    const strays: string[] = [];
    for (const file of [...sources('services'), ...sources('adapters')]) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const match of text.matchAll(CODE_LITERAL)) {
        const code = match[1]!;
        if (isErrorCode(code) || NOT_ON_THE_WIRE[code] === relative(ROOT, join(ROOT, file))) continue;
        strays.push(`${file}: ${code}`);
      }
    }
    expect(strays).toEqual([]);
  });

  it('gives every entry a status, a message, and the JSON-RPC code of the MCP channel where it has one', () => {
    for (const [code, spec] of Object.entries(ERRORS)) {
      expect(spec.status, code).toBeGreaterThanOrEqual(200);
      expect(spec.status, code).toBeLessThan(600);
      expect(spec.message.length, code).toBeGreaterThan(0);
      if ('rpc' in spec) expect(spec.rpc, code).toBeLessThan(-32000 + 1);
      // One casing per family: SCREAMING_CASE or snake_case, never mixed.
      expect(code, code).toMatch(/^[A-Z][A-Z0-9_]*$|^[a-z][a-z0-9_]*$/);
    }
  });

  it('fills message templates and carries the catalog status into a throw', () => {
    expect(errorMessage('INVALID_LIMIT', { max: 50 })).toBe('limit must be an integer from 1 to 50');
    const error = new ServiceError('QUOTA_EXHAUSTED', { window: 'daily', resets: 'soon' }, undefined, {
      headers: { 'retry-after': '60' },
    });
    expect([error.statusCode, error.message, error.headers]).toEqual([
      429,
      'the daily call quota of this key is used up (resets soon)',
      { 'retry-after': '60' },
    ]);
    expect(ErrorBody.parse({ code: error.code, message: error.message })).toBeTruthy();
  });
});
