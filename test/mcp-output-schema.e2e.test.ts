import { isDeepStrictEqual } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { visible } from '../contracts/knowledge.ts';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * What an agent host relies on for every tool tools/list names: any arguments valid against the
 * tool's inputSchema are served (an answer, or a tool error such as unknown_coin, never a
 * refusal of the arguments), and the result passes the official SDK client's own check of
 * structuredContent against the outputSchema (callTool throws otherwise), validates under
 * JSON Schema 2020-12, and its text says the same: the answer's JSON, or the error's code.
 * The arguments are generated from the listed inputSchema (each enum value, each bound, then
 * random ones), so a tool or an argument added later is covered without editing this file.
 */
type Schema = {
  type?: string;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  pattern?: string;
  items?: Schema;
  minItems?: number;
  maxItems?: number;
  uniqueItems?: boolean;
  properties?: Record<string, Schema>;
  required?: string[];
};

/** Fixed for CI; MCP_SCHEMA_SEED and MCP_SCHEMA_RUNS explore further by hand. */
const SEED = Number(process.env.MCP_SCHEMA_SEED ?? 20261129);
const RUNS = Number(process.env.MCP_SCHEMA_RUNS ?? 30);
/** Symbols the replayed market serves, so that symbols drawn at random are not all unknown_coin. */
const SERVED = ['BTC', 'ETH', 'SOL', 'btc', 'Eth', 'XRP', 'DOGE', 'BNB'];
const WORDS = ['how', 'do', 'I', 'get', 'a', 'free', 'key', 'quota', 'MCP', 'session', 'x402', 'risk', '?'];
/** Outside the Basic Multilingual Plane: one character (JSON Schema's count), two UTF-16 units. */
const ASTRAL = '\u{1D465}';

/**
 * The codes that refuse an argument's type or bounds. Others judge what the arguments name
 * (unknown_coin, unsupported_exchange, INVALID_MODEL for a model this server does not run...).
 */
const REFUSING_ARGUMENTS = [
  'invalid_arguments',
  'INVALID_QUERY',
  'QUERY_TOO_SHORT',
  'QUERY_TOO_LONG',
  'INVALID_LIMIT',
  'INVALID_QUESTION',
  'QUESTION_TOO_SHORT',
  'QUESTION_TOO_LONG',
];

const codePoints = (s: string) => [...s].length;
/** Terminal escape sequences as a coloured paste brings them: CSI, its one-character form, OSC, two-character. */
const ESCAPES = ['\u001b[31m', '\u001b[0m', '\u001b[1;32m', '\u009b2J', '\u001b]0;title\u0007', '\u001bM'];
/**
 * The knowledge tools' text bounds hold after trimming, and control and format characters and
 * terminal escape sequences count toward no minimum (their descriptions say so, which JSON Schema
 * cannot): a text is generated with at least minLength characters left once those are dropped
 * and it is trimmed (visible).
 */
const fits = (s: Schema) => (text: string) => codePoints(visible(text)) >= (s.minLength ?? 0);

function arbitraryOf(s: Schema): fc.Arbitrary<unknown> {
  if (s.enum) return fc.constantFrom(...s.enum);
  switch (s.type) {
    case 'boolean':
      return fc.boolean();
    case 'integer':
      return fc.integer({ min: s.minimum, max: s.maximum });
    case 'number':
      return fc.double({ min: s.minimum, max: s.maximum, noNaN: true, noDefaultInfinity: true });
    case 'string': {
      const bounds = { minLength: s.minLength ?? 0, maxLength: s.maxLength ?? 60 };
      if (s.pattern !== undefined) {
        const pattern = new RegExp(s.pattern);
        return fc.oneof(
          fc.constantFrom(...SERVED.filter((v) => pattern.test(v))),
          fc
            .stringMatching(pattern)
            .filter((v) => v.length >= bounds.minLength && v.length <= bounds.maxLength),
        );
      }
      const sentence = fc
        .array(fc.constantFrom(...WORDS), { minLength: 1, maxLength: 12 })
        .map((words) => words.join(' ').slice(0, bounds.maxLength));
      const escapes = fc.array(fc.constantFrom(...ESCAPES), { maxLength: 4 }).map((e) => e.join(''));
      const coloured = fc
        .tuple(escapes, sentence, escapes)
        .map(([before, text, after]) => before + text + after);
      return fc
        .oneof(sentence, coloured, fc.string({ ...bounds, unit: 'binary' }))
        .filter(fits(s))
        .filter((v) => codePoints(v) <= bounds.maxLength);
    }
    case 'array': {
      const items = arbitraryOf(s.items ?? {});
      const bounds = { minLength: s.minItems ?? 0, maxLength: Math.min(s.maxItems ?? 8, 8) };
      return s.uniqueItems ? fc.uniqueArray(items, bounds) : fc.array(items, bounds);
    }
    case 'object': {
      const props = s.properties ?? {};
      return fc.record(Object.fromEntries(Object.entries(props).map(([k, v]) => [k, arbitraryOf(v)])), {
        requiredKeys: s.required ?? [],
      });
    }
  }
  throw new Error(`no generator for ${JSON.stringify(s)}: teach arbitraryOf this schema`);
}

/** The smallest value of a required field, to pair with each edge of another. */
function least(s: Schema): unknown {
  if (s.enum) return s.enum[0];
  if (s.type === 'string')
    return s.pattern !== undefined ? SERVED[0] : 'quota free key'.slice(0, s.maxLength);
  if (s.type === 'number' || s.type === 'integer') return s.minimum ?? 0;
  if (s.type === 'boolean') return false;
  throw new Error(`no least value for ${JSON.stringify(s)}`);
}

