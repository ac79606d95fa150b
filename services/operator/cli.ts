// First: an older Node is refused in one line before any other module runs.
import '../shared/node-version.ts';
import { logIdentity } from '../../adapters/event-store/log-identity.ts';
import { publicBaseUrl } from '../../contracts/config.ts';
import { openAdapters } from '../adapters.ts';
import { commandLineConfig, settingOrExit } from '../shared/cli-config.ts';
import { commandLineLogger, failureText, openedOrExit } from '../shared/cli-failure.ts';
import { exitFlushed, usageIfAsked } from '../shared/exit-flushed.ts';
import { usageHint } from '../shared/invocation.ts';
import { type SecretBox, secretBoxFromConfig } from '../webhooks/secret-box.ts';
import {
  type CommandLine,
  OtherLogError,
  parseCommandLine,
  READS_EXISTING_LOG,
  refuseBeforeOpening,
  runOperatorCommand,
  serviceApplied,
  UnfinishedError,
  USAGE,
  UsageError,
} from './operator-commands.ts';

/** Operator command line for keys (`npm run keys -- …`); uses the configured event store and cache. */
const argv = process.argv.slice(2);
await usageIfAsked(argv, USAGE);
// No command: the usage, exit 2; --help or help: the usage, exit 0. A command line not as USAGE
// has it (an unknown command, an unknown option, a stray word, an option's value given twice): the
// usage error naming it, exit 2. Each before any setting is read or store opened. Read once: the
// command run below is the one read here.
const line: CommandLine = await (async () => {
  try {
    return parseCommandLine(argv);
  } catch (err) {
    // The error and where the usage is: the usage under it would bury the line saying what was wrong.
    console.error(`${(err as Error).message}\n${usageHint('keys')}`);
    return exitFlushed(2);
  }
})();
// A refused setting (a key too short, a URL that is none) is told in the service's words, exit 1.
const config = await commandLineConfig(1);
// The master keys reseal-webhook-secrets seals with are settings too (production requires
// WEBHOOK_MASTER_KEY): refused the same way, before any store is opened.
let secrets: SecretBox | undefined;
if (line.command === 'reseal-webhook-secrets')
  secrets = await settingOrExit(() => secretBoxFromConfig(config), 1);
try {
  refuseBeforeOpening(line.command, config);
} catch (err) {
  console.error((err as Error).message);
  await exitFlushed(2);
}
// A store that cannot be opened (a server down, a log written by a newer version, a DATA_DIR this
// user may not write): one line, exit 1; a log a reading command would have to create: exit 2.
const adapters = await openedOrExit(() =>
  openAdapters(config, commandLineLogger(), { existingLog: READS_EXISTING_LOG.has(line.command) }),
);
let code = 0;
try {
  // A key change returns once the running service (PUBLIC_BASE_URL, else localhost:PORT) has it.
  // Positions are compared only once the service is known to read this log (its first event).
  const ourLog = logIdentity(adapters.eventStore);
  const applied = async (position: number) =>
    serviceApplied(publicBaseUrl(config), position, 10_000, await ourLog());
  const output = await runOperatorCommand(line, {
    store: adapters.eventStore,
    cache: adapters.cache,
    // A new key is printed before the wait for the service: a Ctrl-C then does not lose it.
    applied: { shown: (text) => console.log(text), until: applied },
    secrets: () => secrets ?? secretBoxFromConfig(config),
  });
  if (output !== '') console.log(output);
} catch (err) {
  code = err instanceof UsageError ? 2 : 1;
  // What the command did (a new key is shown this once) went to stdout before the wait; why it is
  // not in effect goes to stderr.
  if (err instanceof OtherLogError) console.error(err.message);
  else if (err instanceof UnfinishedError) {
    // What it did on stdout; what it left undone (and why the exit is 1) on stderr.
    console.log(err.output);
    console.error(err.message);
  } else if (err instanceof UsageError) console.error(`${err.message}\n${usageHint('keys')}`);
  // An expected failure (the cache down, another rebuild first) in one line; a bug with its stack.
  else console.error(failureText(err));
} finally {
  await adapters.close();
}
// Only once the output is all written: a pipe takes 64 KiB at a time.
await exitFlushed(code);
