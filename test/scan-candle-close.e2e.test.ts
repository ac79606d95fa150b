import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDomainEvent } from '../contracts/events.ts';
import { ScanTradeCallsOutput, TradeCall } from '../contracts/tools.ts';
import { startX402Stack, type X402Stack } from './chain/x402-app.ts';

/**
 * Each scan_trade_calls row says the close of the candle its verdict is for, in get_trade_call's
 * field and unit (`timestamp`, Unix seconds): over MCP (structured content and its text, through
 * the official SDK client) and over plain HTTP (the paid /x402 route, paid with @x402/fetch), each
 * row's timestamp is the candle close of the recorded verdict its verdictId names.
 */
let stack: X402Stack;
let client: Client;

beforeAll(async () => {
  stack = await startX402Stack();
  client = new Client({ name: 'scan-reader', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`)));
});
afterAll(async () => {
  await client?.close();
  await stack?.stop();
});

/** The candle close (Unix seconds) of every verdict on the log, by verdict id. */
async function recordedCloses(): Promise<Map<string, number>> {
  const closes = new Map<string, number>();
  for (const recorded of await stack.store.readAll({ after: 0, maxCount: 100_000 })) {
    const event = parseDomainEvent(recorded);
    if (event?.type === 'VerdictRecorded')
      closes.set(event.id, Math.floor(event.data.candleCloseTime / 1000));
  }
  return closes;
}

async function expectRowsAtTheirVerdictsClose(scan: ScanTradeCallsOutput): Promise<void> {
  expect(scan.calls.length).toBeGreaterThan(0);
  const closes = await recordedCloses();
  for (const row of scan.calls) {
    expect(closes.get(row.verdictId), `${row.coin}: verdict ${row.verdictId} on the log`).toBeDefined();
    expect(row.timestamp, row.coin).toBe(closes.get(row.verdictId));
  }
}

describe('scan_trade_calls rows carry their candle close', () => {
  it('over MCP: structured content and text, the close get_trade_call gives the same verdict', async () => {
    const result = await client.callTool({
      name: 'scan_trade_calls',
      arguments: { timeframe: '1h', topN: 3, includeHolds: true },
    });
    expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
    const { _service, ...structured } = result.structuredContent as Record<string, unknown>;
    const scan = ScanTradeCallsOutput.parse(structured);
    await expectRowsAtTheirVerdictsClose(scan);
    const [content] = result.content as { type: string; text: string }[];
    expect(JSON.parse(content!.text)).toEqual(result.structuredContent);

    // The replay clock stands still: get_trade_call on a row's market answers that row's verdict,
    // with the same candle close in the same field.
    const row = scan.calls[0]!;
    const call = await client.callTool({
      name: 'get_trade_call',
      arguments: { coin: row.coin, timeframe: '1h' },
    });
    const { _service: _s, ...answer } = call.structuredContent as Record<string, unknown>;
    const trade = TradeCall.parse(answer);
    expect(trade.verdictId).toBe(row.verdictId);
    expect(row.timestamp).toBe(trade.timestamp);
  });

  it('over plain HTTP: the paid /x402/scan_trade_calls route', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const payments = new x402Client();
    registerExactEvmScheme(payments, { signer: privateKeyToAccount(payer.key) });
    const res = await wrapFetchWithPayment(fetch, payments)(`${stack.url}/x402/scan_trade_calls`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ timeframe: '1h', topN: 3, includeHolds: true }),
    });
    expect(res.status).toBe(200);
    const { _service, ...body } = (await res.json()) as Record<string, unknown>;
    await expectRowsAtTheirVerdictsClose(ScanTradeCallsOutput.parse(body));
  });
});
