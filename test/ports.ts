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
