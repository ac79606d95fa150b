import { createPrivateKey, type JsonWebKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { parseEnv } from 'node:util';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { issueRequirement, isZodWording } from './issue-text.ts';
import { EXTRACTIVE_MODEL } from './knowledge.ts';
import { EXCHANGES, Exchange, Timeframe } from './market.ts';
import { maskUrlCredentials } from './mask-url.ts';
import {
  type Cidr,
  DEFAULT_RETRY_SCHEDULE,
  MAX_TIMER_MS,
  MAX_TIMER_TEXT,
  MAX_TTL_MS,
  parseCidrList,
  parseEventTypes,
  parseList,
  parsePortPolicy,
  parseSchedule,
  splitList,
} from './setting-lists.ts';

/**
 * Service configuration, read from the environment and validated at start. Every variable is
 * listed with its default in `.env.example`; a wrong value stops the process with a message that
 * names the variable.
 */
/** Whole numbers are written in decimal digits: `0x50` or `1e3` is refused, not read as 80 or 1000. */
const decimal = z.string().regex(/^\d+$/, 'a whole number in decimal digits').transform(Number);
/** A fraction or a rate, in decimal digits with an optional point (`0.5`, `.5`, `600`): not `0x1`, `1e0` or blank. */
const decimalNumber = z
  .string()
  .regex(/^(\d+(\.\d*)?|\.\d+)$/, 'a number in decimal digits, such as 0.5')
  .transform(Number);
/** A time as Unix ms in decimal digits, or an ISO 8601 date-time. */
const instant = z.union(
  [decimal.pipe(z.number().int().positive()), z.iso.datetime().transform((s) => Date.parse(s))],
  { error: 'an ISO 8601 date-time such as 2025-10-01T00:00:00Z, or Unix milliseconds in decimal digits' },
);
const port = decimal.pipe(z.number().int().min(0).max(65_535));
const positiveInt = decimal.pipe(z.number().int().positive());
/**
 * The highest WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES taken: the subscription fold keeps the id of
 * each failed delivery it counts (so a re-sent one is counted once) up to this many, which bounds
 * a failing subscription's record whatever the setting.
 */
export const MAX_DISABLE_AFTER_FAILED_DELIVERIES = 1_000;
const nonNegativeInt = decimal.pipe(z.number().int().min(0));
/**
 * A wait the service hands to a timer (setTimeout, setInterval) or to PostgreSQL's
 * statement_timeout: both take at most MAX_TIMER_MS (2^31 - 1 ms, about 24.8 days), and Node fires
 * a longer timer at once (SHUTDOWN_TIMEOUT_MS=3000000000 made every SIGTERM end in `shutdown timed
 * out` and SIGKILL).
 */
const timerMs = decimal.pipe(z.number().int().positive().max(MAX_TIMER_MS, MAX_TIMER_TEXT));
const timerMsOrZero = decimal.pipe(z.number().int().min(0).max(MAX_TIMER_MS, MAX_TIMER_TEXT));
/** The longest stream age JetStream takes: its max_age is int64 nanoseconds, (2^63 - 1) / 1e6 ms. */
const MAX_NATS_AGE_MS = 9_223_372_036_854;
/**
 * A lifetime that becomes an expiry date (now + lifetime), in ms or s as its name says: at most
 * MAX_TTL_MS (10 years), past which the date is invalid or a slip.
 */
function lifetime(unit: 'ms' | 's') {
  const max = unit === 'ms' ? MAX_TTL_MS : MAX_TTL_MS / 1_000;
  return decimal.pipe(
    z.number().int().positive().max(max, `at most ${max} ${unit} (10 years), the longest lifetime taken`),
  );
}
const lifetimeMs = lifetime('ms');
const lifetimeS = lifetime('s');
const bool = z
  .enum(['true', 'false', '1', '0', 'yes', 'no'])
  .transform((v) => v === 'true' || v === '1' || v === 'yes');
const evmAddress = z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'a 0x-prefixed 20-byte hex address');
const caip2 = z.string().regex(/^eip155:\d+$/, 'a CAIP-2 EVM network id such as eip155:8453');
const atomic = decimal.pipe(z.number().int().positive().max(Number.MAX_SAFE_INTEGER));
const privateKey = z.string().regex(/^0x[0-9a-fA-F]{64}$/, 'a 0x-prefixed 32-byte hex key');
/**
 * A URL-valued setting: it must parse, with one of `schemes` (and a host unless `hostOptional`),
 * so a typo stops the start naming the variable instead of failing later in a client
 * (`getaddrinfo ENOTFOUND base`, `TypeError: Invalid URL`). `list`: comma-separated URLs, split
 * as every list setting (splitList); a list of none is refused before (listOf).
 */
function urlSetting(
  schemes: string[],
  example: string,
  opts: { list?: boolean; hostOptional?: boolean } = {},
) {
  const names = schemes.map((s) => `${s}://`).join(' or ');
  const expected = opts.list
    ? `one or more ${names} URLs, comma-separated, such as ${example}`
    : `a ${names} URL such as ${example}`;
  return z.string().superRefine((raw, ctx) => {
    const parts = opts.list ? splitList(raw) : [raw];
    for (const part of parts) {
      let parsed: URL | null = null;
      try {
        parsed = new URL(part);
      } catch {
        parsed = null;
      }
      const scheme = parsed?.protocol.slice(0, -1) ?? '';
      if (
        parsed === null ||
        !schemes.includes(scheme) ||
        !part.toLowerCase().startsWith(`${scheme}://`) ||
        (!opts.hostOptional && parsed.hostname === '')
      ) {
        ctx.addIssue({ code: 'custom', message: expected });
        return;
      }
    }
  });
}
const httpUrl = urlSetting(['http', 'https'], 'https://host.example');
/**
 * The service's own public address: links are built by appending paths to it, so a query, a
 * fragment or a login in it (`https://signals.example.com/?x=1`, `https://u:p@…`) would end up
 * in the middle of every link and issuer it names.
 */
