import { pino } from 'pino';
import { loadConfig, publicBaseUrl, readDotEnv } from '../../contracts/config.ts';
import { openAdapters } from '../adapters.ts';
import {
  refuseBeforeOpening,
  runOperatorCommand,
  serviceApplied,
  USAGE,
  UsageError,
} from './operator-commands.ts';

/** Operator command line for keys (`npm run keys -- …`); uses the configured event store and cache. */
const argv = process.argv.slice(2);
if (argv.length === 0 || argv[0] === '--help' || argv[0] === 'help') {
  console.log(USAGE);
  process.exit(argv.length === 0 ? 2 : 0);
}
readDotEnv();
const config = loadConfig();
try {
  refuseBeforeOpening(argv[0], config);
} catch (err) {
  console.error((err as Error).message);
  process.exit(2);
}
const logger = pino({ level: 'warn' }, pino.destination(2));
const adapters = await openAdapters(config, logger);
let code = 0;
try {
  // A key change returns once the running service (PUBLIC_BASE_URL, else localhost:PORT) has it.
  const applied = (position: number) => serviceApplied(publicBaseUrl(config), position);
  console.log(await runOperatorCommand(argv, { store: adapters.eventStore, cache: adapters.cache, applied }));
} catch (err) {
  code = err instanceof UsageError ? 2 : 1;
  console.error(err instanceof UsageError ? `${err.message}\n\n${USAGE}` : err);
} finally {
  await adapters.close();
}
process.exit(code);
