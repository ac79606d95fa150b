/**
 * `npm test`: the type check (`tsc --noEmit`) and the whole suite (`vitest run --project unit
 * --project io --project slow`, plus any arguments given after `--`) at the same time. It fails
 * when either fails, once both have ended; the type check's output is printed when it ends.
 *
 * Why together rather than one after the other: tsc is one thread, about 38 CPU seconds here,
 * and run before the suite it would leave the second core idle for as long (on two cores a third
 * of a minute at best, two minutes under load); the suite itself does not keep both cores busy
 * (its servers start, children boot, tests wait on conditions), so the type check mostly fills
 * time that would be idle. A type error still fails the run, though not before the first test.
 *
 * npm runs this on the pinned Node with node_modules/.bin first on PATH, so `tsc` and `vitest`
 * are the locked ones.
 */

import { spawn } from 'node:child_process';
import { constants } from 'node:os';

const children = [];

function run(command, args, options) {
  const child = spawn(command, args, options);
  children.push(child);
  const exit = new Promise((resolve) => {
    child.once('error', (err) => {
      process.stderr.write(`test: could not start ${command}: ${err.message}\n`);
      resolve(1);
    });
    child.once('exit', (code, signal) => resolve(code ?? 128 + (constants.signals[signal] ?? 0)));
  });
  return { child, exit };
}

// A signal to `npm test` (Ctrl-C reaches the whole process group anyway; a supervisor's SIGTERM
// may reach this process only) is passed on, and this process waits for both to end.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    for (const child of children) if (child.exitCode === null) child.kill(signal);
  });
}

const tsc = run('tsc', ['--noEmit'], { stdio: ['ignore', 'pipe', 'pipe'] });
// Kept until tsc ends, so that its diagnostics come out in one piece between the suite's lines.
const typeCheckOutput = [];
tsc.child.stdout.on('data', (chunk) => typeCheckOutput.push(chunk));
tsc.child.stderr.on('data', (chunk) => typeCheckOutput.push(chunk));

const vitest = run(
  'vitest',
  ['run', '--project', 'unit', '--project', 'io', '--project', 'slow', ...process.argv.slice(2)],
  {
    stdio: 'inherit',
  },
);

const typeCheck = await tsc.exit;
const output = Buffer.concat(typeCheckOutput).toString();
process.stdout.write(
  typeCheck === 0
    ? '\ntsc --noEmit: no type errors\n'
    : `\ntsc --noEmit failed (exit ${typeCheck}):\n${output}\n`,
);
const suite = await vitest.exit;
if (typeCheck !== 0)
  process.stderr.write(`test: tsc --noEmit failed (exit ${typeCheck}), see its output above\n`);
process.exit(suite !== 0 ? suite : typeCheck);
