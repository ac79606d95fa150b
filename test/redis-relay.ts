import net from 'node:net';

/** A TCP relay to Redis that the test can cut and restore, to simulate Redis going away. */
export function relay(target: URL) {
  const sockets = new Set<net.Socket>();
  let server: net.Server | null = null;
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => socket.destroy());
  };
  return {
    async start(port = 0): Promise<number> {
      server = net.createServer((inbound) => {
        const outbound = net.connect(Number(target.port || 6379), target.hostname);
        track(inbound);
        track(outbound);
        inbound.on('close', () => outbound.destroy());
        outbound.on('close', () => inbound.destroy());
        inbound.pipe(outbound).pipe(inbound);
      });
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
      return (server.address() as net.AddressInfo).port;
    },
    async stop(): Promise<void> {
      const closing = new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
      for (const socket of sockets) socket.destroy();
      await closing;
      server = null;
    },
  };
}