const publicUrl = httpUrl.refine((raw) => {
  if (!URL.canParse(raw)) return true;
  const url = new URL(raw);
  return !/[?#]/.test(raw) && url.username === '' && url.password === '';
}, 'the public address alone, such as https://signals.example.com: no ?query, #fragment or user@');

/**
 * A comma-separated list whose entries must each match `entry` (or be `*`): ALLOWED_HOSTS and
 * ALLOWED_ORIGINS are compared as written with what a request sends, so an entry that can never
 * match one (`https://signals.example.com` as a host, `https://app.example.com/` as an origin)
 * stops the start naming the variable instead of refusing every request 403 later.
 */
function listSetting(entry: RegExp, expected: string) {
  return z.string().superRefine((raw, ctx) => {
    const entries = splitList(raw);
    const bad = entries.filter((e) => e !== '*' && !entry.test(e));
    if (bad.length > 0) {
      ctx.addIssue({
        code: 'custom',
        message:
          entries.length === 1
            ? expected
            : `${expected}; ${bad.map((e) => JSON.stringify(e)).join(', ')} ${bad.length === 1 ? 'is' : 'are'} not`,
      });
    }
  });
}

/**
 * A comma-separated setting (every one is checked by this first, or by its run-time parser through
 * parsedBy): a value that names no entry, only commas and blanks, is refused by the shared parser
 * (parseList) saying what to set instead, `entry` naming what the list holds. The value stays the
 * string; what else it must be is chained after.
 */
function listOf(entry: string, instead: string) {
  return z.string().superRefine((raw, ctx) => {
    try {
      parseList(raw, entry, instead);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
    }
  });
}

/**
 * CHAT_MODELS' names are offered beside `extractive` as one enum (POST /api/chat's request schema
 * in /openapi.json, chat_knowledge's input schema): `extractive` itself, or a name listed twice,
 * would be a value the enum repeats. Each is refused naming the entry.
 */
function chatModelNames(raw: string, ctx: z.RefinementCtx) {
  const seen = new Set<string>();
  for (const name of splitList(raw)) {
    if (name === EXTRACTIVE_MODEL) {
      ctx.addIssue({
        code: 'custom',
        message: `names "${name}", the built-in model every server offers: list only generative models`,
      });
    } else if (seen.has(name)) {
      ctx.addIssue({ code: 'custom', message: `names "${name}" more than once: list each model once` });
    }
    seen.add(name);
  }
}

const DEFAULT_ALLOWED_HOSTS = 'localhost,127.0.0.1,[::1]';
const DEFAULT_TIMEFRAMES = ['15m', '1h', '4h'] as const;

/** Whether `parse` (a run-time parser of a setting's value) takes the value without throwing. */
function parses(parse: () => unknown): boolean {
  try {
    parse();
    return true;
  } catch {
    return false;
  }
}

/**
 * A setting its run-time parser (`parse`, one of setting-lists.ts) reads: what that refuses is
 * refused here in the parser's own words, which name the entry that is wrong.
 */
function parsedBy(parse: (raw: string) => unknown) {
  return z.string().superRefine((raw, ctx) => {
    try {
      parse(raw);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
    }
  });
}

/**
 * OAUTH_JWKS: the authorization server's private signing keys, read when its first request comes.
 * Checked here so that a value it cannot use stops the start naming the variable; unchecked, the
 * service started ready and every sign-in answered 503 "retry shortly" for good. What is checked
 * is what the library asks of each key (oidc-provider's initialize_keystore): a kid, unique, and
 * a private key of a type it signs with. The value is never echoed (JSON.parse's own message
 * quotes the text around the fault).
 */
const oauthJwks = z.string().superRefine((raw, ctx) => {
  const refuse = (why: string) => ctx.addIssue({ code: 'custom', message: why });
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    refuse('not valid JSON: a private JWKS, {"keys":[...]}, on one line');
    return;
  }
  const keys = (parsed as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(keys) || keys.length === 0) {
    refuse('a private JWKS with at least one key: {"keys":[...]}');
    return;
  }
  const kids = new Set<string>();
  for (const [i, key] of keys.entries()) {
    const jwk = key as { kty?: unknown; kid?: unknown; crv?: unknown; alg?: unknown; use?: unknown } | null;
    if (typeof jwk?.kid !== 'string' || jwk.kid === '') {
      refuse(`keys[${i}] has no kid`);
      return;
    }
    if (kids.has(jwk.kid)) {
      refuse(`keys[${i}]: kid "${jwk.kid}" is used twice`);
      return;
    }
    kids.add(jwk.kid);
    if (jwk.kty !== 'RSA' && jwk.kty !== 'EC' && jwk.kty !== 'OKP') {
      refuse(`keys[${i}] (kid "${jwk.kid}"): kty must be RSA, EC or OKP`);
      return;
    }
    // A curve (or a `use`) the library has no signing algorithm for stops its start: "of no use".
    const curves = jwk.kty === 'EC' ? ['P-256', 'P-384', 'P-521'] : jwk.kty === 'OKP' ? ['Ed25519'] : null;
    if (curves !== null && !curves.includes(String(jwk.crv))) {
      refuse(`keys[${i}] (kid "${jwk.kid}"): crv must be one of ${curves.join(', ')} (a signing curve)`);
      return;
    }
    if (jwk.use !== undefined && jwk.use !== 'sig') {
      refuse(`keys[${i}] (kid "${jwk.kid}"): use must be "sig" or absent`);
      return;
    }
    const rsaParts = jwk.kty === 'RSA' ? ['d', 'p', 'q', 'dp', 'dq', 'qi'] : ['d'];
    const missing = rsaParts.filter((p) => typeof (jwk as Record<string, unknown>)[p] !== 'string');
    let readable = missing.length === 0;
    if (readable) {
      try {
        createPrivateKey({ key: jwk as JsonWebKey, format: 'jwk' });
      } catch {
        readable = false;
      }
    }
    if (!readable) {
      refuse(`keys[${i}] (kid "${jwk.kid}") is not a private key (a public JWKS, or a key cut short?)`);
      return;
    }
  }
  // Every client's id_token_signed_response_alg defaults to RS256 (registered clients keep it in
  // their stored metadata), and the library refuses a client whose alg no key signs: without an
  // RS256 key every registration and every host's next refresh answered invalid_client_metadata.
  const rs256 = (keys as { kty?: unknown; alg?: unknown }[]).some(
    (k) => k.kty === 'RSA' && (k.alg === undefined || k.alg === 'RS256'),
  );
  if (!rs256) refuse('no RSA key for RS256 (alg "RS256" or none): every client asks for RS256');
});

/** OAUTH_COOKIE_KEYS: comma-separated cookie secrets, the first signing, all checked. */
const oauthCookieKeys = z.string().superRefine((raw, ctx) => {
  // A list of none is refused before (listOf).
  const keys = splitList(raw);
  if (keys.some((k) => k.length < 16)) {
    ctx.addIssue({
      code: 'custom',
      message: `each secret at least 16 characters (openssl rand -base64 32); ${keys.filter((k) => k.length < 16).length} of ${keys.length} shorter`,
    });
  }
});

/**
 * WEBHOOK_MASTER_KEYS_PREVIOUS: comma-separated master keys (64 hex each) that open secrets sealed
 * before a rotation; WEBHOOK_MASTER_KEY alone seals. Empty means none.
 */
const webhookPreviousKeys = z.string().superRefine((raw, ctx) => {
  const keys = splitList(raw);
  // Which ones by their place in the list: the keys are secrets, never echoed.
  const bad = keys.flatMap((k, i) => (/^[0-9a-fA-F]{64}$/.test(k) ? [] : [i + 1]));
  if (bad.length > 0) {
    const which =
      bad.length === 1
        ? `key ${bad[0]} of ${keys.length} is not one`
        : `keys ${bad.join(', ')} of ${keys.length} are not`;
    ctx.addIssue({
      code: 'custom',
      message: `comma-separated keys of 64 hex characters (32 bytes) each; ${which} (the values are not shown): correct or remove it`,
    });
  }
});

/** The keys of WEBHOOK_MASTER_KEYS_PREVIOUS, in order (the schema has checked each). */
export function webhookPreviousMasterKeys(raw: string | undefined): string[] {
  return splitList(raw ?? '').map((k) => k.toLowerCase());
}

const headersJson = z.string().transform((raw, ctx) => {
  try {
    const parsed: unknown = JSON.parse(raw);
    const headers = z.record(z.string(), z.string()).parse(parsed);
    return headers;
  } catch {
    ctx.addIssue({ code: 'custom', message: 'a JSON object of header names to string values' });
    return z.NEVER;
  }
});

/**
 * The rail quoted outside production when X402_PAY_TO is unset, so that `npm start` serves real
 * quotes with zero set-up: Base Sepolia test USDC paid to anvil's account #0, a public test
 * address whose key everyone knows. No mainnet money can go to a default; production requires
 * X402_PAY_TO and refuses this address.
 */
export const DEVELOPMENT_RAIL = {
  network: 'eip155:84532',
  asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  name: 'USDC',
  version: '2',
  payTo: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
  rpcUrl: 'https://sepolia.base.org',
} as const;

/**
 * The webhook master key that stands in outside production when WEBHOOK_MASTER_KEY is unset. It is
 * in the source, so it protects nothing: production refuses it, as it refuses DEVELOPMENT_RAIL.
 */
export const DEVELOPMENT_WEBHOOK_MASTER_KEY =
  'de7e10be47de7e10be47de7e10be47de7e10be47de7e10be47de7e10be47de7e';

