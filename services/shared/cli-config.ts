import { type Config, ConfigError, loadConfig, readDotEnv } from '../../contracts/config.ts';
import { unknownSettings, unknownSettingWarning } from '../../contracts/setting-names.ts';
import { exitFlushed } from './exit-flushed.ts';

/**
 * A setting an operator command line reads (`read`), or the end of the process when one is
 * refused: a ConfigError is told as `npm start` tells it, the config schema's `invalid
 * configuration:` followed by one line per variable naming it and what is wrong, with no stack
 * trace, and the process exits `exitCode`. Anything else is thrown on.
 */
export async function settingOrExit<T>(read: () => T, exitCode: number): Promise<T> {
  try {
    return read();
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    process.stderr.write(`${err.message}\n`);
    return exitFlushed(exitCode);
  }
}

/**
 * The service's configuration for an operator command line (`npm run keys`, `npm run history --
 * … --store`, `npm run backup`): `./.env` where the environment has none, then the config schema,
 * as the service reads it at start. A refused setting ends the process as `settingOrExit` says:
 * exit 1 as the service's start, or the command line's own code (the history CLI's 2, since its
 * verify's 1 means a broken chain). Once read, a variable that looks meant as a setting
 * (unknownSettings: NATS_ULR) is named on stderr in the service's words. Called once per process
 * (the history CLI keeps what it returns).
 */
export async function commandLineConfig(exitCode = 1): Promise<Config> {
  const config = await settingOrExit(() => {
    readDotEnv();
    return loadConfig();
  }, exitCode);
  for (const unknown of unknownSettings(process.env))
    process.stderr.write(`${unknownSettingWarning(unknown)}\n`);
  return config;
}
