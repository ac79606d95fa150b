import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.ts';
import { postgresUnreachable } from './postgres-probe.ts';

/**
 * A PostgreSQL server of a test's own (initdb in a temp directory, a free loopback port), for a
 * test that holds a transaction open on purpose: readers of the event store wait below the oldest
 * transaction in flight anywhere on their server (pg_snapshot_xmin is cluster-wide), so on the
 * shared loopback server such a test held back the readers of another suite running beside it.
 * Also for a test that crashes the server (postgres-crash.int.test.ts), with settings of its own.
 */
export interface PrivatePostgres {
  url: string;
  stop(): Promise<void>;
  /** Stops the server (a fast shutdown) and keeps its data directory, for start() to start it again. */
  pause(): Promise<void>;
  /** Starts the server paused again, on its port and data directory; resolves once it answers. */
  start(): Promise<void>;
}

function binary(name: string): string {
  const versions = existsSync('/usr/lib/postgresql')
    ? readdirSync('/usr/lib/postgresql').sort().reverse()
    : [];
  for (const dir of ['/usr/local/bin', ...versions.map((v) => `/usr/lib/postgresql/${v}/bin`)]) {
    if (existsSync(join(dir, name))) return join(dir, name);
  }
  throw new Error(
    `PostgreSQL's ${name} is not installed (looked in /usr/local/bin and /usr/lib/postgresql/*/bin)`,
  );
}

/** `settings`: server parameters beside the ones every private server has (`-c name=value`). */
export async function startPrivatePostgres(settings: Record<string, string> = {}): Promise<PrivatePostgres> {
  const dir = mkdtempSync(join(tmpdir(), 'pg-private-'));
  // initdb refuses to run as root: the server runs as the packaged `postgres` user.
  const asPostgres =
    process.getuid?.() === 0 ? ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups'] : [];
  if (asPostgres.length > 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  const run = (argv: string[]) => (asPostgres.length > 0 ? [...asPostgres, ...argv] : argv);
  const [initCmd, ...initArgs] = run([
    binary('initdb'),
    '-D',
    dir,
    '-U',
    'postgres',
    '-A',
    'trust',
    '--no-sync',
  ]);
  execFileSync(initCmd!, initArgs, { stdio: 'ignore' });
  const port = await freePort();
  const [cmd, ...args] = run([
    binary('postgres'),
    '-D',
    dir,
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    `port=${port}`,
    '-c',
    `unix_socket_directories=${dir}`,
    '-c',
    'fsync=off',
    ...Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
  ]);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let server: ChildProcess;
  let exited = false;
  const launch = async () => {
    server = spawn(cmd!, args, { stdio: 'ignore' });
    exited = false;
    server.once('exit', () => {
      exited = true;
    });
    // Ready when it answers; the limit only ends a start that hangs (a loaded machine is slow).
    const deadline = Date.now() + 120_000;
    while ((await postgresUnreachable(url)) !== null) {
      if (exited || Date.now() > deadline) {
        server.kill('SIGKILL');
        rmSync(dir, { recursive: true, force: true });
        throw new Error(`private PostgreSQL on port ${port} did not start`);
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  };
  const halt = async () => {
    if (exited) return;
    const gone = new Promise((r) => server.once('exit', r));
    server.kill('SIGINT');
    await gone;
  };
  await launch();
  return {
    url,
    async stop() {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
    pause: halt,
    start: launch,
  };
}
