/**
 * Child process for export-rows-kill.int.test.ts: folds the export-rows projection of the LMDB
 * log at <path> into its own environment, as the service does (history slice), and prints its
 * checkpoint as a JSON line each time it moves, until killed.
 *
 *   export-rows-kill-child.ts <path>
 */
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { ExportRowStore, openExportRowsEnvironment } from './export-row-store.ts';

const [path] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: export-rows-kill-child.ts <path>\n');
  process.exit(2);
}
const store = await openLmdbEventStore({ path });
const rows = new ExportRowStore(store, openExportRowsEnvironment(path), {
  logRoot: store.root,
  ownsRoot: true,
});
await rows.start();
process.stdout.write(`${JSON.stringify({ ready: true, checkpoint: rows.checkpoint })}\n`);
let told = rows.checkpoint;
setInterval(() => {
  if (rows.checkpoint === told) return;
  told = rows.checkpoint;
  process.stdout.write(`${JSON.stringify({ checkpoint: told })}\n`);
}, 1);