export const ConfigSchema = z
  .object({
    NODE_ENV: z.enum(['development', 'production', 'test']).default('development'),
    LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    /**
     * The address the listener binds: an IP address or a host name. A URL or an address with its
     * port (`http://0.0.0.0`, `127.0.0.1:8080`) is refused here; the listener would fail the start
     * with `getaddrinfo ENOTFOUND`, naming neither the variable nor what is wrong.
     */
    HOST: z
      .string()
      .min(1)
      .refine(
        (host) => (host.includes(':') ? ipaddr.IPv6.isValid(host) : /^[A-Za-z0-9_.-]+$/.test(host)),
        'an IP address or host name to listen on, such as 0.0.0.0, :: or 127.0.0.1, without scheme or port (PORT is the port)',
      )
      .default('0.0.0.0'),
    PORT: port.default(8080),
    /** Largest accepted request body; larger bodies get 413 before any handler runs. */
    BODY_LIMIT_BYTES: positiveInt.default(64 * 1024),
    /**
     * A request (headers and body) must arrive whole within this long, or it is answered 408 and
     * its connection closed: a client trickling a body cannot hold a connection for minutes.
     */
    REQUEST_TIMEOUT_MS: timerMs.default(30_000),
    /**
     * When X-Forwarded-For is believed (the client address meters anonymous callers): empty = never
     * (the socket address counts; right without a proxy), a hop count (`1` = one load balancer in
     * front), or comma-separated addresses/CIDRs of the trusted proxies.
     */
    TRUST_PROXY: listOf('proxy', "unset it, or set 0, to believe none (the socket address is the client's)")
      // What the list may hold at all (digits, an address's or prefix's characters, commas and
      // spaces): a word is told as no such value.
      .regex(/^[0-9a-fA-F.:/,\s]*$/, 'empty, a hop count, or comma-separated proxy addresses/CIDRs')
      // Read here once (parseTrustProxy): an address or prefix the pattern lets through but that
      // is no address (`10.0.0.0/33`) stops the start naming the variable, not the listener later.
      .refine((value) => {
        try {
          parseTrustProxy(value);
          return true;
        } catch {
          return false;
        }
      }, 'an address or CIDR prefix that is not one (IPv4 /0-32, IPv6 /0-128)')
      .default(''),
    /**
     * Connections the HTTP listener holds open at once; past it Node closes each new one at once,
     * so slow or idle sockets cannot take every descriptor the process needs (its event store,
     * NATS, Redis, outbound webhooks). Unset: the soft open-files limit less a reserve (a quarter
     * of it, at most 4,096), read from /proc/self/limits (no cap where that cannot be read);
     * 0: no cap.
     */
    HTTP_MAX_CONNECTIONS: nonNegativeInt.optional(),
    /**
     * Connections one client address (an IPv6 address by its /64) holds open at once; one more is
     * closed as it arrives. Peers TRUST_PROXY believes are not counted (with a hop count, every
     * peer: the cap is off). 1,024 by default: far above what one user holds (an MCP stream, a
     * long poll, a few calls), low enough that a handful of addresses cannot take the total; a
     * shared egress (a hosted agent platform, a carrier NAT) may need more. 0: off.
     */
    HTTP_MAX_CONNECTIONS_PER_ADDRESS: nonNegativeInt.default(1_024),
    /**
     * How long SIGTERM waits for in-flight requests and checkpoints; then the process ends
     * whatever is still pending (a write stuck on a lock included).
     */
    SHUTDOWN_TIMEOUT_MS: timerMs.default(15_000),
    /**
     * On SIGTERM, how long the process goes on serving with /readyz answering 503 (check
     * `shutdown`) before it stops taking connections, so a load balancer that health-checks
     * /readyz takes it out of its pool while it still answers and sends it no call that would be
     * refused. Spent before SHUTDOWN_TIMEOUT_MS, which then runs as before; only by a process that
     * runs the api role (the others have no callers). 0 (default): the listener closes as the
     * signal arrives.
     */
    SHUTDOWN_DRAIN_MS: timerMsOrZero.default(0),
    /**
     * /readyz is not ready once a write of this process (an append or a snapshot save) has waited
     * longer than this (ms) and none finished for as long; ready again below half of it (adapters/event-store/append-watch.ts).
     */
    APPEND_STALL_MS: timerMs.default(5_000),
    DATA_DIR: z.string().min(1).default('./data'),
    /**
     * EVENT_STORE=lmdb: false opens the log's environment (log, snapshots, export rows) with
     * MDB_NORDAHEAD on one map of the file, so a page LMDB faults in is read alone. With read-ahead
     * (default) each fault on a page not cached reads the device's read-ahead window around it
     * (8 MB on a device with read_ahead_kb 8192): under a memory limit those windows fill the
     * cgroup and push out the pages the B-tree needs (deploy/README.md, Memory limits). The one
     * map is what lmdb-js's chunked maps (the default) cannot take the advice on; it keeps every
     * page a process reads mapped, so RSS counts up to the whole file.
     */
    LMDB_READ_AHEAD: bool.default(true),
    /**
     * This service's public address: the one origin every discovery document, quote, verify link,
     * webhook payload, sign-in domain and OAuth metadata names. Unset, what answers a request
     * names the origin the request came to, and the rest `http://localhost:<PORT>`
     * (publicBaseUrl).
     */
    PUBLIC_BASE_URL: publicUrl.optional(),

    EVENT_STORE: z.enum(['lmdb', 'kurrentdb', 'postgres', 'memory']).default('lmdb'),
    KURRENTDB_URL: z
      .string()
      .regex(
        /^(kurrentdb|esdb)(\+discover)?:\/\/[^\s/?]+/,
        'a kurrentdb:// (or kurrentdb+discover://, esdb://) connection string such as kurrentdb://127.0.0.1:2113?tls=false',
      )
      .optional(),
    /** The shared log when EVENT_STORE=postgres, e.g. postgres://postgres@127.0.0.1:5432/signals */
    POSTGRES_URL: urlSetting(['postgres', 'postgresql'], 'postgres://user@127.0.0.1:5432/signals', {
      hostOptional: true,
    }).optional(),
    /** Schema holding the log, projection snapshots and migrations (created at start). */
    POSTGRES_SCHEMA: z
      .string()
      .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'a lower-case SQL identifier')
      .default('signal_service'),
    /** Connections each process keeps to PostgreSQL. */
    POSTGRES_POOL_SIZE: positiveInt.default(10),
    /**
     * Longest a statement may run before PostgreSQL cancels it (migrations exempt): an append stuck
     * behind a stopped process's lock fails as unavailable instead of holding its caller for good.
     */
    POSTGRES_STATEMENT_TIMEOUT_MS: timerMs.default(30_000),
    BUS: z.enum(['memory', 'nats']).default('memory'),
    /** One NATS server, or a cluster's servers comma-separated. */
    NATS_URL: listOf('server', 'unset it for the default, nats://127.0.0.1:4222')
      .pipe(urlSetting(['nats', 'tls'], 'nats://127.0.0.1:4222', { list: true }))
      .default('nats://127.0.0.1:4222'),
    NATS_STREAM: z
      .string()
      .regex(/^[A-Za-z0-9_-]+$/, 'letters, digits, _ and - only')
      .default('SIGNAL_EVENTS'),
    NATS_SUBJECT_PREFIX: z
      .string()
      .regex(/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/, 'dot-separated tokens without wildcards')
      .default('sig'),
    /**
     * Copies of the bus stream across a JetStream cluster (1 on a lone server; 3 survives the loss
     * of any one node). Used when the stream is created; an existing stream with fewer is raised.
     */
    NATS_STREAM_REPLICAS: decimal.pipe(z.number().int().min(1).max(5)).default(1),
    /** Copies of each durable consumer's state; 0 inherits the stream's replicas. */
    NATS_CONSUMER_REPLICAS: decimal.pipe(z.number().int().min(0).max(5)).default(0),
    /**
     * How long the bus stream keeps a message; 0 keeps every one. Acknowledged messages stay in the
     * stream, so without an age its store grows with every relayed event until the server's
     * max_file_store refuses publishes. A consumer stopped for longer misses what aged out (a
     * webhook subscription gets it back by an enable with `recover_since`, read from the log).
     */
    NATS_STREAM_MAX_AGE_MS: nonNegativeInt
      // An hour at least: far above the bus's duplicate window, which JetStream wants no longer.
      .refine((ms) => ms === 0 || ms >= 3_600_000, '0 (keep every message) or at least 3600000 (an hour)')
      // JetStream reads the age as int64 nanoseconds: past it the server answers the stream's
      // creation `invalid JSON`, a start failure that would name NATS_URL, not this setting.
      .refine(
        (ms) => ms <= MAX_NATS_AGE_MS,
        `at most ${MAX_NATS_AGE_MS} (about 292 years), the longest age JetStream takes`,
      )
      .default(7 * 86_400_000),
    /**
     * How long a start waits for NATS (servers down, a cluster electing its leader) before it
     * gives up with the last error; meanwhile it logs each retry.
     */
    NATS_STARTUP_TIMEOUT_MS: timerMs.default(60_000),
    /**
     * Event types the relay publishes to the bus (comma-separated, split as every list setting:
     * splitList, at least one), or `*` for every type. The default is what the service's consumers
     * subscribe to (the webhook dispatcher). Read by the relay's parser (parseEventTypes): a name
     * the event catalog does not hold stops the start, listing the ones it does.
     */
    RELAY_EVENT_TYPES: parsedBy(parseEventTypes).default(
      'VerdictRecorded,RegimeShifted,RiskShifted,SubscriptionReEnabled,SubscriptionDisabled',
    ),
    CACHE: z.enum(['memory', 'redis']).default('memory'),
    REDIS_URL: urlSetting(['redis', 'rediss'], 'redis://127.0.0.1:6379')
      // The path is the database number, read by the client as SELECT <path>: `/abc` crashed the
      // process at connect (SELECT NaN), `/1/x` was read as database 1.
      .refine(
        (raw) => !URL.canParse(raw) || /^(\/\d{1,5})?\/?$/.test(new URL(raw).pathname),
        'a database number alone for its path, such as redis://127.0.0.1:6379/2, or no path',
      )
      .default('redis://127.0.0.1:6379'),
    REDIS_PREFIX: z.string().default('sig:'),

    /** Events folded between two projection snapshots (state and checkpoint saved together). */
    PROJECTION_SNAPSHOT_EVERY: positiveInt.default(1000),
    /** /readyz is not ready while a projection of this process is further behind the log's head. */
    PROJECTION_READY_MAX_LAG: positiveInt.default(1000),
    METRICS_ENABLED: bool.default(true),

    /** Market feed: live venues, the replay files, or live when reachable at start (auto). */
    FEED: z.enum(['live', 'replay', 'auto']).default('auto'),
    /**
     * Replay directory in the shared layout. Unset: ../shared/data/market beside the checkout when
     * it is there (the full data set), else the slice shipped in sample-data/market.
     */
    MARKET_DATA_DIR: z.string().min(1).optional(),
    /**
     * Replay acceleration: feed milliseconds per wall millisecond (3600 = an hour a second). 0
     * holds the replay clock still (tests that want fixed figures); refused in production.
     */
    REPLAY_SPEED: decimalNumber.default(600),
    /** Replay start, ISO time or Unix ms; default 31 days before the data ends (1d outcomes due before it ends). */
    REPLAY_START: instant.optional(),
    /**
     * Wall time (ISO or Unix ms) at which the replay clock stood at REPLAY_START: every process
     * of a deployment then shares one clock. Unset, the first process records it in the event
     * log and the others (and every restart) adopt it.
     */
    REPLAY_ANCHOR: instant.optional(),
    LIVE_EXCHANGES: listOf('exchange', `unset it for every one, ${EXCHANGES.join(',')}`)
      .transform((s) => splitList(s).map((x) => x.toUpperCase()))
      .pipe(z.array(Exchange).min(1))
      .default([...EXCHANGES]),
    /**
     * How long the venues' answers are waited for: `FEED=auto`'s probe of the live venues at
     * selection, and each history filter check of which venues the feed serves a timeframe on (the
     * "served nowhere" refusal and the filter's own venue and timeframe), one check's probes
     * together.
     */
    FEED_PROBE_TIMEOUT_MS: timerMs.default(3_000),
    /** Timeframes the engine computes verdicts for on every candle close. */
    SCHEDULE_TIMEFRAMES: listOf('timeframe', `unset it for the default, ${DEFAULT_TIMEFRAMES.join(',')}`)
      .transform(splitList)
      .pipe(z.array(Timeframe))
      .default([...DEFAULT_TIMEFRAMES]),
    /**
     * One venue, or several comma-separated, all scheduled by one engine process. Unset: the
     * feed's default venue (BINANCE live; BINANCE_SPOT on replay, which serves 5m–1d).
     */
    SCHEDULE_EXCHANGE: listOf('exchange', "unset it for the feed's default venue")
      .transform((s) => splitList(s).map((x) => x.toUpperCase()))
      .pipe(z.array(Exchange).min(1))
      .optional(),
    /** The scheduled markets: the venue's top N by open interest or volume. */
    SCHEDULE_TOP_N: decimal.pipe(z.number().int().min(1).max(100)).default(20),

    /**
     * Pay-per-call (x402): the receiving address. Unset outside production, quotes are served on
     * the development rail (DEVELOPMENT_RAIL); unset in production, the /x402/* routes are off.
     */
    X402_PAY_TO: evmAddress.optional(),
    /** CAIP-2 network of the primary rail (Base mainnet) and its ERC-3009 asset (USDC). */
    X402_NETWORK: caip2.default('eip155:8453'),
    X402_ASSET: evmAddress.default('0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913'),
    /** EIP-712 domain of the asset; a wrong name makes every signature invalid. */
    X402_ASSET_NAME: z.string().min(1).default('USD Coin'),
    X402_ASSET_VERSION: z.string().min(1).default('2'),
    /**
     * How long a signed authorisation may take to arrive (quoted as maxTimeoutSeconds). No upper
     * bound from the reconciler: it releases an unsettled payment only once its authorisation's
     * validBefore has passed on chain.
     */
    X402_MAX_TIMEOUT_SECONDS: positiveInt.default(120),
    /** Prices in atomic units of the asset (USDC: 6 decimals, so 20000 = 0.02 USD). */
    X402_PRICE_GET_TRADE_CALL: atomic.default(20_000),
    X402_PRICE_GET_TRADE_CALL_1M: atomic.default(50_000),
    X402_PRICE_GET_TRADE_CALL_3M: atomic.default(40_000),
    X402_PRICE_GET_TRADE_CALL_5M: atomic.default(30_000),
    X402_PRICE_GET_MARKET_REGIME: atomic.default(20_000),
    X402_PRICE_SCAN_FUNDING_ARB: atomic.default(10_000),
    X402_PRICE_SCAN_TRADE_CALLS: atomic.default(20_000),
    /** Largest accepted body on the /x402/* routes (413 beyond it). */
    X402_BODY_LIMIT_BYTES: positiveInt.default(8 * 1024),
    /** local: in-process facilitator signing with X402_FACILITATOR_PRIVATE_KEY; remote: X402_FACILITATOR_URL. */
    X402_FACILITATOR: z.enum(['local', 'remote']).default('local'),
    X402_FACILITATOR_URL: httpUrl.optional(),
    /** JSON object of headers sent to the remote facilitator, e.g. {"Authorization":"Bearer ..."}. */
    X402_FACILITATOR_AUTH_HEADERS: headersJson.optional(),
    /**
     * Longest a facilitator call may take: with a remote facilitator, each HTTP call (verify, settle,
     * supported); with the local one, a verification's chain reads together (each JSON-RPC request
     * at most 10 s, or this when shorter); with either, the payer's balance read before settling.
     * A verification or balance read past it is 503 facilitator_unavailable, nothing charged; a
     * remote settle past it is served pending, and the reconciler reads the chain.
     */
    X402_FACILITATOR_TIMEOUT_MS: timerMs.default(30_000),
    /** Key of the wallet that submits settlements (pays the gas) for the local facilitator. */
    X402_FACILITATOR_PRIVATE_KEY: privateKey.optional(),
    /** JSON-RPC endpoint of the primary network: settlement and reconciliation read the chain here. */
    X402_RPC_URL: httpUrl.default('https://mainnet.base.org'),
    /** How long the local facilitator waits for a settlement receipt before calling it pending. */
    X402_SETTLE_CONFIRM_TIMEOUT_MS: timerMs.default(20_000),
    /**
     * /readyz reports the check `chain` degraded (never failing) once this process has not seen a
     * settling rail's head block number go up for this long (ms): the chain stopped, settlements
     * may not land (services/payments/chain-readiness.ts; x402_chain_head_age_seconds). 0 turns
     * the poller and the check off.
     */
    X402_CHAIN_STALL_MS: timerMsOrZero.default(30_000),
    /**
     * How long the local facilitator reuses what eth_getCode answered for a payer (0: ask every
     * time). Its verify asks twice per payment; the simulated transfer is still run every time.
     */
    X402_PAYER_CODE_TTL_MS: nonNegativeInt.default(30_000),
    /**
     * An unfinished payment older than this is reconciled against the chain; checked at this
     * interval. A timer too: a settlement left pending counts against its payer this long.
     */
    X402_RECONCILE_AFTER_MS: timerMs.default(300_000),
    X402_RECONCILE_INTERVAL_MS: timerMs.default(60_000),
    /**
     * How long /.well-known/x402 promises a paid answer can be fetched again with the same payment
     * (24 h); the answer is kept with the payment in the event log, which holds it longer.
     */
    X402_PAID_RESPONSE_TTL_MS: lifetimeMs.default(86_400_000),
    /** Optional second rail, advertised only when network and asset are both set. */
    X402_EXTRA_NETWORK: caip2.optional(),
    X402_EXTRA_ASSET: evmAddress.optional(),
    X402_EXTRA_ASSET_NAME: z.string().min(1).default('USDC'),
    X402_EXTRA_ASSET_VERSION: z.string().min(1).default('2'),
    X402_EXTRA_PAY_TO: evmAddress.optional(),
    X402_EXTRA_RPC_URL: httpUrl.optional(),

    /**
     * The history anchor (services/history/anchor.ts): the Merkle root of every verdict stream's
     * heads, published on chain every HISTORY_ANCHOR_INTERVAL_MS (0: never) by the projections
     * role, from the wallet of HISTORY_ANCHOR_PRIVATE_KEY (its own: the settlements' wallet sends
     * from the api role, and two processes sending from one wallet race for its nonces) through
     * HISTORY_ANCHOR_RPC_URL (else X402_RPC_URL). Off without the key; readiness says so.
     */
    HISTORY_ANCHOR_INTERVAL_MS: timerMsOrZero.default(86_400_000),
    HISTORY_ANCHOR_PRIVATE_KEY: privateKey.optional(),
    HISTORY_ANCHOR_RPC_URL: httpUrl.optional(),
    /**
     * Long polls (`GET /api/verdicts?wait=`) one key holds waiting at once, per api process: one
     * more answers at once with the rows there are, as `wait=0` would.
     */
    HISTORY_MAX_LONG_POLLS_PER_KEY: positiveInt.default(4),

    /** Plan limits in calls per UTC month (free also per UTC day); anonymous callers get the free ones. */
    PLAN_FREE_MONTHLY_CALLS: positiveInt.default(200),
    PLAN_FREE_DAILY_CALLS: positiveInt.default(100),
    PLAN_STARTER_MONTHLY_CALLS: positiveInt.default(10_000),
    PLAN_PRO_MONTHLY_CALLS: positiveInt.default(100_000),
    /**
     * Prepaid debits (the quota lease, services/metering/quota-meter.ts): a key or client whose calls
     * come at 8 or more per QUOTA_LEASE_MS has the units of its next calls counted and recorded
     * ahead in one event, sized to QUOTA_LEASE_MS of its calls at their recent rate (at most
     * QUOTA_LEASE_MAX_UNITS, and at most a sixteenth of what is left); what no call took is given
     * back once it goes quiet or the api stops. A killed api leaves at most one lease's unused units
     * charged per busy key (one lease serves all its tools). 0 (or QUOTA_LEASE_MAX_UNITS below 8,
     * the smallest grant): every call is recorded on its own.
     */
    QUOTA_LEASE_MS: timerMsOrZero.default(1_000),
    QUOTA_LEASE_MAX_UNITS: positiveInt.default(256),
    /**
     * Request-rate limits per credential and window, shared across replicas on Redis: an applied
     * key by its plan, anyone else by client address. Each tool may take RATE_LIMIT_TOOL_SHARE of
     * the budget on its own. 429 with Retry-After and RateLimit-* headers beyond it.
     */
    RATE_LIMIT_ENABLED: bool.default(true),
    RATE_LIMIT_WINDOW_MS: positiveInt.default(60_000),
    RATE_LIMIT_ANONYMOUS: positiveInt.default(120),
    RATE_LIMIT_FREE: positiveInt.default(300),
    RATE_LIMIT_STARTER: positiveInt.default(1_200),
    RATE_LIMIT_PRO: positiveInt.default(6_000),
    RATE_LIMIT_TOOL_SHARE: decimalNumber.pipe(z.number().gt(0).max(1)).default(0.5),
    /**
     * The OAuth sign-in paths and their discovery documents, per caller (a client address) and
     * window, counted apart from the product budgets above.
     */
    RATE_LIMIT_SIGNIN: positiveInt.default(300),
    /**
     * Open MCP sessions, in all and per caller (key, or client address; an IPv6 address by its
     * /64): opening one more closes the caller's (or its pool's) least recently used session
     * first. Anonymous callers together hold at most MCP_MAX_SESSIONS_ANONYMOUS of the total, free
     * keys MCP_MAX_SESSIONS_FREE (unset: a quarter each), paid keys the rest, so a flood of
     * addresses or of free keys never evicts a paid caller's session. At least 3, so that each
     * pool holds at least one session within the total.
     */
    MCP_MAX_SESSIONS: decimal
      .pipe(
        z.number().int().min(3, 'at least 3 (one session for each pool: anonymous, free keys, paid keys)'),
      )
      .default(10_000),
    MCP_MAX_SESSIONS_PER_CALLER: positiveInt.default(16),
    MCP_MAX_SESSIONS_ANONYMOUS: positiveInt.optional(),
    MCP_MAX_SESSIONS_FREE: positiveInt.optional(),
    /** Chats per UTC month by plan (chat_knowledge, POST /api/chat); anonymous MCP callers get free. */
    CHAT_QUOTA_FREE: positiveInt.default(10),
    CHAT_QUOTA_STARTER: positiveInt.default(50),
    CHAT_QUOTA_PRO: positiveInt.default(200),
    /** Optional generative chat models; `none` serves the extractive model only. */
    CHAT_PROVIDER: z.enum(['none', 'openai-compatible', 'anthropic']).default('none'),
    /** Base URL of the provider's API (e.g. https://api.openai.com/v1, https://api.anthropic.com). */
    CHAT_BASE_URL: httpUrl.optional(),
    CHAT_API_KEY: z.string().optional(),
    /** Model names callers may ask for, comma-separated, each once; `extractive` is always offered and not listed. */
    CHAT_MODELS: listOf('model', 'unset it for none besides extractive (with CHAT_PROVIDER=none)')
      .superRefine(chatModelNames)
      .transform(splitList)
      .default([]),
    /** A provider that has not answered by then is abandoned: the answer is extractive, with a note. */
    CHAT_TIMEOUT_MS: timerMs.default(10_000),
    /** An MCP session with no request for this long is closed (clients often never send DELETE). */
    MCP_SESSION_IDLE_MS: timerMs.default(15 * 60_000),
    /** DNS-rebinding guard: Host names (port ignored) the API answers on; `*` turns the check off. */
    ALLOWED_HOSTS: listOf(
      'host (every request would be refused 403)',
      `unset it for the default, ${DEFAULT_ALLOWED_HOSTS}, or set * to answer any Host`,
    )
      .pipe(
        listSetting(
          /^([A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])$/,
          'host names as a Host header names them, without scheme, port or path (such as signals.example.com,localhost), comma-separated, or *',
        ),
      )
      .default(DEFAULT_ALLOWED_HOSTS),
    /** Browser origins allowed to call /mcp and /api/keys (CORS); empty = none, `*` = any. */
    ALLOWED_ORIGINS: listOf('origin', 'unset it for none (the default), or set * for any')
      .pipe(
        listSetting(
          /^[A-Za-z][A-Za-z0-9+.-]*:\/\/([A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/,
          'browser origins as a browser sends them, scheme://host[:port] without a path or trailing slash (such as https://app.example.com), comma-separated, or *',
        ),
      )
      .default(''),
    /**
     * The domain (host[:port]) a Sign-In with Ethereum message must name to get a free key. When
     * unset, the host of PUBLIC_BASE_URL, else it follows PORT (`localhost:<PORT>`), see loadConfig.
     */
    SIWE_DOMAIN: z
      .string()
      .regex(
        /^([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?$/,
        // Compared as written with the domain a wallet's message names (EIP-4361: host[:port]).
        'host[:port] as a Sign-In with Ethereum message names it, such as signals.example.com, without scheme or path',
      )
      .default('localhost:8080'),
    /** How long a sign-in nonce from GET /api/keys/nonce stays usable. */
    SIWE_NONCE_TTL_MS: lifetimeMs.default(10 * 60_000),
    /**
     * Free keys issued per client network (an IPv4 address, an IPv6 /64) and UTC day, by POST
     * /api/keys and the OAuth wallet sign-in together: a wallet is a fresh private key, so one key
     * per wallet alone would let one network mint keys without end. Counted in the shared cache.
     */
    FREE_KEYS_PER_ADDRESS_PER_DAY: positiveInt.default(3),

    /**
     * OAuth sign-in for MCP hosts (services/api/oauth): /mcp/signin asks for an OAuth access
     * token that acts as one of the person's API keys. The issuer is OAUTH_ISSUER, else
     * PUBLIC_BASE_URL, else the origin the request came to (services/api/oauth/signin.ts).
     */
    OAUTH_ENABLED: bool.default(true),
    OAUTH_ISSUER: publicUrl.optional(),
    /** Access tokens are short-lived and bound to the /mcp/signin resource; refresh tokens renew them. */
    OAUTH_ACCESS_TOKEN_TTL_S: lifetimeS.default(600),
    OAUTH_REFRESH_TOKEN_TTL_S: lifetimeS.default(30 * 86_400),
    OAUTH_CODE_TTL_S: lifetimeS.default(60),
    /** How long the sign-in page (one interaction) stays usable. */
    OAUTH_INTERACTION_TTL_S: lifetimeS.default(600),
    /**
     * The private signing keys (a JWKS JSON with `keys`) and cookie-signing secrets (comma-separated).
     * When unset they are generated at first start and kept in the OAuth store (Redis when
     * CACHE=redis, so every api host shares them).
     */
    OAUTH_JWKS: oauthJwks.optional(),
    OAUTH_COOKIE_KEYS: listOf(
      'secret',
      'unset it to have them generated at first start and kept in the OAuth store',
    )
      .pipe(oauthCookieKeys)
      .optional(),

    /**
     * Webhooks. 64 hex chars (32 bytes) encrypting subscription secrets at rest. Outside
     * production a fixed development key (DEVELOPMENT_WEBHOOK_MASTER_KEY) stands in; with
     * NODE_ENV=production the roles that handle webhooks (api, dispatcher) refuse to start without
     * it, and no role starts with the development key.
     */
    WEBHOOK_MASTER_KEY: z
      .string()
      .regex(
        /^[0-9a-fA-F]{64}$/,
        '64 hex characters (32 bytes), such as `openssl rand -hex 32` makes (the value is not shown)',
      )
      .optional(),
    /**
     * Master keys in use before WEBHOOK_MASTER_KEY (comma-separated, 64 hex each): they only open
     * secrets sealed under them, until `npm run keys -- reseal-webhook-secrets` has re-sealed every
     * secret under WEBHOOK_MASTER_KEY (deploy/README.md, Rotating the webhook master key).
     */
    WEBHOOK_MASTER_KEYS_PREVIOUS: listOf('key', 'unset it for none').pipe(webhookPreviousKeys).optional(),
    /** Ports a webhook URL may name: `443`, a list `443,8443`, ranges `8000-8999`, or `*`. */
    WEBHOOK_ALLOWED_PORTS: listOf('port', 'unset it for the default, 443, or set * for any')
      .regex(/^(\s*\*\s*|[\d\s,-]*)$/, 'ports and ranges, comma-separated, or *')
      // The pattern lets 99999 or 9000-8000 through: read here by the webhooks slice's own parser,
      // so it is refused naming the variable, not by that slice's start with a line that does not.
      .refine(
        (spec) => parses(() => parsePortPolicy(spec)),
        'ports 1-65535, and each range low-high, comma-separated, or *',
      )
      .default('443'),
    /**
     * TEST ONLY: CIDRs webhooks may reach despite the SSRF guard (e.g. 127.0.0.1/32 for a local
     * receiver). Refused when NODE_ENV=production, so a production config cannot turn it on.
     */
    WEBHOOK_TEST_ALLOW_CIDRS: listOf('address', 'unset it for none')
      // Read here by the webhooks slice's own parser (parseCidrList): a typo would fail that start
      // with ipaddr's own words, naming neither the variable nor the entry.
      .refine(
        (raw) => parses(() => parseCidrList(raw)),
        'addresses or CIDRs, comma-separated, such as 127.0.0.1/32',
      )
      .default(''),
    /**
     * Delays before each attempt (the first is normally 0): ms or 5s/5m/2h/1d, comma-separated,
     * split as every list setting (splitList), each at most 24d (MAX_TIMER_MS: the dispatcher
     * waits for a retry with a timer). Read by the dispatcher's parser (parseSchedule), whose
     * refusal names the entry that is wrong.
     */
    WEBHOOK_RETRY_SCHEDULE: parsedBy(parseSchedule).default(DEFAULT_RETRY_SCHEDULE),
    /** Each retry delay is varied by up to this fraction either way. */
    WEBHOOK_RETRY_JITTER: decimalNumber.pipe(z.number().min(0).max(1)).default(0.2),
    /** A receiver's Retry-After is honoured up to this many ms (the retry's wait is a timer's). */
    WEBHOOK_RETRY_AFTER_MAX_MS: timerMs.default(3_600_000),
    /** A subscription is disabled after this many consecutive deliveries failed every attempt... */
    WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: decimal
      .pipe(
        z
          .number()
          .int()
          .positive()
          .max(
            MAX_DISABLE_AFTER_FAILED_DELIVERIES,
            `at most ${MAX_DISABLE_AFTER_FAILED_DELIVERIES}, the most failed deliveries in a row a subscription's record counts`,
          ),
      )
      .default(5),
    /** ...or after failing without a single success for this long (5 days). */
    WEBHOOK_DISABLE_AFTER_MS: positiveInt.default(5 * 24 * 3_600_000),
    /** Requests in flight per endpoint (an API key's origin); more wait in that endpoint's own queue. */
    WEBHOOK_ENDPOINT_CONCURRENCY: positiveInt.default(4),
    /**
     * Requests in flight (so connections) per origin over every API key's endpoint there, per
     * process: each key with subscriptions there gets an even share of it (at least 1, at most
     * WEBHOOK_ENDPOINT_CONCURRENCY): another key's hung requests hold their share, no more. 256 by
     * default: every key keeps all its slots on a receiver up to 64 keys share (a popular one, a
     * chat or automation platform's hooks host), where 64 cut a busy key to 1 slot past 64 keys
     * and below 4 past 16, idle keys' shares held back unused.
     */
    WEBHOOK_ORIGIN_CONCURRENCY: positiveInt.default(256),
    /** Deliveries waiting per endpoint with their bytes in memory; more wait by id (never failed). */
    WEBHOOK_ENDPOINT_QUEUE_LIMIT: positiveInt.default(1_000),
    /**
     * Bytes of bodies the deliveries past their endpoint's queue limit keep in memory, over every
     * endpoint (64 MiB); past it they wait by id and are read back from the log. 0: none kept.
     */
    WEBHOOK_QUEUE_BYTES_LIMIT: nonNegativeInt.default(64 * 1024 * 1024),
    /**
     * Timeouts in a row after which an endpoint's circuit breaker opens: nothing is sent to it,
     * one probe goes out after each delay of the retry schedule.
     */
    WEBHOOK_BREAKER_TIMEOUTS: positiveInt.default(3),
    WEBHOOK_CONNECT_TIMEOUT_MS: timerMs.default(5_000),
    /** Whole-request limit per attempt (connect, send, response). */
    WEBHOOK_TIMEOUT_MS: timerMs.default(15_000),
    /** An attempt with no recorded outcome after this long is retried (its dispatcher died). */
    WEBHOOK_STUCK_AFTER_MS: timerMs.default(120_000),
    /** How often due retries and digests are looked for. */
    WEBHOOK_TICK_MS: timerMs.default(1_000),
    /** Subscriptions per API key. */
    WEBHOOK_MAX_PER_KEY: positiveInt.default(25),
    /**
     * Deliveries per subscription the delivery log keeps in memory (GET …/deliveries pages through
     * them); recovery and resend read the event log and reach every delivery regardless.
     */
    WEBHOOK_DELIVERY_LOG_RETENTION: positiveInt.default(200),
    /**
     * After a secret rotation, how long (ms) deliveries are signed with the previous secret too
     * (a rotate request may ask for less or more, up to 7 days).
     */
    WEBHOOK_SECRET_ROTATION_OVERLAP_MS: lifetimeMs.default(86_400_000),
    /** Deliveries a recovery (re-enable with recover_since) claims per second, at most. */
    WEBHOOK_RECOVER_PER_SECOND: positiveInt.default(50),
  })
  .superRefine((cfg, ctx) => {
    // main.ts waits for the stop with one timer of the two together.
    if (cfg.SHUTDOWN_DRAIN_MS + cfg.SHUTDOWN_TIMEOUT_MS > MAX_TIMER_MS) {
      ctx.addIssue({
        code: 'custom',
        path: ['SHUTDOWN_DRAIN_MS'],
        message: `${MAX_TIMER_TEXT} together with SHUTDOWN_TIMEOUT_MS (one timer waits for both)`,
      });
    }
    if (cfg.NATS_CONSUMER_REPLICAS > cfg.NATS_STREAM_REPLICAS) {
      ctx.addIssue({
        code: 'custom',
        path: ['NATS_CONSUMER_REPLICAS'],
        message: 'at most NATS_STREAM_REPLICAS (a consumer cannot have more copies than its stream)',
      });
    }
    if (cfg.EVENT_STORE === 'kurrentdb' && !cfg.KURRENTDB_URL) {
      ctx.addIssue({
        code: 'custom',
        path: ['KURRENTDB_URL'],
        message: 'required when EVENT_STORE=kurrentdb',
      });
    }
    if (cfg.EVENT_STORE === 'postgres' && !cfg.POSTGRES_URL) {
      ctx.addIssue({ code: 'custom', path: ['POSTGRES_URL'], message: 'required when EVENT_STORE=postgres' });
    }
    if (cfg.X402_PAY_TO && cfg.X402_FACILITATOR === 'local' && !cfg.X402_FACILITATOR_PRIVATE_KEY) {
      ctx.addIssue({
        code: 'custom',
        path: ['X402_FACILITATOR_PRIVATE_KEY'],
        message: 'required when X402_PAY_TO is set and X402_FACILITATOR=local (it submits settlements)',
      });
    }
    if (cfg.NODE_ENV === 'production') {
      for (const name of ['X402_PAY_TO', 'X402_EXTRA_PAY_TO'] as const) {
        if (cfg[name]?.toLowerCase() === DEVELOPMENT_RAIL.payTo.toLowerCase()) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: 'the public development address (its key is published); set an address you control',
          });
        }
      }
      if (cfg.WEBHOOK_MASTER_KEY?.toLowerCase() === DEVELOPMENT_WEBHOOK_MASTER_KEY) {
        ctx.addIssue({
          code: 'custom',
          path: ['WEBHOOK_MASTER_KEY'],
          message:
            'the published development key (it is in the source, so it protects nothing); make your own with `openssl rand -hex 32`',
        });
      }
    }
    // A reconciler that looks before the request's own settle wait is over races the request.
    const settleWait =
      cfg.X402_FACILITATOR === 'remote'
        ? cfg.X402_FACILITATOR_TIMEOUT_MS
        : cfg.X402_SETTLE_CONFIRM_TIMEOUT_MS;
    if (cfg.X402_RECONCILE_AFTER_MS <= settleWait) {
      ctx.addIssue({
        code: 'custom',
        path: ['X402_RECONCILE_AFTER_MS'],
        message:
          `must be longer than the settle wait (${settleWait} ms, ` +
          `${cfg.X402_FACILITATOR === 'remote' ? 'X402_FACILITATOR_TIMEOUT_MS' : 'X402_SETTLE_CONFIRM_TIMEOUT_MS'})`,
      });
    }
    if (cfg.X402_FACILITATOR === 'remote' && !cfg.X402_FACILITATOR_URL) {
      ctx.addIssue({
        code: 'custom',
        path: ['X402_FACILITATOR_URL'],
        message: 'required when X402_FACILITATOR=remote',
      });
    }
    if (Boolean(cfg.X402_EXTRA_NETWORK) !== Boolean(cfg.X402_EXTRA_ASSET)) {
      ctx.addIssue({
        code: 'custom',
        path: [cfg.X402_EXTRA_NETWORK ? 'X402_EXTRA_ASSET' : 'X402_EXTRA_NETWORK'],
        message: 'the extra rail needs both X402_EXTRA_NETWORK and X402_EXTRA_ASSET',
      });
    }
    if (cfg.CHAT_PROVIDER !== 'none') {
      for (const name of ['CHAT_BASE_URL', 'CHAT_MODELS'] as const) {
        if (cfg[name] === undefined || cfg[name].length === 0) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: `required when CHAT_PROVIDER=${cfg.CHAT_PROVIDER}`,
          });
        }
      }
      // Anthropic's API answers every call without a key with 401: the provider could only fail.
      if (cfg.CHAT_PROVIDER === 'anthropic' && !cfg.CHAT_API_KEY?.trim()) {
        ctx.addIssue({
          code: 'custom',
          path: ['CHAT_API_KEY'],
          message: 'required when CHAT_PROVIDER=anthropic (its API refuses every call without a key)',
        });
      }
    } else if (cfg.CHAT_MODELS.length > 0) {
      // Offered to callers (the request schema's enum), they would be answered extractively.
      ctx.addIssue({
        code: 'custom',
        path: ['CHAT_MODELS'],
        message:
          'names models no provider serves with CHAT_PROVIDER=none: set CHAT_PROVIDER ' +
          '(openai-compatible or anthropic) with CHAT_BASE_URL, or unset CHAT_MODELS',
      });
    }
    if (cfg.NODE_ENV === 'production' && cfg.REPLAY_SPEED === 0) {
      ctx.addIssue({
        code: 'custom',
        path: ['REPLAY_SPEED'],
        message: 'must be > 0 in production (0 holds the replay clock still: no candle ever closes)',
      });
    }
    if (
      cfg.HISTORY_ANCHOR_PRIVATE_KEY !== undefined &&
      cfg.HISTORY_ANCHOR_PRIVATE_KEY.toLowerCase() === cfg.X402_FACILITATOR_PRIVATE_KEY?.toLowerCase()
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['HISTORY_ANCHOR_PRIVATE_KEY'],
        message:
          'the same key as X402_FACILITATOR_PRIVATE_KEY: the anchor needs a wallet of its own ' +
          '(two processes sending from one wallet race for its nonces)',
      });
    }
    if (cfg.NODE_ENV === 'production' && cfg.EVENT_STORE === 'memory') {
      ctx.addIssue({ code: 'custom', path: ['EVENT_STORE'], message: 'memory loses every event on restart' });
    }
    if (cfg.NODE_ENV === 'production' && cfg.WEBHOOK_TEST_ALLOW_CIDRS.trim() !== '') {
      ctx.addIssue({
        code: 'custom',
        path: ['WEBHOOK_TEST_ALLOW_CIDRS'],
        message: 'test-only SSRF exemption; refused when NODE_ENV=production',
      });
    }
  });