/** Each field's edges, one at a time beside the required fields at their least: enum values and bounds. */
function edges(tool: Tool): Record<string, unknown>[] {
  const schema = tool.inputSchema as Schema;
  const base = Object.fromEntries((schema.required ?? []).map((k) => [k, least(schema.properties![k]!)]));
  const out: Record<string, unknown>[] = [base];
  for (const [key, s] of Object.entries(schema.properties ?? {})) {
    const values: unknown[] = [...(s.enum ?? [])];
    if (s.type === 'number' || s.type === 'integer') values.push(s.minimum, s.maximum);
    if (s.type === 'boolean') values.push(true, false);
    if (s.type === 'string' && s.enum === undefined && s.pattern === undefined) {
      // The shortest and the longest text the schema allows, the longest also in astral characters.
      values.push(
        'w'.repeat(s.minLength ?? 1),
        'w'.repeat(s.maxLength ?? 200),
        ASTRAL.repeat(s.maxLength ?? 200),
      );
    }
    if (s.type === 'string' && s.pattern !== undefined) values.push(...SERVED, 'Z'.repeat(s.maxLength ?? 20));
    if (s.type === 'array') {
      const pool = s.items?.enum ?? SERVED.map((v) => v.toUpperCase());
      const lengths = [s.minItems ?? 1, s.maxItems ?? pool.length];
      for (const n of lengths) {
        values.push(
          s.uniqueItems ? pool.slice(0, n) : Array.from({ length: n }, (_, i) => pool[i % pool.length]),
        );
      }
    }
    for (const value of values) if (value !== undefined) out.push({ ...base, [key]: value });
  }
  return out;
}

let running: TestService;
let client: Client;
let tools: Tool[];
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats.default(ajv);

beforeAll(async () => {
  // The service as npm start runs it (its roles, the replayed market, the embedded stores), so the
  // answers carry the verdicts, regimes and scans a host meets; quotas no run here reaches. Its
  // track record has resolved nothing yet this early: track-record-tool.e2e.test.ts reads a
  // recorded one, every venue and timeframe, through the same SDK client and its schema check.
  running = await startTestService(['api', 'engine', 'projections', 'dispatcher'], {
    PLAN_PRO_MONTHLY_CALLS: '10000000',
    CHAT_QUOTA_PRO: '100000',
  });
  await (running.service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
  const key = await running.issue('pro');
  client = new Client({ name: 'schema-walk', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${running.service.url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
    }),
  );
  tools = (await client.listTools()).tools;
}, 60_000);
afterAll(async () => {
  await client?.close();
  await running?.stop();
});

/** Calls the tool through the SDK client and checks what the host relies on; returns the outcome. */
async function served(tool: Tool, args: Record<string, unknown>): Promise<string> {
  const input = ajv.compile(tool.inputSchema);
  expect(input(args), `generated arguments ${JSON.stringify(args)}: ${ajv.errorsText(input.errors)}`).toBe(
    true,
  );
  const where = `${tool.name} ${JSON.stringify(args).slice(0, 300)}`;
  // The SDK client checks structuredContent against the outputSchema and throws on a mismatch.
  const result = await client.callTool({ name: tool.name, arguments: args });
  const output = ajv.compile(tool.outputSchema!);
  expect(output(result.structuredContent), `${where}: ${ajv.errorsText(output.errors)}`).toBe(true);
  const content = result.content as { type: string; text: string }[];
  expect(content, where).toHaveLength(1);
  expect(content[0]!.type).toBe('text');
  const structured = result.structuredContent as { code?: string };
  if (!result.isError) {
    expect(isDeepStrictEqual(JSON.parse(content[0]!.text), structured), where).toBe(true);
    return 'ok';
  }
  // A tool error names its code in the text too; arguments the schema allows are never refused as such.
  expect(structured.code, where).toEqual(expect.any(String));
  expect(content[0]!.text, where).toContain(structured.code);
  expect(REFUSING_ARGUMENTS, `${where}: ${content[0]!.text}`).not.toContain(structured.code);
  return structured.code!;
}

describe('every tool over the SDK client: valid arguments give a result its outputSchema describes', () => {
  it('lists tools, each with both schemas', () => {
    expect(tools.length).toBeGreaterThanOrEqual(8);
    for (const tool of tools) {
      expect(tool.inputSchema, tool.name).toMatchObject({ type: 'object' });
      expect(tool.outputSchema, tool.name).toMatchObject({ type: 'object' });
    }
  });

  it('each enum value and each bound of every argument', async () => {
    const outcomes = new Map<string, Set<string>>();
    for (const tool of tools) {
      const seen = new Set<string>();
      for (const args of edges(tool)) seen.add(await served(tool, args));
      outcomes.set(tool.name, seen);
    }
    // Every tool answered at least once: the edges are not all refusals.
    for (const [name, seen] of outcomes) expect(seen.has('ok'), `${name}: ${[...seen]}`).toBe(true);
    // A bound for a hang, not a figure: about 46 s alone, past 60 s beside other work on 2 cores.
  }, 240_000);

  it('arguments drawn at random from each inputSchema', async () => {
    for (const tool of tools) {
      await fc.assert(
        fc.asyncProperty(
          arbitraryOf(tool.inputSchema as Schema) as fc.Arbitrary<Record<string, unknown>>,
          (args) => served(tool, args).then(() => undefined),
        ),
        { seed: SEED, numRuns: RUNS },
      );
    }
  }, 60_000);
});
