import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../contracts/config.ts';
import type { SourceType } from '../../contracts/knowledge.ts';
import { contractPassages, errorPassages, pricingPassages } from './generated.ts';
import { markdownPassages, type Passage, plainInline } from './passages.ts';

/** The repository root, where the documents live in every deployment (the image copies them). */
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

const SOURCE_TYPES: Record<string, SourceType> = {
  'README.md': 'readme',
  'docs/methodology.md': 'methodology',
  'services/webhooks/README.md': 'webhooks',
};

/**
 * Documents about the chat itself, not the service: docs/knowledge.md quotes the evaluation
 * sets' descriptions and question wording, so indexed it answered questions about the service
 * with sentences about how the chat is measured.
 */
const NOT_INDEXED = new Set(['knowledge.md']);

async function documentPaths(root: string): Promise<string[]> {
  const docs = (await readdir(join(root, 'docs')).catch(() => [] as string[]))
    .filter((name) => name.endsWith('.md') && !NOT_INDEXED.has(name))
    .sort()
    .map((name) => `docs/${name}`);
  return ['README.md', ...docs, 'services/webhooks/README.md'];
}

/** The documents as passages: README, docs/ (methodology, evaluation; not the chat's own page) and the webhook guide. */
async function documentPassages(root = REPO_ROOT): Promise<Passage[]> {
  const passages: Passage[] = [];
  for (const path of await documentPaths(root)) {
    const markdown = await readFile(join(root, path), 'utf8');
    const h1 = /^#\s+(.*)$/m.exec(markdown)?.[1];
    passages.push(
      ...markdownPassages(markdown, {
        path,
        title: h1 ? plainInline(h1) : path,
        source_type: SOURCE_TYPES[path] ?? 'doc',
      }),
    );
  }
  return passages;
}

/** Everything that does not come from the log: documents plus the generated contract, errors and prices. */
export async function staticCorpus(config: Config, root = REPO_ROOT): Promise<Passage[]> {
  return [
    ...(await documentPassages(root)),
    ...contractPassages(),
    ...errorPassages(),
    ...pricingPassages(config),
  ];
}
