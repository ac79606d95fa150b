/**
 * What the fault drill needs on the machine: root (network namespaces), iproute2, nats-server,
 * redis-server, openssl, setpriv, PostgreSQL's initdb and postgres, and a `postgres` user to run
 * PostgreSQL as (it refuses root). Returns the paths found and what is missing.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

const PG_BIN = [
  '/usr/local/bin',
  ...safeList('/usr/lib/postgresql').map((v) => `/usr/lib/postgresql/${v}/bin`),
];
function safeList(dir: string): string[] {
  try {
    return execFileSync('ls', [dir], { encoding: 'utf8' }).split('\n').filter(Boolean).sort().reverse();
  } catch {
    return [];
  }
}
function which(name: string, extra: string[] = []): string | null {
  for (const dir of [...extra, ...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin']) {
    if (dir && existsSync(join(dir, name))) return join(dir, name);
  }
  return null;
}

export function preflight(): { missing: string[]; tools: Record<string, string> } {
  const missing: string[] = [];
  const tools: Record<string, string> = {};
  if (process.getuid?.() !== 0) missing.push('root (network namespaces)');
  for (const [name, extra] of [
    ['ip', []],
    ['nats-server', []],
    ['redis-server', []],
    ['openssl', []],
    ['setpriv', []],
    ['initdb', PG_BIN],
    ['postgres', PG_BIN],
  ] as const) {
    const path = which(name, [...extra]);
    if (path) tools[name] = path;
    else missing.push(name);
  }
  try {
    execFileSync('id', ['-u', 'postgres'], { stdio: 'ignore' });
  } catch {
    missing.push('a postgres user (PostgreSQL refuses to run as root)');
  }
  return { missing, tools };
}
