import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { ConfigError, ConfigSchema, loadConfig } from '../contracts/config.ts';
import { ROLES } from '../services/component.ts';
import { secretBoxFromConfig } from '../services/webhooks/secret-box.ts';

/**
 * Checks the deployment files by reading them, since no Docker engine (nor the compose plugin)
 * runs here: the compose file's structure against the compose specification's rules that
 * `docker compose config` would enforce, its environment against the service's own config
 * schema, and the parts that can run locally (the health-check command, nats.conf, the Redis
 * flags) by running them.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CI = process.env.CI === 'true';
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

interface HealthCheck {
  test: string[] | string;
  interval?: string;
  timeout?: string;
  retries?: number;
  start_period?: string;
}

interface ComposeService {
  image?: string;
  build?: { context: string; dockerfile: string };
  command?: string[];
  environment?: Record<string, string>;
  depends_on?: Record<string, { condition: string; required?: boolean }>;
  profiles?: string[];
  healthcheck?: HealthCheck;
  volumes?: string[];
  ports?: string[];
}

interface ComposeFile {
  name?: string;
  services: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
}

/**
 * Resolves `${VAR}`, `${VAR:-default}`, `${VAR-default}` and `${VAR:?error}` the way compose does,
 * from `env` (what .env gives; empty: nothing set). A required variable that is unset throws its
 * error, as compose stops with it.
 */
function interpolate(text: string, env: Record<string, string>): string {
  const resolved = text.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^}]*)|(:?\?)([^}]*))?\}/g,
    (_, name: string, _dash, fallback: string | undefined, _required, error: string | undefined) => {
      const value = env[name];
      if (value) return value;
      if (error !== undefined) throw new Error(`required variable ${name} is missing a value: ${error}`);
      return fallback ?? '';
    },
  );
  // Anything left with a single `$` is an expression compose would reject; `$$` is a literal `$`.
  const stray = resolved.replace(/\$\$/g, '').match(/\$.{0,20}/);
  if (stray) throw new Error(`malformed interpolation near ${JSON.stringify(stray[0])}`);
  return resolved.replace(/\$\$/g, '$');
}

/** Compose interpolates after parsing, in string values only. */
function interpolateValues(node: unknown, env: Record<string, string>): unknown {
  if (typeof node === 'string') return interpolate(node, env);
  if (Array.isArray(node)) return node.map((item) => interpolateValues(item, env));
  if (node !== null && typeof node === 'object') {
    return Object.fromEntries(
      Object.entries(node).map(([key, value]) => [key, interpolateValues(value, env)]),
    );
  }
  return node;
}

/** What the operator's .env holds: the one variable compose cannot start without. */
const DOT_ENV = { WEBHOOK_MASTER_KEY: randomBytes(32).toString('hex') };
const composeWith = (env: Record<string, string>) =>
  interpolateValues(parse(read('docker-compose.yml'), { merge: true }), env) as ComposeFile;
const compose = composeWith(DOT_ENV);
const services = compose.services;
const dockerfile = read('deploy/Dockerfile');

const INFRA = ['kurrentdb', 'nats', 'redis', 'postgres'];
const ROLE_SERVICES = Object.keys(services).filter((name) => !INFRA.includes(name));

const DURATION = /^\d+(ms|s|m|h)$/;

