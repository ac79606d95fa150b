import type { parseArgs } from 'node:util';

/** The tokens `parseArgs({ tokens: true })` gives. */
type Tokens = NonNullable<ReturnType<typeof parseArgs>['tokens']>;

/** An option as `parseArgs` declares it. */
type OptionShape = { type: 'string' | 'boolean'; multiple?: boolean };

/**
 * Why a command line's options are not as its usage has them, or null: an option taking one
 * value given twice (`--coin BTC --coin ETH`: which one was meant? a repeated flag loses nothing
 * and is taken), or an option the command does not take (`list --owner acme` would look filtered
 * while it is not). The operator CLIs (keys, history) refuse it as a usage error, exit 2.
 * `secret` options (an API key) are named by count alone, their values never printed.
 */
export function optionsRefusal(
  command: string,
  options: Readonly<Record<string, OptionShape>>,
  takes: readonly string[],
  tokens: Tokens,
  secret: readonly string[] = [],
): string | null {
  for (const [name, option] of Object.entries(options)) {
    if (option.type !== 'string' || option.multiple) continue;
    const given = tokens.filter((t) => t.kind === 'option' && t.name === name);
    if (given.length < 2) continue;
    const values = secret.includes(name)
      ? ''
      : ` (${given.map((t) => JSON.stringify(t.kind === 'option' ? t.value : '')).join(', ')})`;
    return `--${name} given ${given.length} times${values}: it takes one value`;
  }
  const named = new Set(tokens.flatMap((t) => (t.kind === 'option' ? [t.name] : [])));
  const foreign = [...named].filter((name) => !takes.includes(name));
  return foreign.length > 0
    ? `${command} does not take ${foreign.map((name) => `--${name}`).join(', ')}`
    : null;
}

/**
 * Why a command line's first word is no command, naming the commands there are: an unknown word or
 * none at all. The operator CLIs (keys, history) refuse it as a usage error, exit 2, before any of
 * its options is read, so `frobnicate --bogus` is told as the command's error.
 */
export function unknownCommandRefusal(command: string | undefined, commands: readonly string[]): string {
  const known = `the commands are ${commands.join(', ')}`;
  return command ? `unknown command ${command}: ${known}` : `a command is required: ${known}`;
}

/**
 * A refusal of `parseArgs`, in the words of optionsRefusal: an option no command takes is
 * `<command> does not take --bogus`. Node's own text goes on to advise passing it after `--` as a
 * positional, which is no fix for an operator's command line. Other refusals (an option missing
 * its value) keep node's words.
 */
export function parseArgsRefusal(command: string, err: unknown): string {
  const { code, message } = err as { code?: string; message?: string };
  const option =
    code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /^Unknown option '([^']+)'/.exec(message ?? '') : null;
  return option ? `${command} does not take ${option[1]}` : String(message ?? err);
}
