import type { z } from 'zod';
import type { Config } from '../../contracts/config.ts';
import type { ErrorCode } from '../../contracts/errors.ts';
import { jsonSchema } from '../../contracts/json-schema.ts';
import {
  ChatAnswer,
  ChatKnowledgeInput,
  KNOWLEDGE_ERRORS,
  type KnowledgeErrorCode,
  SearchAnswer,
  SearchKnowledgeInput,
} from '../../contracts/knowledge.ts';
import { TOOL_NAMES, TOOL_SCHEMAS, TOOLS, type ToolName, type ToolPrices } from '../../contracts/tools.ts';
import { railPlan, v1NetworkName } from '../payments/rails.ts';
import type { Passage } from './passages.ts';

/**
 * Passages generated from structured sources: the tool contract from the same zod schemas that
 * validate requests, the error codes from their tables, prices and plans from configuration.
 * Numbers in answers come from here, never from a model.
 */

type JsonSchema = {
  type?: string | string[];
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  description?: string;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  anyOf?: JsonSchema[];
};

function describeField(name: string, schema: JsonSchema, required: boolean): string {
  const parts: string[] = [];
  if (schema.enum) parts.push(`one of ${schema.enum.map(String).join(', ')}`);
  else if (schema.anyOf) parts.push(schema.anyOf.map((s) => s.type ?? 'value').join(' or '));
  else if (schema.type) parts.push(Array.isArray(schema.type) ? schema.type.join(' or ') : schema.type);
  const bounded = (x: number | undefined) => x !== undefined && Math.abs(x) < Number.MAX_SAFE_INTEGER;
  if (bounded(schema.minimum) && bounded(schema.maximum))
    parts.push(`from ${schema.minimum} to ${schema.maximum}`);
  if (schema.minLength !== undefined || schema.maxLength !== undefined)
    parts.push(`${schema.minLength ?? 0} to ${schema.maxLength ?? 'any'} characters`);
  if (schema.default !== undefined) parts.push(`default ${JSON.stringify(schema.default)}`);
  parts.push(required && schema.default === undefined ? 'required' : 'optional');
  const description = schema.description ? `: ${schema.description}` : '';
  return `${name} (${parts.join(', ')})${description}`;
}

function fieldsOf(schema: z.ZodType, io: 'input' | 'output'): string {
  const json = jsonSchema(schema, io) as JsonSchema;
  const required = new Set(json.required ?? []);
  return Object.entries(json.properties ?? {})
    .map(([name, field]) => describeField(name, field, required.has(name)))
    .join('; ');
}

/** What each tool returns, in a phrase; typed by the tool list so a new tool cannot go without one. */
const TOOL_SUMMARY: Record<ToolName | 'search_knowledge' | 'chat_knowledge', string> = {
  get_trade_call: 'a composite BUY, SELL or HOLD verdict with calibrated confidence for a coin and timeframe',
  get_market_regime: 'the market regime (trending-up, trending-down, ranging, volatile, squeeze) of a coin',
  scan_trade_calls:
    "a venue's top markets ranked by confidence, lean strength, expected move or volume, HOLDs included unless includeHolds is false (calls only); an empty answer says why in note",
  scan_funding_arb: 'perpetual funding-rate spreads across venues with the best long/short pair per coin',
  get_risk_forecast:
    'the forecast σ of the log return (expected_move_pct) and an 80 % band for the next candle, six candles and one UTC day, with sizing for a stated risk budget',
  get_track_record:
    "the track record of revealed verdicts per cell, the risk forecast's record and the free baselines beside them",
  search_knowledge: 'passages of the documentation and live facts that match a query (POST /api/search)',
  chat_knowledge:
    'an answer to a question, quoted from the documentation with [n] citations (POST /api/chat)',
};