describe('docker-compose.yml', () => {
  it('has only keys the compose specification knows at the top level', () => {
    for (const key of Object.keys(compose)) {
      expect(
        ['name', 'services', 'volumes', 'networks', 'configs', 'secrets'].includes(key) ||
          key.startsWith('x-'),
      ).toBe(true);
    }
    expect(compose.name).toMatch(/^[a-z0-9][a-z0-9_-]*$/);
  });

  it('runs KurrentDB, NATS and Redis, and one container for each role the service defines', () => {
    for (const name of INFRA) expect(services[name], `${name} is missing`).toBeDefined();
    expect([...ROLE_SERVICES].sort()).toEqual([...ROLES].sort());
  });

  it('gives every service a runnable health check with valid durations', () => {
    for (const [name, service] of Object.entries(services)) {
      const check = service.healthcheck;
      expect(check, `${name} has no healthcheck`).toBeDefined();
      const test = check!.test;
      expect(Array.isArray(test) ? ['CMD', 'CMD-SHELL'].includes(test[0]!) : typeof test === 'string').toBe(
        true,
      );
      expect(Array.isArray(test) ? test.length : 1).toBeGreaterThan(1);
      for (const field of ['interval', 'timeout'] as const) expect(check![field]).toMatch(DURATION);
      if (check!.start_period !== undefined) expect(check!.start_period).toMatch(DURATION);
      expect(Number.isInteger(check!.retries) && check!.retries! > 0).toBe(true);
    }
  });

  it('makes every dependency wait for a healthy target that exists, without cycles', () => {
    for (const [name, service] of Object.entries(services)) {
      for (const [target, { condition }] of Object.entries(service.depends_on ?? {})) {
        expect(services[target], `${name} depends on unknown service ${target}`).toBeDefined();
        expect(condition).toBe('service_healthy');
        expect(services[target]!.healthcheck).toBeDefined();
      }
    }
    const visiting = new Set<string>();
    const visit = (name: string, path: string[]): void => {
      if (visiting.has(name)) throw new Error(`dependency cycle: ${[...path, name].join(' -> ')}`);
      visiting.add(name);
      for (const target of Object.keys(services[name]!.depends_on ?? {})) visit(target, [...path, name]);
      visiting.delete(name);
    };
    for (const name of Object.keys(services)) visit(name, []);
  });

  it('declares every named volume it mounts, and every bind mount exists in the repository', () => {
    const declared = new Set(Object.keys(compose.volumes ?? {}));
    for (const [name, service] of Object.entries(services)) {
      for (const mount of service.volumes ?? []) {
        const [source, target] = mount.split(':');
        expect(target, `${name}: ${mount}`).toMatch(/^\//);
        if (source!.startsWith('.') || source!.startsWith('/')) {
          expect(existsSync(join(ROOT, source!)), `${name}: ${source} is missing`).toBe(true);
        } else {
          expect(declared.has(source!), `${name}: volume ${source} is not declared`).toBe(true);
        }
      }
    }
  });

  it('runs KurrentDB as an insecure single node checked through /health/live', () => {
    const db = services.kurrentdb!;
    expect(db.image).toMatch(/^(docker\.kurrent\.io\/kurrent-latest\/kurrentdb|eventstore\/eventstore):/);
    expect(db.environment).toMatchObject({ KURRENTDB_CLUSTER_SIZE: '1', KURRENTDB_INSECURE: 'true' });
    expect(JSON.stringify(db.healthcheck!.test)).toContain('http://localhost:2113/health/live');
    expect(db.volumes).toContain('kurrentdb_data:/var/lib/kurrentdb');
  });

  it('runs PostgreSQL only under the postgres profile, on a volume, checked with pg_isready', () => {
    const db = services.postgres!;
    expect(db.profiles).toEqual(['postgres']);
    expect(db.image).toMatch(/^postgres:\d+/);
    expect(db.volumes).toContain('postgres_data:/var/lib/postgresql/data');
    expect(db.healthcheck!.test).toContain('pg_isready');
    expect(db.environment!.POSTGRES_DB).toBe('signals');
  });

  it('runs NATS with JetStream on, its config mounted, checked on the monitoring port', () => {
    const nats = services.nats!;
    expect(nats.command).toContain('-js');
    const config = nats.command![nats.command!.indexOf('--config') + 1];
    expect(nats.volumes).toContain(`./deploy/nats.conf:${config}:ro`);
    expect(JSON.stringify(nats.healthcheck!.test)).toContain('http://localhost:8222/healthz');
    // The JetStream store directory in nats.conf must be on the persistent volume.
    const storeDir = read('deploy/nats.conf').match(/store_dir:\s*(\S+)/)?.[1];
    const dataMount = nats.volumes!.find((v) => v.startsWith('nats_data:'))!.split(':')[1]!;
    expect(storeDir?.startsWith(`${dataMount}/`)).toBe(true);
  });

  it('runs Redis 7 with AOF and without eviction, checked with redis-cli ping', () => {
    const redis = services.redis!;
    expect(redis.image).toMatch(/^redis:7/);
    expect(redis.healthcheck!.test).toEqual(['CMD', 'redis-cli', 'ping']);
    const command = redis.command!.join(' ');
    expect(command).toContain('--maxmemory-policy noeviction');
    expect(command).toContain('--appendonly yes');
  });

  describe.each(ROLE_SERVICES)('role %s', (role) => {
    const service = services[role]!;

    it('is built from deploy/Dockerfile and started with its role', () => {
      expect(service.build).toEqual({ context: '.', dockerfile: 'deploy/Dockerfile' });
      expect(existsSync(join(ROOT, service.build!.context, service.build!.dockerfile))).toBe(true);
      expect(service.command).toEqual(['--role', role]);
    });

    it('waits for KurrentDB, NATS and Redis to be healthy, and PostgreSQL when its profile is on', () => {
      expect(Object.keys(service.depends_on ?? {}).sort()).toEqual([
        'kurrentdb',
        'nats',
        'postgres',
        'redis',
      ]);
      expect(service.depends_on!.postgres!.required).toBe(false);
    });

    it('switches to PostgreSQL by EVENT_STORE alone, on the profile service', () => {
      const config = loadConfig({ ...service.environment!, EVENT_STORE: 'postgres' });
      const url = new URL(config.POSTGRES_URL!);
      expect([url.hostname, Number(url.port), url.pathname]).toEqual(['postgres', 5432, '/signals']);
      expect(url.username).toBe(services.postgres!.environment!.POSTGRES_USER);
      expect(url.password).toBe(services.postgres!.environment!.POSTGRES_PASSWORD);
    });

    it('is configured for the distributed engines with settings the service accepts', () => {
      const env = service.environment!;
      expect(env).toMatchObject({ EVENT_STORE: 'kurrentdb', BUS: 'nats', CACHE: 'redis' });
      const known = new Set(Object.keys(ConfigSchema.shape));
      for (const key of Object.keys(env))
        expect(known.has(key), `${key} is not a config variable`).toBe(true);
      const config = loadConfig(env);
      expect(config.PORT).toBe(8080);
      const urls: [string, string, number][] = [
        [config.KURRENTDB_URL!, 'kurrentdb', 2113],
        [config.NATS_URL, 'nats', 4222],
        [config.REDIS_URL, 'redis', 6379],
      ];
      for (const [url, host, port] of urls) {
        const parsed = new URL(url);
        expect(parsed.hostname).toBe(host);
        expect(Number(parsed.port)).toBe(port);
      }
      expect(new URL(config.KURRENTDB_URL!).searchParams.get('tls')).toBe('false');
    });

    it('supplies no webhook master key: it stops before starting anything until .env has one, which the roles take', () => {
      // A published default was taken silently in production; compose now names what to set.
      expect(() => composeWith({})).toThrow(/WEBHOOK_MASTER_KEY.*openssl rand -hex 32/);
      const config = loadConfig(service.environment!);
      expect(config.NODE_ENV).toBe('production');
      expect(config.WEBHOOK_MASTER_KEY).toBe(DOT_ENV.WEBHOOK_MASTER_KEY);
      expect(() => secretBoxFromConfig(config)).not.toThrow();
      // Without compose the service itself refuses production without a key.
      const { WEBHOOK_MASTER_KEY: _key, ...withoutKey } = service.environment!;
      expect(() => secretBoxFromConfig(loadConfig(withoutKey))).toThrow(ConfigError);
      // The compose file says how to make one (.env, which compose reads).
      expect(read('docker-compose.yml')).toContain('WEBHOOK_MASTER_KEY=$(openssl rand -hex 32)');
    });

    it('serves /mcp behind a hostname once .env names it: ALLOWED_HOSTS and PUBLIC_BASE_URL reach the roles', () => {
      const env = composeWith({
        ...DOT_ENV,
        PUBLIC_BASE_URL: 'https://signals.example.com',
        ALLOWED_HOSTS: 'signals.example.com',
      }).services[role]!.environment!;
      const config = loadConfig(env);
      expect(config.PUBLIC_BASE_URL).toBe('https://signals.example.com');
      expect(config.ALLOWED_HOSTS).toBe('signals.example.com');
      // Unset, they are the service's own defaults.
      const unset = loadConfig(service.environment!);
      expect(unset.PUBLIC_BASE_URL).toBeUndefined();
      expect([unset.ALLOWED_HOSTS, unset.ALLOWED_ORIGINS]).toEqual([loadConfig({}).ALLOWED_HOSTS, '']);
    });

    it('keeps its DATA_DIR on its own volume, at the path the image prepares', () => {
      const dataDir = service.environment!.DATA_DIR;
      expect(dockerfile).toContain(`DATA_DIR=${dataDir}`);
      expect(dockerfile).toContain(`VOLUME ["${dataDir}"]`);
      expect(service.volumes).toContain(`${role}_data:${dataDir}`);
    });
  });

  it('uses the same health check command as the image', () => {
    const script = services.api!.healthcheck!.test as string[];
    const imageCheck = dockerfile.match(/HEALTHCHECK[^\n]*\\\n\s*CMD (\[.*\])/)?.[1];
    expect(JSON.parse(imageCheck!)).toEqual(script.slice(1));
  });
});

describe('deploy/Dockerfile', () => {
  const stages = [...dockerfile.matchAll(/^FROM (\S+) AS (\w+)$/gm)].map((m) => ({
    image: m[1]!,
    name: m[2]!,
  }));
  /** The instructions of one stage: from its FROM line to the next. */
  const stage = (name: string) => {
    const from = dockerfile.search(new RegExp(`^FROM \\S+ AS ${name}$`, 'm'));
    const next = dockerfile.slice(from + 1).search(/^FROM /m);
    return next === -1 ? dockerfile.slice(from) : dockerfile.slice(from, from + 1 + next);
  };
  const runtime = () => stage('runtime');

  it('builds on a supported Node LTS (22 or 24), never on Node 20 (end of life)', () => {
    const base = dockerfile.match(/^ARG NODE_IMAGE=(\S+)$/m)?.[1];
    expect(base).toMatch(/^node:(22|24)(\.\d+)*-bookworm-slim$/);
    // Every stage starts from that image, or from a stage that does.
    const names = new Set<string>();
    for (const { image, name } of stages) {
      expect(image === `\${NODE_IMAGE}` || names.has(image), `${name} starts from ${image}`).toBe(true);
      names.add(name);
    }
    expect(dockerfile).not.toMatch(/node:20/);
  });

  it('installs with npm install (npm ci refuses the committed lock under npm 11), never npm ci', () => {
    expect(dockerfile).not.toMatch(/^RUN[^\n]*npm ci\b/m);
    expect(stage('build')).toMatch(/^RUN npm install\b/m);
    expect(stage('deps')).toMatch(/^RUN npm install --omit=dev\b/m);
    // The lock file is in the context and copied before the install, so the versions it pins are used.
    expect(dockerfile).toMatch(/^COPY package\.json package-lock\.json \.\/$/m);
    expect(existsSync(join(ROOT, 'package-lock.json'))).toBe(true);
  });

  it('compiles in a build stage and runs the compiled JavaScript in a separate runtime stage', () => {
    expect(stages.map((s) => s.name)).toEqual(expect.arrayContaining(['build', 'deps', 'runtime']));
    expect(stages.at(-1)!.name).toBe('runtime');
    expect(stage('build')).toMatch(/^RUN npm run build$/m);
    expect(runtime()).toContain('COPY --from=build /app/dist ./dist');
    expect(runtime()).toContain('COPY --from=deps /app/node_modules ./node_modules');
    // No sources, no TypeScript runner at run time.
    expect(runtime()).not.toMatch(/^COPY \. /m);
    expect(runtime()).not.toMatch(/tsx|services\/main\.ts/);
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    expect(pkg.scripts.build).toBeDefined();
  });

  it('runs as a non-root user and starts dist/services/main.js with plain node', () => {
    const users = [...runtime().matchAll(/^USER (\S+)$/gm)].map((m) => m[1]);
    expect(users.length).toBeGreaterThan(0);
    expect(['root', '0']).not.toContain(users.at(-1));
    const entry = runtime().match(/^ENTRYPOINT (\[.*\])$/m)?.[1];
    // node, its flags (npm start's: test/node-runtime.unit.test.ts keeps them equal), the service.
    const [node, ...rest] = JSON.parse(entry!) as string[];
    expect(node).toBe('node');
    expect(rest.at(-1)).toBe('dist/services/main.js');
    for (const flag of rest.slice(0, -1)) expect(flag).toMatch(/^--[a-z-]+(=\S+)?$/);
    expect(runtime()).toContain('CMD ["--role", "all"]');
  });

  it('keeps dependencies, build output and local state out of the build context, but not the sources', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line && !line.startsWith('#'));
    for (const needed of ['node_modules', 'dist', '.git', 'data', '.env']) expect(ignored).toContain(needed);
    for (const source of [
      'services',
      'contracts',
      'adapters',
      'projections',
      'package.json',
      'package-lock.json',
      'tsconfig.json',
      'tsconfig.build.json',
      'scripts/build.ts',
      'sample-data',
      'docs',
      'README.md',
    ]) {
      expect(ignored).not.toContain(source);
      expect(existsSync(join(ROOT, source)), `${source} is missing`).toBe(true);
    }
  });
});