export type Config = z.infer<typeof ConfigSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * Defaults that name this process's own address follow PORT, so a service moved to another port
 * does not hand out verify links and sign-in domains of a port nobody listens on.
 */
function withPortDefaults(cfg: Config, env: Record<string, string | undefined>): Config {
  // The sign-in domain is the public origin's host, so a SIWE message names what the documents name.
  if (env.SIWE_DOMAIN === undefined && cfg.PUBLIC_BASE_URL !== undefined) {
    return { ...cfg, SIWE_DOMAIN: new URL(cfg.PUBLIC_BASE_URL).host };
  }
  // PORT=0 asks for any free port: nothing to name before listening, so the default stands.
  if (cfg.PORT === 0 || env.SIWE_DOMAIN !== undefined) return cfg;
  return { ...cfg, SIWE_DOMAIN: `localhost:${cfg.PORT}` };
}

/**
 * The public origin where no request says it (webhook payloads, verdicts' verify links, the OAuth
 * issuer of a Host outside ALLOWED_HOSTS): PUBLIC_BASE_URL, else `http://localhost:<PORT>` (port
 * 8080 when PORT=0 asks for any).
 */
export function publicBaseUrl(config: Pick<Config, 'PUBLIC_BASE_URL' | 'PORT'>): string {
  return (config.PUBLIC_BASE_URL ?? `http://localhost:${config.PORT || 8080}`).replace(/\/+$/, '');
}

