import { connect, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { parseTrustProxy } from '../../contracts/config.ts';
import { Readiness } from '../shared/readiness.ts';
import { buildApp } from './app.ts';
import { defaultMaxConnections } from './connection-caps.ts';

/**
 * Connection caps on a real listener: raw sockets from 127.0.0.1 and, bound to another loopback
 * address, from 127.0.0.2 (Linux routes all of 127/8 to lo). A socket past a cap is closed
 * without an answer; the ones within it are answered and kept alive.
 */
const logger = pino({ level: 'silent' });
let app: FastifyInstance | null = null;
const sockets: Socket[] = [];
afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await app?.close();
  app = null;
});

async function start(
  config: {
    HTTP_MAX_CONNECTIONS?: number;
    HTTP_MAX_CONNECTIONS_PER_ADDRESS?: number;
    TRUST_PROXY?: string;
  },
  log = logger,
): Promise<number> {
  app = await buildApp({
    config: { BODY_LIMIT_BYTES: 1024, ...config },
    logger: log,
    readiness: new Readiness(),
    metrics: null,
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as { port: number }).port;
}

/** A connected socket from `from` (a loopback address). */
function open(port: number, from = '127.0.0.1'): Promise<Socket> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress: from });
    sockets.push(socket);
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve(socket));
    socket.once('close', () => resolve(socket));
  });
}

/** The app on a real listener with a route that answers the address the request is metered by. */
async function startEchoing(config: Parameters<typeof start>[0]): Promise<number> {
  app = await buildApp({
    config: { BODY_LIMIT_BYTES: 1024, ...config },
    logger,
    readiness: new Readiness(),
    metrics: null,
  });
  app.get('/whoami', async (request) => ({ ip: request.ip }));
  await app.listen({ host: '127.0.0.1', port: 0 });
  return (app.server.address() as { port: number }).port;
}

/**
 * Writes `request` on `socket` and resolves with what `read` makes of the bytes received, once it
 * makes something of them (not null); 'closed' when the socket closes first, or already has.
 */
function exchange<T>(
  socket: Socket,
  request: string,
  read: (received: string) => T | null,
): Promise<T | 'closed'> {
  return new Promise((resolve) => {
    if (socket.destroyed) {
      resolve('closed');
      return;
    }
    let received = '';
    const onData = (chunk: Buffer) => {
      received += chunk.toString();
      const answer = read(received);
      if (answer !== null) {
        socket.off('data', onData);
        resolve(answer);
      }
    };
    socket.on('data', onData);
    socket.once('close', () => resolve('closed'));
    socket.write(request);
  });
}

/** GET /whoami on `socket` as a proxy forwarding for `client`: the address answered, or 'closed'. */
function whoAmI(socket: Socket, client: string): Promise<string> {
  return exchange(
    socket,
    `GET /whoami HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: ${client}\r\n\r\n`,
    (received) => /"ip":"([^"]*)"/.exec(received)?.[1] ?? null,
  );
}

/** GET /healthz on `socket`: 'answered' when a 200 comes back (the socket stays open), else 'closed'. */
function ask(socket: Socket): Promise<'answered' | 'closed'> {
  return exchange(socket, 'GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n', (received) =>
    received.includes('\r\n\r\n') ? (received.startsWith('HTTP/1.1 200') ? 'answered' : 'closed') : null,
  );
}

async function outcomes(port: number, count: number, from = '127.0.0.1') {
  const opened: Socket[] = [];
  for (let i = 0; i < count; i++) opened.push(await open(port, from));
  const answers: string[] = [];
  for (const socket of opened) answers.push(await ask(socket));
  return answers;
}

