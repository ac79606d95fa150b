/**
 * A child process of the concurrent-writer test: appends `count` single-event batches to its own
 * streams with `concurrency` appends in flight, then prints the acknowledged positions as JSON.
 * argv: url schema writerId count concurrency
 */
import { randomUUID } from 'node:crypto';
import { openPostgresEventStore } from './postgres.ts';

const [url, schema, writer, count, concurrency] = process.argv.slice(2) as [
  string,
  string,
  string,
  string,
  string,
];
const store = await openPostgresEventStore({ url, schema, poolSize: Number(concurrency) });
const acked: Array<{ id: string; position: number }> = [];
let next = 0;
async function lane(lane: number) {
  for (;;) {
    const i = next++;
    if (i >= Number(count)) return;
    const id = randomUUID();
    const { position } = await store.append(`w${writer}-${lane}`, [
      { id, type: 'Written', data: { writer: Number(writer), i } },
    ]);
    acked.push({ id, position });
  }
}
await Promise.all(Array.from({ length: Number(concurrency) }, (_, l) => lane(l)));
await store.close();
process.stdout.write(JSON.stringify(acked));