export function contractPassages(): Passage[] {
  const tools: { name: string; input: z.ZodType; output: z.ZodType; routes: string }[] = [
    ...Object.entries(TOOL_SCHEMAS).map(([name, s]) => ({
      name,
      input: s.input as z.ZodType,
      output: s.output as z.ZodType,
      routes: `MCP tools/call ${name}, HTTP POST /x402/${name} (pay per call or Bearer key)`,
    })),
    {
      name: 'search_knowledge',
      input: SearchKnowledgeInput,
      output: SearchAnswer,
      routes: 'MCP tools/call search_knowledge, HTTP POST /api/search with a Bearer key',
    },
    {
      name: 'chat_knowledge',
      input: ChatKnowledgeInput,
      output: ChatAnswer,
      routes: 'MCP tools/call chat_knowledge, HTTP POST /api/chat with a Bearer key',
    },
  ];
  const passages = tools.map(
    (tool): Passage => ({
      id: `contract#${tool.name}`,
      source_type: 'contract',
      source_url: `contracts/tools.ts#${tool.name}`,
      title: `Tool ${tool.name}: arguments and answer`,
      text:
        `The tool ${tool.name} returns ${TOOL_SUMMARY[tool.name as keyof typeof TOOL_SUMMARY]}. Reached by ${tool.routes}. ` +
        `Arguments: ${fieldsOf(tool.input, 'input')}. ` +
        `Answer fields: ${fieldsOf(tool.output, 'output')}, plus the _service block with auth and quota.`,
    }),
  );
  return passages;
}

/** An OpenAPI document as far as the route list needs it. */
export interface OpenApiDocument {
  paths?: Record<string, Record<string, { summary?: string; tags?: string[]; security?: unknown[] }>>;
}

const METHODS = ['get', 'post', 'put', 'patch', 'delete', 'head', 'options'];

/** The document's security requirements in words: which credential a route needs. */
function authOf(security: unknown[] | undefined): string {
  const schemes = (security ?? []).map((r) => Object.keys(r as object));
  const optional = schemes.some((s) => s.length === 0);
  if (schemes.some((s) => s.includes('x402')))
    return 'paid per call with x402 (no key needed), or with a Bearer key from the plan quota';
  if (schemes.some((s) => s.includes('apiKey')))
    return optional
      ? 'a Bearer key is optional (without one, the free anonymous limit applies)'
      : 'requires the header Authorization: Bearer <API_KEY>';
  return 'public, no key';
}

/**
 * The route list, generated from the OpenAPI document the running app builds from its route
 * declarations (so it cannot go stale): one overview passage with every route and its
 * credential, and one passage per tag with what each route does. Methods of one path that share
 * a summary (GET, POST and DELETE /mcp) are one line. `referencePage`: where the rendered
 * reference of the document is served, when it is.
 */
export function routePassages(document: OpenApiDocument, referencePage: string | null = null): Passage[] {
  const lines: { methods: string[]; path: string; summary: string; auth: string; tag: string }[] = [];
  for (const [path, operations] of Object.entries(document.paths ?? {})) {
    for (const method of METHODS) {
      const op = operations[method];
      if (op === undefined) continue;
      const summary = op.summary ?? '';
      const auth = authOf(op.security);
      const same = lines.find((l) => l.path === path && l.summary === summary && l.auth === auth);
      if (same) same.methods.push(method.toUpperCase());
      else lines.push({ methods: [method.toUpperCase()], path, summary, auth, tag: op.tags?.[0] ?? 'other' });
    }
  }
  const route = (l: (typeof lines)[number]) => `${l.methods.join(', ')} ${l.path}`;
  const reference = referencePage
    ? ` The reference page GET ${referencePage} renders the OpenAPI document of GET /openapi.json.`
    : '';
  const overview: Passage = {
    id: 'contract#routes',
    source_type: 'contract',
    source_url: '/openapi.json',
    title: 'HTTP routes and how each authenticates',
    text:
      `The HTTP routes of the service, from its OpenAPI document: ` +
      `${lines.map((l) => `${route(l)} (${l.auth})`).join('; ')}.${reference}`,
  };
  const tags = [...new Set(lines.map((l) => l.tag))].sort();
  const byTag = tags.map(
    (tag): Passage => ({
      id: `contract#routes-${tag}`,
      source_type: 'contract',
      source_url: `/openapi.json#tag-${tag}`,
      title: `HTTP routes: ${tag}`,
      text:
        lines
          .filter((l) => l.tag === tag)
          .map((l) => `${route(l)}: ${l.summary.replace(/\.$/, '')}; ${l.auth}.`)
          .join(' ') + (tag === 'discovery' ? reference : ''),
    }),
  );
  return [overview, ...byTag];
}

