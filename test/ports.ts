import { type AddressInfo, createServer } from 'node:net';

/**
 * A loopback port that was free a moment ago: bound, read and released. Tests use it both to
 * start a server of their own and as a port where nothing listens.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** A loopback port from `from` to `to` that was free a moment ago (tried from a random start). */
export async function freePortIn(from: number, to: number): Promise<number> {
  const span = to - from + 1;
  const start = Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = from + ((start + i) % span);
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
  throw new Error(`no free loopback port from ${from} to ${to}`);
}
