import { declareDiscoveryExtension } from '@x402/extensions/bazaar';
import { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { SIGNIN_MCP_PATH } from '../../../contracts/oauth.ts';
import { SERVICE_VERSION } from '../../../contracts/service-version.ts';
import type { ToolAnnotations } from '../../../contracts/tools.ts';
import { SERVER_CAPABILITIES } from '../mcp/server.ts';
import { annotationsOf, answerSchemaOf, outputSchemaOf, type ToolDefinition } from '../mcp/tool-registry.ts';
import { PROTOCOL_VERSIONS } from '../mcp/versions.ts';
import { recordedAnswer } from '../openapi.ts';
import { servedAt } from '../recorded-origin.ts';

/**
 * Everything agents discover about the service, derived from the one tool table (contracts/tools.ts,
 * as the MCP registry and the x402 prices carry it, beside the knowledge tools): the `bazaar`
 * extension of each 402, `/.well-known/x402`, `/llms.txt` and the MCP server card. Pure: the
 * documents are built from these inputs and the origin a request came to.
 */

/**
 * What discovery reads of a tool sold per call. Declared here, not imported: the payments slice
 * builds on this folder, so this folder does not import it back.
 */
export interface SoldTool {
  name: string;
  /** Price for a validated body; null prices the tool's base call. */
  price(input: unknown | null): number;
  /** The price of each value of the one input field the price depends on, if it depends on one. */
  priceBy: { field: string; amounts: Record<string, number> } | null;
}

/** What discovery publishes of a payment rail (the payments slice's Rail fits it). */
export interface QuotedRail {
  network: string;
  asset: string;
  payTo: string;
  name: string;
  version: string;
  maxTimeoutSeconds: number;
}

export const SERVICE_NAME = 'signal-service';
export const SERVICE_TITLE = 'Crypto signal service';
export const SERVICE_DESCRIPTION =
  'Composite BUY/SELL/HOLD crypto verdicts, market regimes, ranked scans and funding-arbitrage scans, ' +
  'over MCP and keyless x402 pay-per-call HTTP.';
/** The description where at most 100 characters fit: server cards and the MCP registry entry. */
export const SERVICE_SUMMARY =
  'Crypto BUY/SELL/HOLD verdicts, regimes and funding-arb scans; x402 pay-per-call.';

/** How paid calls are fulfilled and what happens when something goes wrong, machine-readable. */
export function paymentPolicy(retentionMs: number) {
  return {
    fulfilment: {
      answer:
        'the result is returned once the payment is verified, reserved, the call succeeded and the ' +
        'settlement transaction is broadcast; settlement confirms about one block later',
      receipt:
        '_service.payment and PAYMENT-RESPONSE carry the settlement transaction (status pending until confirmed)',
      receiptLookup:
        'present the same payment (or payment-identifier id) again to get the answer and its current receipt; ' +
        'while its first request is still running, the duplicate waits for that answer (or gets 409 payment_in_use, retryable, no quote)',
    },
    charging: {
      chargedOnlyOnSuccess: true,
      notCharged: [
        'invalid input',
        'invalid_content_type',
        'handler failure',
        'settlement refused before broadcast',
      ],
      perPayerExposure:
        "a call is served only while the payer's balance minus their payments still settling covers it",
    },
    idempotency: {
      paymentIdentifierExtension: PAYMENT_IDENTIFIER,
      samePaymentReturnsStoredResponse: true,
      /** Past the authorisation's validity (once settled its signature is public on chain). */
      storedResponseSeconds: Math.floor(retentionMs / 1000),
      storedWith:
        "the payment's record in the event log, written before the settlement is sent, so a restart or crash loses no paid answer",
      storedEncrypted: false,
      conflictStatus: 409,
      conflictCodes: ['payment_identifier_conflict', 'payment_already_used'],
    },
    refunds: {
      policy:
        'a call that fails is never charged, and a paid answer can be fetched again for ' +
        'storedResponseSeconds past its authorisation (the same payment or payment id presented again is ' +
        'answered with it, never with a new quote); the one payment owed back is one that paid the seller ' +
        'with nothing served for it, and it is refunded by hand, not automatically',
      /**
       * When a payment reaches the seller and nothing is served for it: the operator's payments
       * ledger (`npm run keys -- payments`) lists it as a refund due, and the refusal said so.
       */
      refundDue: [
        "an authorisation already used on chain to pay the seller before it was presented (the payer's own " +
          'transaction, say): refused 402 naming that transaction, nothing served, recorded settled and refunded ' +
          'by the operator to the paying address',
      ],
      contact: null,
    },
  };
}

/** A tool as the table describes it (its `run` is not needed to describe it). */
export type TableTool = Omit<ToolDefinition, 'run'>;

export interface CatalogTool {
  name: string;
  title: string;
  description: string;
  inputSchema: Record<string, unknown>;
  outputSchema: Record<string, unknown> | null;
  example: Record<string, unknown>;
  annotations: ToolAnnotations;
  /** The x402 route and its prices in atomic units of the rails' asset, or null when not sold per call. */
  paid: { path: string; price: number; priceBy: SoldTool['priceBy'] } | null;
  /** What a paid call answers (200), for the bazaar extension; null when not sold or not recorded. */
  answer: { schema: Record<string, unknown>; example: unknown } | null;
}

function inputSchemaOf(tool: TableTool): Record<string, unknown> {
  return jsonSchema(tool.input, 'input');
}

/** The one table, joined: every MCP tool, with its x402 route and prices when it is sold per call. */
export function catalogTools(tools: TableTool[], paid: SoldTool[]): CatalogTool[] {
  const prices = new Map(paid.map((p) => [p.name as string, p]));
  return tools.map((tool) => {
    const sold = prices.get(tool.name);
    const path = `/x402/${tool.name}`;
    const recorded = sold && tool.output ? recordedAnswer('POST', path, 200) : undefined;
    return {
      name: tool.name,
      title: tool.title,
      description: tool.description,
      inputSchema: inputSchemaOf(tool),
      outputSchema: tool.output ? outputSchemaOf(tool.output) : null,
      example: tool.example ?? {},
      annotations: annotationsOf(tool),
      paid: sold ? { path, price: sold.price(null), priceBy: sold.priceBy } : null,
      answer:
        recorded !== undefined && tool.output
          ? { schema: topLevel(answerSchemaOf(tool.output)), example: abridged(recorded) }
          : null,
    };
  });
}

/**
 * The answer's schema one level deep: each field with its type, and which are required. The
 * bazaar extension rides in every PAYMENT-REQUIRED header and again in the payer's
 * PAYMENT-SIGNATURE (the client echoes it), where Node's HTTP parsers stop at 16 KB of headers:
 * the full schemas (up to 3.7 KB) stay in the server card and OpenAPI.
 */
function topLevel(schema: Record<string, unknown>): Record<string, unknown> {
  const properties = Object.fromEntries(
    Object.entries(schema.properties as Record<string, { type?: unknown }>).map(([name, field]) => [
      name,
      field.type === undefined ? {} : { type: field.type },
    ]),
  );
  return { type: 'object', properties, ...(schema.required ? { required: schema.required } : {}) };
}

/**
 * A recorded answer made short for a header: every list cut to its first item, long texts to their
 * start, fractions to six significant digits (an indicator's 0.16666666666666666: get_trade_call's
 * example carries some thirty).
 */
function abridged(value: unknown): unknown {
  if (typeof value === 'string') return value.length > 160 ? `${value.slice(0, 159)}…` : value;
  if (typeof value === 'number') return Number.isInteger(value) ? value : Number(value.toPrecision(6));
  if (Array.isArray(value)) return value.slice(0, 1).map(abridged);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, abridged(v)]));
  }
  return value;
}

