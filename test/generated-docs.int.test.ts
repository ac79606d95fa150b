import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Generated documents (the evaluation reports, the bench figures) say the same to every reader:
 * a data folder is named relative to the checkout (`../shared/data/market`), never by the absolute
 * path of the machine that ran the generator.
 */
const checkout = join(import.meta.dirname, '..');
const documents = [
  ...readdirSync(join(checkout, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => join(checkout, 'docs', f)),
  join(checkout, 'bench', 'README.md'),
];

describe('generated documents', () => {
  it.each(documents.map((path) => [path.slice(checkout.length + 1), path]))(
    '%s names no absolute path of this machine',
    (_name, path) => {
      const text = readFileSync(path, 'utf8');
      // The checkout's own folder and the one beside it (where ../shared lives).
      for (const absolute of [checkout, dirname(checkout)]) {
        expect(text.includes(`${absolute}/`), `${absolute}/ in ${path}`).toBe(false);
      }
    },
  );
});
