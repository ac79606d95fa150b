import { Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { SeriesHistogram } from './series-histogram.ts';

const BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const options = {
  name: 'http_request_duration_seconds',
  help: 'HTTP request duration',
  labelNames: ['method', 'route', 'status'] as const,
  buckets: BUCKETS,
};

/** The same observations through prom-client's Histogram and through SeriesHistogram. */
function both(observations: [method: string, route: string, status: string, seconds: number][]) {
  const reference = new Registry();
  const histogram = new Histogram({ ...options, registers: [reference] });
  const ours = new Registry();
  const series = new SeriesHistogram({ ...options, registers: [ours] });
  for (const [method, route, status, seconds] of observations) {
    histogram.labels(method, route, status).observe(seconds);
    series.labels(method, route, status).observe(seconds);
  }
  return { reference, ours, series };
}

describe('SeriesHistogram', () => {
  it('reads out exactly as prom-client’s Histogram for the same observations', async () => {
    const { reference, ours } = both([
      ['GET', '/verify/:stream/:revision', '200', 0.0004],
      ['GET', '/verify/:stream/:revision', '200', 0.001], // on a bound: counted in that bucket
      ['GET', '/verify/:stream/:revision', '304', 0.2],
      ['POST', '/mcp', '200', 7], // above every bound: +Inf only
      ['POST', '/mcp', '200', 0.03],
      ['GET', 'unmatched', '404', 0],
      ['GET', '/a"quoted\\route\n', '200', 0.5],
    ]);
    expect(await ours.metrics()).toBe(await reference.metrics());
    const json = async (r: Registry) => JSON.parse(JSON.stringify(await r.getMetricsAsJSON())) as unknown;
    expect(await json(ours)).toEqual(await json(reference));
  });

  it('keeps one series per label set; reset forgets them, and a handle held across it counts afresh', async () => {
    const { ours, series } = both([['GET', '/x', '200', 0.01]]);
    const held = series.labels('GET', '/x', '200');
    held.observe(0.02);
    expect(series.labels('GET', '/x', '200').count).toBe(2);
    expect(series.labels('GET', '/x', '500').count).toBe(0);
    series.reset();
    expect(await ours.metrics()).not.toContain('_count');
    // As a prom-client labels() child held across a reset: the next observation is read out alone.
    const reference = new Registry();
    const histogram = new Histogram({ ...options, registers: [reference] });
    const child = histogram.labels('GET', '/x', '200');
    child.observe(0.01);
    histogram.reset();
    child.observe(0.3);
    held.observe(0.3);
    expect(await ours.metrics()).toBe(await reference.metrics());
  });

  it('refuses a wrong number of label values and a value that is not finite, as prom-client does', () => {
    const { series } = both([]);
    expect(() => series.labels('GET', '/x')).toThrow(/3 label values expected/);
    expect(() => series.labels('GET', '/x', '200').observe(Number.NaN)).toThrow(/not a finite/);
    expect(series.labels('GET', '/x', '200').count).toBe(0);
  });

  it('reads out as prom-client with the registry’s default labels, and with handles old and new across a reset', async () => {
    const reference = new Registry();
    const histogram = new Histogram({ ...options, registers: [reference] });
    const ours = new Registry();
    const series = new SeriesHistogram({ ...options, registers: [ours] });
    for (const registry of [reference, ours]) registry.setDefaultLabels({ host: 'api-1', zone: 'a' });
    const oldRef = histogram.labels('GET', '/x', '200');
    const oldOurs = series.labels('GET', '/x', '200');
    oldRef.observe(0.01);
    oldOurs.observe(0.01);
    histogram.reset();
    series.reset();
    const newRef = histogram.labels('GET', '/x', '200');
    const newOurs = series.labels('GET', '/x', '200');
    for (const [ref, own, seconds] of [
      [newRef, newOurs, 0.002],
      [oldRef, oldOurs, 0.7],
      [newRef, newOurs, 3],
    ] as const) {
      ref.observe(seconds);
      own.observe(seconds);
    }
    expect(await ours.metrics()).toBe(await reference.metrics());
    const json = async (r: Registry) => JSON.parse(JSON.stringify(await r.getMetricsAsJSON())) as unknown;
    expect(await json(ours)).toEqual(await json(reference));
    expect(await ours.metrics()).toContain(
      'http_request_duration_seconds_count{host="api-1",zone="a",method="GET"',
    );
  });

  it('takes its name in the registry, as any metric does', () => {
    const registry = new Registry();
    new SeriesHistogram({ ...options, registers: [registry] });
    expect(() => new Histogram({ ...options, registers: [registry] })).toThrow(/already been registered/);
  });
});
