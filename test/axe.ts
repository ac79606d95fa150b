import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';

/** axe-core's browser build (the pinned devDependency). */
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** The WCAG 2.0-2.2 A and AA rules and axe's best practices (landmarks, one h1, region names). */
const TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'];

/**
 * axe-core's violations on the page as it stands, one line each: rule, WCAG tags, the elements.
 * Run through the DevTools protocol (page.evaluate), so a page's Content-Security-Policy, which
 * would refuse an injected script tag, does not stand in the way.
 */
export async function axeViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate('typeof window.axe !== "undefined"'))) await page.evaluate(AXE);
  const result = (await page.evaluate(
    `axe.run(document, { runOnly: { type: 'tag', values: ${JSON.stringify(TAGS)} } })`,
  )) as { violations: { id: string; tags: string[]; nodes: { target: string[] }[] }[] };
  return result.violations.map(
    (v) =>
      `${v.id} (${v.tags.filter((t) => t.startsWith('wcag') || t === 'best-practice').join(' ')}): ${v.nodes
        .slice(0, 5)
        .map((n) => n.target.join(' '))
        .join(', ')}`,
  );
}