/**
 * A schema without its field descriptions, for the bazaar extension: it rides in every
 * PAYMENT-REQUIRED header and back in the payer's PAYMENT-SIGNATURE, and get_trade_call's already
 * sat within 100 characters of the 8 KB those headers are kept under. The described schema (units,
 * defaults in words) is in tools/list, the server card and the OpenAPI document.
 */
export function undescribed(schema: unknown): Record<string, unknown> {
  const strip = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(strip);
    if (node === null || typeof node !== 'object') return node;
    return Object.fromEntries(
      Object.entries(node)
        .filter(([key, value]) => key !== 'description' || typeof value !== 'string')
        .map(([key, value]) => [key, strip(value)]),
    );
  };
  return strip(schema) as Record<string, unknown>;
}

/**
 * The x402 `bazaar` discovery extension of one paid route: how to call it and what it answers
 * (the answer's fields and a recorded answer, abridged: see topLevel), the answer naming `origin`
 * (its verify link) as the quote it rides in does.
 */
export function bazaarExtension(tool: CatalogTool, origin: string): Record<string, unknown> {
  const declared = declareDiscoveryExtension({
    bodyType: 'json',
    input: tool.example,
    inputSchema: undescribed(tool.inputSchema),
    ...(tool.answer ? { output: tool.answer } : {}),
  } as Parameters<typeof declareDiscoveryExtension>[0]) as Record<string, { info: { input: object } }>;
  const bazaar = declared.bazaar!;
  // The method is normally filled in by the HTTP route enrichment of @x402/core; our routes are our own.
  return servedAt(
    { ...bazaar, info: { ...bazaar.info, input: { ...bazaar.info.input, method: 'POST' } } },
    origin,
  );
}