/** Codes of the catalog, and the JSON-RPC numbers of the MCP channel (`-32602`...). */
const OTHER_ERRORS: { code: ErrorCode | `-${number}`; status: string; meaning: string }[] = [
  {
    code: '-32602',
    status: 'MCP result.isError',
    meaning: 'invalid tool arguments (wrong type, unknown field, value out of range)',
  },
  {
    code: '-32003',
    status: 'MCP JSON-RPC error',
    meaning: 'unknown or revoked API key; retrying will not help',
  },
  {
    code: '-32004',
    status: 'MCP JSON-RPC error',
    meaning: 'the key or its quota could not be checked right now; retry shortly',
  },
  {
    code: 'payment_required',
    status: 'HTTP 402',
    meaning: 'an /x402/* call without payment: the body is the quote',
  },
  {
    code: 'invalid_content_type',
    status: 'HTTP 400',
    meaning: 'Content-Type missing, doubled or not JSON on an /x402/* route; nothing is charged',
  },
  {
    code: 'quota_exhausted',
    status: 'HTTP 429 or MCP isError',
    meaning:
      'the plan quota of the key is used up on a signal tool; the answer carries x402 payment requirements',
  },
  {
    code: 'facilitator_not_configured',
    status: 'HTTP 503',
    meaning: 'a paid retry on the development rail: no facilitator key is configured',
  },
];

const ON_SEARCH = 'on POST /api/search (and comes back as result.isError of search_knowledge over MCP)';
const ON_CHAT = 'on POST /api/chat (and comes back as result.isError of chat_knowledge over MCP)';
const ON_BOTH = 'on POST /api/search and POST /api/chat';

/** Where each knowledge code is answered: a field's code on its route alone, the caller's on both. */
const ANSWERED: Record<KnowledgeErrorCode, string> = {
  INVALID_QUERY: ON_SEARCH,
  QUERY_TOO_SHORT: ON_SEARCH,
  QUERY_TOO_LONG: ON_SEARCH,
  INVALID_LIMIT: ON_SEARCH,
  INVALID_QUESTION: ON_CHAT,
  QUESTION_TOO_SHORT: ON_CHAT,
  QUESTION_TOO_LONG: ON_CHAT,
  INVALID_MODEL: ON_CHAT,
  CHAT_QUOTA_EXHAUSTED: ON_CHAT,
  UNAUTHORIZED: `${ON_BOTH} (over MCP a caller without a key is served on the free limits, and an unknown key is JSON-RPC error -32003)`,
  QUOTA_EXHAUSTED: `${ON_BOTH} (over MCP the knowledge tools answer quota_exhausted, as every tool does)`,
  KEY_UNVERIFIABLE: `${ON_BOTH} (over MCP, JSON-RPC error -32004 with data.code key_unverifiable)`,
  QUOTA_UNAVAILABLE: `${ON_BOTH} (over MCP, JSON-RPC error -32004 with data.code quota_unavailable, as every tool answers)`,
  INTERNAL_ERROR: `${ON_BOTH} (and comes back as result.isError over MCP)`,
};

export function errorPassages(): Passage[] {
  const knowledge = Object.entries(KNOWLEDGE_ERRORS).map(
    ([code, e]): Passage => ({
      id: `errors#${code}`,
      source_type: 'errors',
      source_url: `contracts/knowledge.ts#${code}`,
      title: `Error code ${code}`,
      text: `Error code ${code} answers HTTP ${e.status} ${ANSWERED[code as KnowledgeErrorCode]} when ${e.meaning}. The body is {code, message, _service}.`,
    }),
  );
  const others = OTHER_ERRORS.map(
    (e): Passage => ({
      id: `errors#${e.code}`,
      source_type: 'errors',
      source_url: `README.md#using-it`,
      title: `Error code ${e.code}`,
      text: `Error code ${e.code} (${e.status}) means ${e.meaning}.`,
    }),
  );
  return [...knowledge, ...others];
}