/** Secrets are never echoed back in a refusal; a URL is, with its password masked. */
const SECRET_SETTING = /KEY|SECRET|PASSWORD|TOKEN|JWKS|HEADERS/;
/** A count or a time whose name holds one of those words (WEBHOOK_MAX_PER_KEY, OAUTH_ACCESS_TOKEN_TTL_S): no secret. */
const NUMBER_SETTING = /_(MS|S|PER_DAY|PER_KEY)$/;
function shown(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (SECRET_SETTING.test(name) && !NUMBER_SETTING.test(name)) return undefined;
  return maskUrlCredentials(value);
}

/** Parses the environment; the error message lists each bad variable by name. */
/**
 * `./.env`, when there is one (a copy of .env.example): its variables where the environment has
 * none, so an exported variable wins. The entry points (the service, the keys and history CLIs)
 * read it before their settings. Node's --env-file-if-exists does the same, but prints a line on
 * every start of a checkout that has no .env, the README's first command included.
 */
export function readDotEnv(path = '.env', env: Record<string, string | undefined> = process.env): void {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new ConfigError(`${path} could not be read: ${(err as Error).message}`);
  }
  for (const [name, value] of Object.entries(parseEnv(text))) {
    if (env[name] === undefined) env[name] = value;
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // Empty strings mean "unset" so that `VAR=` in a .env file falls back to the default.
  const cleaned = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const result = ConfigSchema.safeParse(cleaned);
  if (result.success) return withPortDefaults(result.data, cleaned);
  // One line per variable: a value that fails several checks (TRUST_PROXY's pattern and its
  // address parse) is told by the first, so an operator reads one reason per setting.
  const seen = new Set<string>();
  const issues = result.error.issues.filter((issue) => {
    const name = issue.path.join('.');
    if (name === '') return true;
    if (seen.has(name)) return false;
    seen.add(name);
    return true;
  });
  const lines = issues.map((issue) => {
    const name = issue.path.join('.') || '(config)';
    const value =
      typeof issue.path[0] === 'string' ? shown(issue.path[0], cleaned[issue.path[0]]) : undefined;
    // zod's own words ("Too small: expected number to be >0") become what the setting must be.
    const must = isZodWording(issue.message) ? issueRequirement(issue, ConfigSchema) : null;
    return `  ${name}: ${must ?? issue.message}${value === undefined ? '' : ` (got ${JSON.stringify(value)})`}`;
  });
  throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
}

