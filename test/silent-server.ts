import { type AddressInfo, createServer, type Socket } from 'node:net';

/**
 * A loopback server that takes every connection and never answers: what a hung peer (a database
 * past its login, a bus, a venue) looks like to a client waiting for its reply. On a port the system
 * hands out, never one another test file takes from a shared block. `sockets` are the connections
 * it took, in order; `onSocket` may write to one (a greeting that starts a protocol). The client
 * resets its connection when it stops: no error of the server's, so such errors are dropped.
 */
export async function silentServer(onSocket?: (socket: Socket) => void) {
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => {});
    onSocket?.(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    sockets,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
