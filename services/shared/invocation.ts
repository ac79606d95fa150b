import { relative } from 'node:path';

/**
 * How this command line was started, for its usage and hints to name a command that works where
 * it runs: `npm run <script> --` under npm (which names the script it runs in
 * npm_lifecycle_event), else the node command itself, such as `node dist/services/operator/cli.js`
 * in the image, where there are no npm scripts (no sources, no TypeScript runner).
 */
export function invocation(script: string): string {
  if (process.env.npm_lifecycle_event === script) return `npm run ${script} --`;
  return ['node', ...process.execArgv, relative(process.cwd(), process.argv[1] ?? '')].join(' ');
}

/**
 * The line an operator command line prints under a usage error, in place of its whole usage: the
 * error stays the one thing to read, and this names the command that prints the usage where it runs.
 */
export function usageHint(script: string): string {
  return `for the usage: ${invocation(script)} --help`;
}