/**
 * Settings a process's roles cannot run with, found once both are read (the roles come from the
 * command line). The in-process bus (BUS=memory) carries the relay's events only to a dispatcher
 * in the same process: a process that runs the projections role (the relay) without the
 * dispatcher would publish every event to no one and still move the relay's checkpoint past it,
 * which on a shared log is the checkpoint the deployment's relay resumes from, so those events
 * never reach NATS and no webhook is sent for them. Throws a ConfigError naming BUS.
 */
export function refuseRoleSettings(config: Pick<Config, 'BUS'>, roles: readonly string[]): void {
  if (config.BUS === 'memory' && roles.includes('projections') && !roles.includes('dispatcher')) {
    throw new ConfigError(
      "invalid configuration:\n  BUS: memory carries the relay's events only to a dispatcher in the same " +
        'process; with the projections role and no dispatcher it would publish them to no one and move ' +
        'the relay checkpoint past them. Set BUS=nats (and NATS_URL) as on the other roles, or run the ' +
        'dispatcher role in this process too',
    );
  }
}

/**
 * Settings a process's roles run with that hold only while the process is alone in its role, told
 * at start as warnings (one line each). A process cannot tell how many api processes serve the
 * deployment beside it; an api run apart from the other roles (`--role api`) is how replicas are
 * run (behind a balancer), and on CACHE=memory each keeps its quota counters, rate limits,
 * free-key counts and OAuth state (clients, grants, signing keys) to itself. `everyRole`: the
 * roles `all` stands for.
 */
