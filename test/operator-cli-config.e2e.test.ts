import { execFile, spawn } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { ConfigError, loadConfig } from '../contracts/config.ts';
import { newEvent } from '../contracts/events.ts';
import { freePort } from './ports.ts';
import { POSTGRES_URL } from './postgres-probe.ts';

const ROOT = new URL('..', import.meta.url).pathname;
const root = mkdtempSync(join(tmpdir(), 'operator-cli-config-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A script of package.json as npm runs it (node with tsx's loader) in a bare environment. */
async function run(
  entry: string,
  args: string[],
  env: Record<string, string>,
  user: { uid?: number; gid?: number } = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, entry), ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env }, ...user },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

/** What the config schema says of `env`: the words `npm start` prints when it refuses it. */
function refusal(env: Record<string, string>): string {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return `${err.message}\n`;
    throw err;
  }
  throw new Error(`the config accepts ${JSON.stringify(env)}`);
}

// Every operator command line that reads the service's configuration (package.json: keys, history
// with --store, backup) refuses a malformed setting as the service does at start: the schema's
// line naming the variable and what is wrong, no stack trace, nothing opened.
describe('operator command lines on a refused setting', () => {
  let dataDir: string;
  beforeAll(async () => {
    dataDir = join(root, 'data');
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    await store.append('key-test', [newEvent('ApiKeyRevoked', { keyId: 'k', reason: 'test' })]);
    await store.close();
  });

  const settings = {
    'a master key too short': { WEBHOOK_MASTER_KEY: 'abc' },
    'a public URL that is none': { PUBLIC_BASE_URL: 'notaurl' },
  };
  const commands: [string, string, string[], number][] = [
    ['keys list', 'services/operator/cli.ts', ['list'], 1],
    ['keys reseal-webhook-secrets', 'services/operator/cli.ts', ['reseal-webhook-secrets'], 1],
    ['keys create', 'services/operator/cli.ts', ['create', '--plan', 'free', '--owner', 'ops'], 1],
    // history's verify exits 1 for a broken chain: a setting refused exits 2, as a DATA_DIR without a log.
    ['history verify --store', 'services/history/cli.ts', ['verify', '--store'], 2],
    ['history export --store', 'services/history/cli.ts', ['export', '--store', '--out', join(root, 'x')], 2],
    ['backup', 'services/operator/backup.ts', [join(root, 'backup')], 1],
  ];

  it.each(Object.entries(settings))('%s: each says it in the service words and exits', async (_name, bad) => {
    const env = { DATA_DIR: dataDir, ...bad };
    const expected = refusal(env);
    // The service and the command lines side by side: each refuses before it opens anything.
    const [service, ...runs] = await Promise.all([
      run('services/main.ts', [], env),
      ...commands.map(([, entry, args]) => run(entry, args, env)),
    ]);
    expect(service).toMatchObject({ code: 1, stderr: expected });
    for (const [i, [name, , , code]] of commands.entries()) {
      expect({ name, ...runs[i] }).toEqual({ name, code, stdout: '', stderr: expected });
    }
    expect(existsSync(join(root, 'x'))).toBe(false);
    expect(existsSync(join(root, 'backup'))).toBe(false);
  });

  it("history --store with a misspelled setting in its environment: named once on stderr, in the service's words", async () => {
    const out = await run('services/history/cli.ts', ['verify', '--store'], {
      DATA_DIR: dataDir,
      NATS_ULR: 'nats://127.0.0.1:4222',
    });
    const warning =
      'NATS_ULR is not a setting of this service and is ignored; the nearest setting is NATS_URL';
    expect(out.stderr.split('\n').filter((line) => line.includes('NATS_ULR'))).toEqual([warning]);
  });

  it('keys reseal-webhook-secrets in production without WEBHOOK_MASTER_KEY: the one line, no log created', async () => {
    const empty = join(root, 'empty');
    const out = await run('services/operator/cli.ts', ['reseal-webhook-secrets'], {
      DATA_DIR: empty,
      NODE_ENV: 'production',
    });
    expect(out).toEqual({
      code: 1,
      stdout: '',
      stderr:
        'invalid configuration:\n  WEBHOOK_MASTER_KEY: required when NODE_ENV=production by the api and dispatcher roles (64 hex characters, e.g. `openssl rand -hex 32`)\n',
    });
    expect(existsSync(empty) ? readdirSync(empty) : []).toEqual([]);
  });
});