/** The v2 `extensions` of a tool's 402 served from `origin`: discovery and the idempotency key it accepts. */
export function quoteExtensions(tool: CatalogTool, origin: string): Record<string, unknown> {
  return {
    bazaar: bazaarExtension(tool, origin),
    [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false),
  };
}

function usd(atomic: number): string {
  return (atomic / 1_000_000).toFixed(6).replace(/0+$/, '').replace(/\.$/, '.0');
}

/**
 * A paid tool's price in words, from the prices the quotes use: the base price, and where one
 * input field sets it, each value priced otherwise ("0.02 USD per call; timeframe 1m 0.05, 3m
 * 0.04, 5m 0.03 USD").
 */
function priceText(paid: NonNullable<CatalogTool['paid']>): string {
  const base = `${usd(paid.price)} USD per call`;
  const by = paid.priceBy;
  if (by === null) return base;
  const other = Object.entries(by.amounts).filter(([, amount]) => amount !== paid.price);
  if (other.length === 0) return base;
  const each = other.map(([value, amount]) => `${value} ${usd(amount)}`).join(', ');
  return `${base}; ${by.field} ${each} USD`;
}

/** `/.well-known/x402`: every paid route, its price, the rails, the policy. */
export function x402Manifest(
  origin: string,
  tools: CatalogTool[],
  rails: QuotedRail[],
  policy: ReturnType<typeof paymentPolicy>,
) {
  return {
    x402Version: 2,
    name: SERVICE_NAME,
    description: SERVICE_DESCRIPTION,
    resources: tools
      .filter((t) => t.paid !== null)
      .map((t) => ({
        resource: `${origin}${t.paid!.path}`,
        method: 'POST',
        tool: t.name,
        title: t.title,
        description: t.description,
        mimeType: 'application/json',
        price: { amount: String(t.paid!.price), usd: usd(t.paid!.price) },
        ...(t.paid!.priceBy
          ? {
              priceBy: {
                field: t.paid!.priceBy.field,
                amounts: Object.fromEntries(
                  Object.entries(t.paid!.priceBy.amounts).map(([k, v]) => [k, String(v)]),
                ),
              },
            }
          : {}),
        extensions: { bazaar: bazaarExtension(t, origin) },
      })),
    accepts: rails.map((rail) => ({
      scheme: 'exact',
      network: rail.network,
      asset: rail.asset,
      payTo: rail.payTo,
      extra: { name: rail.name, version: rail.version },
      maxTimeoutSeconds: rail.maxTimeoutSeconds,
    })),
    extensions: [PAYMENT_IDENTIFIER, 'bazaar'],
    policy,
    mcp: { url: `${origin}/mcp`, card: `${origin}/.well-known/mcp.json` },
  };
}

/**
 * `/.well-known/mcp.json`: the MCP server card. With sign-in on, /mcp/signin is the second
 * endpoint, with the OAuth it takes (its protected resource metadata, RFC 9728), as the other
 * discovery documents name it; `authentication` stays that of /mcp.
 */
