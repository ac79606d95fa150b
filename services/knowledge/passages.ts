import type { SourceType } from '../../contracts/knowledge.ts';

/** One retrievable unit of the corpus: a section of a document, a generated fact, a live fact. */
export interface Passage {
  id: string;
  source_type: SourceType;
  source_url: string;
  title: string;
  /** Plain text (markdown markup removed): what is indexed, highlighted and quoted. */
  text: string;
}

/** Longest passage; longer sections are cut at paragraph boundaries. */
const MAX_CHARS = 1_200;

export function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[`*_]/g, '')
    .replace(/[^\p{L}\p{N}\s-]/gu, '')
    .trim()
    .replace(/\s+/g, '-');
}

/**
 * HTML the documents use for layout ("<br>" in a table cell). Only these are tags: "<keyId>" in
 * `revoke <keyId>` stands for a key's id and "fit < 2025-02-01, … → pass" is a comparison, both
 * kept as text.
 */
const HTML_TAG =
  /<\/?(?:a|b|br|code|details|div|em|i|img|kbd|li|ol|p|picture|source|span|strong|sub|summary|sup|ul)\b[^<>]*>/gi;

/** Inline markdown to plain text: links keep their text, emphasis and code marks go. */
export function plainInline(text: string): string {
  return text
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\([^)]*\)/g, '$1')
    .replace(/\*\*([^*]+)\*\*/g, '$1')
    .replace(/(^|[\s(])\*([^*\s][^*]*)\*(?=[\s).,;:]|$)/g, '$1$2')
    .replace(/`([^`]*)`/g, '$1')
    .replace(HTML_TAG, ' ')
    .replace(/[ \t]+/g, ' ')
    .trim();
}

function tableRows(lines: string[]): string[] {
  const cells = (line: string) =>
    line
      .trim()
      .replace(/^\||\|$/g, '')
      .split('|')
      .map((c) => plainInline(c));
  const header = cells(lines[0]!);
  return lines
    .slice(2)
    .map((line) => {
      const row = cells(line);
      return `${row.map((value, i) => (header[i] ? `${header[i]} ${value}` : value)).join('; ')}.`;
    })
    .filter((row) => row.length > 1);
}

/** A paragraph opening with a bold lead-in ("**API keys.** ...") starts a topic of its own. */
const LEAD = /^\*\*([^*]{2,60}?)\.?\*\*/;

interface Paragraph {
  text: string;
  lead?: string;
}

/** A block of markdown (one section body) as plain paragraphs; tables become one sentence per row. */
function paragraphs(body: string): Paragraph[] {
  const out: Paragraph[] = [];
  const lines = body.split('\n');
  let i = 0;
  let current: string[] = [];
  const flush = () => {
    const raw = current.join(' ').trim();
    const text = plainInline(raw);
    const lead = LEAD.exec(raw)?.[1];
    if (text !== '') out.push(lead ? { text, lead: plainInline(lead) } : { text });
    current = [];
  };
  while (i < lines.length) {
    const line = lines[i]!;
    if (line.trim().startsWith('```')) {
      flush();
      const code: string[] = [];
      i++;
      while (i < lines.length && !lines[i]!.trim().startsWith('```')) code.push(lines[i++]!);
      i++;
      const text = code.join('\n').trim();
      if (text !== '') out.push({ text });
      continue;
    }
    if (line.trim().startsWith('|')) {
      flush();
      const table: string[] = [];
      while (i < lines.length && lines[i]!.trim().startsWith('|')) table.push(lines[i++]!);
      out.push(...tableRows(table).map((text) => ({ text })));
      continue;
    }
    if (line.trim() === '') flush();
    else if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
      flush();
      current.push(line.replace(/^\s*([-*]|\d+\.)\s+/, ''));
    } else current.push(line);
    i++;
  }
  flush();
  return out;
}

/**
 * A heading's anchor as GitHub (github-slugger) writes it, for its rendered text: lower case,
 * every character but letters, marks, digits, connector punctuation (`_`), hyphens and spaces
 * dropped, each space a hyphen ("Error code INVALID_MODEL" is `error-code-invalid_model`, "A — B"
 * `a--b`). Unlike slug(), which passage ids keep.
 */