/** Monthly plan prices of the contract (§8); call limits come from configuration. */
const PLAN_PRICES = { free: 'free, with sign-in', starter: '9.99 USD per month', pro: '49 USD per month' };

function usd(atomic: number): string {
  return `${(atomic / 1_000_000).toFixed(atomic % 10_000 === 0 ? 2 : 6)} USD`;
}

/** What each sold tool costs, in the words of the tool table: one sentence per tool. */
function toolPriceSentences(config: ToolPrices): string[] {
  return TOOL_NAMES.map((name) => {
    const { title, price } = TOOLS[name];
    const base = `${title} (${name}) costs ${usd(config[price.key])} per call`;
    if (!price.by) return `${base}.`;
    // Only the values priced apart from the base call are named (1m, 3m and 5m trade calls).
    const apart = Object.entries(price.by.keys).filter(([, key]) => config[key] !== config[price.key]);
    if (apart.length === 0) return `${base}.`;
    const each = apart.map(([value, key]) => `a ${value} ${title.toLowerCase()} ${usd(config[key])}`);
    return `${base}; by ${price.by.field}: ${each.join(', ')}.`;
  });
}

/** The networks the 402 quote offers under this configuration, as its v1 body names them. */
function paymentNetworks(config: Config): string {
  const plan = railPlan(config);
  if (plan.kind === 'off') return `Pay-per-call is not offered on this service: ${plan.reason}.`;
  const networks = plan.rails.map((r) => {
    const v1 = v1NetworkName(r.network);
    return v1 ? `${v1} (${r.network})` : r.network;
  });
  const test =
    plan.kind === 'development' ? ', test networks (the development rails, for trying the flow),' : '';
  return `The price is paid in USDC on ${networks.join(' or ')}${test} with an ERC-3009 authorisation; no account or key is needed.`;
}

export function pricingPassages(config: Config): Passage[] {
  const n = (x: number) => x.toLocaleString('en-US');
  return [
    {
      id: 'pricing#pay-per-call',
      source_type: 'pricing',
      source_url: 'README.md#using-it',
      title: 'Prices per call (x402 pay-per-call in USDC)',
      text: [...toolPriceSentences(config), paymentNetworks(config)].join(' '),
    },
    {
      id: 'pricing#plans',
      source_type: 'pricing',
      source_url: 'README.md#using-it',
      title: 'Plans, monthly call quotas and plan prices',
      text: [
        `The free plan is ${PLAN_PRICES.free} and allows ${n(config.PLAN_FREE_MONTHLY_CALLS)} calls a month and at most ${n(config.PLAN_FREE_DAILY_CALLS)} a day.`,
        `The starter plan costs ${PLAN_PRICES.starter} and allows ${n(config.PLAN_STARTER_MONTHLY_CALLS)} calls a month.`,
        `The pro plan costs ${PLAN_PRICES.pro} and allows ${n(config.PLAN_PRO_MONTHLY_CALLS)} calls a month.`,
        'Every plan covers all assets and all 11 timeframes; quotas reset at the start of each UTC month (and UTC day for the daily limit).',
        'Search and chat calls count against the same call quota as every other tool.',
      ].join(' '),
    },
    {
      id: 'pricing#chat-quota',
      source_type: 'pricing',
      source_url: 'README.md#knowledge-search-and-chat',
      title: 'Chat quota per plan (chat_knowledge, POST /api/chat)',
      text: [
        `The chat quota is ${n(config.CHAT_QUOTA_FREE)} chats a month on the free plan, ${n(config.CHAT_QUOTA_STARTER)} on the starter plan and ${n(config.CHAT_QUOTA_PRO)} on the pro plan.`,
        'The chat quota resets at the start of each UTC month; when it is used up the answer is 429 CHAT_QUOTA_EXHAUSTED with Retry-After.',
        'A chat that fails on our side or with the model provider gives its unit back.',
      ].join(' '),
    },
  ];
}
