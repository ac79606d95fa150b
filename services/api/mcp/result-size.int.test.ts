import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../../adapters/event-store/memory.ts';
import { openReplayFeed } from '../../../adapters/market/replay.ts';
import { SHARED_MARKET_DIR } from '../../../adapters/market/shared-data.ts';
import {
  MAX_FUNDING_ARB_LIMIT,
  MAX_SCAN_LIMIT,
  MAX_TOOL_RESULT_CHARS,
  ScanFundingArbInput,
  ScanTradeCallsInput,
} from '../../../contracts/tools.ts';
import { createSignalEngine, type SignalEngine } from '../../engine/engine.ts';
import { escapeJson } from './answer-json.ts';
import { runOperation } from './tool-registry.ts';

/**
 * Every tool result stays within what MCP hosts accept (150,000 characters), at the largest
 * list a scan may return: its largest item, measured on the real data set, repeated up to the
 * input's cap, in the MCP result the service sends (the JSON twice: structuredContent and its
 * escaped text). The replayed data holds fewer markets than a live venue lists, so the worst
 * case is built from measured items rather than waited for.
 */
let engine: SignalEngine;
beforeAll(async () => {
  const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start: Date.UTC(2025, 9, 20), run: false });
  engine = await createSignalEngine({ feed, store: new MemoryEventStore() });
});
afterAll(async () => {
  await engine?.close();
});

/** The MCP tools/call result as the service serialises it (session-call.ts resultJson). */
function mcpResultChars(structured: unknown): number {
  const json = JSON.stringify(structured);
  return `{"content":[{"type":"text","text":"${escapeJson(json)}"}],"structuredContent":${json}}`.length;
}

/** The output with each list filled to `count` copies of its longest measured item. */
function worstCase(output: Record<string, unknown>, lists: Record<string, number>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...output };
  for (const [field, count] of Object.entries(lists)) {
    const items = output[field] as unknown[];
    expect(items.length, `${field} has items to measure`).toBeGreaterThan(0);
    const longest = items.reduce((a, b) => (JSON.stringify(b).length > JSON.stringify(a).length ? b : a));
    out[field] = Array.from({ length: count }, () => longest);
  }
  return out;
}

describe('tool results within 150,000 characters', () => {
  it('scan_funding_arb at its largest limit', async () => {
    expect(ScanFundingArbInput.safeParse({ limit: MAX_FUNDING_ARB_LIMIT + 1 }).success).toBe(false);
    const output = (await runOperation(
      engine,
      'scan_funding_arb',
      { minSpreadBps: 0, limit: MAX_FUNDING_ARB_LIMIT },
      'r',
    )) as Record<string, unknown>;
    const chars = mcpResultChars(worstCase(output, { opportunities: MAX_FUNDING_ARB_LIMIT }));
    console.log(`scan_funding_arb worst case: ${chars} characters`);
    expect(chars).toBeLessThanOrEqual(MAX_TOOL_RESULT_CHARS);
  });

  it('scan_trade_calls at its largest top-N and limit', async () => {
    expect(ScanTradeCallsInput.safeParse({ limit: MAX_SCAN_LIMIT + 1 }).success).toBe(false);
    const output = (await runOperation(
      engine,
      'scan_trade_calls',
      { timeframe: '1h', exchange: 'BINANCE_SPOT', topN: 100, limit: MAX_SCAN_LIMIT, includeHolds: true },
      'r',
    )) as Record<string, unknown>;
    // A market of the top 100 is called or skipped, never both: the calls at their cap, and the
    // skipped ones as measured (each a coin and a one-line reason).
    const chars = mcpResultChars(worstCase(output, { calls: MAX_SCAN_LIMIT }));
    console.log(`scan_trade_calls worst case: ${chars} characters`);
    expect(chars).toBeLessThanOrEqual(MAX_TOOL_RESULT_CHARS);
  });
});
