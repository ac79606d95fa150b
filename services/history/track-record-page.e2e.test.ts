import { existsSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { type BrowserContext, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';

const CHROMIUM = '/usr/bin/chromium';
const present = existsSync(CHROMIUM);
// Outside CI a machine without Debian's chromium says so loudly; under CI=true the suite runs and fails.
if (!present && process.env.CI !== 'true') {
  console.warn(
    `\n*** ${CHROMIUM} missing (apt-get install -y chromium): track-record page suite NOT RUN ***\n`,
  );
}

let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let browser: BrowserContext;
let profile: string;

describe.runIf(present || process.env.CI === 'true')('GET /track-record in headless Chromium', () => {
  beforeAll(async () => {
    fx = await recordHistory({ steps: 60 });
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
    profile = join(process.cwd(), 'test-results', `chromium-profile-${process.pid}-${Date.now()}`);
    mkdirSync(profile, { recursive: true });
    // A fresh profile per run (the persistent-context form is how playwright takes --user-data-dir).
    browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      viewport: { width: 1400, height: 1000 },
      headless: true,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
  });
  afterAll(async () => {
    await browser?.close();
    if (profile) rmSync(profile, { recursive: true, force: true });
    await server?.close();
    await fx?.engine.close();
  });

  /** Opens the page at a viewport width and waits for its figures; collects every console problem. */
  async function open(width: number, height: number) {
    const page = await browser.newPage();
    await page.setViewportSize({ width, height });
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('requestfailed', (r) => problems.push(`requestfailed: ${r.url()}`));
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
    });
    await page.goto(`${server.url}/track-record`);
    await page.waitForSelector(
      'body[data-loaded="true"]',
      { timeout: 120_000 } /* generous: a loaded machine, not a slow page */,
    );
    return { page, problems };
  }

  /** Every value axis's tick labels, measured in the page's own font, against the room the axis has. */
  async function axes(page: Page) {
    return (await page.evaluate(`Object.entries(window.trackRecordPlots).map(([id, u]) => {
      const a = u.axes[1];
      const ctx = document.createElement('canvas').getContext('2d');
      ctx.font = a.font[0];
      const labels = a._values.filter((v) => v != null).map(String);
      const widest = Math.max(...labels.map((v) => ctx.measureText(v).width / devicePixelRatio));
      return { id, labels, widest, room: a._size - a.ticks.size - a.gap };
    })`)) as { id: string; labels: string[]; widest: number; room: number }[];
  }

  /** Each chart has its points; the calibration chart has three or says why it has fewer. */
  async function expectCharts(page: Page) {
    const points = (await page.evaluate('window.trackRecordCharts')) as Record<string, number>;
    expect(Object.keys(points).sort()).toEqual(['chart-calibration', 'chart-hit', 'chart-net']);
    for (const n of Object.values(points)) expect(n).toBeGreaterThan(0);
    expect(await page.locator('canvas').count()).toBe(3);
    const note = page.locator('#calibration-note');
    if (points['chart-calibration']! < 3) {
      expect(await note.isVisible()).toBe(true);
      expect(await note.textContent()).toContain(`Only ${points['chart-calibration']} confidence bucket`);
    } else expect(await note.isVisible()).toBe(false);
    for (const axis of await axes(page)) {
      expect(axis.labels.length, axis.id).toBeGreaterThan(1);
      expect(axis.widest, `${axis.id}: ${axis.labels.join(' ')}`).toBeLessThanOrEqual(axis.room);
    }
    const net = (await axes(page)).find((a) => a.id === 'chart-net')!;
    // Net return in compact notation ("-1.2K"), never a long number an axis could cut.
    for (const label of net.labels) expect(label).toMatch(/^-?\d+(\.\d)?[KMB]?$/);
  }

  it('desktop: no console errors, every chart with its points and unclipped axes, refresh as often as the data may be cached', async () => {
    const { page, problems } = await open(1400, 1000);
    await expectCharts(page);
    const rows = await page.locator('#lines tbody tr').count();
    expect(rows).toBe(3);
    expect(await page.locator('#lines tbody tr').first().textContent()).toContain('ALL');
    // The free baselines beside the figures sold, as the API serves them.
    const tr = (await (await fetch(`${server.url}/api/track-record?window=all`)).json()) as {
      baselines: { cells: { cell: string; bestFreeRule: string }[]; risk: unknown[] };
    };
    expect(await page.locator('#baselines tbody tr').count()).toBe(tr.baselines.cells.length);
    expect(tr.baselines.cells.length).toBeGreaterThan(0);
    expect(await page.locator('#baselines tbody tr').first().textContent()).toContain(
      tr.baselines.cells[0]!.bestFreeRule,
    );
    expect(await page.locator('#risk tbody tr').count()).toBe(tr.baselines.risk.length);
    // Polling faster than the API's max-age would only fetch the same cached bytes again.
    const api = await fetch(`${server.url}/api/track-record?window=all`);
    const maxAge = Number(/max-age=(\d+)/.exec(api.headers.get('cache-control') ?? '')?.[1]);
    expect(maxAge).toBeGreaterThan(0);
    expect(await page.evaluate('window.trackRecordRefreshMs')).toBe(maxAge * 1000);
    // Switching the window reloads the figures without errors.
    await page.selectOption('#window', '7d');
    await page.waitForFunction("document.querySelector('#asof').textContent.includes('as of')");
    const shot = join(process.cwd(), 'test-results', 'track-record.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(statSync(shot).size).toBeGreaterThan(10_000);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('phone (390 px): nothing wider than the screen, charts with their points and unclipped axes', async () => {
    const { page, problems } = await open(390, 844);
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await expectCharts(page);
    // The wide table scrolls inside its own box instead of widening the page.
    const wrap = (await page.evaluate(
      "(() => { const w = document.querySelector('.table-wrap'); return [w.clientWidth, w.scrollWidth]; })()",
    )) as [number, number];
    expect(wrap[0]).toBeLessThanOrEqual(390);
    expect(wrap[1]).toBeGreaterThan(wrap[0]);
    const shot = join(process.cwd(), 'test-results', 'track-record-phone.png');
    await page.screenshot({ path: shot, fullPage: true });
    expect(statSync(shot).size).toBeGreaterThan(10_000);
    expect(problems).toEqual([]);
    await page.close();
  });
});
