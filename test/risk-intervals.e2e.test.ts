import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RiskForecast } from '../contracts/tools.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * The evaluation ships the 1d six-candle risk rows without 95 % intervals (too few resampled
 * blocks in the test months); a buyer of get_risk_forecast on 1d is told so, and why, rather than
 * reading "interval below 0 on none" as a measured interval that missed 0.
 */
let running: TestService;
let url: string;
let key: string;
let mcp: Client;

beforeAll(async () => {
  running = await startTestService(['api'], { REPLAY_SPEED: '0' });
  url = running.service.url;
  key = await running.issue();
  mcp = new Client({ name: 'risk-intervals-test', version: '1.0.0' });
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

async function overHttp(timeframe: string) {
  const res = await fetch(`${url}/x402/get_risk_forecast`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ coin: 'ETH', timeframe }),
  });
  expect(res.status).toBe(200);
  const { _service, ...rest } = (await res.json()) as Record<string, unknown>;
  return RiskForecast.parse(rest);
}

async function overMcp(timeframe: string) {
  const result = await mcp.callTool({ name: 'get_risk_forecast', arguments: { coin: 'ETH', timeframe } });
  expect(result.isError).toBeFalsy();
  return RiskForecast.parse(result.structuredContent);
}

describe('risk rows without an interval say so', () => {
  it('1d: the evidence names the six-candle rows that carry no interval and why, over HTTP and MCP', async () => {
    for (const forecast of [await overHttp('1d'), await overMcp('1d')]) {
      expect(forecast.evidence).toContain(
        'The 2 six-candle rows have no 95 % interval: a resampled block lasts at least a day and two horizons, and the test months hold fewer than 20 of them.',
      );
    }
  });

  it('1h: every row has its interval, and nothing is said about missing ones', async () => {
    for (const forecast of [await overHttp('1h'), await overMcp('1h')])
      expect(forecast.evidence).not.toContain('no 95 % interval');
  });
});