export function mcpServerCard(origin: string, tools: CatalogTool[], signin = false) {
  return {
    name: SERVICE_NAME,
    title: SERVICE_TITLE,
    version: SERVICE_VERSION,
    description: SERVICE_DESCRIPTION,
    endpoints: [
      { transport: 'streamable-http', url: `${origin}/mcp` },
      ...(signin
        ? [
            {
              transport: 'streamable-http',
              url: `${origin}${SIGNIN_MCP_PATH}`,
              authentication: {
                optional: false,
                schemes: ['oauth2'],
                resource_metadata: `${origin}/.well-known/oauth-protected-resource${SIGNIN_MCP_PATH}`,
                note: 'for hosts that sign in with OAuth (authorization code with PKCE, scope mcp); the token acts as one of your API keys',
              },
            },
          ]
        : []),
    ],
    protocolVersions: [...PROTOCOL_VERSIONS],
    capabilities: SERVER_CAPABILITIES,
    authentication: {
      optional: true,
      schemes: ['bearer'],
      note: 'anonymous callers get the free limits; an exhausted caller can pay per call with _meta["x402/payment"]',
    },
    tools: tools.map((t) => ({
      name: t.name,
      title: t.title,
      description: t.description,
      inputSchema: t.inputSchema,
      ...(t.outputSchema ? { outputSchema: t.outputSchema } : {}),
      annotations: t.annotations,
    })),
  };
}

/** The media type of an MCP Server Card (the server-card extension, SEP-2127). */
export const SERVER_CARD_TYPE = 'application/mcp-server-card+json';

/**
 * `GET /mcp/server-card`: the MCP Server Card at the place the server-card extension reserves
 * (`<streamable-http-url>/server-card`): who the server is and where to connect, no tools (a
 * live tools/list cannot go stale). `/mcp` serves anonymous callers and Bearer API keys; with
 * sign-in on, `/mcp/signin` serves hosts that sign in with OAuth (the token acts as a key).
 */
export function serverCard(origin: string, signin = false) {
  return {
    $schema: 'https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json',
    name: REGISTRY_NAME,
    title: SERVICE_TITLE,
    description: SERVICE_SUMMARY,
    version: SERVICE_VERSION,
    remotes: [
      {
        type: 'streamable-http',
        url: `${origin}/mcp`,
        // Optional: anonymous callers get the free limits; a Bearer API key brings its plan.
        headers: [
          {
            name: 'Authorization',
            description: 'Bearer <API key> (optional; without it the anonymous free tier applies)',
            isRequired: false,
            isSecret: true,
          },
        ],
      },
      ...(signin ? [signInRemote(origin)] : []),
    ],
  };
}

/** The sign-in URL as a remote: no header to configure, the host discovers OAuth from its 401. */
function signInRemote(origin: string) {
  return { type: 'streamable-http', url: `${origin}${SIGNIN_MCP_PATH}` };
}

/** `GET /mcp/signin/server-card`: the card of the sign-in URL alone, for hosts that only sign in. */
export function signInServerCard(origin: string) {
  return { ...serverCard(origin), name: `${REGISTRY_NAME}-signin`, remotes: [signInRemote(origin)] };
}

/** The media type of an AI Catalog (served at `/.well-known/ai-catalog.json`). */
export const AI_CATALOG_TYPE = 'application/ai-catalog+json';

/**
 * `GET /.well-known/ai-catalog.json`: the AI Catalog of this origin (specVersion 1.0), where the
 * server-card extension's discovery looks first, with one entry per server card. Entries carry no
 * displayName: a server card names itself (its title).
 */
export function aiCatalog(origin: string, host: string, signin = false) {
  const id = REGISTRY_NAME.split('/')[1];
  const entry = (name: string, path: string) => ({
    identifier: `urn:air:${host}:mcp:${name}`,
    type: SERVER_CARD_TYPE,
    url: `${origin}${path}/server-card`,
  });
  return {
    specVersion: '1.0',
    host: { displayName: SERVICE_TITLE, identifier: host },
    entries: [entry(`${id}`, '/mcp'), ...(signin ? [entry(`${id}-signin`, SIGNIN_MCP_PATH)] : [])],
  };
}

/** `GET /.well-known/mcp/catalog.json`: the earlier draft MCP Catalog, kept for hosts that still read it. */
export function mcpCatalog(origin: string, host: string, signin = false) {
  const id = REGISTRY_NAME.split('/')[1];
  return {
    specVersion: 'draft',
    entries: [
      {
        identifier: `urn:air:${host}:${id}`,
        displayName: SERVICE_TITLE,
        type: SERVER_CARD_TYPE,
        url: `${origin}/mcp/server-card`,
      },
      ...(signin
        ? [
            {
              identifier: `urn:air:${host}:${id}-signin`,
              displayName: `${SERVICE_TITLE} (OAuth sign-in)`,
              type: SERVER_CARD_TYPE,
              url: `${origin}${SIGNIN_MCP_PATH}/server-card`,
            },
          ]
        : []),
    ],
  };
}