export function githubSlug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/**
 * A heading's anchor in its document, as GitHub names it: its githubSlug, `-1`, `-2`… for the
 * slug's second, third… heading, skipping an anchor already taken; `top` for a heading with no
 * slug. `seen` holds the anchors given and, for each slug, how many repeats it had.
 */
export function headingAnchor(heading: string, seen: Map<string, number>): string {
  const base = githubSlug(plainInline(heading)) || 'top';
  let anchor = base;
  while (seen.has(anchor)) {
    const n = seen.get(base)! + 1;
    seen.set(base, n);
    anchor = `${base}-${n}`;
  }
  seen.set(anchor, 0);
  return anchor;
}

/** The anchors of a markdown document's headings (levels 1–4, outside code blocks), in order. */
export function headingAnchors(markdown: string): string[] {
  const seen = new Map<string, number>();
  const anchors: string[] = [];
  let inCode = false;
  for (const line of markdown.split('\n')) {
    if (line.trim().startsWith('```')) inCode = !inCode;
    const heading = inCode ? null : /^(#{1,4})\s+(.*)$/.exec(line);
    if (heading) anchors.push(headingAnchor(heading[2]!, seen));
  }
  return anchors;
}

/**
 * Splits a markdown document into passages, one per section (cut further when long). Ids are
 * `<path>#<heading-slug>` (with `-2`, `-3` for cuts and repeated headings), stable while the
 * document's headings are. A passage's source_url is `<url>#<anchor>` (headingAnchor), `url` the
 * document's address (its path unless given).
 */
export function markdownPassages(
  markdown: string,
  doc: { path: string; title: string; source_type: SourceType; url?: string },
): Passage[] {
  const sections: { heading: string; body: string[]; raw?: string }[] = [{ heading: '', body: [] }];
  let inCode = false;
  for (const line of markdown.split('\n')) {
    if (line.trim().startsWith('```')) inCode = !inCode;
    const heading = inCode ? null : /^(#{1,4})\s+(.*)$/.exec(line);
    if (heading) sections.push({ heading: plainInline(heading[2]!), body: [], raw: heading[2]! });
    else sections[sections.length - 1]!.body.push(line);
  }
  const passages: Passage[] = [];
  const used = new Map<string, number>();
  const anchors = new Map<string, number>();
  for (const section of sections) {
    const at = section.raw === undefined ? 'top' : headingAnchor(section.raw, anchors);
    const chunks: { text: string; lead?: string }[] = [];
    let chunk: { text: string; lead?: string } | null = null;
    for (const paragraph of paragraphs(section.body.join('\n'))) {
      // A topic cut only for length goes on under its lead-in: the paragraphs after "**MCP.** …"
      // still speak of MCP, and their title says so.
      let lead = paragraph.lead;
      if (chunk !== null && (paragraph.lead || chunk.text.length + paragraph.text.length > MAX_CHARS)) {
        lead ??= chunk.lead;
        chunks.push(chunk);
        chunk = null;
      }
      if (chunk === null) chunk = lead ? { text: paragraph.text, lead } : { text: paragraph.text };
      else chunk.text = `${chunk.text}\n${paragraph.text}`;
    }
    if (chunk !== null) chunks.push(chunk);
    const base = slug(section.heading) || 'top';
    for (const { text, lead } of chunks) {
      const key = lead ? `${base}-${slug(lead)}` : base;
      const n = (used.get(key) ?? 0) + 1;
      used.set(key, n);
      const anchor = n === 1 ? key : `${key}-${n}`;
      const heading =
        section.heading && section.heading !== doc.title ? `${doc.title} › ${section.heading}` : doc.title;
      passages.push({
        id: `${doc.path}#${anchor}`,
        source_type: doc.source_type,
        source_url: `${doc.url ?? doc.path}#${at}`,
        title: lead ? `${heading} › ${lead}` : heading,
        text,
      });
    }
  }
  return passages;
}
