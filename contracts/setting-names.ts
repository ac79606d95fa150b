import { ConfigSchema } from './config.ts';

/**
 * Environment variables that look like a misspelled setting. A variable the configuration does
 * not know is ignored, so `NATS_ULR=…` runs on the embedded bus without a word: the service warns
 * at start for each variable that is within a small edit distance of a setting's name, or begins
 * with the prefix of a family of settings (`NATS_`, `WEBHOOK_`, `X402_`…, every first word two or
 * more settings share), naming the nearest setting. What a process's environment ordinarily holds
 * is never named (see `ordinary`).
 */

/** Every setting's name: the configuration schema's keys. */
export const SETTING_NAMES: readonly string[] = Object.keys(ConfigSchema.shape);

/**
 * Read from the environment besides the configuration: the allocator settings `npm start` and the
 * image set, the shared market data directory, and the variables docker-compose.yml interpolates
 * (an operator's .env holds them beside the settings, and the service reads .env too).
 */
export const READ_ELSEWHERE: ReadonlySet<string> = new Set([
  'MALLOC_ARENA_MAX',
  'MALLOC_TRIM_THRESHOLD_',
  'MALLOC_TOP_PAD_',
  'SHARED_MARKET_DIR',
  'API_PORT',
  'POSTGRES_PASSWORD',
  'SIGNAL_IMAGE',
  'KURRENTDB_IMAGE',
  'POSTGRES_IMAGE',
  'NATS_IMAGE',
  'REDIS_IMAGE',
]);

/** Names a shell, a CI runner or a proxy sets, close to a setting by spelling only (HOME, HOST). */
const ORDINARY = new Set([
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'TERM',
  'PWD',
  'OLDPWD',
  'LANG',
  'LANGUAGE',
  'TZ',
  'HOSTNAME',
  'HOSTTYPE',
  'SHLVL',
  'CI',
  'TMPDIR',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'ALL_PROXY',
]);

/**
 * The service links Kubernetes (and Docker's legacy links) add for every service beside this one:
 * a service named `redis` or `nats` gives REDIS_SERVICE_HOST, NATS_PORT_4222_TCP and the like.
 */
const SERVICE_LINK =
  /_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$/;

function ordinary(name: string): boolean {
  // Settings are upper case; npm's npm_*, and anything in lower case, are not meant as one.
  if (!/^[A-Z][A-Z0-9_]*$/.test(name)) return true;
  if (ORDINARY.has(name) || READ_ELSEWHERE.has(name)) return true;
  if (/^(NODE|NPM|LC|XDG)_/.test(name)) return true;
  // libpq's PGHOST, PGPORT, PGUSER, PGSSLMODE...: the PostgreSQL driver (pg) reads them for what
  // POSTGRES_URL leaves out, so they are not ignored (PGPORT is no misspelled PORT).
  if (/^PG[A-Z]/.test(name)) return true;
  return SERVICE_LINK.test(name);
}

/**
 * The edits that turn `a` into `b`: one letter inserted, deleted, changed, or two beside each other
 * swapped (NATS_ULR to NATS_URL is one).
 */
export function editDistance(a: string, b: string): number {
  // Row i of the table is d[i * w .. i * w + b.length], one flat array rather than a row each.
  const w = b.length + 1;
  const d = new Uint32Array((a.length + 1) * w);
  for (let j = 0; j <= b.length; j++) d[j] = j;
  for (let i = 1; i <= a.length; i++) {
    d[i * w] = i;
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[(i - 1) * w + j]! + 1, d[i * w + j - 1]! + 1, d[(i - 1) * w + j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, d[(i - 2) * w + j - 2]! + 1);
      }
      d[i * w + j] = best;
    }
  }
  return d[a.length * w + b.length]!;
}

/** The first words two or more settings share (`X402_`, `WEBHOOK_`, `NATS_`, `REDIS_`…). */
function families(names: readonly string[]): Set<string> {
  const count = new Map<string, number>();
  for (const name of names) {
    const cut = name.indexOf('_');
    if (cut > 0) count.set(name.slice(0, cut + 1), (count.get(name.slice(0, cut + 1)) ?? 0) + 1);
  }
  return new Set([...count].flatMap(([prefix, n]) => (n >= 2 ? [prefix] : [])));
}

/**
 * The name of `names` fewest edits from `variable` (the first of equals), and how many; only names
 * within `within` edits are weighed (none: `['', Infinity]`). A name whose length differs by more
 * than that, or by as much as the nearest so far, cannot be nearer (each letter of the difference
 * is an edit), so its distance is not worked out: the scan runs at every start.
 */
function nearestName(
  variable: string,
  names: readonly string[],
  within = Number.POSITIVE_INFINITY,
): [string, number] {
  let nearest = '';
  let distance = Number.POSITIVE_INFINITY;
  for (const name of names) {
    const gap = Math.abs(variable.length - name.length);
    if (gap > within || gap >= distance) continue;
    const d = editDistance(variable, name);
    if (d <= within && d < distance) [nearest, distance] = [name, d];
  }
  return [nearest, distance];
}

export interface UnknownSetting {
  /** The variable, as set. */
  variable: string;
  /** The setting nearest to it by spelling. */
  nearest: string;
}

/**
 * The variables of `env` that are no setting but look meant as one: within 2 edits of a setting's
 * name (1 for a name under 6 letters, where 2 edits make another word: HOME and HOST), or in a
 * settings family. Each with the nearest setting; in the order of `env`.
 */
export function unknownSettings(
  env: Record<string, string | undefined>,
  names: readonly string[] = SETTING_NAMES,
): UnknownSetting[] {
  const known = new Set(names);
  const prefixes = families(names);
  const found: UnknownSetting[] = [];
  for (const variable of Object.keys(env)) {
    if (known.has(variable) || ordinary(variable)) continue;
    // Only a name close enough to be named is looked for: a farther nearest one is named only
    // within its family, below.
    const [nearest, distance] = nearestName(variable, names, variable.length < 6 ? 1 : 2);
    const close = distance !== Number.POSITIVE_INFINITY;
    const prefix = [...prefixes].find((p) => variable.startsWith(p));
    if (close) found.push({ variable, nearest });
    else if (prefix !== undefined) {
      // In a family but far from each name: the nearest of that family's.
      const family = names.filter((n) => n.startsWith(prefix));
      found.push({ variable, nearest: nearestName(variable, family)[0] });
    }
  }
  return found;
}

/** What the service and the operator command lines say of a variable unknownSettings finds. */
export function unknownSettingWarning({ variable, nearest }: UnknownSetting): string {
  return `${variable} is not a setting of this service and is ignored; the nearest setting is ${nearest}`;
}
