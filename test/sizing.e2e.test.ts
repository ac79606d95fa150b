import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorBody } from '../contracts/errors.ts';
import { parseDomainEvent } from '../contracts/events.ts';
import { RiskForecast, type Sizing, TradeCall } from '../contracts/tools.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Sizing for a stated risk budget, as a buyer meets it: trade calls and risk forecasts over the
 * keyed HTTP route and over MCP (the SDK client), with the default budget and a stated one, and
 * the documented refusal of a budget that is not one.
 */

let running: TestService;
let url: string;
let key: string;
let mcp: Client;

beforeAll(async () => {
  // The replay clock stands still: every call of the suite reads the same closed candles.
  running = await startTestService(['api'], { REPLAY_SPEED: '0' });
  url = running.service.url;
  key = await running.issue();
  mcp = new Client({ name: 'sizing-test', version: '1.0.0' });
  await mcp.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
    }),
  );
}, 60_000);
afterAll(async () => {
  await mcp?.close().catch(() => undefined);
  await running?.stop();
});

async function post(tool: string, body: unknown) {
  const res = await fetch(`${url}/x402/${tool}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function call(tool: string, args: Record<string, unknown>) {
  const result = await mcp.callTool({ name: tool, arguments: args });
  return result as {
    isError?: boolean;
    structuredContent?: Record<string, unknown>;
    content: { text: string }[];
  };
}

/** `x` with the decimals that give `price` six significant digits (0.231274 beside 0.23293). */
const atScale = (x: number, price: number) =>
  Number(x.toFixed(Math.max(0, 5 - Math.floor(Math.log10(price)))));

/** The sizing means what it says: budget ÷ σ of the horizon, in coins at the price, stops at the band. */
function expectSized(
  sizing: Sizing,
  budget: number,
  f: { expected_move_pct: number; band_low: number; band_high: number },
  price: number,
) {
  expect(sizing.risk_budget_usd).toBe(budget);
  expect(sizing.notional_usd).toBeCloseTo(budget / (f.expected_move_pct / 100), 1);
  expect(sizing.quantity! * price).toBeCloseTo(sizing.notional_usd!, 0);
  expect(sizing.long_stop).toMatchObject({ price: f.band_low });
  expect(sizing.short_stop).toMatchObject({ price: f.band_high });
  expect(sizing.long_stop!.distance_pct).toBeCloseTo((100 * (price - f.band_low)) / price, 3);
  // Prices at the price's own scale (six significant digits of it), a stop's distance to 4 decimals.
  for (const edge of [f.band_low, f.band_high, sizing.long_stop!.price, sizing.short_stop!.price])
    expect(edge, `${edge} beside ${price}`).toBe(atScale(edge, price));
  for (const stop of [sizing.long_stop!, sizing.short_stop!])
    expect(stop.distance_pct).toBe(Number(stop.distance_pct.toFixed(4)));
  // The loss at the stop, to the cent and the distance's 4 decimals of a percent.
  for (const stop of [sizing.long_stop!, sizing.short_stop!]) {
    const shown = (sizing.notional_usd! * stop.distance_pct) / 100;
    expect(Math.abs(stop.loss_usd! - shown)).toBeLessThanOrEqual(0.01 + sizing.notional_usd! * 5e-7);
  }
}

describe('sizing for the caller’s risk budget', () => {
  it('a trade call over HTTP carries it in its volatility block, default 100 USD or the stated budget, same verdict', async () => {
    const plain = await post('get_trade_call', { coin: 'BTC', timeframe: '1h' });
    expect(plain.status).toBe(200);
    const { _service: _a, ...defaulted } = plain.body;
    const a = TradeCall.parse(defaulted);
    expectSized(a.volatility!.sizing, 100, a.volatility!, a.price);

    const stated = await post('get_trade_call', { coin: 'BTC', timeframe: '1h', riskBudgetUsd: 250 });
    expect(stated.status).toBe(200);
    const { _service: _b, ...sized } = stated.body;
    const b = TradeCall.parse(sized);
    // The same verdict (nothing recomputed, nothing recorded again), sized for 250 USD.
    expect(b.verdictId).toBe(a.verdictId);
    expect(b.signalHash).toBe(a.signalHash);
    expectSized(b.volatility!.sizing, 250, b.volatility!, b.price);
    expect(b.volatility!.sizing.notional_usd).toBeCloseTo(2.5 * a.volatility!.sizing.notional_usd!, 1);

    // The caller's budget is never part of the recorded, hash-chained verdict.
    const verdicts = (await running.service.adapters.eventStore.readAll())
      .map((e) => parseDomainEvent(e))
      .filter((e) => e?.type === 'VerdictRecorded');
    expect(verdicts.length).toBeGreaterThan(0);
    for (const v of verdicts) expect(JSON.stringify(v)).not.toMatch(/budget|sizing|notional/i);
    // The band is recorded as it is served (webhooks and exports carry the recorded one).
    for (const v of verdicts) {
      if (v?.type !== 'VerdictRecorded') continue;
      const { vol_band_low: low, vol_band_high: high } = v.data.inputs as Record<string, number>;
      expect([low, high]).toEqual([atScale(low!, v.data.price), atScale(high!, v.data.price)]);
    }
  });

  it('a risk forecast over HTTP sizes every horizon', async () => {
    for (const [body, budget] of [
      [{ coin: 'ETH', timeframe: '1h' }, 100],
      [{ coin: 'ETH', timeframe: '1h', riskBudgetUsd: 1_000 }, 1_000],
    ] as const) {
      const res = await post('get_risk_forecast', body);
      expect(res.status).toBe(200);
      const { _service, ...rest } = res.body;
      const forecast = RiskForecast.parse(rest);
      expect(forecast.horizons.map((h) => h.horizon)).toEqual(['next', 'verdict', 'day']);
      for (const h of forecast.horizons) expectSized(h.sizing, budget, h, forecast.price);
    }
  });

  it('over MCP, with and without the budget', async () => {
    const trade = await call('get_trade_call', { coin: 'SOL', timeframe: '15m' });
    expect(trade.isError).toBeFalsy();
    const t = TradeCall.parse(trade.structuredContent);
    expectSized(t.volatility!.sizing, 100, t.volatility!, t.price);
    const stated = TradeCall.parse(
      (await call('get_trade_call', { coin: 'SOL', timeframe: '15m', riskBudgetUsd: 12.5 }))
        .structuredContent,
    );
    expect(stated.verdictId).toBe(t.verdictId);
    expectSized(stated.volatility!.sizing, 12.5, stated.volatility!, stated.price);

    // Budgets taking turns on one verdict: each answer's text is its own sizing, never the last one's.
    for (const budget of [100, 12.5, 100, 7, 12.5]) {
      for (const tool of ['get_trade_call', 'get_risk_forecast']) {
        const result = await call(tool, { coin: 'SOL', timeframe: '15m', riskBudgetUsd: budget });
        expect(JSON.parse(result.content[0]!.text)).toEqual(result.structuredContent);
        const { volatility, horizons } = result.structuredContent as {
          volatility?: { sizing: Sizing };
          horizons?: { sizing: Sizing }[];
        };
        for (const sizing of volatility ? [volatility.sizing] : horizons!.map((h) => h.sizing)) {
          expect(sizing.risk_budget_usd).toBe(budget);
        }
      }
    }

    const forecast = await call('get_risk_forecast', { coin: 'SOL', riskBudgetUsd: 5_000 });
    expect(forecast.isError).toBeFalsy();
    const f = RiskForecast.parse(forecast.structuredContent);
    for (const h of f.horizons) expectSized(h.sizing, 5_000, h, f.price);
    // The smallest budget, a cent, still sizes something in every USD amount.
    const cent = RiskForecast.parse(
      (await call('get_risk_forecast', { coin: 'SOL', riskBudgetUsd: 0.01 })).structuredContent,
    );
    for (const h of cent.horizons) {
      expect(h.sizing.notional_usd).toBeGreaterThan(0);
      expect(h.sizing.long_stop!.loss_usd).toBeGreaterThan(0);
      expect(h.sizing.short_stop!.loss_usd).toBeGreaterThan(0);
    }
  });

  it.each([
    // Every refusal says what the field must be and what was sent (README, Error codes).
    ['negative', -5, /riskBudgetUsd must be a number from 0\.01 to 10000000; got -5$/],
    ['zero', 0, /riskBudgetUsd must be a number from 0\.01 to 10000000; got 0$/],
    ['below a cent', 0.001, /riskBudgetUsd must be a number from 0\.01 to 10000000; got 0\.001$/],
    ['string', '100', /riskBudgetUsd must be a number from 0\.01 to 10000000; got "100"$/],
    ['huge', 1e12, /riskBudgetUsd must be a number from 0\.01 to 10000000; got 1000000000000$/],
  ])(
    'a %s budget is refused: 400 invalid_input over HTTP, -32602 over MCP',
    async (_what, budget, message) => {
      for (const tool of ['get_trade_call', 'get_risk_forecast']) {
        const res = await post(tool, { coin: 'BTC', riskBudgetUsd: budget });
        expect(res.status, `${tool} ${JSON.stringify(res.body)}`).toBe(400);
        const body = ErrorBody.parse(res.body);
        expect(body).toMatchObject({ code: 'invalid_input' });
        expect(body.message).toMatch(message);

        const result = await call(tool, { coin: 'BTC', riskBudgetUsd: budget });
        expect(result.isError).toBe(true);
        expect(result.content[0]!.text).toContain('-32602');
        expect(result.content[0]!.text).toMatch(message);
      }
    },
  );
});

/** The node at `path` inside a JSON document (a schema), failing the test where there is none. */
function at(node: unknown, ...path: string[]): Record<string, unknown> {
  let here = node;
  for (const key of path) {
    expect(here, path.join('.')).toBeTypeOf('object');
    here = (here as Record<string, unknown>)[key];
  }
  expect(here, path.join('.')).toBeTypeOf('object');
  return here as Record<string, unknown>;
}

describe('the units of a forecast, wherever it is sent', () => {
  it("the webhook payload schemas describe expected_move_pct and band_coverage in the risk forecast's own words", async () => {
    // A receiver reading expected_move_pct (percent) beside band_coverage (a fraction) learns which
    // is which from the payload schema, as a caller of get_risk_forecast does from the answer's.
    const schemaOf = async (path: string) => {
      const res = await fetch(`${url}${path}`);
      expect(res.status).toBe(200);
      return (await res.json()) as unknown;
    };
    const openapi = await schemaOf('/openapi.json');
    const json = ['content', 'application/json', 'schema'];
    const answer = at(openapi, 'paths', '/x402/get_risk_forecast', 'post', 'responses', '200', ...json);
    const said = (field: string) =>
      at(answer, 'properties', 'horizons', 'items', 'properties', field).description;
    expect(said('expected_move_pct')).toMatch(/^Percent \(2\.1 means 2\.1 %\)/);
    expect(said('band_coverage')).toMatch(/^Fraction \(0–1, not percent\)/);
    for (const doc of [openapi, await schemaOf('/api/webhooks/schemas')]) {
      const data = (event: string) =>
        at(
          doc,
          'webhooks',
          `${event}.v1`,
          'post',
          'requestBody',
          ...json,
          'properties',
          'data',
          'properties',
        );
      for (const event of ['risk_shift', 'trade_call']) {
        const move = at(data(event), 'expected_move');
        // trade_call's is nullable: the object is one branch of its anyOf.
        const object =
          (move.anyOf as Record<string, unknown>[] | undefined)?.find((s) => s.type === 'object') ?? move;
        for (const field of ['expected_move_pct', 'band_coverage', 'band_low', 'band_high']) {
          expect(at(object, 'properties', field).description, `${event} ${field}`).toBe(said(field));
        }
      }
      // A digest row says the forecast's words, then when it is null (a verdict recorded without one).
      const digestMove = at(data('scan_digest'), 'calls', 'items', 'properties', 'expected_move_pct');
      expect(digestMove.description).toBe(
        `${said('expected_move_pct')} Null when the row's verdict was recorded without a volatility forecast.`,
      );
    }
  });
});

