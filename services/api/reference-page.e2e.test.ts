import { existsSync } from 'node:fs';
import { pino } from 'pino';
import type { BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { axeViolations } from '../../test/axe.ts';
import { CHROMIUM, launchChromium } from '../../test/chromium.ts';
import { contrast } from '../../test/contrast.ts';
import { Readiness } from '../shared/readiness.ts';
import { buildApp } from './app.ts';

const present = existsSync(CHROMIUM);
if (!present && process.env.CI !== 'true') {
  console.warn(`\n*** ${CHROMIUM} missing (apt-get install -y chromium): reference page suite NOT RUN ***\n`);
}

let app: Awaited<ReturnType<typeof buildApp>>;
let origin: string;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;

describe.runIf(present || process.env.CI === 'true')(
  'the API reference page (/docs) in headless Chromium',
  () => {
    beforeAll(async () => {
      app = await buildApp({
        config: { BODY_LIMIT_BYTES: 65_536 },
        logger: pino({ level: 'silent' }),
        readiness: new Readiness(),
        metrics: null,
      });
      origin = await app.listen({ host: '127.0.0.1', port: 0 });
      ({ browser, close: closeBrowser } = await launchChromium('docs'));
    });
    afterAll(async () => {
      await closeBrowser?.();
      await app?.close();
    });

    it('renders the document and makes no request off its own origin', async () => {
      const page = await browser.newPage();
      const requested: string[] = [];
      const failed: string[] = [];
      const errors: string[] = [];
      page.on('request', (r) => requested.push(r.url()));
      page.on('response', (r) => {
        if (r.status() >= 400) failed.push(`${r.status()} ${r.url()}`);
      });
      page.on('console', (m) => {
        // A resource that failed is listed by its response above, with its URL.
        if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) errors.push(m.text());
      });
      page.on('pageerror', (e) => errors.push(e.message));
      const answer = await page.goto(`${origin}/docs`);
      // Never framed; Scalar's inline script and styles leave no room for a CSP beyond frame-ancestors.
      expect(answer?.headers()).toMatchObject({
        'x-frame-options': 'DENY',
        'content-security-policy': "frame-ancestors 'none'",
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      });
      // Rendered from /openapi.json: an operation's summary is on the page.
      await page
        .getByText('This OpenAPI document')
        .first()
        .waitFor({ timeout: 60_000 /* generous: a loaded machine parses Scalar's 5 MB bundle slowly */ });
      expect(requested).toContain(`${origin}/openapi.json`);
      // A language a screen reader can pronounce it in, and a title naming this service.
      expect(await page.evaluate('document.documentElement.lang')).toBe('en');
      const spec = (await (await fetch(`${origin}/openapi.json`)).json()) as { info: { title: string } };
      expect(await page.title()).toBe(`${spec.info.title} API reference`);
      expect(requested.filter((url) => !url.startsWith(`${origin}/`) && !url.startsWith('data:'))).toEqual(
        [],
      );
      // Scalar's muted text colours read at 4.5:1 or more (WCAG AA) on its page and panel
      // backgrounds, in light and dark mode (its light --scalar-color-3, #8e8e8e, is 3.3:1 on white).
      const palettes = (await page.evaluate(`['light-mode', 'dark-mode'].map((mode) => {
        const el = document.createElement('div');
        el.className = mode;
        document.body.append(el);
        const style = getComputedStyle(el);
        const colour = (name) => style.getPropertyValue('--scalar-' + name).trim();
        const palette = { mode, text: ['color-1', 'color-2', 'color-3'].map(colour),
          backgrounds: ['background-1', 'background-2'].map(colour) };
        el.remove();
        return palette;
      })`)) as { mode: string; text: string[]; backgrounds: string[] }[];
      expect(palettes).toHaveLength(2);
      for (const { mode, text, backgrounds } of palettes) {
        for (const fg of text) {
          for (const bg of backgrounds)
            expect(contrast(fg, bg), `${mode} ${fg} on ${bg}`).toBeGreaterThanOrEqual(4.5);
        }
      }
      // The page as rendered passes axe's WCAG 2.0-2.2 A/AA and best-practice rules: Scalar's own
      // green for POST in the sidebar (#00935d, 3.6:1 on its #f6f6f6) is darkened by our CSS.
      expect(await axeViolations(page)).toEqual([]);
      // The browser asks for a favicon of its own accord; the service has none.
      expect(failed.filter((f) => !f.endsWith('/favicon.ico'))).toEqual([]);
      expect(errors).toEqual([]);
    }, 90_000);

    it('on localhost too (the README\'s address): no developer toolbar, no "Ask AI", nothing off its origin', async () => {
      // Scalar shows its developer tools and agent chat on a localhost origin only (127.0.0.1 hides
      // them); the agent fetches api.scalar.com, which an offline machine cannot reach.
      const local = `http://localhost:${new URL(origin).port}`;
      const page = await browser.newPage();
      const requested: string[] = [];
      page.on('request', (r) => requested.push(r.url()));
      await page.goto(`${local}/docs/`);
      await page
        .getByText('This OpenAPI document')
        .first()
        .waitFor({ timeout: 60_000 /* generous: a loaded machine parses Scalar's 5 MB bundle slowly */ });
      expect(requested).toContain(`${local}/openapi.json`);
      expect(await page.locator('.references-developer-tools').count()).toBe(0);
      expect(await page.getByText('Ask AI').count()).toBe(0);
      expect(requested.filter((url) => !url.startsWith(`${local}/`) && !url.startsWith('data:'))).toEqual([]);
      await page.close();
    }, 90_000);
  },
);
