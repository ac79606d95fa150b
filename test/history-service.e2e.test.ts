import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import { HistoryRow, TrackRecordBrief, TrackRecordResponse } from '../contracts/history.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { type RunningService, startService } from '../services/service.ts';

/**
 * The history slice through the real service, not the slice's own harness: embedded defaults
 * (LMDB in a temporary DATA_DIR, in-process bus and cache), the replay feed at an hour per 100 ms
 * so verdicts are recorded, revealed and labelled while the suite runs, every route reached
 * through the service's own wiring (keyed channel, MCP, the track-record line on trade calls).
 */
describe('verdict history through the started service', () => {
  let dir: string;
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'history-svc-'));
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      REPLAY_SPEED: '36000',
      SCHEDULE_TIMEFRAMES: '1h',
    });
    service = await startService(config, ['api', 'engine', 'projections'], pino({ level: 'silent' }));
    ({ key } = await issueKey(service.adapters.eventStore, {
      plan: 'pro',
      owner: 'analyst',
      via: 'operator',
    }));
  });
  afterAll(async () => {
    await service?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('streams the verdict history to a keyed analyst, and refuses one without a key', async () => {
    const rows = async () => {
      const res = await fetch(`${service.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } });
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toContain('application/x-ndjson');
      // Rows only by default: every line is a row, and carries its cursor.
      const lines = (await res.text()).trim().split('\n');
      return lines.map((l) => HistoryRow.parse(JSON.parse(l)));
    };
    // Scheduled verdicts are recorded as the replayed candles close; revealed six candles later.
    await expect.poll(async () => (await rows()).filter((r) => r.revealed).length).toBeGreaterThan(0);
    const all = await rows();
    expect(all.every((r) => r.stream.startsWith('verdicts-'))).toBe(true);
    expect(all.filter((r) => !r.revealed).every((r) => r.call === null && r.inputs_json === null)).toBe(true);
    const anonymous = await fetch(`${service.url}/api/verdicts`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toMatchObject({ code: 'UNAUTHORIZED' });
  });

  it('/verify reveals on the feed clock, as the export does: a replayed call is sealed until then', async () => {
    const feed = service.engine!.feed;
    // A daily call is revealed six replayed days after its candle: over ten seconds at this speed.
    const res = await fetch(`${service.url}/x402/get_trade_call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '1d' }),
    });
    expect(res.status).toBe(200);
    const call = (await res.json()) as { feed: string; verifyUrl: string };
    expect(call.feed).toBe('replay');
    const asked = feed.now();
    const answer = await fetch(`${service.url}${new URL(call.verifyUrl).pathname}`);
    expect(answer.status).toBe(200);
    const body = (await answer.json()) as { revealAt: string; content: unknown };
    // The replay's candles are months old on the wall clock; on the feed's they are not.
    expect(Date.parse(body.revealAt)).toBeLessThan(Date.now());
    expect(Date.parse(body.revealAt)).toBeGreaterThan(asked);
    expect(body.content).toBeNull();
    expect(answer.headers.get('cache-control')).not.toContain('immutable');
  });

  it('serves the public track record, which fills in as outcomes resolve, and its page', async () => {
    const record = async () => {
      const res = await fetch(`${service.url}/api/track-record?window=all`);
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toContain('public');
      return TrackRecordResponse.parse(await res.json());
    };
    // An outcome resolves 24 replayed candles after its verdict (2.4 s at this replay speed).
    await expect
      .poll(async () => {
        const { overall } = await record();
        return overall.calls + overall.holds;
      })
      .toBeGreaterThan(0);
    const page = await fetch(`${service.url}/track-record`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toContain('text/html');
    const html = await page.text();
    expect(html).toContain('<title>Track record</title>');
    expect(html).toContain('/track-record/assets/uPlot');
    const asset = await fetch(`${service.url}/track-record/assets/uPlot.iife.min.js`);
    expect(asset.status).toBe(200);
  });

  it('carries the track-record line of its market and bucket on an MCP get_trade_call', async () => {
    const client = new Client({ name: 'history-e2e', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
        requestInit: { headers: { Authorization: `Bearer ${key}` } },
      }),
    );
    try {
      const result = await client.callTool({
        name: 'get_trade_call',
        arguments: { coin: 'BTC', timeframe: '1h' },
      });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      const call = result.structuredContent as {
        exchange: string;
        timeframe: string;
        confidence: number;
        trackRecord?: unknown;
      };
      const line = TrackRecordBrief.parse(call.trackRecord);
      expect(line).toMatchObject({ exchange: call.exchange, timeframe: call.timeframe });
      expect(line.calls).toBeGreaterThanOrEqual(line.hits);
    } finally {
      await client.close();
    }
  });
});
