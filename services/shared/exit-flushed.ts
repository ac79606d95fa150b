/**
 * Ends a command-line process with `code` once everything written to stdout and stderr has been
 * handed to the OS. A pipe takes 64 KiB at a time and Node writes to it asynchronously, so
 * `process.exit` straight after a large `write` cut the output there (`… | wc -c` gave 65536)
 * with exit status 0. An empty write's callback runs only after every write queued before it.
 */
export async function exitFlushed(code: number): Promise<never> {
  process.exitCode = code;
  await Promise.all(
    [process.stdout, process.stderr].map(
      (stream) =>
        new Promise<void>((resolve) => {
          if (stream.destroyed || !stream.writable) return resolve();
          // A reader that went away (EPIPE, `| head`) ends the wait too, rather than throw:
          // nothing more can be delivered.
          stream.once('error', () => resolve());
          stream.write('', () => resolve());
        }),
    ),
  );
  process.exit(code);
}

/**
 * An operator command line's usage when it is asked for: with no argument it is written and the
 * process exits 2 (a command was expected), with `--help` or `help` first it exits 0; with any
 * other first argument this returns and the command runs.
 */
export async function usageIfAsked(argv: readonly string[], usage: string): Promise<void> {
  if (argv.length > 0 && argv[0] !== '--help' && argv[0] !== 'help') return;
  process.stdout.write(`${usage}\n`);
  await exitFlushed(argv.length === 0 ? 2 : 0);
}
