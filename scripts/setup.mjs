/**
 * `npm run setup`: `npm install` on the Node this repository pins, whatever Node the machine has.
 *
 * The pinned Node is a registry package (`node-<platform>-<arch>` in package.json's
 * optionalDependencies): once installed, npm scripts find its `node` first on PATH, so
 * `npm start` and `npm test` run on it. The install itself cannot pick its Node that way: npm
 * checks every package's `engines` against the Node that runs npm, before any script of ours
 * could run, and on an end-of-life system Node that check warns for every package that has
 * moved on. So this script, plain JavaScript that any system Node runs, starts the same npm on
 * the pinned Node: the copy already in node_modules when there is one, else the package fetched
 * once into npm's own cache (`npm exec`, registry only, no install script). Arguments are passed
 * on to `npm install`.
 */

import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
const runtimes = Object.entries(pkg.optionalDependencies ?? {}).filter(([name]) => name.startsWith('node-'));
const runtime = `node-${process.platform}-${process.arch}`;
const version = pkg.optionalDependencies?.[runtime];
const pinnedMajor = runtimes[0]?.[1].split('.')[0];

// The npm that runs `npm run setup` (npm sets npm_execpath), started again on another Node.
const npmCli = process.env.npm_execpath;
const npm = (node) => (npmCli ? [node, npmCli] : ['npm']);
const install = ['install', ...process.argv.slice(2)];

const run = ([command, ...args]) => {
  const result = spawnSync(command, args, { cwd: ROOT, stdio: 'inherit' });
  if (result.error) throw result.error;
  process.exit(result.status ?? 1);
};

if (version === undefined) {
  // No registry build pinned for this platform: a system Node of the pinned major will do.
  if (process.versions.node.split('.')[0] === pinnedMajor) run(npm(process.execPath).concat(install));
  process.stderr.write(
    `setup: no Node is pinned for ${process.platform}-${process.arch} (pinned: ${runtimes
      .map(([name, v]) => `${name}@${v}`)
      .join(', ')}) and this Node is ${process.version}.\n` +
      `Install Node ${pinnedMajor} LTS (https://nodejs.org, or nvm), then run \`npm run setup\` again.\n`,
  );
  process.exit(1);
}

const local = `${ROOT}node_modules/${runtime}`;
const installed = existsSync(`${local}/package.json`)
  ? JSON.parse(readFileSync(`${local}/package.json`, 'utf8')).version
  : undefined;
if (process.version === `v${version}`) run(npm(process.execPath).concat(install));
if (installed === version) run(npm(`${local}/bin/node`).concat(install));
// `npm exec` puts the package's bin directory first on PATH, so `node` below is the pinned one.
run([
  ...npm(process.execPath),
  'exec',
  '--yes',
  `--package=${runtime}@${version}`,
  '--',
  ...npm('node'),
  ...install,
]);
