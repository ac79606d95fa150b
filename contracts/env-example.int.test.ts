import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigSchema, loadConfig } from './config.ts';

const lines = readFileSync(new URL('../.env.example', import.meta.url), 'utf8')
  .split('\n')
  .filter((l) => /^[A-Z0-9_]+=/.test(l));
const listed = Object.fromEntries(
  lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
);
/** Variables shown commented out (a whole line `# NAME=value`): left unset so that their default follows other settings. */
const commentedOut = readFileSync(new URL('../.env.example', import.meta.url), 'utf8')
  .split('\n')
  .flatMap((l) => /^# ([A-Z][A-Z0-9_]+)=\S*$/.exec(l)?.[1] ?? []);

describe('.env.example', () => {
  it('lists every configuration variable, and nothing else', () => {
    const known = Object.keys(ConfigSchema.shape).sort();
    expect([...Object.keys(listed), ...commentedOut].sort()).toEqual(known);
  });

  it('states the real defaults', () => {
    expect(loadConfig(listed)).toEqual(loadConfig({}));
  });
});
