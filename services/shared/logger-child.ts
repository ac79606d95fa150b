/**
 * A process that logs through createLogger, for services/shared/logger.int.test.ts:
 *   quiet      one line, then waits (it must reach stdout by the flush interval alone)
 *   many N     N numbered lines (some with multi-byte characters), then exit(0)
 *   killed N   N numbered lines, flushSync (main's exit path), then SIGKILL to itself
 *   flushed    one line, then logger.flush(cb): cb says so on stderr
 */
import { createLogger } from './logger.ts';

const [mode, count] = process.argv.slice(2);
const logger = createLogger({ LOG_LEVEL: 'info' });
const stream = (logger as unknown as Record<symbol, { flushSync(): void }>)[
  Object.getOwnPropertySymbols(logger).find((s) => s.description === 'pino.stream')!
]!;

if (mode === 'flushed') {
  logger.info({ n: 0 }, 'line');
  logger.flush((err) => process.stderr.write(`flushed ${err ?? 'ok'}\n`));
} else if (mode === 'quiet') {
  logger.info({ n: 0 }, 'quiet line');
  setTimeout(() => process.exit(0), 60_000);
} else {
  for (let n = 0; n < Number(count); n++)
    logger.info({ n, text: n % 7 === 0 ? 'prix: 5 € – ünïcödé ✓' : 'x' }, 'line');
  if (mode === 'killed') {
    stream.flushSync();
    process.kill(process.pid, 'SIGKILL');
  } else {
    process.on('exit', () => stream.flushSync());
    process.exit(0);
  }
}
