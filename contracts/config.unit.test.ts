import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, publicBaseUrl } from './config.ts';

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
    [{ POSTGRES_STATEMENT_TIMEOUT_MS: 'forever' }, 'POSTGRES_STATEMENT_TIMEOUT_MS'],
    [{ METRICS_ENABLED: 'maybe' }, 'METRICS_ENABLED'],
    [{ TRUST_PROXY: 'yes' }, 'TRUST_PROXY'],
    [{ TRUST_PROXY: '10.0.0.0/8;rm' }, 'TRUST_PROXY'],
    [{ NODE_ENV: 'production', EVENT_STORE: 'memory' }, 'EVENT_STORE'],
    [{ WEBHOOK_QUEUE_BYTES_LIMIT: '-1' }, 'WEBHOOK_QUEUE_BYTES_LIMIT'],
    [{ WEBHOOK_QUEUE_BYTES_LIMIT: '64MB' }, 'WEBHOOK_QUEUE_BYTES_LIMIT'],
  ])('rejects %o naming %s', (env, variable) => {
    expect(() => loadConfig(env)).toThrow(ConfigError);
    expect(() => loadConfig(env)).toThrow(new RegExp(`^invalid configuration:\\n  ${variable}:`, 'm'));
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