describe('connection caps', () => {
  it('says which address it refused, once a minute per address, in a warning naming the setting', async () => {
    const lines: { level: number; msg: string; address?: string; cap?: number }[] = [];
    const capture = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const port = await start({ HTTP_MAX_CONNECTIONS: 0, HTTP_MAX_CONNECTIONS_PER_ADDRESS: 1 }, capture);
    expect(await outcomes(port, 3)).toEqual(['answered', 'closed', 'closed']);
    expect(await outcomes(port, 2, '127.0.0.2')).toEqual(['answered', 'closed']);
    const refusals = lines.filter((l) => l.msg.includes('HTTP_MAX_CONNECTIONS_PER_ADDRESS'));
    expect(refusals.map((l) => [l.level, l.address, l.cap])).toEqual([
      [40, '127.0.0.1', 1],
      [40, '127.0.0.2', 1],
    ]);
  });

  it('closes a client address past its cap while another address is answered', async () => {
    const port = await start({ HTTP_MAX_CONNECTIONS: 0, HTTP_MAX_CONNECTIONS_PER_ADDRESS: 4 });
    const answers = await outcomes(port, 6);
    expect(answers.filter((a) => a === 'answered')).toHaveLength(4);
    expect(answers.filter((a) => a === 'closed')).toHaveLength(2);
    // 127.0.0.1 still holds its 4 (kept alive): one more is closed, another address is answered.
    expect(await ask(await open(port))).toBe('closed');
    expect(await outcomes(port, 2, '127.0.0.2')).toEqual(['answered', 'answered']);
    // A connection of 127.0.0.1 closed frees its place (once the server has seen the close).
    const held = sockets.find((s) => !s.destroyed && s.localAddress === '127.0.0.1')!;
    const gone = new Promise((resolve) => held.once('close', resolve));
    held.end();
    await gone;
    let answer: string;
    do answer = await ask(await open(port));
    while (answer !== 'answered');
  });

  it('closes every connection past the total cap, whatever its address', async () => {
    const port = await start({ HTTP_MAX_CONNECTIONS: 3, HTTP_MAX_CONNECTIONS_PER_ADDRESS: 0 });
    expect(await outcomes(port, 3)).toEqual(['answered', 'answered', 'answered']);
    expect(await ask(await open(port))).toBe('closed');
    expect(await ask(await open(port, '127.0.0.2'))).toBe('closed');
  });

  it('does not count the peers TRUST_PROXY believes (their clients are many)', async () => {
    const port = await start({
      HTTP_MAX_CONNECTIONS: 0,
      HTTP_MAX_CONNECTIONS_PER_ADDRESS: 2,
      TRUST_PROXY: '127.0.0.1/32',
    });
    expect(await outcomes(port, 4)).toEqual(['answered', 'answered', 'answered', 'answered']);
    expect(await outcomes(port, 3, '127.0.0.2')).toEqual(['answered', 'answered', 'closed']);
  });

  // One reading of TRUST_PROXY for both: the address a request is metered by (request.ip, which
  // the rate limits key anonymous callers by) and whether its connection counts against the
  // proxy's address. Before, the cap read the setting apart: an IPv4 proxy written IPv4-mapped
  // (as a dual-stack host logs it) was believed for the client's address, yet its connections
  // were counted as one client's and closed past the cap.
  /**
   * Two connections from `peer` to a service that caps each address at one, behind
   * TRUST_PROXY=`setting`, each forwarding for a client of its own: whom each is metered as
   * ('closed': the cap closed it).
   */
  async function twoForwarded(setting: string, peer?: string): Promise<[string, string]> {
    const port = await startEchoing({
      HTTP_MAX_CONNECTIONS: 0,
      HTTP_MAX_CONNECTIONS_PER_ADDRESS: 1,
      TRUST_PROXY: setting,
    });
    const first = await open(port, peer);
    const second = await open(port, peer);
    return [await whoAmI(first, '198.51.100.7'), await whoAmI(second, '198.51.100.8')];
  }

  for (const setting of ['127.0.0.1', '127.0.0.0/8', '::ffff:127.0.0.1', '::ffff:127.0.0.0/104', '1']) {
    it(`TRUST_PROXY=${setting}: the client a proxy forwards for is the one metered, and the proxy's connections are not counted`, async () => {
      expect(await twoForwarded(setting)).toEqual(['198.51.100.7', '198.51.100.8']);
    });
  }

  it('a peer TRUST_PROXY does not name is metered by its own address and counted', async () => {
    expect(await twoForwarded('::ffff:127.0.0.1', '127.0.0.2')).toEqual(['127.0.0.2', 'closed']);
  });

  it('TRUST_PROXY=0 believes no one, the sign-in included: the peer is metered and counted', async () => {
    expect(await twoForwarded('0')).toEqual(['127.0.0.1', 'closed']);
    expect(parseTrustProxy('0').any).toBe(false);
  });

  it('derives the default total from the soft open-files limit, less a reserve', () => {
    const limits = (soft: string) =>
      `Limit                     Soft Limit           Hard Limit           Units     \nMax open files            ${soft}                1048576              files     \n`;
    expect(defaultMaxConnections(limits('20000'))).toBe(15_904);
    expect(defaultMaxConnections(limits('1024'))).toBe(768);
    expect(defaultMaxConnections(limits('unlimited'))).toBeNull();
    expect(defaultMaxConnections(null)).toBeNull();
  });
});
