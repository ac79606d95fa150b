/**
 * Child processes of the split layout of bench/webhooks.bench.ts, driven over IPC (fork):
 *   receiver <key.pem> <cert.pem>   the HTTPS receiver; answers {type:'await', count} with
 *                                   {type:'reached', count} once that many requests arrived,
 *                                   and {type:'reset'} by starting the count again
 *   posts <url> <ca.pem> <request.json> <count> <concurrency> [<lmdb dir>]
 *                                   a bare undici POST loop of the request in the file ({body,
 *                                   headers}), started by {type:'go'} (`count` POSTs, or the
 *                                   message's own `count`: a warm-up); with a directory, the
 *                                   baseline, the durable floor (webhooks-floor.ts): each POST's
 *                                   outcome is then put and flushed to LMDB there
 */
import { readFileSync } from 'node:fs';
import { Agent } from 'undici';
import { startReceiver } from '../test/webhooks-receiver.ts';
import { openFloorStore, postLoop } from './webhooks-floor.ts';

type Message = { type: 'await'; count: number } | { type: 'reset' } | { type: 'go'; count?: number };

function send(message: Record<string, unknown>): void {
  process.send?.(message);
}

async function receiver(keyFile: string, certFile: string): Promise<void> {
  const r = await startReceiver({ key: readFileSync(keyFile, 'utf8'), cert: readFileSync(certFile, 'utf8') });
  process.on('message', (m: Message) => {
    if (m.type === 'reset') r.received.length = 0;
    else if (m.type === 'await') {
      r.waitFor(m.count, 600_000).then(
        () => send({ type: 'reached', count: m.count }),
        (err: unknown) => send({ type: 'error', message: String(err) }),
      );
    }
  });
  process.on('disconnect', () => {
    void r.close().then(() => process.exit(0));
  });
  send({ type: 'ready', url: r.url });
}

async function posts(
  url: string,
  caFile: string,
  requestFile: string,
  count: number,
  concurrency: number,
  floorDir: string | undefined,
): Promise<void> {
  const agent = new Agent({ connect: { ca: readFileSync(caFile, 'utf8') }, connections: concurrency });
  const req = JSON.parse(readFileSync(requestFile, 'utf8')) as {
    body: string;
    headers: Record<string, string>;
  };
  const store = floorDir === undefined ? null : openFloorStore(floorDir);
  const loop = async (total: number) => {
    await postLoop({ url, agent, req, count: total, concurrency, store });
    send({ type: 'done' });
  };
  process.on('message', (m: Message) => {
    if (m.type === 'go')
      loop(m.count ?? count).catch((err: unknown) => send({ type: 'error', message: String(err) }));
  });
  process.on('disconnect', () => {
    void Promise.all([agent.close(), store?.close()]).then(() => process.exit(0));
  });
  send({ type: 'ready' });
}

const [mode, ...args] = process.argv.slice(2);
if (mode === 'receiver' && args.length === 2) await receiver(args[0]!, args[1]!);
else if (mode === 'posts' && (args.length === 5 || args.length === 6)) {
  await posts(args[0]!, args[1]!, args[2]!, Number(args[3]), Number(args[4]), args[5]);
} else {
  process.stderr.write(
    'usage: webhooks-bench-child.ts receiver <key> <cert> | posts <url> <ca> <request.json> <count> <concurrency> [<lmdb dir>]\n',
  );
  process.exit(2);
}
