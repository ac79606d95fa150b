import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type Config,
  ConfigError,
  DEVELOPMENT_WEBHOOK_MASTER_KEY,
  loadConfig,
  MAX_DISABLE_AFTER_FAILED_DELIVERIES,
  publicBaseUrl,
  readDotEnv,
  refuseRoleSettings,
  roleSettingWarnings,
} from './config.ts';
import { maskUrlCredentials } from './mask-url.ts';

describe('loadConfig', () => {
  it('runs on embedded defaults with an empty environment', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      PORT: 8080,
      DATA_DIR: './data',
      EVENT_STORE: 'lmdb',
      BUS: 'memory',
      CACHE: 'memory',
    });
  });

  it('coerces numbers and treats empty strings as unset', () => {
    const config = loadConfig({ PORT: '9090', DATA_DIR: '', BODY_LIMIT_BYTES: '1024' });
    expect(config.PORT).toBe(9090);
    expect(config.DATA_DIR).toBe('./data');
    expect(config.BODY_LIMIT_BYTES).toBe(1024);
    expect(loadConfig({}).WEBHOOK_QUEUE_BYTES_LIMIT).toBe(64 * 1024 * 1024);
    expect(loadConfig({ WEBHOOK_QUEUE_BYTES_LIMIT: '0' }).WEBHOOK_QUEUE_BYTES_LIMIT).toBe(0);
  });

  it.each([
    [{ PORT: 'eighty' }, 'PORT'],
    [{ HOST: 'http://0.0.0.0' }, 'HOST'],
    // Past 2^31 - 1 ms a Node timer fires at once: every SIGTERM was a SIGKILL.
    [{ SHUTDOWN_TIMEOUT_MS: '3000000000' }, 'SHUTDOWN_TIMEOUT_MS'],
    [{ SHUTDOWN_DRAIN_MS: '2000000000', SHUTDOWN_TIMEOUT_MS: '200000000' }, 'SHUTDOWN_DRAIN_MS'],
    [{ WEBHOOK_TICK_MS: '2147483648' }, 'WEBHOOK_TICK_MS'],
    [{ POSTGRES_STATEMENT_TIMEOUT_MS: '2147483648' }, 'POSTGRES_STATEMENT_TIMEOUT_MS'],
    // Also a timer: the hold on a pending payment's exposure, released at once past the cap.
    [{ X402_RECONCILE_AFTER_MS: '2147483648' }, 'X402_RECONCILE_AFTER_MS'],
    // A receiver's Retry-After, honoured up to it, is the dispatcher's wait for the retry.
    [{ WEBHOOK_RETRY_AFTER_MAX_MS: '99999999999' }, 'WEBHOOK_RETRY_AFTER_MAX_MS'],
    [{ WEBHOOK_RETRY_SCHEDULE: '0,99999999999d' }, 'WEBHOOK_RETRY_SCHEDULE'],
    [{ SIWE_DOMAIN: 'https://signals.example.com' }, 'SIWE_DOMAIN'],
    [{ WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32,garbage' }, 'WEBHOOK_TEST_ALLOW_CIDRS'],
    [{ HOST: '127.0.0.1:8080' }, 'HOST'],
    [{ PORT: '70000' }, 'PORT'],
    [{ EVENT_STORE: 'sqlite' }, 'EVENT_STORE'],
    [{ BUS: 'kafka' }, 'BUS'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ EVENT_STORE: 'kurrentdb' }, 'KURRENTDB_URL'],
    [{ EVENT_STORE: 'postgres' }, 'POSTGRES_URL'],
    [
      { EVENT_STORE: 'postgres', POSTGRES_URL: 'postgres://h/db', POSTGRES_SCHEMA: 'Bad-Name' },
      'POSTGRES_SCHEMA',
    ],
    [{ NATS_SUBJECT_PREFIX: 'sig.>' }, 'NATS_SUBJECT_PREFIX'],
    [{ NATS_STREAM_REPLICAS: '0' }, 'NATS_STREAM_REPLICAS'],
    [{ NATS_STREAM_REPLICAS: '7' }, 'NATS_STREAM_REPLICAS'],
    [{ NATS_STREAM_REPLICAS: 'three' }, 'NATS_STREAM_REPLICAS'],
    [{ NATS_STREAM_REPLICAS: '1', NATS_CONSUMER_REPLICAS: '3' }, 'NATS_CONSUMER_REPLICAS'],
    [{ NATS_STARTUP_TIMEOUT_MS: '0' }, 'NATS_STARTUP_TIMEOUT_MS'],
    // Under the bus's duplicate window JetStream refuses the stream; an hour is the floor.
    [{ NATS_STREAM_MAX_AGE_MS: '60000' }, 'NATS_STREAM_MAX_AGE_MS'],
    [{ NATS_STREAM_MAX_AGE_MS: '7d' }, 'NATS_STREAM_MAX_AGE_MS'],
    // Past int64 nanoseconds JetStream refuses the stream (`invalid JSON`, the start failed naming NATS_URL).
    [{ NATS_STREAM_MAX_AGE_MS: '9223372036855' }, 'NATS_STREAM_MAX_AGE_MS'],
    [{ POSTGRES_STATEMENT_TIMEOUT_MS: 'forever' }, 'POSTGRES_STATEMENT_TIMEOUT_MS'],
    [{ METRICS_ENABLED: 'maybe' }, 'METRICS_ENABLED'],
    [{ TRUST_PROXY: 'yes' }, 'TRUST_PROXY'],
    [{ TRUST_PROXY: '10.0.0.0/8;rm' }, 'TRUST_PROXY'],
    [{ TRUST_PROXY: '10.0.0.0/33' }, 'TRUST_PROXY'],
    [{ NODE_ENV: 'production', EVENT_STORE: 'memory' }, 'EVENT_STORE'],
    [{ WEBHOOK_QUEUE_BYTES_LIMIT: '-1' }, 'WEBHOOK_QUEUE_BYTES_LIMIT'],
    [{ WEBHOOK_QUEUE_BYTES_LIMIT: '64MB' }, 'WEBHOOK_QUEUE_BYTES_LIMIT'],
    [{ PORT: '0x50' }, 'PORT'],
    [{ PORT: '8e3' }, 'PORT'],
    [{ BODY_LIMIT_BYTES: '0x400' }, 'BODY_LIMIT_BYTES'],
    // Every number is read in decimal digits: no hex, exponent or blank read as a number (a blank
    // REPLAY_SPEED was 0, the replay clock held still).
    [{ NATS_STREAM_REPLICAS: '0x3' }, 'NATS_STREAM_REPLICAS'],
    [{ NATS_STREAM_REPLICAS: ' 2' }, 'NATS_STREAM_REPLICAS'],
    [{ NATS_CONSUMER_REPLICAS: '0x0' }, 'NATS_CONSUMER_REPLICAS'],
    [{ SCHEDULE_TOP_N: '1e1' }, 'SCHEDULE_TOP_N'],
    [{ REPLAY_SPEED: ' ' }, 'REPLAY_SPEED'],
    [{ REPLAY_SPEED: '0x10' }, 'REPLAY_SPEED'],
    [{ REPLAY_START: '1e12' }, 'REPLAY_START'],
    [{ REPLAY_ANCHOR: '0x10' }, 'REPLAY_ANCHOR'],
    [{ RATE_LIMIT_TOOL_SHARE: '5e-1' }, 'RATE_LIMIT_TOOL_SHARE'],
    [{ WEBHOOK_RETRY_JITTER: '0x1' }, 'WEBHOOK_RETRY_JITTER'],
    // A port no URL can name, a range upside down: refused here, not by the webhooks slice's start.
    [{ WEBHOOK_ALLOWED_PORTS: '99999' }, 'WEBHOOK_ALLOWED_PORTS'],
    [{ WEBHOOK_ALLOWED_PORTS: '443,9000-8000' }, 'WEBHOOK_ALLOWED_PORTS'],
    // Entries no request's Host or Origin can ever equal: every /mcp call refused 403 otherwise.
    [{ ALLOWED_HOSTS: 'https://signals.example.com' }, 'ALLOWED_HOSTS'],
    [{ ALLOWED_HOSTS: 'localhost,signals.example.com:443' }, 'ALLOWED_HOSTS'],
    [{ ALLOWED_ORIGINS: 'https://app.example.com/' }, 'ALLOWED_ORIGINS'],
    [{ ALLOWED_ORIGINS: 'app.example.com' }, 'ALLOWED_ORIGINS'],
    [{ NODE_ENV: 'production', REPLAY_SPEED: '0' }, 'REPLAY_SPEED'],
    [{ REPLAY_SPEED: '-1' }, 'REPLAY_SPEED'],
    [{ EVENT_STORE: 'postgres', POSTGRES_URL: 'not-a-url' }, 'POSTGRES_URL'],
    [{ POSTGRES_URL: 'mysql://h/db' }, 'POSTGRES_URL'],
    [{ NATS_URL: '::bad::' }, 'NATS_URL'],
    [{ NATS_URL: 'nats://a:4222,::bad::' }, 'NATS_URL'],
    [{ NATS_URL: 'http://h:4222' }, 'NATS_URL'],
    // A list is split as every list setting (splitList): one of no entry names no server.
    [{ NATS_URL: ',' }, 'NATS_URL'],
    [{ NATS_URL: ' , ,' }, 'NATS_URL'],
    [{ RELAY_EVENT_TYPES: ',' }, 'RELAY_EVENT_TYPES'],
    [{ RELAY_EVENT_TYPES: 'VerdictRecorded,Regime-Shifted' }, 'RELAY_EVENT_TYPES'],
    [{ REDIS_URL: 'localhost:6379' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://' }, 'REDIS_URL'],
    [{ REDIS_URL: '::bad::' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://127.0.0.1:6379/abc' }, 'REDIS_URL'],
    [{ REDIS_URL: 'redis://127.0.0.1:6379/1/x' }, 'REDIS_URL'],
    [{ EVENT_STORE: 'kurrentdb', KURRENTDB_URL: '127.0.0.1:2113' }, 'KURRENTDB_URL'],
    [{ X402_RPC_URL: 'mainnet.base.org' }, 'X402_RPC_URL'],
    [{ X402_RPC_URL: 'ftp://mainnet.base.org' }, 'X402_RPC_URL'],
    [{ HISTORY_ANCHOR_RPC_URL: 'base' }, 'HISTORY_ANCHOR_RPC_URL'],
    [{ X402_EXTRA_RPC_URL: 'nope' }, 'X402_EXTRA_RPC_URL'],
    [{ PUBLIC_BASE_URL: 'signals.example' }, 'PUBLIC_BASE_URL'],
    // Links are the address with a path appended: a query, fragment or login would sit inside each.
    [{ PUBLIC_BASE_URL: 'https://signals.example.com/?utm=x' }, 'PUBLIC_BASE_URL'],
    [{ PUBLIC_BASE_URL: 'https://signals.example.com#top' }, 'PUBLIC_BASE_URL'],
    [{ PUBLIC_BASE_URL: 'https://admin:pw@signals.example.com' }, 'PUBLIC_BASE_URL'],
    [{ OAUTH_ISSUER: 'https://signals.example.com?x' }, 'OAUTH_ISSUER'],
    [{ CHAT_BASE_URL: 'api.openai.com/v1' }, 'CHAT_BASE_URL'],
    [{ OAUTH_ISSUER: 'javascript:alert(1)' }, 'OAUTH_ISSUER'],
    [{ X402_FACILITATOR: 'remote', X402_FACILITATOR_URL: 'facilitator' }, 'X402_FACILITATOR_URL'],
    [
      {
        HISTORY_ANCHOR_PRIVATE_KEY: `0x${'ab'.repeat(32)}`,
        X402_FACILITATOR_PRIVATE_KEY: `0x${'AB'.repeat(32)}`,
      },
      'HISTORY_ANCHOR_PRIVATE_KEY',
    ],
  ])('rejects %o naming %s', (env, variable) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(new RegExp(`^invalid configuration:\\n  ${variable}:`, 'm'));
  });

  it('reads decimal numbers, times, port lists, host names and origins written as documented', () => {
    const config = loadConfig({
      NATS_STREAM_REPLICAS: '3',
      NATS_CONSUMER_REPLICAS: '0',
      SCHEDULE_TOP_N: '6',
      REPLAY_SPEED: '0.5',
      REPLAY_START: '2025-10-20T00:00:00Z',
      REPLAY_ANCHOR: '1761000000000',
      RATE_LIMIT_TOOL_SHARE: '.25',
      WEBHOOK_RETRY_JITTER: '0',
      WEBHOOK_ALLOWED_PORTS: '443,8000-8999',
      ALLOWED_HOSTS: 'signals.example.com, localhost,127.0.0.1,[::1],api_1',
      ALLOWED_ORIGINS: 'https://app.example.com,http://localhost:3000,http://[::1]:8080',
      REDIS_URL: 'rediss://user:pw@redis.internal:6380/2',
      PUBLIC_BASE_URL: 'https://signals.example.com/',
      HOST: 'fe80::1%eth0',
      SIWE_DOMAIN: 'localhost:19400',
      WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32, ::1',
      OAUTH_ISSUER: 'https://signals.example.com',
    });
    expect(config).toMatchObject({
      NATS_STREAM_REPLICAS: 3,
      SCHEDULE_TOP_N: 6,
      REPLAY_SPEED: 0.5,
      REPLAY_START: Date.parse('2025-10-20T00:00:00Z'),
      REPLAY_ANCHOR: 1_761_000_000_000,
      RATE_LIMIT_TOOL_SHARE: 0.25,
      WEBHOOK_RETRY_JITTER: 0,
    });
    expect(
      loadConfig({ ALLOWED_HOSTS: '*', ALLOWED_ORIGINS: '*', WEBHOOK_ALLOWED_PORTS: '*' }),
    ).toBeDefined();
    expect(loadConfig({}).NATS_STREAM_MAX_AGE_MS).toBe(604_800_000);
    expect(loadConfig({ NATS_STREAM_MAX_AGE_MS: '0' }).NATS_STREAM_MAX_AGE_MS).toBe(0);
    expect(loadConfig({ NATS_STREAM_MAX_AGE_MS: '3600000' }).NATS_STREAM_MAX_AGE_MS).toBe(3_600_000);
    expect(loadConfig({ NATS_STREAM_MAX_AGE_MS: '9223372036854' }).NATS_STREAM_MAX_AGE_MS).toBe(
      9_223_372_036_854,
    );
  });

  it('refuses a lifetime past 10 years, naming the largest taken, and takes that one', () => {
    // Each becomes an expiry date, now + lifetime, never a timer: a Date ends 8.64e15 ms after
    // 1970, and SIWE_NONCE_TTL_MS=9000000000000000 passed the check and made every GET
    // /api/keys/nonce a 500 (its expires_at's toISOString threw RangeError).
    const inMs = ['SIWE_NONCE_TTL_MS', 'X402_PAID_RESPONSE_TTL_MS', 'WEBHOOK_SECRET_ROTATION_OVERLAP_MS'];
    const inS = [
      'OAUTH_ACCESS_TOKEN_TTL_S',
      'OAUTH_REFRESH_TOKEN_TTL_S',
      'OAUTH_CODE_TTL_S',
      'OAUTH_INTERACTION_TTL_S',
    ];
    for (const [names, largest, unit] of [
      [inMs, 315_360_000_000, 'ms'],
      [inS, 315_360_000, 's'],
    ] as const) {
      for (const name of names) {
        expect(loadConfig({ [name]: String(largest) })[name as keyof Config]).toBe(largest);
        for (const past of [String(largest + 1), '9000000000000000']) {
          expect(() => loadConfig({ [name]: past })).toThrow(
            `${name}: at most ${largest} ${unit} (10 years), the longest lifetime taken`,
          );
        }
      }
    }
  });

  it('refuses a failed-deliveries disable threshold past the most the subscription fold counts', () => {
    // The fold keeps the id of each delivery it counts (a re-sent one is counted once), up to
    // this many: a higher threshold would never be reached.
    const name = 'WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES';
    const largest = MAX_DISABLE_AFTER_FAILED_DELIVERIES;
    expect(loadConfig({ [name]: String(largest) })[name]).toBe(largest);
    expect(() => loadConfig({ [name]: String(largest + 1) })).toThrow(
      `${name}: at most ${largest}, the most failed deliveries in a row a subscription's record counts`,
    );
  });

  it('names the entries of a list that no request can match', () => {
    expect(() => loadConfig({ ALLOWED_HOSTS: 'localhost,https://signals.example.com' })).toThrow(
      /^ {2}ALLOWED_HOSTS: host names .*; "https:\/\/signals\.example\.com" is not \(got /m,
    );
  });

  it('refuses CHAT_MODELS naming extractive or a model twice, naming the entry (the advertised enum lists each once)', () => {
    const chat = { CHAT_PROVIDER: 'openai-compatible', CHAT_BASE_URL: 'https://api.example.com/v1' };
    expect(() => loadConfig({ ...chat, CHAT_MODELS: 'gpt-4o,extractive' })).toThrow(
      /CHAT_MODELS: names "extractive", the built-in model every server offers: list only generative models/,
    );
    expect(() => loadConfig({ ...chat, CHAT_MODELS: 'gpt-4o, mini ,gpt-4o' })).toThrow(
      /CHAT_MODELS: names "gpt-4o" more than once: list each model once/,
    );
    expect(loadConfig({ ...chat, CHAT_MODELS: 'gpt-4o,mini' }).CHAT_MODELS).toEqual(['gpt-4o', 'mini']);
  });

  it('refuses a list setting that names no entry (only commas or blanks), saying how to get the default', () => {
    // Every comma-separated setting, with what its refusal offers besides unsetting it.
    const lists: [string, RegExp][] = [
      ['TRUST_PROXY', /names no proxy: unset it, or set 0, to believe none/],
      ['NATS_URL', /names no server: unset it for the default, nats:\/\/127\.0\.0\.1:4222/],
      ['RELAY_EVENT_TYPES', /names no event type: unset it for the default list, or set \* for every type/],
      ['LIVE_EXCHANGES', /names no exchange: unset it for every one, BINANCE,/],
      ['SCHEDULE_TIMEFRAMES', /names no timeframe: unset it for the default, 15m,1h,4h/],
      ['SCHEDULE_EXCHANGE', /names no exchange: unset it for the feed's default venue/],
      ['CHAT_MODELS', /names no model: unset it for none besides extractive/],
      [
        'ALLOWED_HOSTS',
        /names no host .*: unset it for the default, localhost,127\.0\.0\.1,\[::1\], or set \*/,
      ],
      ['ALLOWED_ORIGINS', /names no origin: unset it for none \(the default\), or set \* for any/],
      ['OAUTH_COOKIE_KEYS', /names no secret: unset it to have them generated/],
      ['WEBHOOK_MASTER_KEYS_PREVIOUS', /names no key: unset it for none/],
      ['WEBHOOK_ALLOWED_PORTS', /names no port: unset it for the default, 443, or set \* for any/],
      ['WEBHOOK_TEST_ALLOW_CIDRS', /names no address: unset it for none/],
      ['WEBHOOK_RETRY_SCHEDULE', /names no delay: unset it for the default, 0,5s,5m/],
    ];
    const defaults = loadConfig({});
    for (const [name, refusal] of lists) {
      for (const value of [',', ' ', ' , ,', '\t']) {
        let message = '';
        try {
          loadConfig({ [name]: value });
        } catch (err) {
          message = (err as Error).message;
        }
        expect(message.split('\n'), `${name}=${JSON.stringify(value)}`).toHaveLength(2);
        expect(message.split('\n')[1], `${name}=${JSON.stringify(value)}`).toMatch(
          new RegExp(`^ {2}${name}: ${refusal.source}`),
        );
      }
      // The empty value is the unset one: the default.
      expect(loadConfig({ [name]: '' })[name as keyof Config], name).toEqual(defaults[name as keyof Config]);
    }
  });

  it('refuses BUS=memory for a process that runs the relay (projections) without the dispatcher', () => {
    // Its relay would publish to no one and move the shared relay checkpoint past the events: a
    // projections role started without BUS=nats lost every webhook event of its run for good.
    for (const roles of [['projections'], ['api', 'engine', 'projections']]) {
      expect(() => refuseRoleSettings(loadConfig({}), roles)).toThrow(
        /^invalid configuration:\n {2}BUS: memory carries the relay's events only to a dispatcher in the same process;/,
      );
      expect(() => refuseRoleSettings(loadConfig({ BUS: 'nats' }), roles)).not.toThrow();
    }
    for (const roles of [
      ['api', 'engine', 'projections', 'dispatcher'],
      ['api'],
      ['engine'],
      ['dispatcher'],
    ]) {
      expect(() => refuseRoleSettings(loadConfig({}), roles)).not.toThrow();
    }
  });

  it('warns of CACHE=memory on an api run apart from the other roles, where api replicas run', () => {
    const every = ['api', 'engine', 'projections', 'dispatcher'];
    for (const roles of [['api'], ['api', 'engine'], ['api', 'projections', 'dispatcher']]) {
      expect(roleSettingWarnings(loadConfig({}), roles, every)).toEqual([
        {
          setting: 'CACHE',
          message: expect.stringMatching(
            /^CACHE=memory keeps quota counters, .* in this api process alone: .* With more than one api process set CACHE=redis \(and REDIS_URL\) on every one$/,
          ),
        },
      ]);
      expect(roleSettingWarnings(loadConfig({ CACHE: 'redis' }), roles, every)).toEqual([]);
    }
    // Every role in one process (npm start), or no api: no replica of the api to share with.
    for (const roles of [every, ['engine'], ['projections', 'dispatcher']]) {
      expect(roleSettingWarnings(loadConfig({}), roles, every)).toEqual([]);
    }
  });

  it('refuses a value that fails several checks of its variable in one line', () => {
    // TRUST_PROXY=foo fails both its pattern and its address parse; the operator reads one reason.
    let message = '';
    try {
      loadConfig({ TRUST_PROXY: 'foo', PORT: 'eighty' });
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message.split('\n')).toEqual([
      'invalid configuration:',
      '  PORT: a whole number in decimal digits (got "eighty")',
      '  TRUST_PROXY: empty, a hop count, or comma-separated proxy addresses/CIDRs (got "foo")',
    ]);
  });

  it("words a bound or a choice it refuses in the service's words, never zod's, with the value", () => {
    const refusal = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (err) {
        return (err as Error).message.split('\n').slice(1);
      }
      return [];
    };
    expect(refusal({ APPEND_STALL_MS: '0' })).toEqual([
      '  APPEND_STALL_MS: a whole number > 0 and ≤ 2147483647 (got "0")',
    ]);
    expect(refusal({ NATS_CONSUMER_REPLICAS: '9' })).toEqual([
      '  NATS_CONSUMER_REPLICAS: a whole number from 0 to 5 (got "9")',
    ]);
    expect(refusal({ LOG_LEVEL: 'loud' })).toEqual([
      '  LOG_LEVEL: one of fatal, error, warn, info, debug, trace, silent (got "loud")',
    ]);
    expect(refusal({ SCHEDULE_TIMEFRAMES: '1h,2d' })[0]).toMatch(
      /^ {2}SCHEDULE_TIMEFRAMES\.1: one of 1m, 3m, /,
    );
    // A count whose name holds KEY or TOKEN is no secret: its value is shown.
    expect(refusal({ WEBHOOK_MAX_PER_KEY: '0' })).toEqual([
      '  WEBHOOK_MAX_PER_KEY: a whole number > 0 (got "0")',
    ]);
    // Every setting of .env.example, given values out of a number's range or no choice of a list.
    const names = [...readFileSync('.env.example', 'utf8').matchAll(/^#? ?([A-Z][A-Z0-9_]+)=/gm)].map(
      (m) => m[1] as string,
    );
    const zodWords = /Invalid option|Too (small|big)|expected/;
    for (const name of new Set(names))
      for (const value of ['0', 'x', '1.5', '99999999999999999999'])
        for (const line of refusal({ [name]: value })) expect(line, `${name}=${value}`).not.toMatch(zodWords);
  });

  it('refuses a malformed WEBHOOK_MASTER_KEY saying how to make one, never echoing it', () => {
    expect(() => loadConfig({ WEBHOOK_MASTER_KEY: 'short-secret' })).toThrow(
      /^ {2}WEBHOOK_MASTER_KEY: 64 hex characters \(32 bytes\), such as `openssl rand -hex 32` makes \(the value is not shown\)$/m,
    );
  });

  it('names a malformed WEBHOOK_MASTER_KEYS_PREVIOUS entry by its place, never its value', () => {
    const good = 'ab'.repeat(32);
    expect(() => loadConfig({ WEBHOOK_MASTER_KEYS_PREVIOUS: `${good},notakey` })).toThrow(
      'WEBHOOK_MASTER_KEYS_PREVIOUS: comma-separated keys of 64 hex characters (32 bytes) each; key 2 of 2 is not one (the values are not shown): correct or remove it',
    );
  });

  it('refuses an OAUTH_JWKS or OAUTH_COOKIE_KEYS the sign-in cannot use, in one line naming it, never echoing it', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
    const k256 = generateKeyPairSync('ec', { namedCurve: 'secp256k1' }).privateKey.export({ format: 'jwk' });
    const good = JSON.stringify({
      keys: [
        { ...rsa, kid: 'k1', alg: 'RS256', use: 'sig' },
        { ...ec, kid: 'e1', alg: 'ES256', use: 'sig' },
      ],
    });
    const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...publicOnly } = rsa;
    const secret = 'SECRETSECRETSECRET';
    const refusals: [Record<string, string>, string, RegExp][] = [
      [{ OAUTH_JWKS: `{"keys":[{"kid":"${secret}"` }, 'OAUTH_JWKS', /not valid JSON/],
      [{ OAUTH_JWKS: '{"keys":[]}' }, 'OAUTH_JWKS', /at least one key/],
      [
        { OAUTH_JWKS: JSON.stringify({ keys: [{ ...publicOnly, kid: 'k1' }] }) },
        'OAUTH_JWKS',
        /not a private key/,
      ],
      [{ OAUTH_JWKS: JSON.stringify({ keys: [{ ...rsa, n: 'AQAB' }] }) }, 'OAUTH_JWKS', /has no kid/],
      [
        { OAUTH_JWKS: JSON.stringify({ keys: [{ ...rsa, kid: 'k1', n: 'AQAB' }] }) },
        'OAUTH_JWKS',
        /not a private key/,
      ],
      [{ OAUTH_JWKS: JSON.stringify({ keys: [{ kty: 'oct', k: secret, kid: 'k1' }] }) }, 'OAUTH_JWKS', /kty/],
      [
        {
          OAUTH_JWKS: JSON.stringify({
            keys: [
              { ...rsa, kid: 'k1' },
              { ...rsa, kid: 'k1' },
            ],
          }),
        },
        'OAUTH_JWKS',
        /twice/,
      ],
      [{ OAUTH_JWKS: JSON.stringify({ keys: [{ ...ec, kid: 'e1', alg: 'ES256' }] }) }, 'OAUTH_JWKS', /RS256/],
      [
        { OAUTH_JWKS: JSON.stringify({ keys: [{ ...rsa, kid: 'k1', alg: 'RS384' }] }) },
        'OAUTH_JWKS',
        /RS256/,
      ],
      [
        {
          OAUTH_JWKS: JSON.stringify({
            keys: [
              { ...rsa, kid: 'k1' },
              { ...ec, kid: 'e1', use: 'enc' },
            ],
          }),
        },
        'OAUTH_JWKS',
        /use/,
      ],
      [
        {
          OAUTH_JWKS: JSON.stringify({
            keys: [
              { ...rsa, kid: 'k1' },
              { ...k256, kid: 'e1' },
            ],
          }),
        },
        'OAUTH_JWKS',
        /crv/,
      ],
      [{ OAUTH_COOKIE_KEYS: ' , ' }, 'OAUTH_COOKIE_KEYS', /names no secret: unset it/],
      [{ OAUTH_COOKIE_KEYS: `${secret}x,short` }, 'OAUTH_COOKIE_KEYS', /at least 16 characters/],
    ];
    for (const [env, variable, why] of refusals) {
      let message = '';
      try {
        loadConfig(env);
      } catch (err) {
        message = (err as Error).message;
      }
      const [head, line, ...rest] = message.split('\n');
      expect([head, rest], JSON.stringify(env)).toEqual(['invalid configuration:', []]);
      expect(line, JSON.stringify(env)).toMatch(new RegExp(`^  ${variable}: `));
      expect(line, JSON.stringify(env)).toMatch(why);
      expect(message).not.toContain(secret);
      expect(message).not.toContain(String(rsa.d));
    }
    const taken = loadConfig({ OAUTH_JWKS: good, OAUTH_COOKIE_KEYS: `${'b'.repeat(32)}, ${'a'.repeat(16)}` });
    expect(taken.OAUTH_JWKS).toBe(good);
  });

  it('refuses the published development webhook master key in production, saying how to make one, and takes it elsewhere', () => {
    for (const key of [DEVELOPMENT_WEBHOOK_MASTER_KEY, DEVELOPMENT_WEBHOOK_MASTER_KEY.toUpperCase()]) {
      let message = '';
      try {
        loadConfig({ NODE_ENV: 'production', WEBHOOK_MASTER_KEY: key });
        expect.unreachable();
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        message = (err as Error).message;
      }
      expect(message).toMatch(/^ {2}WEBHOOK_MASTER_KEY: the published development key/m);
      expect(message).toContain('openssl rand -hex 32');
      expect(message).not.toContain(DEVELOPMENT_WEBHOOK_MASTER_KEY);
    }
    for (const NODE_ENV of ['development', 'test'])
      expect(
        loadConfig({ NODE_ENV, WEBHOOK_MASTER_KEY: DEVELOPMENT_WEBHOOK_MASTER_KEY }).WEBHOOK_MASTER_KEY,
      ).toBe(DEVELOPMENT_WEBHOOK_MASTER_KEY);
    expect(
      loadConfig({ NODE_ENV: 'production', WEBHOOK_MASTER_KEY: 'ab'.repeat(32) }).WEBHOOK_MASTER_KEY,
    ).toBe('ab'.repeat(32));
  });

  it('lists every bad variable at once, with the value it got', () => {
    try {
      loadConfig({ PORT: 'x', CACHE: 'memcached' });
      expect.unreachable();
    } catch (err) {
      const message = (err as Error).message;
      expect(message).toContain('PORT');
      expect(message).toContain('"x"');
      expect(message).toContain('CACHE');
      expect(message).toContain('"memcached"');
    }
  });

  it('refuses MCP_MAX_SESSIONS below 3, naming it: each of the three session pools holds at least one', () => {
    for (const value of ['0', '1', '2']) {
      expect(() => loadConfig({ MCP_MAX_SESSIONS: value })).toThrow(/MCP_MAX_SESSIONS.*at least 3/s);
    }
    expect(loadConfig({ MCP_MAX_SESSIONS: '3' }).MCP_MAX_SESSIONS).toBe(3);
    expect(loadConfig({}).MCP_MAX_SESSIONS).toBe(10_000);
  });

  it('accepts the URL forms the clients take, a NATS cluster comma-separated', () => {
    const config = loadConfig({
      EVENT_STORE: 'postgres',
      POSTGRES_URL: 'postgresql://u:p@db.internal:5432/signals?sslmode=require',
      NATS_URL: 'nats://u:p@n1:4222, nats://n2:4222,tls://n3:4222',
      REDIS_URL: 'rediss://admin:pw@redis:6380/2',
      KURRENTDB_URL: 'kurrentdb+discover://a:2113,b:2113?tls=false',
      X402_RPC_URL: 'http://127.0.0.1:8545',
    });
    expect(config.NATS_URL).toBe('nats://u:p@n1:4222, nats://n2:4222,tls://n3:4222');
    // Split as every list setting (splitList): trimmed, an empty entry (a trailing comma) dropped.
    expect(loadConfig({ NATS_URL: 'nats://n1:4222, ,nats://n2:4222,' }).NATS_URL).toBe(
      'nats://n1:4222, ,nats://n2:4222,',
    );
    expect(loadConfig({ RELAY_EVENT_TYPES: 'VerdictRecorded, RegimeShifted,' }).RELAY_EVENT_TYPES).toBe(
      'VerdictRecorded, RegimeShifted,',
    );
    expect(
      loadConfig({ POSTGRES_URL: 'postgres:///signals?host=/run/postgresql' }).POSTGRES_URL,
    ).toBeDefined();
  });

  it('names a bad URL without echoing its password, and never echoes a key', () => {
    const refusal = (env: Record<string, string>) => {
      try {
        loadConfig(env);
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error('accepted');
    };
    const nats = refusal({ NATS_URL: 'nats://u:SECRETPW2@127.0.0.1:4999,::bad::' });
    expect(nats).toMatch(/^ {2}NATS_URL: one or more nats:\/\/ or tls:\/\/ URLs/m);
    expect(nats).toContain('u:***@127.0.0.1');
    expect(nats).not.toContain('SECRETPW2');
    expect(refusal({ POSTGRES_URL: 'pg://u:hunter2@h/db' })).not.toContain('hunter2');
    const same = `0x${'cd'.repeat(32)}`;
    const key = refusal({ HISTORY_ANCHOR_PRIVATE_KEY: same, X402_FACILITATOR_PRIVATE_KEY: same });
    expect(key).toContain('X402_FACILITATOR_PRIVATE_KEY');
    expect(key).not.toContain(same);
    expect(refusal({ X402_FACILITATOR_PRIVATE_KEY: 'oops-a-secret' })).not.toContain('oops-a-secret');
  });

  it('holds the replay still at REPLAY_SPEED=0 outside production only', () => {
    expect(loadConfig({ REPLAY_SPEED: '0' }).REPLAY_SPEED).toBe(0);
    expect(loadConfig({ NODE_ENV: 'production', REPLAY_SPEED: '0.5' }).REPLAY_SPEED).toBe(0.5);
  });

  it('derives the verify base URL and the sign-in domain from PORT unless they are set', () => {
    const derived = loadConfig({ PORT: '9191' });
    expect(derived.PUBLIC_BASE_URL).toBeUndefined();
    expect(derived.SIWE_DOMAIN).toBe('localhost:9191');
    expect(publicBaseUrl(derived)).toBe('http://localhost:9191');
    // Set, the public origin is the one every document names, and the sign-in domain is its host.
    const set = loadConfig({ PORT: '9191', PUBLIC_BASE_URL: 'https://signals.example/' });
    expect(set.SIWE_DOMAIN).toBe('signals.example');
    expect(publicBaseUrl(set)).toBe('https://signals.example');
    expect(
      loadConfig({
        PORT: '9191',
        PUBLIC_BASE_URL: 'https://signals.example',
        SIWE_DOMAIN: 'signals.example',
      }),
    ).toMatchObject({ PUBLIC_BASE_URL: 'https://signals.example', SIWE_DOMAIN: 'signals.example' });
  });
});

describe('maskUrlCredentials (every URL the service prints: Redis, NATS, PostgreSQL)', () => {
  it.each([
    ['redis://admin:pw@h:6379/2', 'redis://admin:***@h:6379/2'],
    ['nats://u:SECRETPW2@127.0.0.1:4999', 'nats://u:***@127.0.0.1:4999'],
    ['nats://a:1@h1:4222,nats://h2:4222', 'nats://a:***@h1:4222,nats://h2:4222'],
    ['postgres://p:x y@h/db', 'postgres://p:***@h/db'],
    ['u:pw@h:4222', 'u:***@h:4222'],
    // A slash too many parses as a URL with no host, its user:password@ in the path.
    ['postgres:///signal:PGSECRET@127.0.0.1:5432/signals', 'postgres:///signal:***@127.0.0.1:5432/signals'],
    ['redis:////u:pw@h:6379', 'redis:////u:***@h:6379'],
    ['postgres:///signals?host=/var/run/postgresql', 'postgres:///signals?host=/var/run/postgresql'],
    // A password may hold a comma: a list is cut only where another server starts.
    ['postgres://signal:PG,SECRET@127.0.0.1:5432/signals', 'postgres://signal:***@127.0.0.1:5432/signals'],
    ['nats://u:p,w@h1:4222,nats://h2:4222', 'nats://u:***@h1:4222,nats://h2:4222'],
    ['nats://a:b@h1,nats//c:d@h2', 'nats://a:***@h1,nats//c:***@h2'],
    ['postgres//u:p,w@h', 'postgres//u:***@h'],
    ['redis://h:6379', 'redis://h:6379'],
    ['not-a-url', 'not-a-url'],
  ])('%s -> %s', (url, masked) => {
    expect(maskUrlCredentials(url)).toBe(masked);
  });
});

describe('readDotEnv', () => {
  it('fills what the environment lacks from the file, an exported variable winning, and passes over a missing file', () => {
    const dir = mkdtempSync(join(tmpdir(), 'dotenv-'));
    try {
      const file = join(dir, '.env');
      writeFileSync(file, '# a comment\nPORT=9090\nHOST=0.0.0.0\nLOG_LEVEL="debug"\n');
      const env: Record<string, string | undefined> = { HOST: '127.0.0.1' };
      readDotEnv(file, env);
      expect(env).toEqual({ PORT: '9090', HOST: '127.0.0.1', LOG_LEVEL: 'debug' });
      const untouched: Record<string, string | undefined> = { PORT: '1' };
      readDotEnv(join(dir, 'missing.env'), untouched);
      expect(untouched).toEqual({ PORT: '1' });
      expect(() => readDotEnv(dir, {})).toThrow(ConfigError);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
