import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { editDistance, READ_ELSEWHERE, SETTING_NAMES, unknownSettings } from './setting-names.ts';

describe('unknownSettings: the variables meant as a setting that none is', () => {
  it('names a misspelled setting with the nearest one: a swap, a letter off, a lost underscore', () => {
    expect(
      unknownSettings({
        NATS_ULR: 'nats://nats:4222',
        REDIS_URI: 'redis://redis',
        EVENTSTORE: 'postgres',
        CAHCE: 'redis',
        POSTGRES_URL: 'postgres://db/signals',
      }),
    ).toEqual([
      { variable: 'NATS_ULR', nearest: 'NATS_URL' },
      { variable: 'REDIS_URI', nearest: 'REDIS_URL' },
      { variable: 'EVENTSTORE', nearest: 'EVENT_STORE' },
      { variable: 'CAHCE', nearest: 'CACHE' },
    ]);
  });

  it("names a variable in a settings family however far from each name, with that family's nearest", () => {
    expect(
      unknownSettings({ X402_WALLET_ADDRESS: '0x1', WEBHOOK_TIMEOUT: '5000', QUOTA_LIMIT: '9' }),
    ).toEqual([
      { variable: 'X402_WALLET_ADDRESS', nearest: expect.stringMatching(/^X402_/) },
      { variable: 'WEBHOOK_TIMEOUT', nearest: expect.stringMatching(/^WEBHOOK_/) },
      { variable: 'QUOTA_LIMIT', nearest: expect.stringMatching(/^QUOTA_/) },
    ]);
  });

  it('takes its families from the settings: every first word two settings share, none written out', () => {
    expect(unknownSettings({ A_ONE: '', A_TWO: '', A_THREE: '' }, ['A_ONE', 'A_TWO'])).toEqual([
      { variable: 'A_THREE', nearest: 'A_ONE' },
    ]);
    expect(unknownSettings({ B_THREE: '' }, ['A_ONE', 'B_ONE'])).toEqual([]);
  });

  it('names none of what an environment ordinarily holds, nor the variables read besides the settings', () => {
    const env = {
      PATH: '/usr/bin',
      HOME: '/home/signal',
      HOSTNAME: 'box',
      USER: 'signal',
      CI: 'true',
      NODE_OPTIONS: '--max-old-space-size=2048',
      NODE_EXTRA_CA_CERTS: '/ca.pem',
      npm_config_cache: '/tmp',
      npm_lifecycle_event: 'start',
      LC_ALL: 'C',
      HTTP_PROXY: 'http://proxy:3128',
      REDIS_SERVICE_HOST: '10.0.0.2',
      REDIS_PORT: 'tcp://10.0.0.2:6379',
      NATS_PORT_4222_TCP_ADDR: '10.0.0.3',
      MALLOC_ARENA_MAX: '2',
      POSTGRES_PASSWORD: 'x',
      NATS_IMAGE: 'nats:2.10-alpine',
      ...Object.fromEntries(SETTING_NAMES.map((name) => [name, 'x'])),
    };
    expect(unknownSettings(env)).toEqual([]);
  });

  it("names none of libpq's PG* variables: the PostgreSQL driver reads them where POSTGRES_URL leaves a part out", () => {
    expect(
      unknownSettings({
        PGHOST: 'db',
        PGPORT: '5433',
        PGUSER: 'signal',
        PGPASSWORD: 'x',
        PGDATABASE: 'signals',
        PGSSLMODE: 'require',
      }),
    ).toEqual([]);
  });

  it('knows every variable docker-compose.yml reads that is no setting', () => {
    const compose = readFileSync(new URL('../docker-compose.yml', import.meta.url), 'utf8');
    const read = new Set([...compose.matchAll(/\$\{([A-Z][A-Z0-9_]*)/g)].map((m) => m[1]!));
    const notSettings = [...read].filter((name) => !SETTING_NAMES.includes(name)).sort();
    expect(notSettings).toEqual(
      [...READ_ELSEWHERE].filter((name) => !/^MALLOC_|^SHARED_MARKET_DIR$/.test(name)).sort(),
    );
  });

  it('counts a swap of two letters beside each other as one edit', () => {
    expect(editDistance('NATS_ULR', 'NATS_URL')).toBe(1);
    expect(editDistance('HOME', 'HOST')).toBe(2);
    expect(editDistance('', 'PORT')).toBe(4);
  });
});
