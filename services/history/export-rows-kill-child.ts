/**
 * Child process for export-rows-kill.int.test.ts: folds the export-rows projection of the LMDB
 * log at <path> into that log's own environment, as the service does (history slice). It prints
 * the checkpoint it resumes from (as the last fold committed it) as a JSON line, then its
 * checkpoint each time it moves, until killed.
 *
 *   export-rows-kill-child.ts <path>
 */
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { ExportRowStore, openVerdictsDb } from './export-row-store.ts';

const [path] = process.argv.slice(2);
if (!path) {
  process.stderr.write('usage: export-rows-kill-child.ts <path>\n');
  process.exit(2);
}
const store = await openLmdbEventStore({ path });
// The meta (key 0: version, generation, checkpoint, id) before the fold runs a page: start()
// already folds the first one.
const meta = openVerdictsDb(store.root).get(0);
const committed = meta ? (JSON.parse(meta.toString('utf8')) as [number, string, number])[2] : 0;
process.stdout.write(`${JSON.stringify({ checkpoint: committed })}\n`);
const rows = new ExportRowStore(store, store.root);
await rows.start();
let told = committed;
const tell = () => {
  if (rows.checkpoint === told) return;
  told = rows.checkpoint;
  process.stdout.write(`${JSON.stringify({ checkpoint: told })}\n`);
};
tell();
setInterval(tell, 1);
