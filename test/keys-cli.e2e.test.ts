import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { hashApiKey } from '../services/keys/key-material.ts';
import { findById } from '../services/keys/key-registry.ts';
import { foldKeyRegistry } from '../services/keys/registry-fold.ts';
import {
  parseCommandLine,
  runOperatorCommand,
  serviceApplied,
  UsageError,
} from '../services/operator/operator-commands.ts';
import { startTestService, type TestService } from './service-harness.ts';

const exec = promisify(execFile);
const ROOT = new URL('..', import.meta.url).pathname;

describe('operator key commands', () => {
  const store = new MemoryEventStore();
  const cache = createMemoryCache();
  const run = (...argv: string[]) => runOperatorCommand(argv, { store, cache });

  it('create prints the key once; list, plan and revoke act on its id', async () => {
    const out = await run('create', '--plan', 'pro', '--owner', 'alice@example.com');
    const key = /key: +(\S+)/.exec(out)![1]!;
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    expect(key).toMatch(/^sk_live_/);
    const registry = await foldKeyRegistry(store);
    expect(findById(registry, keyId)).toMatchObject({
      keyHash: hashApiKey(key),
      plan: 'pro',
      owner: 'alice@example.com',
    });

    expect(await run('list')).toContain(keyId);
    expect(await run('list')).not.toContain(key);
    expect(await run('plan', keyId, 'starter')).toBe(`${keyId}: pro -> starter`);
    expect(await run('revoke', keyId, '--reason', 'leaked')).toBe(`${keyId}: revoked (leaked)`);
    expect(await run('list')).toBe('no keys');
    expect(await run('list', '--all')).toContain('revoked');
  });

  it('runs the command line the CLI read once (parseCommandLine) as it runs the same words', async () => {
    const read = parseCommandLine(['create', '--plan', 'starter', '--owner', 'once@example.com']);
    expect(read).toMatchObject({ command: 'create', positional: [], named: { plan: 'starter' } });
    const out = await runOperatorCommand(read, { store, cache });
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    expect(findById(await foldKeyRegistry(store), keyId)).toMatchObject({
      plan: 'starter',
      owner: 'once@example.com',
    });
    expect(await runOperatorCommand(parseCommandLine(['list', '--all']), { store, cache })).toBe(
      await run('list', '--all'),
    );
    // What the words would be refused for, the read is refused for, before anything runs.
    expect(() => parseCommandLine(['list', '--owner', 'x'])).toThrow(
      new UsageError('list does not take --owner'),
    );
    await run('revoke', keyId);
  });

  it('moves a key to a plan once when plan changes to it run at the same time: each succeeds, one appends', async () => {
    const keyId = /id: +(\S+)/.exec(await run('create', '--plan', 'pro', '--owner', 'dave'))![1]!;
    const said = await Promise.all([run('plan', keyId, 'starter'), run('plan', keyId, 'starter')]);
    expect(said.filter((line) => line === `${keyId}: pro -> starter`)).toHaveLength(1);
    expect(said.filter((line) => line === `${keyId}: is already on starter; nothing changed`)).toHaveLength(
      1,
    );
    const events = (await store.readAll()).filter(
      (e) => e.type === 'ApiKeyPlanChanged' && (e.data as { keyId: string }).keyId === keyId,
    );
    expect(events).toHaveLength(1);
    await run('revoke', keyId);
  });

  it('refuses bad input with a usage error naming the problem', async () => {
    await expect(run('create', '--plan', 'gold', '--owner', 'x')).rejects.toThrow(UsageError);
    await expect(run('create', '--plan', 'pro')).rejects.toThrow('--owner <who> is required');
    // A missing plan is told as missing, with the plans to choose from (not "got undefined").
    await expect(run('create', '--owner', 'x')).rejects.toThrow(
      new UsageError('--plan <plan> is required: one of free, starter, pro'),
    );
    await expect(run('revoke', 'key_nope')).rejects.toThrow('no key key_nope');
    await expect(run('frobnicate')).rejects.toThrow('unknown command frobnicate');
    // A day past its month's end names no day: refused, not rolled over to the next month's.
    await expect(run('payments', '--from', '2026-02-30')).rejects.toThrow(
      '--from must be an ISO 8601 date or time, e.g. 2026-11-01 or 2026-11-01T12:00Z (got 2026-02-30)',
    );
    await expect(run('payments', '--to', '2026-11-31T12:00Z')).rejects.toThrow(UsageError);
    expect(await run('payments', '--from', '2028-02-29', '--to', '2028-03-01T00:00+01:00')).toContain(
      '0 payments',
    );
    // A window that ends before (or where) it starts: refused, not answered with empty totals.
    for (const [from, to] of [
      ['2026-12-01', '2026-11-01'],
      ['2026-11-01', '2026-11-01'],
      ['2026-11-01T00:30+01:00', '2026-10-31T23:30Z'],
    ]) {
      await expect(run('payments', '--from', from!, '--to', to!), `${from} ${to}`).rejects.toThrow(
        new UsageError(`--from must be before --to (--to is exclusive; got --from ${from} --to ${to})`),
      );
    }
    const out = await run('create', '--plan', 'free', '--owner', 'bob');
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    // Its plan already (a script re-applying plans after a restore): done, nothing appended.
    const before = (await store.readAll()).length;
    expect(await run('plan', keyId, 'free')).toBe(`${keyId}: is already on free; nothing changed`);
    expect((await store.readAll()).length).toBe(before);
    await run('revoke', keyId);
    expect(await run('revoke', keyId)).toMatch(new RegExp(`^${keyId}: was already revoked \\(at `));
    // Revoked is for good: a plan change is refused.
    await expect(run('plan', keyId, 'pro')).rejects.toThrow('is revoked');
  });

  it('revokes a key once when revokes of it run at the same time: each succeeds, one appends', async () => {
    // Each reads the key unrevoked and decides at one revision; a plan change races them, started
    // before them and after them.
    for (const planFirst of [true, false]) {
      const keyId = /id: +(\S+)/.exec(await run('create', '--plan', 'pro', '--owner', 'carol'))![1]!;
      const revoke = (reason: string) => run('revoke', keyId, '--reason', reason);
      const plan = () => run('plan', keyId, 'free');
      const [planned, ...revoked] = await Promise.allSettled(
        planFirst
          ? [plan(), revoke('leaked'), revoke('left')]
          : [revoke('leaked'), revoke('left'), plan()].reverse(), // started in this order, the plan listed first
      );
      expect(revoked.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled']);
      const said = revoked.map((r) => (r as PromiseFulfilledResult<string>).value);
      expect(said.filter((line) => line.startsWith(`${keyId}: revoked (`))).toHaveLength(1);
      expect(said.filter((line) => line.startsWith(`${keyId}: was already revoked (at `))).toHaveLength(1);
      // The plan change is made before the revocation or refused as revoked: no conflict error.
      if (planned!.status === 'rejected') expect(String(planned!.reason)).toContain('is revoked');
      const events = (await store.readAll()).filter(
        (e) => e.type === 'ApiKeyRevoked' && (e.data as { keyId: string }).keyId === keyId,
      );
      expect(events).toHaveLength(1);
    }
  });

  it('refuses an option that takes a value given twice, naming it, on every such option', async () => {
    const out = await run('create', '--plan', 'free', '--owner', 'dave');
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    const twice = (name: string, a: string, b: string) =>
      new UsageError(`--${name} given 2 times ("${a}", "${b}"): it takes one value`);
    for (const [argv, told] of [
      [['create', '--plan', 'free', '--owner', 'a', '--owner', 'b'], twice('owner', 'a', 'b')],
      [['create', '--plan=free', '--plan', 'pro', '--owner', 'a'], twice('plan', 'free', 'pro')],
      [['revoke', keyId, '--reason', 'x', '--reason=y'], twice('reason', 'x', 'y')],
      [
        ['payments', '--from', '2026-11-01', '--from', '2026-11-02'],
        twice('from', '2026-11-01', '2026-11-02'),
      ],
      [['payments', '--to', '2026-11-01', '--to', '2026-11-02'], twice('to', '2026-11-01', '2026-11-02')],
      [['payments', '--status', 'settled', '--status', 'failed'], twice('status', 'settled', 'failed')],
      [['payments', '--format', 'csv', '--format', 'ndjson'], twice('format', 'csv', 'ndjson')],
      [['list', '--owner', 'a', '--owner', 'a'], twice('owner', 'a', 'a')],
    ] as const) {
      await expect(run(...argv), argv.join(' ')).rejects.toThrow(told);
    }
    const registry = await foldKeyRegistry(store);
    expect(Object.values(registry.byHash).filter((r) => r.owner === 'a' || r.owner === 'b')).toEqual([]);
    expect(findById(registry, keyId)).toMatchObject({ revoked: false });
    // A flag that takes no value loses nothing when repeated.
    expect(await run('list', '--all', '--all')).toContain(keyId);
  });

  it('refuses an option a command does not take, naming it, on every command (list --owner is no filter)', async () => {
    const out = await run('create', '--plan', 'free', '--owner', 'erin');
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    for (const [argv, told] of [
      [['list', '--owner', 'erin'], 'list does not take --owner'],
      [['list', '--all', '--plan', 'pro'], 'list does not take --plan'],
      [['create', '--plan', 'free', '--owner', 'x', '--reason', 'r'], 'create does not take --reason'],
      [['plan', keyId, 'pro', '--plan', 'starter'], 'plan does not take --plan'],
      [['revoke', keyId, '--all'], 'revoke does not take --all'],
      [['rebuild-quota', '--format', 'csv'], 'rebuild-quota does not take --format'],
      [['payments', '--owner', 'x', '--all'], 'payments does not take --owner, --all'],
      [['reseal-webhook-secrets', '--from', '2026-11-01'], 'reseal-webhook-secrets does not take --from'],
      // An option no command takes: named the same way, not with node's advice to pass it after '--'.
      [['list', '--bogus'], 'list does not take --bogus'],
      [['revoke', keyId, '-x'], 'revoke does not take -x'],
    ] as const) {
      await expect(run(...argv), argv.join(' ')).rejects.toThrow(new UsageError(told));
    }
    expect(findById(await foldKeyRegistry(store), keyId)).toMatchObject({ plan: 'free', revoked: false });
  });

  it('refuses a word a command does not take, naming it, on every command', async () => {
    const out = await run('create', '--plan', 'free', '--owner', 'carol');
    const keyId = /id: +(\S+)/.exec(out)![1]!;
    const none = 'no argument but its options';
    for (const [argv, told] of [
      [['list', '--all', 'extra'], `unexpected argument "extra" (list takes ${none})`],
      [['list', 'a', 'b'], `unexpected arguments "a" "b" (list takes ${none})`],
      [
        ['create', '--plan', 'free', '--owner', 'x', 'extra'],
        `unexpected argument "extra" (create takes ${none})`,
      ],
      [
        ['plan', keyId, 'pro', 'extra'],
        'unexpected argument "extra" (plan takes <keyId> <free|starter|pro>)',
      ],
      [['revoke', keyId, 'extra'], 'unexpected argument "extra" (revoke takes <keyId>)'],
      [['revoke', keyId, '--', '--reason'], 'unexpected argument "--reason" (revoke takes <keyId>)'],
      [['rebuild-quota', 'extra'], `unexpected argument "extra" (rebuild-quota takes ${none})`],
      [['payments', 'extra'], `unexpected argument "extra" (payments takes ${none})`],
      [
        ['reseal-webhook-secrets', 'extra'],
        `unexpected argument "extra" (reseal-webhook-secrets takes ${none})`,
      ],
    ] as const) {
      await expect(run(...argv), argv.join(' ')).rejects.toThrow(new UsageError(told));
    }
    // Nothing was done: the key is active on its plan.
    expect(await run('list')).toContain(`${keyId}  `);
    expect(findById(await foldKeyRegistry(store), keyId)).toMatchObject({ plan: 'free', revoked: false });
  });
});

/**
 * The CLI `npm run keys` runs, in a process of its own: tsx as node's loader, as npm start runs the
 * service (tsx's own launcher would start a second Node process per command, about 0.4 CPU s each).
 */
const CLI = ['--import', 'tsx', join(ROOT, 'services/operator/cli.ts')];

describe('npm run keys (the real CLI on an LMDB store)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'keys-cli-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const cliUnder = (npmScript: string | undefined, ...args: string[]) =>
    exec(process.execPath, [...CLI, ...args], {
      cwd: ROOT,
      // No service runs here: port 9 (discard) answers nothing, so the CLI does not wait for one.
      env: {
        ...process.env,
        // What npm sets for the script it runs (npm run keys); unset, the command was node's.
        npm_lifecycle_event: npmScript,
        EVENT_STORE: 'lmdb',
        DATA_DIR: dir,
        CACHE: 'memory',
        BUS: 'memory',
        PUBLIC_BASE_URL: 'http://127.0.0.1:9',
      },
    });
  const cli = (...args: string[]) => cliUnder(undefined, ...args);

  it('creates a key in one command and lists it from a second process', async () => {
    const created = await cli('create', '--plan', 'pro', '--owner', 'ops');
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    // An operator on a host without the api learns which address was tried and how to name another.
    expect(created.stdout).toContain(
      'no service answered at http://127.0.0.1:9/readyz, the service this command waits for (PUBLIC_BASE_URL, ' +
        'else http://localhost:<PORT>; set either to reach one on another host): the change is on the event log',
    );
    const listed = await cli('list');
    expect(listed.stdout).toContain(keyId);
    const failed = await cli('revoke').catch((err: { code: number; stderr: string }) => err);
    expect(failed).toMatchObject({ code: 2 });
    expect((failed as { stderr: string }).stderr).toContain('a key id is required');
  });

  it('prints a new key before waiting for the service, so a Ctrl-C during the wait does not lose it', async () => {
    // A service address that takes the connection and answers nothing: the CLI waits up to 10 s.
    // The key was printed only after that wait, so a Ctrl-C in it left an active key never shown.
    let probed: () => void = () => undefined;
    const reached = new Promise<void>((resolve) => {
      probed = resolve;
    });
    const held: Socket[] = [];
    const silent = createNetServer((socket) => {
      held.push(socket);
      probed();
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const child = spawn(process.execPath, [...CLI, 'create', '--plan', 'pro', '--owner', 'interrupted'], {
        cwd: ROOT,
        env: {
          ...process.env,
          EVENT_STORE: 'lmdb',
          DATA_DIR: dir,
          CACHE: 'memory',
          BUS: 'memory',
          PUBLIC_BASE_URL: `http://127.0.0.1:${(silent.address() as AddressInfo).port}`,
        },
      });
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
      // The CLI asks the service's /readyz only once the key is on the log.
      await reached;
      child.kill('SIGINT');
      await exited;
      const keyId = /id: +(\S+)/.exec(stdout)?.[1];
      expect(stdout).toMatch(/key: +sk_live_/);
      expect((await cli('list')).stdout).toContain(`${keyId}  `);
    } finally {
      for (const socket of held) socket.destroy();
      silent.close();
    }
  });

  it('refuses an id that names no key, and a plan change of a revoked key, in one line without the usage (exit 1)', async () => {
    const refused = (...args: string[]) =>
      cli(...args).then(
        () => ({ code: 0, stderr: '' }),
        (err: { code: number; stderr: string }) => err,
      );
    const unknown = await refused('plan', 'key_nope', 'starter');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toBe(
      'no key key_nope on this event log: `node --import tsx services/operator/cli.ts list --all` lists the key ids\n',
    );
    // Under npm (npm run keys), the npm script; the compiled CLI names itself (test/build.int).
    const underNpm = await cliUnder('keys', 'plan', 'key_nope', 'starter').catch(
      (err: { stderr: string }) => err,
    );
    expect(underNpm.stderr).toBe(
      'no key key_nope on this event log: `npm run keys -- list --all` lists the key ids\n',
    );
    const created = await cli('create', '--plan', 'free', '--owner', 'ops');
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    await cli('revoke', keyId);
    const revoked = await refused('plan', keyId, 'pro');
    expect(revoked.code).toBe(1);
    expect(revoked.stderr).toBe(`key ${keyId} is revoked\n`);
  });

  it('re-applies the plan a key is on as done (exit 0), saying so and appending nothing', async () => {
    const created = await cli('create', '--plan', 'pro', '--owner', 'ops');
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    const listed = (await cli('list', '--all')).stdout;
    // A script re-applying every key's plan after a restore succeeds on the keys already on it.
    const same = await cli('plan', keyId, 'pro').catch((err: { code: number }) => err);
    expect(same).toMatchObject({ stderr: '', stdout: `${keyId}: is already on pro; nothing changed\n` });
    expect((await cli('list', '--all')).stdout).toBe(listed);
  });

  it('revokes a key already revoked as done (exit 0), saying so and appending nothing', async () => {
    const created = await cli('create', '--plan', 'free', '--owner', 'ops');
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    expect((await cli('revoke', keyId, '--reason', 'leaked')).stdout.split('\n')[0]).toBe(
      `${keyId}: revoked (leaked)`,
    );
    const listed = (await cli('list', '--all')).stdout;
    // A script that revokes a list of keys, run twice or after a partial run, succeeds.
    const again = await cli('revoke', keyId, '--reason', 'rotated').catch((err: { code: number }) => err);
    expect(again).toMatchObject({ stderr: '' });
    expect((again as { stdout: string }).stdout).toMatch(
      new RegExp(`^${keyId}: was already revoked \\(at \\d{4}-\\d\\d-\\d\\dT[^)]+\\); nothing changed\\n$`),
    );
    // Nothing appended (so no wait for the service to apply it): the first revocation stands.
    expect((await cli('list', '--all')).stdout).toBe(listed);
  });

  it('refuses a create without --plan and a payments window that ends before it starts as usage errors (exit 2)', async () => {
    const refused = (...args: string[]) =>
      cli(...args).then(
        () => ({ code: 0, stderr: '' }),
        (err: { code: number; stderr: string }) => err,
      );
    // The log exists (payments reads one): a key issued first.
    await cli('create', '--plan', 'free', '--owner', 'ops');
    const noPlan = await refused('create', '--owner', 'ops');
    expect(noPlan.code).toBe(2);
    expect(noPlan.stderr).toMatch(
      /^--plan <plan> is required: one of free, starter, pro\nfor the usage: node --import tsx services\/operator\/cli\.ts --help\n$/,
    );
    const swapped = await refused('payments', '--from', '2026-12-01', '--to', '2026-11-01');
    expect(swapped.code).toBe(2);
    expect(swapped.stderr).toMatch(
      /^--from must be before --to \(--to is exclusive; got --from 2026-12-01 --to 2026-11-01\)\nfor the usage: node --import tsx services\/operator\/cli\.ts --help\n$/,
    );
  });

  it('refuses a read on a DATA_DIR holding no log, and rebuild-quota on the in-process cache (exit 2)', async () => {
    const refused = (args: string[], env: Record<string, string>) =>
      exec(process.execPath, [...CLI, ...args], {
        cwd: ROOT,
        env: { ...process.env, EVENT_STORE: 'lmdb', DATA_DIR: dir, CACHE: 'memory', BUS: 'memory', ...env },
      }).then(
        () => ({ code: 0, stderr: '' }),
        (err: { code: number; stderr: string }) => err,
      );
    const mistyped = join(dir, 'no-such-data-dir');
    for (const args of [['list'], ['revoke', 'key_x'], ['reseal-webhook-secrets']]) {
      const out = await refused(args, { DATA_DIR: mistyped });
      expect(out.code).toBe(2);
      expect(out.stderr).toContain(`DATA_DIR=${mistyped} holds no event log`);
    }
    expect(existsSync(mistyped)).toBe(false);
    const quota = await refused(['rebuild-quota'], {});
    expect(quota.code).toBe(2);
    expect(quota.stderr).toContain('set CACHE=redis');
  });

  it('refuses a word a command does not take and an option given twice as usage errors naming them (exit 2), before opening the store', async () => {
    const refused = (...args: string[]) =>
      cli(...args).then(
        () => ({ code: 0, stderr: '' }),
        (err: { code: number; stderr: string }) => err,
      );
    await cli('create', '--plan', 'free', '--owner', 'ops');
    const list = await refused('list', '--all', 'extra');
    expect(list.code).toBe(2);
    expect(list.stderr).toMatch(
      /^unexpected argument "extra" \(list takes no argument but its options\)\nfor the usage: node --import tsx services\/operator\/cli\.ts --help\n$/,
    );
    const owners = await refused('create', '--plan', 'free', '--owner', 'a', '--owner', 'b');
    expect(owners.code).toBe(2);
    expect(owners.stderr).toMatch(
      /^--owner given 2 times \("a", "b"\): it takes one value\nfor the usage: node --import tsx services\/operator\/cli\.ts --help\n$/,
    );
    // Refused before the store is opened: a create on a DATA_DIR holding no log makes none.
    const fresh = join(dir, 'fresh-create');
    const create = await exec(
      process.execPath,
      [...CLI, 'create', '--plan', 'free', '--owner', 'x', 'extra'],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          EVENT_STORE: 'lmdb',
          DATA_DIR: fresh,
          CACHE: 'memory',
          BUS: 'memory',
          PUBLIC_BASE_URL: 'http://127.0.0.1:9',
        },
      },
    ).catch((err: { code: number; stderr: string }) => err);
    expect(create).toMatchObject({ code: 2 });
    expect((create as { stderr: string }).stderr).toMatch(/^unexpected argument "extra" \(create takes/);
    expect(existsSync(fresh)).toBe(false);
  });

  it('answers an unknown command, no command and --help before any setting is read or store opened: the DATA_DIR stays empty', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'keys-cli-empty-'));
    onTestFinished(() => rmSync(empty, { recursive: true, force: true }));
    const on = (publicUrl: string, ...args: string[]) =>
      exec(process.execPath, [...CLI, ...args], {
        cwd: ROOT,
        env: {
          ...process.env,
          EVENT_STORE: 'lmdb',
          DATA_DIR: empty,
          CACHE: 'memory',
          BUS: 'memory',
          PUBLIC_BASE_URL: publicUrl,
        },
      }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
    const commands = 'create, list, plan, revoke, rebuild-quota, payments, reseal-webhook-secrets';
    for (const [argv, word] of [
      [['frobnicate'], 'frobnicate'],
      [['frobnicate', '--owner', 'x', 'extra'], 'frobnicate'],
      [['--all'], '--all'],
      [['lst', '--all'], 'lst'],
    ] as const) {
      // Settings as the service takes them, and one it refuses (a URL that is none): the command
      // line is answered before any setting is read, the same either way.
      for (const publicUrl of ['http://127.0.0.1:9', 'notaurl']) {
        const out = await on(publicUrl, ...argv);
        expect({ argv, publicUrl, code: out.code, stdout: out.stdout }).toEqual({
          argv,
          publicUrl,
          code: 2,
          stdout: '',
        });
        // Nothing opened: no log (LMDB's events/data.mdb and lock.mdb) made by a typo.
        expect(readdirSync(empty), `${argv.join(' ')} with PUBLIC_BASE_URL=${publicUrl}`).toEqual([]);
        expect(out.stderr, argv.join(' ')).toMatch(
          new RegExp(`^unknown command ${word}: the commands are ${commands}\\nfor the usage: .* --help\\n$`),
        );
      }
    }
    // No command: the usage (naming every command) and exit 2; --help and help: the usage, exit 0.
    for (const [argv, code] of [
      [[], 2],
      [['--help'], 0],
      [['help'], 0],
    ] as const) {
      const out = await on('notaurl', ...argv);
      expect({ argv, code: out.code, stderr: out.stderr }).toEqual({ argv, code, stderr: '' });
      expect(out.stdout).toMatch(/^usage: .*<command>\n {2}create --plan/);
    }
    expect(readdirSync(empty)).toEqual([]);
  });
});

