/**
 * Hosts for the fault drill: one network namespace per host, each joined to one bridge by a veth
 * pair, on a private /24. Every name starts with a random `drl<4 hex>` prefix so that runs on a
 * shared machine never collide, and `teardown()` removes whatever was made (processes still in
 * the namespaces, veths, namespaces, bridge); it is synchronous so that an `exit` handler can run
 * it. Needs root and iproute2 (`ip`).
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';

export interface Host {
  /** Short tag, also the veth's suffix: 2 characters. */
  tag: string;
  /** The namespace's name. */
  ns: string;
  ip: string;
  /** The veth end left in the root namespace (on the bridge). */
  veth: string;
  /** Addresses this host cannot reach (unreachable routes), e.g. PostgreSQL during a cut. */
  cutFrom: Set<string>;
}

function ip(...args: string[]): string {
  return execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** A /24 of 10.0.0.0/8 that no interface of this machine uses yet. */
function freeSubnet(): string {
  const used = ip('-4', '-o', 'addr', 'show');
  for (let tries = 0; tries < 100; tries++) {
    const [a, b] = [200 + (randomBytes(1)[0]! % 50), randomBytes(1)[0]! % 250];
    const subnet = `10.${a}.${b}`;
    if (!used.includes(` ${subnet}.`)) return subnet;
  }
  throw new Error('no free 10.x.y.0/24 for the drill network');
}

export class DrillNet {
  readonly prefix = `drl${randomBytes(2).toString('hex')}`;
  readonly subnet = freeSubnet();
  readonly bridge = `${this.prefix}br`;
  /** The bridge's address: the root namespace (the drill itself, anvil, the webhook receiver). */
  readonly gateway = `${this.subnet}.1`;
  readonly hosts = new Map<string, Host>();
  private bridgeMade = false;
  private torn = false;

  constructor() {
    ip('link', 'add', this.bridge, 'type', 'bridge');
    this.bridgeMade = true;
    ip('addr', 'add', `${this.gateway}/24`, 'dev', this.bridge);
    ip('link', 'set', this.bridge, 'up');
  }

  /** A new host `tag` (2 characters) with the next address of the subnet. */
  addHost(tag: string): Host {
    if (this.hosts.has(tag)) throw new Error(`host ${tag} exists`);
    const host: Host = {
      tag,
      ns: `${this.prefix}-${tag}`,
      ip: `${this.subnet}.${10 + this.hosts.size}`,
      veth: `${this.prefix}${tag}`,
      cutFrom: new Set(),
    };
    // Registered before it exists: a failure half-way is still torn down.
    this.hosts.set(tag, host);
    const peer = `${host.veth}p`;
    ip('netns', 'add', host.ns);
    ip('link', 'add', host.veth, 'type', 'veth', 'peer', 'name', peer);
    ip('link', 'set', peer, 'netns', host.ns);
    ip('link', 'set', host.veth, 'master', this.bridge);
    ip('link', 'set', host.veth, 'up');
    ip('-n', host.ns, 'link', 'set', peer, 'name', 'eth0');
    ip('-n', host.ns, 'addr', 'add', `${host.ip}/24`, 'dev', 'eth0');
    ip('-n', host.ns, 'link', 'set', 'eth0', 'up');
    ip('-n', host.ns, 'link', 'set', 'lo', 'up');
    return host;
  }

  host(tag: string): Host {
    const h = this.hosts.get(tag);
    if (!h) throw new Error(`no host ${tag}`);
    return h;
  }

  /** The argv that runs `command` inside the host's namespace (`ip netns exec` execs it: same pid). */
  exec(tag: string, command: string, args: string[]): [string, string[]] {
    return ['ip', ['netns', 'exec', this.host(tag).ns, command, ...args]];
  }

  /**
   * Cuts `a` and `b` apart: an `unreachable` route on each side. Packets of established
   * connections go nowhere (the peer hears nothing, as behind a firewall's DROP) and a new
   * connection fails with EHOSTUNREACH, as when a router answers "no route to host". (A
   * `blackhole` route would fail it with EINVAL, which no real network outage produces; tc and
   * iptables are not there on every machine.)
   */
  cut(a: string, b: string): void {
    const [ha, hb] = [this.host(a), this.host(b)];
    ip('-n', ha.ns, 'route', 'add', 'unreachable', `${hb.ip}/32`);
    ha.cutFrom.add(hb.ip);
    ip('-n', hb.ns, 'route', 'add', 'unreachable', `${ha.ip}/32`);
    hb.cutFrom.add(ha.ip);
  }

  heal(a: string, b: string): void {
    for (const [x, y] of [
      [this.host(a), this.host(b)],
      [this.host(b), this.host(a)],
    ] as const) {
      if (!x.cutFrom.has(y.ip)) continue;
      ip('-n', x.ns, 'route', 'del', 'unreachable', `${y.ip}/32`);
      x.cutFrom.delete(y.ip);
    }
  }

  /** Pids of every process in the host's namespace (all of them started by this drill). */
  pids(tag: string): number[] {
    try {
      return ip('netns', 'pids', this.host(tag).ns).split('\n').filter(Boolean).map(Number);
    } catch {
      return [];
    }
  }

  /**
   * Kills every process left in the drill's namespaces, then removes the veths, the namespaces
   * and the bridge. Synchronous and idempotent; errors are collected, not thrown, so one missing
   * piece does not leave the rest behind.
   */
  teardown(): string[] {
    if (this.torn) return [];
    this.torn = true;
    const errors: string[] = [];
    const attempt = (what: string, f: () => void) => {
      try {
        f();
      } catch (err) {
        errors.push(`${what}: ${(err as { stderr?: string }).stderr?.toString().trim() || String(err)}`);
      }
    };
    for (const h of this.hosts.values()) {
      for (const pid of this.pids(h.tag)) attempt(`kill ${pid}`, () => process.kill(pid, 'SIGKILL'));
    }
    for (const h of this.hosts.values()) {
      // A namespace still held by a dying process outlives `netns del` with its veth: delete the
      // root end explicitly, which takes the peer with it.
      attempt(`veth ${h.veth}`, () => {
        if (linkExists(h.veth)) ip('link', 'del', h.veth);
      });
      attempt(`netns ${h.ns}`, () => {
        if (ip('netns', 'list').includes(h.ns)) ip('netns', 'del', h.ns);
      });
    }
    if (this.bridgeMade) attempt(`bridge ${this.bridge}`, () => ip('link', 'del', this.bridge));
    return errors;
  }

  /** What of this drill is still on the machine (namespaces and links with its prefix). */
  leftovers(): string[] {
    return leftoversOf(this.prefix);
  }
}

function linkExists(name: string): boolean {
  try {
    ip('link', 'show', name);
    return true;
  } catch {
    return false;
  }
}

/** Namespaces and links whose names start with `prefix`. */
export function leftoversOf(prefix: string): string[] {
  const namespaces = ip('netns', 'list')
    .split('\n')
    .map((l) => l.split(' ')[0]!)
    .filter((n) => n.startsWith(prefix));
  const links = ip('-o', 'link', 'show')
    .split('\n')
    .map((l) => l.split(': ')[1]?.split('@')[0] ?? '')
    .filter((n) => n.startsWith(prefix));
  return [...namespaces.map((n) => `netns ${n}`), ...links.map((n) => `link ${n}`)];
}

/**
 * Removes what a drill run with `prefix` left (a run killed before its own clean-up): kills the
 * processes in its namespaces, deletes its links (veths, bridge) and namespaces. For tests and
 * operators; a run cleans up after itself on any exit it lives to see.
 */
export function removeLeftovers(prefix: string): void {
  if (!/^drl[0-9a-f]{4}$/.test(prefix)) throw new Error(`not a drill prefix: ${prefix}`);
  for (const item of leftoversOf(prefix)) {
    const [kind, name] = item.split(' ') as [string, string];
    try {
      if (kind === 'netns') {
        for (const pid of ip('netns', 'pids', name).split('\n').filter(Boolean))
          process.kill(Number(pid), 'SIGKILL');
      }
    } catch {
      // gone meanwhile
    }
  }
  for (const item of leftoversOf(prefix)) {
    const [kind, name] = item.split(' ') as [string, string];
    try {
      if (kind === 'link') ip('link', 'del', name);
      else ip('netns', 'del', name);
    } catch {
      // a veth's peer goes with it
    }
  }
}
