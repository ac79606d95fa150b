/**
 * `npm run build`: the deployable service in dist/, run with plain `node dist/services/main.js`
 * (the image does; development and tests run the TypeScript sources, on the same Node major).
 *
 * tsc emits the JavaScript (and the JSON modules it imports); everything else the running
 * service reads from disk next to its own files is copied here, at the same relative place,
 * because the sources find it with `new URL('…', import.meta.url)`:
 *   - every other non-TypeScript file under the source folders (the Lua scripts of the Redis
 *     cache, the webhook guide the knowledge corpus indexes);
 *   - README.md and docs/ (the knowledge corpus reads them from the repository root, dist/ here);
 *   - sample-data/ (the replay slice the market feed falls back to).
 *
 * `--out-dir=<dir>` builds elsewhere than dist/ (bench/startup.bench.ts builds its own copy, so
 * that it never pulls dist/ from under a running service or test). The directory must sit inside
 * the repository, where `node_modules` is found by walking up from it.
 *
 * `--emit-only` emits without the type check (tsc's --noCheck): test/build.int.test.ts builds so,
 * because `npm test` type-checks the same sources beside it (`tsc --noEmit` over tsconfig.json,
 * whose files include tsconfig.build.json's); the check is about two thirds of the build's CPU.
 */

import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SOURCE_DIRS = ['contracts', 'projections', 'services', 'adapters'];
const ROOT_ASSETS = ['README.md', 'docs', 'sample-data'];
const { values } = parseArgs({
  options: { 'out-dir': { type: 'string' }, 'emit-only': { type: 'boolean', default: false } },
});
const OUT = resolve(ROOT, values['out-dir'] ?? 'dist');
// It is emptied first: never the repository, a folder above it, or one of the sources.
const outRel = relative(ROOT, OUT);
const inSources = [...SOURCE_DIRS, ...ROOT_ASSETS, '.git'].includes(outRel.split(sep)[0]!);
if (outRel === '' || outRel.startsWith('..') || inSources || outRel === 'node_modules') {
  process.stderr.write(`build: --out-dir must be a folder of its own inside the repository, not ${OUT}\n`);
  process.exit(1);
}

/** Test inputs live beside the sources but are never read by the running service. */
const isTestOnly = (path: string) => /(^|\/)fixtures(\/|$)/.test(path);

function* files(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (entry.isFile()) yield path;
  }
}

// A stale dist/ could keep a module the sources no longer have, and the service would still load it.
rmSync(OUT, { recursive: true, force: true });

const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const compiled = spawnSync(
  process.execPath,
  [
    tsc,
    '-p',
    join(ROOT, 'tsconfig.build.json'),
    '--outDir',
    OUT,
    ...(values['emit-only'] ? ['--noCheck'] : []),
  ],
  {
    cwd: ROOT,
    stdio: 'inherit',
  },
);
if (compiled.status !== 0) {
  process.stderr.write(`build: tsc failed (exit ${compiled.status ?? compiled.signal})\n`);
  process.exit(1);
}

let copied = 0;
for (const dir of SOURCE_DIRS) {
  for (const path of files(join(ROOT, dir))) {
    const rel = relative(ROOT, path);
    if (/\.(ts|tsx)$/.test(rel) || isTestOnly(rel)) continue;
    mkdirSync(dirname(join(OUT, rel)), { recursive: true });
    cpSync(path, join(OUT, rel));
    copied += 1;
  }
}
for (const asset of ROOT_ASSETS) {
  if (!existsSync(join(ROOT, asset))) continue;
  cpSync(join(ROOT, asset), join(OUT, asset), { recursive: true });
  copied += 1;
}

// The emitted files are ES modules: say so beside them, so dist/ runs wherever it is copied.
writeFileSync(join(OUT, 'package.json'), `${JSON.stringify({ type: 'module' }, null, 2)}\n`);

if (!existsSync(join(OUT, 'services/main.js'))) {
  process.stderr.write('build: dist/services/main.js was not emitted\n');
  process.exit(1);
}
process.stdout.write(`build: ${outRel}/ ready (${copied} assets copied)\n`);
