import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type TrackRecordLine, TrackRecordResponse } from '../../contracts/history.ts';
import { axeViolations } from '../../test/axe.ts';
import { CHROMIUM, launchChromium } from '../../test/chromium.ts';
import { contrast } from '../../test/contrast.ts';
import {
  MARKETS,
  recordHistory,
  type ServedHistory,
  startHistoryServer,
  startSettledHistory,
} from '../../test/history-harness.ts';
import { recordIntervalHistory } from '../../test/interval-history.ts';

const present = existsSync(CHROMIUM);
// Outside CI a machine without Debian's chromium says so loudly; under CI=true the suite runs and fails.
if (!present && process.env.CI !== 'true') {
  console.warn(
    `\n*** ${CHROMIUM} missing (apt-get install -y chromium): track-record page suite NOT RUN ***\n`,
  );
}

let main: ServedHistory;
let server: ServedHistory['server'];
/** A history of HOLDs only (the perp 1h market the shipped table answers HOLD on). */
let holds: ServedHistory;
/** A history none of whose verdicts is revealed yet. */
let young: ServedHistory;
/** Weeks of history: a line whose risk record has intervals beside lines without. */
let intervals: ServedHistory;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;

const CHARTS = ['chart-calibration', 'chart-coverage', 'chart-hit', 'chart-net', 'chart-sigma'];

/** The server's /api/track-record?window=all, parsed with the contract's schema. */
async function trackRecord(url: string): Promise<TrackRecordResponse> {
  const res = await fetch(`${url}/api/track-record?window=all`);
  expect(res.status).toBe(200);
  return TrackRecordResponse.parse(await res.json());
}

