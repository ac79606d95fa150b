/**
 * The Node every entry point runs on, checked first: each entry (the service, `keys`, `history`,
 * `backup`) imports this module before any other, so its top level runs before theirs. On an older
 * Node (the machines' system Node 20, say) the process says so in one line and exits 1, rather than
 * failing later on an API that Node lacks, or warning from a dependency and going on unsupported.
 * package.json's `engines` names the same major (node-version.e2e.test.ts keeps them equal).
 */
export const MIN_NODE_MAJOR = 24;

/** The line refusing Node `version` (run from `execPath`), or null when it is recent enough. */
export function nodeRefusal(version: string, execPath: string): string | null {
  if (Number(version.split('.')[0]) >= MIN_NODE_MAJOR) return null;
  return (
    `signal-service needs Node.js ${MIN_NODE_MAJOR} or later; this is Node ${version} (${execPath}): ` +
    `start it through npm (npm start, npm run keys, ...), which runs the Node ${MIN_NODE_MAJOR} that npm run setup installs, or with a Node ${MIN_NODE_MAJOR} LTS`
  );
}

const refusal = nodeRefusal(process.versions.node, process.execPath);
if (refusal !== null) {
  process.stderr.write(`${refusal}\n`);
  process.exit(1);
}
