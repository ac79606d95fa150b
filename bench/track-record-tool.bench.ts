/**
 * The server's CPU per MCP `tools/call get_track_record`, the tool's answer made per call against
 * kept (RecordCache.forAgents: made once per record position, its JSON reused by the channels,
 * services/api/served-answers.ts). One keyed channel (the api role's /mcp: key, quota, the
 * one-shot tool call) over a record of every venue and timeframe, 90 days (history.bench.ts's
 * wideRecord), whose operation answers either way by a switch; a client in a process of its own
 * sends the calls over loopback (plain JSON-RPC, no session), so the CPU counted (this process's,
 * process.cpuUsage) is the server's. The two ways alternate round by round, their order swapped
 * each round; the figures are each way's median over the rounds.
 *
 *   npx tsx bench/track-record-tool.bench.ts [--rounds=7] [--calls=300]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { pathToFileURL } from 'node:url';
import { pino } from 'pino';
import type { z } from 'zod';
import { MemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { openReplayFeed } from '../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { TRACK_RECORD_WINDOWS } from '../contracts/history.ts';
import type { Exchange, Timeframe } from '../contracts/market.ts';
import type { GetTrackRecordInput } from '../contracts/tools.ts';
import { buildApp } from '../services/api/app.ts';
import { keyedChannel } from '../services/api/plugins.ts';
import { createSignalEngine } from '../services/engine/engine.ts';
import { RecordCache } from '../services/history/record-cache.ts';
import { trackRecordForAgents } from '../services/history/track-record-tool.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { Readiness } from '../services/shared/readiness.ts';
import { wideRecord } from './history.bench.ts';

const arg = (name: string, fallback: number) => {
  const found = process.argv.find((a) => a.startsWith(`--${name}=`));
  return found ? Number(found.split('=')[1]) : fallback;
};

/** On each message `{ n, args }`: n one-shot tools/call get_track_record in turn; replies with the last body's bytes. */
const CLIENT = `
const [url, key] = process.argv.slice(1);
let id = 0;
process.on('message', async ({ n, args }) => {
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: 'Bearer ' + key },
      body: JSON.stringify({ jsonrpc: '2.0', id: ++id, method: 'tools/call', params: { name: 'get_track_record', arguments: args } }),
    });
    const body = await res.text();
    if (res.status !== 200 || body.includes('"isError":true')) throw new Error(res.status + ': ' + body.slice(0, 300));
    bytes = Buffer.byteLength(body);
  }
  process.send(bytes);
});
`;

type Way = 'made per call' | 'kept';

export async function run(): Promise<void> {
  const rounds = arg('rounds', 7);
  const calls = arg('calls', 300);
  const { state, now } = wideRecord(90);
  const records = new RecordCache({ state, revision: 1 });
  let way: Way = 'made per call';

  const config = loadConfig({
    EVENT_STORE: 'memory',
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    PLAN_PRO_MONTHLY_CALLS: String(1e12),
  });
  const logger = pino({ level: 'silent' });
  const store = new MemoryEventStore();
  const engine = await createSignalEngine({ feed: await openReplayFeed({ run: false }), store });
  const channel = keyedChannel({
    config,
    adapters: { eventStore: store, projectionStore: new MemoryProjectionStore(), cache: new MemoryCache() },
    logger,
    ops: {
      getTradeCall: (input, ctx) => engine.getTradeCall(input, ctx),
      getMarketRegime: (input, ctx) => engine.getMarketRegime(input, ctx),
      getRiskForecast: (input, ctx) => engine.getRiskForecast(input, ctx),
      scanTradeCalls: (input, ctx) => engine.scanTradeCalls(input, ctx),
      scanFundingArb: (input) => engine.scanFundingArb(input),
      // The slice's operation (services/history/slice.ts) either way; the venue check aside.
      // The channel hands the operation its parsed arguments (ctx.parsed), as the slice reads them.
      getTrackRecord: async (input) => {
        const ask = input as z.output<typeof GetTrackRecordInput>;
        return way === 'kept'
          ? records.forAgents(ask.window, now, ask)
          : trackRecordForAgents(records.current(ask.window, now), ask);
      },
    },
  });
  await channel.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [channel.callers, ...channel.plugins],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const issued = await issueKey(store, { plan: 'pro', owner: 'bench', via: 'operator' });
  await channel.registry.waitFor(issued.position);

  let client: ChildProcess | null = null;
  try {
    client = spawn(process.execPath, ['-e', CLIENT, `http://127.0.0.1:${port}/mcp`, issued.key], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const send = (n: number, args: Record<string, unknown>) =>
      new Promise<number>((resolve, reject) => {
        const exit = (code: number | null) => reject(new Error(`client exited ${code}`));
        client!.once('exit', exit);
        client!.once('message', (bytes) => {
          client!.off('exit', exit);
          resolve(Number(bytes));
        });
        client!.send({ n, args });
      });
    /** This process's CPU ms per call of `n` calls with `args`, and the body's bytes. */
    const measure = async (args: Record<string, unknown>, n: number) => {
      await send(5, args);
      const before = process.cpuUsage();
      const bytes = await send(n, args);
      const used = process.cpuUsage(before);
      return { ms: (used.user + used.system) / 1000 / n, bytes };
    };
    const asks: { label: string; args: { window: string; exchange?: Exchange; timeframe?: Timeframe } }[] = [
      ...TRACK_RECORD_WINDOWS.map((window) => ({ label: window, args: { window } })),
      { label: '30d BINANCE', args: { window: '30d', exchange: 'BINANCE' } },
      { label: '30d 1h', args: { window: '30d', timeframe: '1h' } },
    ];
    const ms: Record<string, Record<Way, number[]>> = {};
    const bytes: Record<string, number> = {};
    for (let round = 0; round < rounds; round++) {
      const order: Way[] = round % 2 === 0 ? ['made per call', 'kept'] : ['kept', 'made per call'];
      for (const { label, args } of asks) {
        ms[label] ??= { 'made per call': [], kept: [] };
        for (const w of order) {
          way = w;
          const got = await measure(args, calls);
          ms[label]![w].push(got.ms);
          bytes[label] = got.bytes;
        }
      }
    }
    const median = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return s[Math.floor(s.length / 2)]!;
    };
    const rows: Record<string, Record<string, number | string>> = {};
    for (const { label } of asks) {
      const made = ms[label]!['made per call'];
      const kept = ms[label]!.kept;
      rows[label] = {
        'made per call ms (median)': Number(median(made).toFixed(3)),
        'made per call ms (min–max)': `${Math.min(...made).toFixed(3)}–${Math.max(...made).toFixed(3)}`,
        'kept ms (median)': Number(median(kept).toFixed(3)),
        'kept ms (min–max)': `${Math.min(...kept).toFixed(3)}–${Math.max(...kept).toFixed(3)}`,
        'kept / made': Number((median(kept) / median(made)).toFixed(2)),
        'body KB': Math.round(bytes[label]! / 1000),
      };
    }
    console.log(
      `server CPU per MCP tools/call get_track_record (one-shot, keyed, loopback), ${Object.keys(state).length.toLocaleString()} day cells; ${rounds} alternated rounds of ${calls} calls each way`,
    );
    console.table(rows);
  } finally {
    client?.removeAllListeners('exit');
    client?.kill();
    await app.close();
    await channel.stop();
    await engine.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) await run();