/**
 * A service that answers /readyz from the given replies in turn ('stall' holds the request
 * unanswered, a number is the key registry's checkpoint, a string a non-JSON 502 page).
 */
async function readyzServer(
  replies: Array<'stall' | number | string>,
): Promise<{ url: string; probes: () => number; close: () => Promise<void> }> {
  let probes = 0;
  const server: Server = createServer((_req, res) => {
    const reply = replies[Math.min(probes, replies.length - 1)]!;
    probes += 1;
    if (reply === 'stall') return;
    if (typeof reply === 'string') {
      // `403:<html>…` answers with that status; a bare page is a proxy's 502.
      const [, status = '502', page = reply] = /^(\d{3}):(.*)$/s.exec(reply) ?? [];
      return void res.writeHead(Number(status), { 'content-type': 'text/html' }).end(page);
    }
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ checks: { 'projection:key-registry': { ok: true, checkpoint: reply } } }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    probes: () => probes,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

describe('waiting for the running service to apply a key change', () => {
  it('polls again after a /readyz slower than the probe timeout instead of saying no service answered', async () => {
    const slow = await readyzServer(['stall', 3, 7]);
    try {
      expect(await serviceApplied(slow.url, 7, 10_000, null, 200)).toBeNull();
      expect(slow.probes()).toBe(3);
    } finally {
      await slow.close();
    }
  });

  it("polls again after an answer that is not the readiness JSON (a proxy's 502 page)", async () => {
    const proxied = await readyzServer(['<html>bad gateway</html>', 7]);
    try {
      expect(await serviceApplied(proxied.url, 7, 10_000, null, 200)).toBeNull();
    } finally {
      await proxied.close();
    }
  });

  it('says at once, with what to set, when a proxy in front refuses /readyz (403) rather than polling it', async () => {
    const denied = await readyzServer(['403:<html>403 Forbidden</html>', 7]);
    try {
      const note = await serviceApplied(denied.url, 7, 10_000, null, 200);
      expect(note).toBe(
        `${denied.url}/readyz answered 403: the readiness of the service there cannot be read from here ` +
          '(a proxy in front that refuses /readyz?). The change is on the event log, and every service ' +
          "reading that log applies it; set PUBLIC_BASE_URL to an api's own address (http://<host>:<PORT>) " +
          'to wait for it',
      );
      expect(denied.probes()).toBe(1);
    } finally {
      await denied.close();
    }
  });

  it('says what it saw when a service that answers never shows its readiness in time', async () => {
    const stalled = await readyzServer(['stall']);
    try {
      const note = await serviceApplied(stalled.url, 7, 600, null, 100);
      expect(note).toBe(
        `${stalled.url}/readyz did not answer within 100 ms (polled for 600 ms): the change applies once the service has folded position 7`,
      );
    } finally {
      await stalled.close();
    }
  });
});

describe('npm run keys beside a running service on the same log', () => {
  const dir = mkdtempSync(join(tmpdir(), 'keys-live-'));
  let running: TestService;
  beforeAll(async () => {
    running = await startTestService(['api'], { DATA_DIR: dir });
  }, 60_000);
  afterAll(async () => {
    await running?.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const cli = (...args: string[]) =>
    exec(process.execPath, [...CLI, ...args], {
      cwd: ROOT,
      env: { ...process.env, EVENT_STORE: 'lmdb', DATA_DIR: dir, PUBLIC_BASE_URL: running.service.url },
    });
  const call = async (key: string) => {
    const res = await fetch(`${running.service.url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '4h' }),
    });
    return {
      status: res.status,
      tier: ((await res.json()) as { _service: { auth: { tier: string } } })._service.auth.tier,
    };
  };

  it('create, plan and revoke take effect on the very next call', async () => {
    const created = await cli('create', '--plan', 'free', '--owner', 'ops');
    const key = /key: +(\S+)/.exec(created.stdout)![1]!;
    const keyId = /id: +(\S+)/.exec(created.stdout)![1]!;
    expect(await call(key)).toEqual({ status: 200, tier: 'free' });
    expect((await cli('plan', keyId, 'pro')).stdout.trim()).toBe(`${keyId}: free -> pro`);
    expect(await call(key)).toEqual({ status: 200, tier: 'pro' });
    await cli('revoke', keyId);
    expect((await call(key)).status).toBe(401);
    // The refusal carries tier free: the key is not applied, and detail says why.
    const refused = await fetch(`${running.service.url}/api/verdicts`, {
      headers: { authorization: `Bearer ${key}` },
    });
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { _service: { auth: unknown } })._service.auth).toEqual({
      outcome: 'UNKNOWN',
      presented: true,
      tier: 'free',
      detail: 'this key was revoked',
    });
  }, 120_000);

  it('create against a service that reads another log says so and exits 1, the key still printed', async () => {
    // The service's log is ahead of this fresh one, and behind another with more events: neither
    // is compared by position, the service's /readyz names its log (its first event's id).
    const elsewhere = mkdtempSync(join(tmpdir(), 'keys-elsewhere-'));
    try {
      const other = await exec(process.execPath, [...CLI, 'create', '--plan', 'free', '--owner', 'ops'], {
        cwd: ROOT,
        env: {
          ...process.env,
          EVENT_STORE: 'lmdb',
          DATA_DIR: elsewhere,
          PUBLIC_BASE_URL: running.service.url,
        },
      }).catch((err: { code: number; stdout: string; stderr: string }) => err);
      const { code, stdout, stderr } = other as { code: number; stdout: string; stderr: string };
      expect(code).toBe(1);
      expect(stdout).toMatch(/key: +sk_live_/);
      expect(stderr).toContain(`the service at ${running.service.url}/readyz reads another event log`);
      expect((await call(/key: +(\S+)/.exec(stdout)![1]!)).status).toBe(401);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  }, 60_000);
});
