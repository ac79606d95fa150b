/**
 * A bench's child process: issues `count` keys of `plan` through the operator commands on the
 * store and cache its environment configures (as `npm run keys -- create` does, once per process
 * rather than once per key), then prints them as one JSON line.
 *   node --import tsx bench/issue-keys.ts <count> <plan>
 */
import { pino } from 'pino';
import { loadConfig } from '../contracts/config.ts';
import { openAdapters } from '../services/adapters.ts';
import { runOperatorCommand } from '../services/operator/operator-commands.ts';

const count = Number(process.argv[2] ?? '1');
const plan = process.argv[3] ?? 'pro';
const adapters = await openAdapters(loadConfig(), pino({ level: 'warn' }, pino.destination(2)));
const keys: string[] = [];
try {
  for (let i = 0; i < count; i++) {
    const out = await runOperatorCommand(['create', '--plan', plan, '--owner', `bench-${i}`], {
      store: adapters.eventStore,
      cache: adapters.cache,
    });
    const key = /key: +(\S+)/.exec(out)?.[1];
    if (!key) throw new Error(`no key in: ${out}`);
    keys.push(key);
  }
} finally {
  await adapters.close();
}
process.stdout.write(`${JSON.stringify(keys)}\n`);