export function roleSettingWarnings(
  config: Pick<Config, 'CACHE'>,
  roles: readonly string[],
  everyRole: readonly string[],
): { setting: keyof Config; message: string }[] {
  const apiApart = roles.includes('api') && everyRole.some((role) => !roles.includes(role));
  if (config.CACHE !== 'memory' || !apiApart) return [];
  return [
    {
      setting: 'CACHE',
      message:
        'CACHE=memory keeps quota counters, rate limits, free-key counts and OAuth state in this api ' +
        "process alone: beside another api process, each counts a key's quota and signs hosts in apart " +
        'from the other. With more than one api process set CACHE=redis (and REDIS_URL) on every one',
    },
  ];
}

/**
 * TRUST_PROXY, read once, with one meaning for every part that asks who the client is: the
 * request's address (Fastify's trustProxy, which the metering and rate limits key anonymous
 * callers by) and the per-address connection cap (which does not count a trusted proxy's
 * connections). Read in two places before, an IPv4 proxy written IPv4-mapped (`::ffff:10.0.0.1`)
 * was believed by the one and counted by the other.
 */
export interface TrustProxy {
  /** Whether any peer is believed (empty or `0`: none; the socket address is the client's). */
  readonly any: boolean;
  /**
   * Whether the address at `hop` of the chain (0: the socket's peer, 1: the address that peer
   * forwarded for…) is a proxy whose X-Forwarded-For is believed: Fastify's trustProxy. A hop
   * count believes the nearest `hops` entries whatever their address; a list, its addresses.
   */
  trusts(address: string, hop: number): boolean;
  /**
   * Whether a connection from `address` may be a trusted proxy's (hop 0): with a hop count every
   * peer may be, so none is counted per address.
   */
  peer(address: string): boolean;
}