/** `/llms.txt`: the same, for a model reading plain text. */
export function llmsTxt(origin: string, tools: CatalogTool[], rails: QuotedRail[], signin = false): string {
  const lines = [
    `# ${SERVICE_TITLE}`,
    '',
    `> ${SERVICE_DESCRIPTION}`,
    '',
    '## MCP',
    '',
    `- [MCP endpoint](${origin}/mcp): Streamable HTTP; one-shot tools/call without a session works too`,
    ...(signin
      ? [
          `- [Sign-in MCP endpoint](${origin}${SIGNIN_MCP_PATH}): the same tools for hosts that sign in with OAuth (Claude, ChatGPT); the token acts as one of your API keys`,
        ]
      : []),
    `- [Server card](${origin}/mcp/server-card): where to connect (${SERVER_CARD_TYPE}); catalog at ${origin}/.well-known/ai-catalog.json`,
    `- [Tool card](${origin}/.well-known/mcp.json): tools with input and output schemas`,
    '',
    '## Pay per call (x402, no account)',
    '',
    `- [x402 manifest](${origin}/.well-known/x402): routes, prices, networks, refund and fulfilment policy`,
    ...rails.map((r) => `- Accepted: ${r.name} ${r.asset} on ${r.network}, paid to ${r.payTo}`),
    '',
    '## HTTP API with a key, and webhooks',
    '',
    `- [OpenAPI document](${origin}/openapi.json): every HTTP route, its errors and the webhook payloads; rendered at ${origin}/docs/`,
    `- Free key: GET ${origin}/api/keys/nonce, then POST ${origin}/api/keys with a Sign-In with Ethereum message and its signature; send it as Authorization: Bearer <key> (the /x402 routes and /mcp take it too)`,
    `- Webhooks: POST ${origin}/api/webhooks with a key registers an HTTPS receiver for signed trade_call, regime_shift, risk_shift and scan_digest events; payload schemas at ${origin}/api/webhooks/schemas`,
    ...(tools.some((t) => t.name === 'search_knowledge')
      ? [
          `- [Documentation as markdown](${origin}/knowledge/README.md): the documents search_knowledge and chat_knowledge cite, at ${origin}/knowledge/{file} (README.md, methodology.md, webhooks.md, tools.md, errors.md, pricing.md); a citation's source_url opens one at its section; no key`,
        ]
      : []),
    '',
    '## Tools',
    '',
    ...tools.map((t) => {
      const price = t.paid ? ` — POST ${origin}${t.paid.path}, ${priceText(t.paid)}` : '';
      return `- ${t.name}: ${t.description}${price}`;
    }),
    '',
  ];
  return lines.join('\n');
}

/** Where the MCP registry entry says the service runs; {host} is filled in by whoever deploys it. */
export const REGISTRY_NAME = 'io.github.signal-service/signal-service';

/**
 * `server.json` for the MCP registry (checked in at the repository root; a test keeps it equal
 * to this). The registry lists remote endpoints, not tools: the tool names ride in the
 * publisher-provided `_meta` so a reader can check them against the server card.
 */
export function registryServerJson(tools: CatalogTool[]) {
  return {
    $schema: 'https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json',
    name: REGISTRY_NAME,
    title: SERVICE_TITLE,
    description: SERVICE_SUMMARY,
    version: SERVICE_VERSION,
    // Both URLs: /mcp for anonymous callers and API keys, /mcp/signin for hosts that sign in with OAuth.
    remotes: ['/mcp', SIGNIN_MCP_PATH].map((path) => ({
      type: 'streamable-http',
      url: `https://{host}${path}`,
      variables: {
        host: { description: 'Host name the service is deployed at', isRequired: true, format: 'string' },
      },
    })),
    _meta: {
      'io.modelcontextprotocol.registry/publisher-provided': {
        tools: tools.map((t) => t.name),
        serverCard: '/.well-known/mcp.json',
        x402Manifest: '/.well-known/x402',
      },
    },
  };
}