describe('the health check command', () => {
  const command = services.api!.healthcheck!.test as string[];
  const servers: Server[] = [];

  afterAll(async () => {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  });

  async function serve(status: number): Promise<number> {
    const server = createServer((req, res) => {
      res.statusCode = req.url === '/healthz' ? status : 404;
      res.end();
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return (server.address() as AddressInfo).port;
  }

  function runCheck(port: number): Promise<number | null> {
    const [bin, ...args] = command.slice(1);
    const child = spawn(bin === 'node' ? process.execPath : bin!, args, {
      env: { ...process.env, PORT: String(port) },
      stdio: 'ignore',
    });
    return new Promise((resolve) => child.on('exit', resolve));
  }

  it('exits 0 when /healthz answers 200 on PORT', async () => {
    expect(await runCheck(await serve(200))).toBe(0);
  });

  it('exits 1 when /healthz answers 503, and when nothing listens', async () => {
    expect(await runCheck(await serve(503))).toBe(1);
    const closed = await serve(200);
    await new Promise((resolve) => servers.pop()!.close(resolve));
    expect(await runCheck(closed)).toBe(1);
  });
});

/** Runs a locally installed server binary; missing is a failure under CI, a warning elsewhere. */
function available(bin: string): boolean {
  const path = (process.env.PATH ?? '').split(':').concat(['/usr/sbin', '/usr/bin']);
  if (path.some((dir) => existsSync(join(dir, bin)))) return true;
  if (CI) throw new Error(`${bin} is required under CI=true to validate the deployment files`);
  console.warn(`\n*** ${bin} not installed: its deployment check is NOT RUN ***\n`);
  return false;
}

function exited(child: ChildProcess): Promise<{ code: number | null; output: string }> {
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, output })));
}