/**
 * Parses TRUST_PROXY: empty = none, a hop count, or comma-separated addresses/CIDRs read as every
 * such list setting is (parseCidrList: entries trimmed, empty ones dropped; a list of none believes
 * none). Matching is proxy-addr's (what Fastify did with the list before): an IPv4-mapped IPv6
 * entry or peer is read as IPv4, and an IPv6 range matches an IPv4 peer by its mapped form. Throws
 * on an entry that is no address or prefix.
 */
export function parseTrustProxy(value: string): TrustProxy {
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) {
    const hops = Number(trimmed);
    return { any: hops > 0, trusts: (_address, hop) => hop < hops, peer: () => hops > 0 };
  }
  const ranges = parseCidrList(trimmed).map(([ip, bits]): Cidr => {
    if (ip.kind() === 'ipv6' && (ip as ipaddr.IPv6).isIPv4MappedAddress() && bits >= 96) {
      return [(ip as ipaddr.IPv6).toIPv4Address(), bits - 96];
    }
    return [ip, bits];
  });
  if (ranges.length === 0) return { any: false, trusts: () => false, peer: () => false };
  const matches = (address: string): boolean => {
    if (!ipaddr.isValid(address)) return false;
    const ip = ipaddr.process(address);
    return ranges.some(([range, bits]) => {
      if (ip.kind() === range.kind()) return ip.match(range, bits);
      // An IPv6 range written for IPv4 peers (::ffff:0:0/96 and within): the peer's mapped form.
      return ip.kind() === 'ipv4' && (ip as ipaddr.IPv4).toIPv4MappedAddress().match(range, bits);
    });
  };
  return { any: true, trusts: (address) => matches(address), peer: matches };
}
