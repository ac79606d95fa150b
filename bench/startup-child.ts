/**
 * The service as `npm start` runs it (every role, embedded adapters), for bench/startup.bench.ts:
 * started in its own process so that its start-up time and resident memory are its own.
 */
import { loadConfig } from '../contracts/config.ts';
import { ROLES } from '../services/component.ts';
import { startService } from '../services/service.ts';
import { createLogger } from '../services/shared/logger.ts';

const config = loadConfig();
const logger = createLogger(config, { roles: 'all' });
const service = await startService(config, [...ROLES], logger);
process.on('SIGTERM', () => {
  service.stop().then(
    () => process.exit(0),
    () => process.exit(1),
  );
});