/**
 * The evaluation ships the 1d six-candle risk rows without 95 % intervals (too few resampled
 * blocks in the test months); a buyer of get_risk_forecast on 1d is told so, and why, rather than
 * reading "interval below 0 on none" as a measured interval that missed 0.
 */
describe('risk rows without an interval say so', () => {
  async function forecasts(timeframe: string) {
    const http = await post('get_risk_forecast', { coin: 'ETH', timeframe });
    expect(http.status).toBe(200);
    const { _service, ...rest } = http.body;
    const mcpAnswer = await call('get_risk_forecast', { coin: 'ETH', timeframe });
    expect(mcpAnswer.isError).toBeFalsy();
    return [RiskForecast.parse(rest), RiskForecast.parse(mcpAnswer.structuredContent)];
  }

  it('1d: the evidence names the six-candle rows that carry no interval and why, over HTTP and MCP', async () => {
    for (const forecast of await forecasts('1d')) {
      expect(forecast.evidence).toContain(
        'The 2 six-candle rows have no 95 % interval: a resampled block lasts at least a day and two horizons, and the test months hold fewer than 20 of them.',
      );
    }
  });

  it('1h: every row has its interval, and nothing is said about missing ones', async () => {
    for (const forecast of await forecasts('1h')) expect(forecast.evidence).not.toContain('no 95 % interval');
  });
});