describe.runIf(available('nats-server'))('deploy/nats.conf', () => {
  it('is accepted by nats-server -t', async () => {
    const { code, output } = await exited(spawn('nats-server', ['-t', '-c', join(ROOT, 'deploy/nats.conf')]));
    expect(output).toContain('is valid');
    expect(code).toBe(0);
  });
});

describe.runIf(available('redis-server'))('the Redis command line', () => {
  it('starts a Redis that answers PING with the compose flags', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'compose-redis-'));
    const socketPath = join(dir, 'redis.sock');
    const [bin, ...args] = services.redis!.command!;
    // Same flags, but on a unix socket (no TCP port) and a temporary directory.
    const child = spawn(bin!, [...args, '--port', '0', '--unixsocket', socketPath, '--dir', dir], {
      stdio: 'pipe',
    });
    const exit = exited(child);
    try {
      await expect
        .poll(async () => (existsSync(socketPath) ? ping(socketPath) : ''), { interval: 50 })
        .toBe('+PONG');
      expect(await command(socketPath, 'CONFIG GET maxmemory-policy')).toContain('noeviction');
    } finally {
      child.kill('SIGTERM');
      await exit;
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function command(socketPath: string, line: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let reply = '';
    socket.setTimeout(2_000, () => socket.destroy());
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.endsWith('\r\n')) socket.end();
    });
    socket.on('error', () => resolve(''));
    socket.on('close', () => resolve(reply.trim()));
    socket.connect(socketPath, () => socket.write(`${line}\r\n`));
  });
}

function ping(socketPath: string): Promise<string> {
  return command(socketPath, 'PING');
}
