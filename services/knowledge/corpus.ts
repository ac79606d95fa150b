import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Config } from '../../contracts/config.ts';
import type { SourceType } from '../../contracts/knowledge.ts';
import { LIVE_DOCUMENT } from './facts.ts';
import { contractPassages, errorPassages, pricingPassages } from './generated.ts';
import { headingAnchor, markdownPassages, type Passage, plainInline } from './passages.ts';

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

/** Where the service serves the documents of the corpus (GET /knowledge/{file}): citations link there. */
export const SOURCES_PATH = '/knowledge';

/** A document's name under SOURCES_PATH: docs/ and the webhook guide flat beside README.md. */
function servedName(path: string): string {
  if (path === 'services/webhooks/README.md') return 'webhooks.md';
  return path.startsWith('docs/') ? path.slice('docs/'.length) : path;
}

/** The corpus's passages, and the markdown documents its citations open, by served name. */
export interface Corpus {
  passages: Passage[];
  documents: Map<string, string>;
}

/**
 * Generated passages as one markdown document, a section each under its title, the text as indexed;
 * each passage's source_url becomes its section in it.
 */
function generatedDocument(corpus: Corpus, name: string, title: string, passages: Passage[]): void {
  const anchors = new Map<string, number>();
  headingAnchor(title, anchors);
  const sections = passages.map((p) => {
    corpus.passages.push({ ...p, source_url: `${SOURCES_PATH}/${name}#${headingAnchor(p.title, anchors)}` });
    return `## ${p.title}\n\n${p.text}\n`;
  });
  corpus.documents.set(
    name,
    `# ${title}\n\nGenerated from the service's contract and configuration.\n\n${sections.join('\n')}`,
  );
}

/**
 * Everything that does not come from the log: the documents (README, docs/ — methodology,
 * evaluation; not the chat's own page — and the webhook guide) plus the generated contract,
 * errors and prices, each served as a document its passages' source_url names.
 */
export async function knowledgeCorpus(config: Config, root = REPO_ROOT): Promise<Corpus> {
  const corpus: Corpus = { passages: [], documents: new Map() };
  for (const path of await documentPaths(root)) {
    const markdown = await readFile(join(root, path), 'utf8');
    const h1 = /^#\s+(.*)$/m.exec(markdown)?.[1];
    const name = servedName(path);
    if (corpus.documents.has(name) || name === LIVE_DOCUMENT)
      throw new Error(`two documents served as ${SOURCES_PATH}/${name}`);
    corpus.documents.set(name, markdown);
    corpus.passages.push(
      ...markdownPassages(markdown, {
        path,
        url: `${SOURCES_PATH}/${name}`,
        title: h1 ? plainInline(h1) : path,
        source_type: SOURCE_TYPES[path] ?? 'doc',
      }),
    );
  }
  for (const [name, title, passages] of [
    ['tools.md', 'Tools: arguments and answers', contractPassages()],
    ['errors.md', 'Error codes', errorPassages()],
    ['pricing.md', 'Prices, plans and quotas', pricingPassages(config)],
  ] as const) {
    if (corpus.documents.has(name)) throw new Error(`two documents served as ${SOURCES_PATH}/${name}`);
    generatedDocument(corpus, name, title, passages);
  }
  return corpus;
}

/** The passages of knowledgeCorpus. */
export async function staticCorpus(config: Config, root = REPO_ROOT): Promise<Passage[]> {
  return (await knowledgeCorpus(config, root)).passages;
}