/** A port in 19000–19999 on which nothing listens (a connection to it is refused). */
async function closed19xxxPort(): Promise<number> {
  for (let port = 19_400; port < 19_500; port++) {
    const refused = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(false);
      });
      socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'));
    });
    if (refused) return port;
  }
  throw new Error('no closed port in 19400–19499');
}

/** stderr without the adapters' JSON log lines (pino, one object a line). */
const told = (stderr: string) =>
  stderr
    .split('\n')
    .filter((line) => line !== '' && !line.startsWith('{"level":'))
    .join('\n');

// An expected failure once the configuration is accepted (a store down, a path this user may not
// write, another rebuild first) is one line saying what failed and what to do, exit 1; only a bug
// prints a stack trace.
describe('operator command lines on an expected failure', () => {
  let dataDir: string;
  let aFile: string;
  beforeAll(async () => {
    dataDir = join(root, 'data-failures');
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    await store.append('key-test', [newEvent('ApiKeyRevoked', { keyId: 'k', reason: 'test' })]);
    await store.close();
    aFile = join(root, 'a-file');
    writeFileSync(aFile, 'not a directory');
  });

  it('keys rebuild-quota with Redis down: one line naming REDIS_URL and nothing else, exit 1', async () => {
    const port = await closed19xxxPort();
    const out = await run('services/operator/cli.ts', ['rebuild-quota'], {
      DATA_DIR: dataDir,
      CACHE: 'redis',
      REDIS_URL: `redis://127.0.0.1:${port}`,
    });
    expect(out.code).toBe(1);
    // The whole of stderr: none of the Redis client's JSON lines before it.
    expect(out.stderr).toBe(
      `redis cache liveGeneration failed: redis at redis://127.0.0.1:${port} is not connected ` +
        `(status reconnecting, last error: connect ECONNREFUSED 127.0.0.1:${port}): start Redis or correct REDIS_URL, then run the command again\n`,
    );
  });

  it('keys list with Redis down: a command that does not need the cache says nothing of it, exit 0', async () => {
    const port = await closed19xxxPort();
    const out = await run('services/operator/cli.ts', ['list'], {
      DATA_DIR: dataDir,
      CACHE: 'redis',
      REDIS_URL: `redis://127.0.0.1:${port}`,
    });
    expect(out).toMatchObject({ code: 0, stderr: '' });
  });

  it('keys rebuild-quota with Redis down exits 1 when its stderr reader has gone away (`2>&1 | head -1`)', async () => {
    // pino's buffered destination flushed at exit retried a write to the closed pipe for ever.
    const port = await freePort();
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'services/operator/cli.ts'), 'rebuild-quota'],
      {
        cwd: ROOT,
        env: {
          PATH: process.env.PATH ?? '',
          DATA_DIR: dataDir,
          CACHE: 'redis',
          REDIS_URL: `redis://127.0.0.1:${port}`,
        },
        stdio: ['ignore', 'ignore', 'pipe'],
      },
    );
    // A child that hangs is not left behind when the test times out.
    onTestFinished(() => void (child.exitCode === null && child.kill('SIGKILL')));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await new Promise<void>((resolve) => child.stderr.once('data', () => resolve()));
    child.stderr.destroy();
    expect(await exited).toBe(1);
  });

  it('keys create on a DATA_DIR it cannot make: one line naming the path and what to do, exit 1', async () => {
    const out = await run('services/operator/cli.ts', ['create', '--plan', 'free', '--owner', 'ops'], {
      DATA_DIR: aFile,
    });
    expect(out.code).toBe(1);
    expect(told(out.stderr)).toMatch(
      new RegExp(
        `^cannot use ${aFile}/events: a part of the path is a file, not a directory \\(ENOTDIR\\); move that file or choose another path$`,
      ),
    );
  });

  it('a DATA_DIR, --out or DEST under /proc, which takes no new directory: one line each, exit 1 (a recursive mkdir of Node hung there)', async () => {
    const proc = '/proc/signal-service-test';
    const line = `cannot use ${proc}: its parent takes no new directories (as /proc and /sys) (ENOENT); use a path on an ordinary writable file system`;
    // Side by side: each fails at its own path under /proc, and the log they read is not written.
    const [service, created, exported, backup] = await Promise.all([
      run('services/main.ts', [], { DATA_DIR: proc, PORT: '0' }),
      run('services/operator/cli.ts', ['create', '--plan', 'free', '--owner', 'ops'], { DATA_DIR: proc }),
      run('services/history/cli.ts', ['export', '--store', '--out', `${proc}/x.ndjson`], {
        DATA_DIR: dataDir,
      }),
      run('services/operator/backup.ts', [proc], { DATA_DIR: dataDir }),
    ]);
    expect(service).toMatchObject({ code: 1, stderr: `DATA_DIR: ${line}\n` });
    expect(created).toMatchObject({ code: 1, stderr: `${line}\n` });
    expect(exported.code).toBe(1);
    expect(told(exported.stderr).split('\n').at(-1)).toBe(line);
    expect(backup).toMatchObject({ code: 1, stderr: `backup failed: ${line}\n` });
  });

  it('keys list, backup and the service on a log another user wrote, its lock file not theirs to write: one line naming it, exit 1 (lmdb-js crashed on it)', async () => {
    // Root may write anything: as root the commands run as nobody, otherwise as this user.
    const asRoot = process.getuid?.() === 0;
    const user = asRoot ? { uid: 65534, gid: 65534 } : {};
    const theirs = join(root, 'theirs');
    const store = await openLmdbEventStore({ path: join(theirs, 'events') });
    await store.append('key-test', [newEvent('ApiKeyRevoked', { keyId: 'k', reason: 'test' })]);
    await store.close();
    // Everything open to that user but the lock file (mkdtemp's folder is its owner's alone).
    chmodSync(root, 0o755);
    for (const dir of [theirs, join(theirs, 'events')]) chmodSync(dir, 0o777);
    chmodSync(join(theirs, 'events', 'data.mdb'), 0o666);
    const lock = join(theirs, 'events', 'lock.mdb');
    chmodSync(lock, 0o444);
    const line = `cannot use ${lock}: permission denied (EACCES); use a path this user (uid ${asRoot ? 65534 : process.getuid?.()}) may write, or fix its permissions`;
    // Side by side: each fails opening the lock file, before anything is written.
    const [listed, backup, service] = await Promise.all([
      run('services/operator/cli.ts', ['list'], { DATA_DIR: theirs }, user),
      run('services/operator/backup.ts', [join(theirs, 'backup')], { DATA_DIR: theirs }, user),
      run('services/main.ts', [], { DATA_DIR: theirs, PORT: '0' }, user),
    ]);
    expect(listed).toMatchObject({ code: 1, stderr: `${line}\n` });
    expect(backup).toMatchObject({ code: 1, stderr: `backup failed: ${line}\n` });
    expect(service.code).toBe(1);
    expect(service.stdout).toContain(`"msg":"failed to start: ${line}"`);
  });

  it('backup of a log this user may read but not write (its lock file writable): taken, as lmdb-js takes it read-only', async () => {
    const asRoot = process.getuid?.() === 0;
    const user = asRoot ? { uid: 65534, gid: 65534 } : {};
    const readable = join(root, 'readable');
    const events = join(readable, 'events');
    const store = await openLmdbEventStore({ path: events });
    await store.append('key-test', [newEvent('ApiKeyRevoked', { keyId: 'k', reason: 'test' })]);
    await store.close();
    const outs = join(root, 'readable-backups');
    mkdirSync(outs);
    chmodSync(root, 0o755);
    chmodSync(outs, 0o777);
    // A read-only open writes the lock file alone: the folder and data.mdb stay read-only.
    chmodSync(readable, 0o555);
    chmodSync(events, 0o555);
    chmodSync(join(events, 'data.mdb'), 0o444);
    chmodSync(join(events, 'lock.mdb'), 0o666);
    onTestFinished(() => {
      for (const dir of [readable, events]) chmodSync(dir, 0o755);
    });
    const backup = await run('services/operator/backup.ts', [join(outs, 'b')], { DATA_DIR: readable }, user);
    expect(backup.stderr).toBe('');
    expect(backup.code).toBe(0);
    expect(existsSync(join(outs, 'b', 'events', 'data.mdb'))).toBe(true);
  });

  it('history --store with PostgreSQL down: the one line of the store, no "Error:", exit 1', async () => {
    const port = await freePort();
    const out = await run('services/history/cli.ts', ['verify', '--store'], {
      EVENT_STORE: 'postgres',
      POSTGRES_URL: `postgres://signal:secret@127.0.0.1:${port}/signal`,
    });
    expect(out.code).toBe(1);
    expect(told(out.stderr)).toBe(
      `PostgreSQL at postgres://signal:***@127.0.0.1:${port}/signal (POSTGRES_URL) is unreachable: connect ECONNREFUSED 127.0.0.1:${port}. ` +
        "Start the server, or correct POSTGRES_URL's host and port; start this process again once it answers, or let its supervisor restart it (deploy/README.md, PostgreSQL as the shared log)",
    );
  });

  it('keys list and history --store with POSTGRES_URL asking SSL of a server without it: the one line naming sslmode, no warning, exit 1', async () => {
    // The loopback server serves no SSL. pg printed its multi-line SECURITY WARNING on
    // sslmode=require, then the command its bare 'Error: The server does not support SSL
    // connections' with a stack.
    const url = new URL(POSTGRES_URL);
    url.searchParams.set('sslmode', 'require');
    const env = { EVENT_STORE: 'postgres', POSTGRES_URL: url.toString() };
    for (const [entry, args] of [
      ['services/operator/cli.ts', ['list']],
      ['services/history/cli.ts', ['verify', '--store']],
    ] as const) {
      const out = await run(entry, [...args], env);
      expect(out.code).toBe(1);
      expect(out.stderr).toBe(
        `PostgreSQL at ${url} (POSTGRES_URL) does not accept SSL: The server does not support SSL connections, ` +
          "which POSTGRES_URL's sslmode=require asks for. To fix it, set sslmode=disable in POSTGRES_URL, or enable SSL on the server\n",
      );
    }
  });

  it('history export to an --out it cannot make, and backup to such a DEST: one line, exit 1', async () => {
    // Side by side: each fails at its own path through the file.
    const [exported, backup] = await Promise.all([
      run('services/history/cli.ts', ['export', '--store', '--out', join(aFile, 'x.ndjson')], {
        DATA_DIR: dataDir,
      }),
      run('services/operator/backup.ts', [join(aFile, 'backup')], { DATA_DIR: dataDir }),
    ]);
    expect(exported.code).toBe(1);
    expect(
      told(exported.stderr)
        .split('\n')
        .filter((line) => !line.startsWith('export |')),
    ).toEqual([
      expect.stringMatching(
        new RegExp(
          `^cannot use ${aFile}: a file of that name is in the way \\(EEXIST\\); move that file or choose another path$`,
        ),
      ),
    ]);
    expect(backup.code).toBe(1);
    expect(told(backup.stderr)).toMatch(
      new RegExp(
        `^backup failed: cannot use ${aFile}/backup/events.partial: a part of the path is a file, not a directory \\(ENOTDIR\\); move that file or choose another path$`,
      ),
    );
    expect(backup.stderr).not.toContain('\n    at ');
  });
});