describe.runIf(present || process.env.CI === 'true')('GET /track-record in headless Chromium', () => {
  beforeAll(async () => {
    main = await startSettledHistory({ steps: 60 });
    server = main.server;
    const perp = MARKETS.filter((m) => m.exchange === 'BINANCE' && m.coin === 'BTC');
    holds = await startSettledHistory({ steps: 40, markets: perp });
    young = await startSettledHistory({ steps: 3, markets: perp });
    intervals = await startSettledHistory({ record: recordIntervalHistory });
    ({ browser, close: closeBrowser } = await launchChromium('track-record'));
  });
  afterAll(async () => {
    await closeBrowser?.();
    await main?.close();
    await holds?.close();
    await young?.close();
    await intervals?.close();
  });

  /** Opens the page at a viewport width and waits for its figures; collects every console problem. */
  async function open(width: number, height: number, url = server.url, timezone?: string) {
    const page = await browser.newPage();
    await page.setViewportSize({ width, height });
    if (timezone) {
      const cdp = await page.context().newCDPSession(page);
      await cdp.send('Emulation.setTimezoneOverride', { timezoneId: timezone });
    }
    const problems: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error' || m.type() === 'warning') problems.push(`${m.type()}: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('requestfailed', (r) => problems.push(`requestfailed: ${r.url()}`));
    page.on('response', (r) => {
      if (r.status() >= 400) problems.push(`${r.status()}: ${r.url()}`);
    });
    // A url ending in '#' names the page itself (its query with it); else /track-record is added.
    const answer = await page.goto(url.endsWith('#') ? url.slice(0, -1) : `${url}/track-record`);
    // Its own Content-Security-Policy (no inline code but its hashed script and style, never
    // framed): a violation would be a console error, which `problems` collects.
    const headers = answer?.headers() ?? {};
    expect(headers['content-security-policy']).toMatch(
      /script-src 'self' 'sha256-[^;]+; style-src 'self' 'sha256-/,
    );
    expect(headers['content-security-policy']).toContain("frame-ancestors 'none'");
    expect(headers).toMatchObject({
      'x-frame-options': 'DENY',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
    });
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

  /**
   * No empty chart: each chart is drawn with its points, or not drawn at all and a sentence in
   * its place says why. Returns the point counts.
   */
  async function chartsOrSentences(page: Page) {
    const points = (await page.evaluate('window.trackRecordCharts')) as Record<string, number>;
    expect(Object.keys(points).sort()).toEqual(CHARTS);
    for (const [id, n] of Object.entries(points)) {
      const empty = page.locator(`#${id}-empty`);
      if (n > 0) {
        expect(await page.locator(`#${id} canvas`).count(), id).toBe(1);
        expect(await empty.isVisible(), id).toBe(false);
      } else {
        expect(await page.locator(`#${id} canvas`).count(), id).toBe(0);
        expect(await empty.isVisible(), id).toBe(true);
        expect((await empty.textContent())!.length, id).toBeGreaterThan(40);
      }
    }
    expect(await page.locator('canvas').count()).toBe(Object.values(points).filter((n) => n > 0).length);
    return points;
  }

  /**
   * The charts over time: the x axis runs from a day before the first day to a day after the last
   * (one day is not lost on an axis of years), and a reference line ("stated", "right in level")
   * spans the chart even over one day.
   */
  async function expectDayAxes(page: Page) {
    const plots = (await page.evaluate(`Object.entries(window.trackRecordPlots)
      .filter(([id]) => id !== 'chart-calibration')
      .map(([id, u]) => {
        const a = u.axes[0];
        const ctx = document.createElement('canvas').getContext('2d');
        ctx.font = a.font[0];
        return { id, min: u.scales.x.min, max: u.scales.x.max, x: u.data[0],
          drawn: u.data.slice(1).map((c) => c.filter((v) => v != null).length),
          splits: a._splits, labels: a._values,
          at: a._splits.map((t) => u.bbox.left / devicePixelRatio + u.valToPos(t, 'x')), width: u.width,
          widths: a._values.map((v) => ctx.measureText(String(v)).width / devicePixelRatio) };
      })`)) as {
      id: string;
      min: number;
      max: number;
      x: number[];
      drawn: number[];
      splits: number[];
      labels: string[];
      at: number[];
      width: number;
      widths: number[];
    }[];
    expect(plots.length).toBeGreaterThan(0);
    for (const plot of plots) {
      // Each tick is labelled with its UTC day as the API spells it (2025-07-14): never a US
      // month/day ("7/14") a reader elsewhere takes for the 7th of the 14th month.
      expect(plot.splits.length, plot.id).toBeGreaterThan(1);
      expect(plot.labels, plot.id).toEqual(
        plot.splits.map((t) => new Date(t * 1000).toISOString().slice(0, 10)),
      );
      // The longer labels do not run into each other: ticks are further apart than a label is wide.
      for (let i = 1; i < plot.at.length; i++) {
        const gap = plot.at[i]! - plot.at[i - 1]!;
        const room = (plot.widths[i]! + plot.widths[i - 1]!) / 2;
        expect(gap, `${plot.id}: ${plot.labels[i - 1]} to ${plot.labels[i]}`).toBeGreaterThan(room);
      }
      // Each label is whole: the last tick stands on the plot's right edge, its label centred on it.
      plot.at.forEach((x, i) => {
        expect(x - plot.widths[i]! / 2, `${plot.id}: ${plot.labels[i]}`).toBeGreaterThanOrEqual(0);
        expect(x + plot.widths[i]! / 2, `${plot.id}: ${plot.labels[i]}`).toBeLessThanOrEqual(plot.width);
      });
      const [first, last] = [plot.x[1]!, plot.x.at(-2)!];
      expect(plot.min, plot.id).toBe(first - 86_400);
      expect(plot.max, plot.id).toBe(last + 86_400);
      if (plot.id === 'chart-coverage' || plot.id === 'chart-sigma') {
        expect(plot.drawn.at(-1), `${plot.id} reference`).toBe(plot.x.length);
      }
    }
  }

  /**
   * Every value axis (and the calibration chart's confidence axis) labels its grid lines as they
   * are: the page's own formatter, given the steps uPlot picks on a short axis (quarters, 2.5 and
   * 250 apart: its increments are 1, 2, 2.5 and 5 times a power of ten), labels each tick so that it
   * reads back as its value, never 0.25 as "0.3" or 1,250 bps as "1.3K".
   */
  async function expectExactTicks(page: Page) {
    const read = (await page.evaluate(`Object.entries(window.trackRecordPlots).flatMap(([id, u]) =>
      (id === 'chart-calibration' ? [0, 1] : [1]).flatMap((i) => [0.25, 2.5, 250].map((step) => {
        const splits = [0, 1, 2, 3, 4, 5].map((k) => k * step);
        return { id, axis: i, splits, labels: u.axes[i].values(u, splits, i, 30, step) };
      })))`)) as { id: string; axis: number; splits: number[]; labels: string[] }[];
    expect(read.length).toBeGreaterThan(0);
    const unit = { K: 1e3, M: 1e6, B: 1e9 } as Record<string, number>;
    for (const { id, splits, labels } of read) {
      // The rates' axes label a share (0.25) in percent (25 %).
      const scale = id === 'chart-hit' || id === 'chart-coverage' ? 100 : 1;
      labels.forEach((label, k) => {
        const m = label.match(/^(-?\d+(?:\.\d+)?)([KMB])?(?: %| bps)?$/);
        expect(m, `${id}: ${label}`).not.toBeNull();
        const value = Number(m![1]) * (m![2] ? unit[m![2]]! : 1);
        expect(value, `${id}: "${label}" names the tick at ${splits[k]! * scale}`).toBeCloseTo(
          splits[k]! * scale,
          9,
        );
      });
    }
  }

  /** Each chart has its points; the calibration chart has three or says why it has fewer. */
  async function expectCharts(page: Page) {
    const points = await chartsOrSentences(page);
    for (const n of Object.values(points)) expect(n).toBeGreaterThan(0);
    await expectDayAxes(page);
    const note = page.locator('#calibration-note');
    if (points['chart-calibration']! < 3) {
      expect(await note.isVisible()).toBe(true);
      expect(await note.textContent()).toContain(`Only ${points['chart-calibration']} confidence bucket`);
    } else expect(await note.isVisible()).toBe(false);
    for (const axis of await axes(page)) {
      expect(axis.labels.length, axis.id).toBeGreaterThan(1);
      expect(axis.widest, `${axis.id}: ${axis.labels.join(' ')}`).toBeLessThanOrEqual(axis.room);
    }
    await expectExactTicks(page);
    // Every axis says what it measures and its unit: a tick's "%" alone does not say of what.
    const titles = (await page.evaluate(
      `Object.fromEntries(Object.entries(window.trackRecordPlots).map(([id, u]) => [id, u.axes.map((a) => a.label)]))`,
    )) as Record<string, string[]>;
    expect(titles).toEqual({
      'chart-hit': ['day (UTC)', 'hit rate (%)'],
      'chart-calibration': ['confidence (%)', 'hit rate (%)'],
      'chart-net': ['day (UTC)', 'cumulative net return (bps)'],
      'chart-coverage': ['day (UTC)', 'closes inside the band (%)'],
      'chart-sigma': ['day (UTC)', 'σ served ÷ realised (ratio)'],
    });
    const net = (await axes(page)).find((a) => a.id === 'chart-net')!;
    // Net return in compact notation ("-1.2K bps"), never a long number an axis could cut.
    for (const label of net.labels) expect(label).toMatch(/^-?\d+(\.\d{1,3})?[KMB]? bps$/);
    // Rates on their own scale, 0 to 100 %, whatever the data.
    for (const id of ['chart-hit', 'chart-coverage']) {
      const labels = (await axes(page)).find((a) => a.id === id)!.labels;
      expect(labels[0], id).toBe('0 %');
      expect(labels.at(-1), id).toBe('100 %');
    }
  }

  it('desktop: no console errors, every chart with its points and unclipped axes, refresh as often as the data may be cached', async () => {
    const { page, problems } = await open(1400, 1000);
    await expectCharts(page);
    // axe-core (WCAG 2.2 A/AA and best practice) finds nothing, the charts drawn.
    expect(await axeViolations(page)).toEqual([]);
    const rows = await page.locator('#lines tbody tr').count();
    expect(rows).toBe(3);
    expect(await page.locator('#lines tbody tr').first().textContent()).toContain('ALL');
    // The free baselines beside the figures sold, as the API serves them.
    const { baselines } = await trackRecord(server.url);
    if (!baselines) throw new Error('/api/track-record served no baselines');
    expect(await page.locator('#baselines tbody tr').count()).toBe(baselines.cells.length);
    expect(baselines.cells.length).toBeGreaterThan(0);
    expect(await page.locator('#baselines tbody tr').first().textContent()).toContain(
      baselines.cells[0]!.bestFreeRule,
    );
    expect(await page.locator('#risk tbody tr').count()).toBe(baselines.risk.length);
    // The risk desk's out-of-sample figures where the shipped table has them, the words where not.
    const unscored = baselines.risk.filter((r) => !r.desk).length;
    expect(await page.locator('#risk tbody tr', { hasText: 'not yet scored' }).count()).toBe(unscored);
    // The live risk record per line, and the shipped carry fit with the sentence saying what it is.
    expect(await page.locator('#risk-record tbody tr').count()).toBe(3);
    const live = await trackRecord(server.url);
    const overallRow = (await page.locator('#risk-record tbody tr').first().textContent())!;
    expect(overallRow).toContain(String(live.overall.risk.points));
    // The blocks its figures rest on, and [–] for the interval until they span 20 (days: these
    // span three; a printed interval is the weeks-long history's test below).
    expect(overallRow).toContain(`${live.overall.risk.points}${live.overall.risk.blocks}`);
    expect(live.overall.risk.blocks).toBeLessThan(20);
    expect(live.overall.risk.sigmaRatioInterval).toBeNull();
    expect(overallRow).toContain('[–]');
    // Each market's line sits beside the evaluation's figures for its cell at the verdict's horizon.
    const spot = (await page.locator('#risk-record tbody tr', { hasText: 'BINANCE_SPOT' }).textContent())!;
    const cell = baselines.risk.find(
      (r) => r.set === 'spot' && r.timeframe === '5m' && r.horizon === 'verdict',
    )!;
    expect(spot).toContain(`${(100 * cell.coverage.value!).toFixed(1)} %`);
    if (!cell.desk) expect(spot).toContain('not yet scored');
    expect(await page.locator('#carry tbody tr').count()).toBe(
      live.carry.buckets.reduce((n, b) => n + b.horizons.length, 0),
    );
    expect(await page.locator('#carry-note').textContent()).toContain('not tracked live');
    // Built from the replay feed: the page says so in words, and counts each line's verdicts by feed.
    const feedNote = page.locator('#feed-note');
    expect(await feedNote.isVisible()).toBe(true);
    expect(await feedNote.getAttribute('data-feed')).toBe('replay');
    expect(await feedNote.textContent()).toContain('not a live track record');
    const overall = await trackRecord(server.url);
    expect(await page.locator('#lines tbody tr').first().textContent()).toContain(
      `0 / ${overall.overall.calls + overall.overall.holds}`,
    );
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

  it('each chart has a text alternative: a summary as its label and its figures in a table', async () => {
    const { page, problems } = await open(1400, 1000);
    const points = await chartsOrSentences(page);
    const tr = await trackRecord(server.url);
    for (const id of CHARTS) {
      // The plot area is the image; the legend beside it is not part of it.
      const chart = page.locator(`#${id} .u-wrap`);
      const title = (await page.locator(`.chart:has(#${id}) h3`).textContent())!;
      expect(await chart.getAttribute('role'), id).toBe('img');
      expect(await chart.getAttribute('aria-label'), id).toMatch(
        new RegExp(`^${title.replace(/[()]/g, '\\$&')}: ${points[id]} points?, `),
      );
      // Not shown, but read: the accessibility tree has it under its caption.
      const table = page.getByRole('table', { name: `${title}: the figures charted` });
      expect(await table.count(), id).toBe(1);
      expect(await table.locator('tbody tr').count(), id).toBe(points[id]);
    }
    // The figures are the API's, as the page's tables print them.
    const days = tr.series.filter((p) => p.calls > 0);
    const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
    const cells = await page
      .getByRole('table', { name: 'Hit rate vs baselines (cumulative): the figures charted' })
      .locator('tbody tr')
      .last()
      .locator('th, td')
      .allTextContents();
    const last = days.at(-1)!;
    expect(cells).toEqual([
      last.day,
      pct(last.hitRate!),
      pct(last.alwaysBuy!),
      pct(last.alwaysSell!),
      pct(last.random!),
    ]);
    const label = (await page.locator('#chart-hit .u-wrap').getAttribute('aria-label'))!;
    expect(label).toContain(`${days[0]!.day} to ${last.day}`);
    expect(label).toContain(`calls ${pct(last.hitRate!)}`);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the legend toggles are keyboard controls: focusable buttons, Enter and Space toggle a series, kept through a redraw', async () => {
    const { page, problems } = await open(1400, 1000);
    const toggles = page.locator('#chart-hit .u-legend [role=button]');
    // One per series (the day is not one).
    expect(await toggles.allTextContents()).toEqual(['calls', 'always-BUY', 'always-SELL', 'random']);
    for (const t of await toggles.all()) {
      expect(await t.getAttribute('tabindex')).toBe('0');
      expect(await t.getAttribute('aria-pressed')).toBe('true');
    }
    const shown = () => page.evaluate("window.trackRecordPlots['chart-hit'].series[4].show");
    const random = toggles.nth(3);
    await random.focus();
    await page.keyboard.press('Enter');
    expect(await shown()).toBe(false);
    expect(await random.getAttribute('aria-pressed')).toBe('false');
    await page.keyboard.press(' ');
    expect(await shown()).toBe(true);
    expect(await random.getAttribute('aria-pressed')).toBe('true');
    // Reached with Tab from the control before it.
    await toggles.nth(2).focus();
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.textContent')).toBe('random');
    // A redraw (the page's refresh, a resize, a zoom to 200 %) replaces the chart: the series
    // hidden stays hidden and the toggle keeps the focus (it was lost to the page before).
    await page.keyboard.press('Enter');
    await page.evaluate("window.trackRecordPlots['chart-hit'].stale = true");
    await page.evaluate("window.dispatchEvent(new Event('resize'))");
    await expect
      .poll(() => page.evaluate("window.trackRecordPlots['chart-hit'].stale === undefined"), {
        timeout: 30_000,
      })
      .toBe(true);
    expect(await shown()).toBe(false);
    expect(await page.evaluate('document.activeElement.textContent')).toBe('random');
    expect(await page.evaluate("document.activeElement.getAttribute('aria-pressed')")).toBe('false');
    expect(
      await page.evaluate("window.trackRecordPlots['chart-hit'].root.contains(document.activeElement)"),
    ).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('the updates can be paused and resumed from the keyboard (WCAG 2.2.2): paused, no load is due', async () => {
    const { page, problems } = await open(1400, 1000);
    const box = page.getByRole('checkbox', {
      name: 'Update the figures automatically as new verdicts resolve',
    });
    expect(await box.isChecked()).toBe(true);
    expect(await page.evaluate('typeof window.trackRecordNextLoad')).toBe('number');
    await box.focus();
    await page.keyboard.press(' ');
    expect(await box.isChecked()).toBe(false);
    expect(await page.evaluate('window.trackRecordNextLoad')).toBeNull();
    // Ticked again: the figures load at once and the refresh is scheduled again.
    const loaded = page.waitForResponse((r) => r.url().includes('/api/track-record?window=all'));
    await page.keyboard.press(' ');
    expect((await loaded).status()).toBe(200);
    await expect.poll(() => page.evaluate('typeof window.trackRecordNextLoad')).toBe('number');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('every line reads at 3:1 or more on white and is told apart by its dash, not its colour alone', async () => {
    const { page, problems } = await open(1400, 1000);
    const plots = (await page.evaluate(`Object.entries(window.trackRecordPlots).map(([id, u]) => ({ id,
      series: u.series.slice(1).map((s, i) => ({ label: s.label, stroke: s.stroke(u, i + 1), width: s.width,
        dash: s.dash || [] })) }))`)) as {
      id: string;
      series: { label: string; stroke: string; width: number; dash: number[] }[];
    }[];
    expect(plots.map((p) => p.id).sort()).toEqual(CHARTS);
    for (const plot of plots) {
      for (const s of plot.series) {
        expect(contrast(s.stroke, '#ffffff'), `${plot.id} ${s.label} ${s.stroke}`).toBeGreaterThanOrEqual(3);
      }
      // Points, a solid line, or each its own dash pattern.
      const looks = plot.series.map((s) => (s.width === 0 ? 'points' : JSON.stringify(s.dash)));
      expect(new Set(looks).size, `${plot.id}: ${looks.join(' ')}`).toBe(looks.length);
    }
    expect(problems).toEqual([]);
    await page.close();
  });

  it('structure: one main landmark, headings without a skipped level, captioned tables in keyboard-scrollable regions', async () => {
    const { page, problems } = await open(390, 844);
    expect(await page.locator('main').count()).toBe(1);
    expect(await page.locator('main h1').count()).toBe(1);
    const levels = (await page.evaluate(
      "[...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map((h) => Number(h.tagName[1]))",
    )) as number[];
    expect(levels[0]).toBe(1);
    levels.forEach((level, i) => {
      if (i > 0)
        expect(level, `heading ${i}: h${levels[i - 1]} then h${level}`).toBeLessThanOrEqual(
          levels[i - 1]! + 1,
        );
    });
    // Every table says what it holds, the charts' hidden ones too (uPlot's legends aside).
    const captions = await page
      .locator('table:not([hidden]):not(.u-legend)')
      .evaluateAll((ts) =>
        ts.map(
          (t) => (t as unknown as { caption: { textContent: string } | null }).caption?.textContent ?? '',
        ),
      );
    expect(captions.length).toBeGreaterThan(5);
    for (const c of captions) expect(c.length).toBeGreaterThan(10);
    // A table wider than the phone scrolls in its box: a keyboard reaches the box, named by its caption.
    const wraps = page.locator('.table-wrap');
    expect(await wraps.count()).toBe(5);
    for (const wrap of await wraps.all()) {
      expect(await wrap.getAttribute('tabindex')).toBe('0');
      expect(await wrap.getAttribute('role')).toBe('region');
      const caption = (await wrap.locator('caption').textContent())!;
      expect(await page.getByRole('region', { name: caption, exact: true }).count()).toBe(1);
    }
    expect(problems).toEqual([]);
    await page.close();
  });

  it('without JavaScript the page says so and links the figures as JSON', async () => {
    // This headless Chromium parses <noscript> as text even with scripts switched off (CDP, Blink
    // settings): read the markup a browser without scripts renders.
    const html = await (await fetch(`${server.url}/track-record`)).text();
    const noscript = /<noscript>([\s\S]*?)<\/noscript>/.exec(html)?.[1] ?? '';
    expect(noscript).toContain('This page draws its figures with JavaScript');
    expect(noscript).toContain('<a href="/api/track-record?window=all">/api/track-record?window=all</a>');
  });

  it('the window is in the page address: ?window=30d selects it, the select writes it, an unknown one is said', async () => {
    const { page, problems } = await open(1400, 1000, `${server.url}/track-record?window=30d#`);
    expect(await page.locator('#window').inputValue()).toBe('30d');
    expect(await page.locator('#window-note').isVisible()).toBe(false);
    await page.selectOption('#window', '90d');
    expect(new URL(page.url()).searchParams.get('window')).toBe('90d');
    await page.close();
    const wrong = await open(1400, 1000, `${server.url}/track-record?window=1y#`);
    expect(await wrong.page.locator('#window').inputValue()).toBe('all');
    expect(await wrong.page.locator('#window-note').textContent()).toBe(
      'There is no window "1y" (7d, 30d, 90d or all): showing all.',
    );
    expect(await wrong.page.locator('#window-note').isVisible()).toBe(true);
    expect([...problems, ...wrong.problems]).toEqual([]);
    await wrong.page.close();
  });

  it('beside its time, the log position the figures are folded to (asOfPosition)', async () => {
    const { page, problems } = await open(1400, 1000);
    const tr = await trackRecord(server.url);
    expect(tr.asOfPosition).toBeGreaterThan(0);
    expect(await page.locator('#asof').textContent()).toBe(
      ` as of ${tr.asOf}, log position ${tr.asOfPosition}`,
    );
    expect(problems).toEqual([]);
    await page.close();
  });

  it("each chart's legend reads as its table: the last point's figures until one is hovered, shares in percent", async () => {
    const { page, problems } = await open(1400, 1000);
    const legends = (await page.evaluate(`Object.entries(window.trackRecordPlots).map(([id, u]) => {
      const read = () => [...u.root.querySelectorAll('.u-legend .u-value')].map((e) => e.textContent);
      const idle = read();
      u.setCursor({ left: u.valToPos(u.data[0][1], 'x'), top: 10 });
      const hovered = read();
      const rows = [...document.querySelectorAll('#' + id + '-table tbody tr')]
        .map((tr) => [...tr.children].map((c) => c.textContent));
      return { id, idle, hovered, first: rows[0], last: rows[rows.length - 1] };
    })`)) as { id: string; idle: string[]; hovered: string[]; first: string[]; last: string[] }[];
    expect(legends.map((l) => l.id).sort()).toEqual(CHARTS);
    for (const l of legends) {
      // uPlot's own legend says "--" until a point is hovered, and a share as a raw fraction (0.8).
      expect(l.idle, l.id).toEqual(l.last);
      expect(l.hovered, l.id).toEqual(l.first);
    }
    const coverage = legends.find((l) => l.id === 'chart-coverage')!;
    expect(
      coverage.idle.slice(1).every((v) => / %$/.test(v)),
      coverage.idle.join(', '),
    ).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('in another time zone (America/New_York) the days plotted are UTC days, on the axis and on hover', async () => {
    const { page, problems } = await open(1400, 1000, server.url, 'America/New_York');
    expect(await page.evaluate('Intl.DateTimeFormat().resolvedOptions().timeZone')).toBe('America/New_York');
    const plots = (await page.evaluate(`Object.entries(window.trackRecordPlots)
      .filter(([id]) => id !== 'chart-calibration')
      .map(([id, u]) => {
        u.setCursor({ left: u.valToPos(u.data[0][1], 'x'), top: 10 });
        return { id, x: u.data[0], splits: u.axes[0]._splits, labels: u.axes[0]._values,
          hovered: u.root.querySelector('.u-legend .u-series .u-value').textContent };
      })`)) as { id: string; x: number[]; splits: number[]; labels: string[]; hovered: string }[];
    expect(plots.length).toBeGreaterThan(0);
    const utcDay = (t: number) => new Date(t * 1000).toISOString().slice(0, 10);
    for (const plot of plots) {
      // The first day with figures, hovered, reads as its UTC day (not 8 pm the day before).
      expect(plot.hovered, plot.id).toBe(utcDay(plot.x[1]!));
      // Ticks fall on UTC midnights and are labelled with that UTC day.
      expect(plot.splits.length, plot.id).toBeGreaterThan(1);
      plot.splits.forEach((t, i) => {
        expect(t % 86_400, `${plot.id} tick ${t}`).toBe(0);
        expect(plot.labels[i], `${plot.id} tick ${t}`).toBe(utcDay(t));
      });
    }
    expect(problems).toEqual([]);
    await page.close();
  });

  it('a refused /api/track-record (429) says so in a status line and is retried after its Retry-After', async () => {
    const perp = MARKETS.filter((m) => m.exchange === 'BINANCE' && m.coin === 'BTC');
    const limitedFx = await recordHistory({ steps: 3, markets: perp });
    // The service's limiter in front: 30 requests per 5 s window for an anonymous address.
    const limited = await startHistoryServer({
      store: limitedFx.store,
      feed: limitedFx.feed,
      rateLimited: true,
      env: { RATE_LIMIT_ANONYMOUS: '30', RATE_LIMIT_WINDOW_MS: '5000' },
    });
    try {
      await limited.settle();
      const { page, problems } = await open(1400, 1000, limited.url);
      const status = page.getByRole('status');
      expect(await status.count()).toBe(1);
      expect(await status.textContent()).toBe('');
      // Spend this address's budget (the page's own): a window with 2 s or more left, so the
      // page's next call falls in it.
      for (;;) {
        const answer = await fetch(`${limited.url}/api/track-record?window=all`);
        await answer.arrayBuffer();
        if (answer.status === 429 && Number(answer.headers.get('retry-after')) >= 2) break;
      }
      const refused = page.waitForResponse((r) => r.url().includes('/api/track-record?window=7d'));
      await page.selectOption('#window', '7d');
      const answer = await refused;
      expect(answer.status()).toBe(429);
      await page.locator('[role=status]:not(:empty)').waitFor();
      // The wait said is the Retry-After the page was sent (seconds), not a guess: read as a date,
      // "4" was a day in 2001 and the page said 1 s.
      const retryAfter = Number(await answer.headerValue('retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(await status.textContent()).toBe(
        `The figures could not be loaded: too many requests (HTTP 429). Trying again in ${retryAfter} s.`,
      );
      // Retried once its window has ended: the figures of the window chosen, the status cleared.
      await page.locator('[role=status]:empty').waitFor({ state: 'attached', timeout: 30_000 });
      expect(await page.locator('#asof').textContent()).toContain('as of');
      expect(await page.locator('#lines tbody tr').count()).toBeGreaterThan(0);
      // The browser reports the refused fetch itself; nothing else went wrong.
      expect(problems.filter((p) => !p.includes('429'))).toEqual([]);
      await page.close();
    } finally {
      await limited.close();
      await limitedFx.engine.close();
    }
  });

  it('HOLDs only: the direction charts say so in words, the risk charts are drawn', async () => {
    const { page, problems } = await open(1400, 1000, holds.server.url);
    const points = await chartsOrSentences(page);
    expect(points).toMatchObject({ 'chart-hit': 0, 'chart-calibration': 0, 'chart-net': 0 });
    expect(points['chart-coverage']).toBeGreaterThan(0);
    expect(points['chart-sigma']).toBeGreaterThan(0);
    await expectDayAxes(page);
    expect(await page.locator('#chart-hit-empty').textContent()).toMatch(
      /^No BUY or SELL call has a resolved outcome in this window: all \d+ resolved verdicts were HOLD/,
    );
    expect(await page.locator('#calibration-note').isVisible()).toBe(false);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('weeks of verdicts: the line over 20 blocks prints its risk intervals, the lines under 20 print [–]', async () => {
    const tr = await trackRecord(intervals.server.url);
    const [perp, spot] = tr.lines;
    expect([perp!.exchange, perp!.timeframe, spot!.exchange, spot!.timeframe]).toEqual([
      'BINANCE',
      '4h',
      'BINANCE_SPOT',
      '5m',
    ]);
    // One-day blocks on 5m reach 20; two-day blocks (4h, and the overall line with it) do not.
    expect(spot!.risk.blocks).toBeGreaterThanOrEqual(20);
    expect(spot!.risk.coverageInterval).not.toBeNull();
    expect(spot!.risk.sigmaRatioInterval).not.toBeNull();
    for (const l of [tr.overall, perp!]) {
      expect(l.risk.blocks, l.exchange).toBeLessThan(20);
      expect(l.risk.points, l.exchange).toBeGreaterThan(0);
      expect([l.risk.coverageInterval, l.risk.sigmaRatioInterval], l.exchange).toEqual([null, null]);
    }
    const { page, problems } = await open(1400, 1000, `${intervals.server.url}/track-record?window=all#`);
    // Each row's cells: exchange, timeframe, points, blocks, coverage, σ ratio, then the rest.
    const rows = (await page.evaluate(`[...document.querySelectorAll('#risk-record tbody tr')]
      .map((tr) => [...tr.cells].slice(0, 6).map((td) => td.textContent))`)) as string[][];
    const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
    const two = (x: number) => x.toFixed(2);
    const c = spot!.risk.coverageInterval!;
    const s = spot!.risk.sigmaRatioInterval!;
    const without = (l: TrackRecordLine) => [
      l.exchange,
      l.timeframe,
      String(l.risk.points),
      String(l.risk.blocks),
      `${pct(l.risk.coverage!)} [–] (${pct(l.risk.nominalCoverage!)})`,
      `${two(l.risk.sigmaRatio!)} [–]`,
    ];
    expect(rows).toEqual([
      without(tr.overall),
      without(perp!),
      [
        'BINANCE_SPOT',
        '5m',
        String(spot!.risk.points),
        String(spot!.risk.blocks),
        `${pct(spot!.risk.coverage!)} [${pct(c.low)}, ${pct(c.high)}] (${pct(spot!.risk.nominalCoverage!)})`,
        `${two(spot!.risk.sigmaRatio!)} [${two(s.low)}, ${two(s.high)}]`,
      ],
    ]);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('no revealed verdict yet: every chart is a sentence, never an empty frame', async () => {
    // The API says so in figures: nothing scored, no rate or ratio made up.
    const tr = await trackRecord(young.server.url);
    expect(tr.overall).toMatchObject({ calls: 0, holds: 0 });
    expect(tr.overall.risk).toEqual({
      points: 0,
      covered: 0,
      coverage: null,
      nominalCoverage: null,
      sigmaRatio: null,
      blocks: 0,
      sigmaRatioInterval: null,
      coverageInterval: null,
      unscored: 0,
    });
    expect(tr.series).toEqual([]);
    const { page, problems } = await open(1400, 1000, young.server.url);
    const points = await chartsOrSentences(page);
    for (const id of CHARTS) expect(points[id], id).toBe(0);
    expect(await page.locator('#chart-hit-empty').textContent()).toContain(
      'No verdict has a resolved outcome in this window yet',
    );
    expect(await page.locator('#chart-coverage-empty').textContent()).toContain(
      'the risk forecast has nothing to be scored on',
    );
    // The shipped baselines and carry fit still show: they do not depend on the window.
    expect(await page.locator('#risk tbody tr').count()).toBeGreaterThan(0);
    expect(await page.locator('#carry tbody tr').count()).toBeGreaterThan(0);
    // Switching windows keeps it so.
    await page.selectOption('#window', '7d');
    await page.waitForFunction("document.querySelector('#asof').textContent.includes('as of')");
    expect(Object.values(await chartsOrSentences(page)).every((n) => n === 0)).toBe(true);
    expect(problems).toEqual([]);
    await page.close();
  });

  it('phone (390 px): nothing wider than the screen, charts with their points and unclipped axes', async () => {
    const { page, problems } = await open(390, 844);
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await expectCharts(page);
    expect(await axeViolations(page)).toEqual([]);
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
