/**
 * A process that logs through createLogger, for services/shared/logger.int.test.ts:
 *   quiet      one line, then waits (it must reach stdout by the flush interval alone)
 *   many N     N numbered lines (some with multi-byte characters), then process.exit(0)
 *   killed N   N numbered lines, flushBeforeKill (main's path to SIGKILL), then SIGKILL to itself
 *   flushed    one line, then logger.flush(cb): cb says so on stderr
 *   stuck N F  the thread pool's only thread (UV_THREADPOOL_SIZE=1) blocked opening the FIFO F,
 *              then N lines (no write of them may wait on the pool), flushBeforeKill, SIGKILL
 *   full N D   N lines into a stdout pipe nobody reads yet (it fills and takes part of a chunk); once
 *              every write begun is over (UV_THREADPOOL_SIZE=1, the thread pool's next task made
 *              the directory D), `full` on stderr, then waits for a line on stdin (the reader has
 *              started), flushBeforeKill, SIGKILL
 */
import { existsSync, mkdir, open, readSync } from 'node:fs';
import { pino } from 'pino';
import { createLogger } from './logger.ts';

const [mode, count, fifo] = process.argv.slice(2);
const logger = createLogger({ LOG_LEVEL: 'info' });
// As main's flushLogs finds it.
const stream = (logger as unknown as Record<symbol, { flushBeforeKill(): void }>)[pino.symbols.streamSym]!;

if (mode === 'stuck') {
  // Opening a FIFO for reading blocks until a writer opens it: none ever does.
  open(fifo!, 'r', () => undefined);
  setTimeout(() => {
    for (let n = 0; n < Number(count); n++) logger.info({ n, text: 'x'.repeat(100) }, 'line');
    stream.flushBeforeKill();
    process.kill(process.pid, 'SIGKILL');
    // Before the logger's first 200 ms flush, whose write would be the one stuck, and empty.
  }, 50);
} else if (mode === 'full') {
  for (let n = 0; n < Number(count); n++)
    logger.info({ n, text: n % 7 === 0 ? 'prix: 5 € – ünïcödé ✓' : 'x' }, 'line');
  // Queued behind any write of the lines on the pool's one thread: once it is done, that write
  // has returned, having written what the full pipe took.
  mkdir(fifo!, () => undefined);
  while (!existsSync(fifo!)) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
  process.stderr.write('full\n');
  waitForLine();
  stream.flushBeforeKill();
  process.kill(process.pid, 'SIGKILL');
} else if (mode === 'flushed') {
  logger.info({ n: 0 }, 'line');
  logger.flush((err) => process.stderr.write(`flushed ${err ?? 'ok'}\n`));
} else if (mode === 'quiet') {
  logger.info({ n: 0 }, 'quiet line');
  setTimeout(() => process.exit(0), 60_000);
} else {
  for (let n = 0; n < Number(count); n++)
    logger.info({ n, text: n % 7 === 0 ? 'prix: 5 € – ünïcödé ✓' : 'x' }, 'line');
  if (mode === 'killed') {
    stream.flushBeforeKill();
    process.kill(process.pid, 'SIGKILL');
  } else {
    // No flush of its own: pino's exit hook and the thread pool's last writes put it all out.
    process.exit(0);
  }
}

/** Blocks until stdin brings a byte (stdin may be non-blocking: EAGAIN is waited out). */
function waitForLine(): void {
  for (;;) {
    try {
      if (readSync(0, Buffer.alloc(1)) > 0) return;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') throw err;
    }
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1);
  }
}
