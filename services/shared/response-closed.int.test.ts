import { createServer, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { expect, it } from 'vitest';
import { onResponseClosed } from './response-closed.ts';

/** A request whose client has left before the handler (after an await) listens for its end. */
async function responseOfAClientGone(): Promise<{ res: ServerResponse; done: () => Promise<void> }> {
  let gone!: (res: ServerResponse) => void;
  const handled = new Promise<ServerResponse>((resolve) => {
    gone = resolve;
  });
  const server = createServer((req, res) => {
    req.socket.once('close', () => gone(res));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const socket = connect(port, '127.0.0.1', () => {
    socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n');
  });
  socket.on('error', () => undefined);
  setTimeout(() => socket.destroy(), 20);
  const res = await handled;
  return { res, done: () => new Promise((resolve) => server.close(() => resolve())) };
}

it('runs at once for a response whose client already left, where a close listener never would', async () => {
  const { res, done } = await responseOfAClientGone();
  try {
    let listened = false;
    res.once('close', () => {
      listened = true;
    });
    let ran = 0;
    onResponseClosed(res, () => {
      ran++;
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(listened).toBe(false);
    expect(ran).toBe(1);
  } finally {
    await done();
  }
});

it('runs once when an open response closes later', async () => {
  let ran = 0;
  const server = createServer((_req, res) => {
    onResponseClosed(res, () => {
      ran++;
    });
    res.end('ok');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const answer = await fetch(`http://127.0.0.1:${port}/`);
  expect(await answer.text()).toBe('ok');
  await new Promise((resolve) => setTimeout(resolve, 50));
  expect(ran).toBe(1);
  await new Promise<void>((resolve) => server.close(() => resolve()));
});
