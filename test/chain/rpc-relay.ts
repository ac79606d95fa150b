import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A JSON-RPC relay in front of a chain's RPC (anvil in tests) that counts the calls it passes on:
 * each method by name, eth_getCode by address as well ("eth_getCode 0xabc…"), batches call by
 * call. A body that is not JSON is forwarded uncounted; a target that does not answer is a 502.
 * A body carrying a method `hold` names is neither passed on nor answered (a request lost on its
 * way: a settlement's send held, say); `firstHeld` resolves when the first one arrives.
 */
export interface RpcRelay {
  url: string;
  calls: Map<string, number>;
  firstHeld: Promise<void>;
  close(): Promise<void>;
}

export async function countingRpcRelay(target: string, hold: readonly string[] = []): Promise<RpcRelay> {
  const calls = new Map<string, number>();
  let onHeld: () => void = () => undefined;
  const firstHeld = new Promise<void>((resolve) => {
    onHeld = resolve;
  });
  /** Counts the body's calls; returns their methods. */
  const count = (body: string): string[] => {
    type Call = { method?: string; params?: unknown[] };
    let parsed: Call | Call[];
    try {
      parsed = JSON.parse(body) as Call | Call[];
    } catch {
      return [];
    }
    const methods: string[] = [];
    for (const { method, params } of Array.isArray(parsed) ? parsed : [parsed]) {
      if (typeof method !== 'string') continue;
      methods.push(method);
      const name = method === 'eth_getCode' ? `${method} ${String(params?.[0]).toLowerCase()}` : method;
      calls.set(name, (calls.get(name) ?? 0) + 1);
    }
    return methods;
  };
  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    if (count(body).some((method) => hold.includes(method))) {
      onHeld();
      return;
    }
    try {
      const answer = await fetch(target, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
      res.writeHead(answer.status, { 'content-type': 'application/json' });
      res.end(await answer.text());
    } catch {
      res.writeHead(502).end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls,
    firstHeld,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
