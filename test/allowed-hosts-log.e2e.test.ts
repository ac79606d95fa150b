import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

/** One raw request (fetch will not send a Host of our choosing); resolves with the status. */
function rawRequest(port: number, head: string, body = ''): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.write(
        `${head}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    });
    let data = '';
    socket.on('data', (chunk) => {
      data += chunk;
    });
    socket.on('end', () => resolve(Number(data.split(' ')[1])));
    socket.on('error', reject);
  });
}

/**
 * A service reached by a name not in ALLOWED_HOSTS (put behind a proxy serving
 * https://signals.example.com without the setting) refuses every MCP call and free-key sign-in with
 * 403 'Host not allowed'. The operator's log now says which name and which setting, once a minute
 * per name; before, it held only the request lines' `statusCode: 403`.
 */
describe('a Host refused by ALLOWED_HOSTS', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'allowed-hosts-'));
  let service: ServiceProcess;

  afterAll(async () => {
    service?.child.kill('SIGTERM');
    await service?.exit;
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('is named in a warning with the setting to change, on /mcp and /api/keys', async () => {
    service = runServiceProcess({ DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    await expect
      .poll(() => service.lines.find((l) => l.msg === 'service started') ?? service.child.exitCode, {
        interval: 100,
        timeout: 90_000,
      })
      .toBeTruthy();
    const url = service.lines.find((l) => l.msg === 'service started')?.url as string;
    expect(url, service.stderr).toBeDefined();
    const port = Number(new URL(url).port);

    const init = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    expect(await rawRequest(port, 'POST /mcp HTTP/1.1\r\nHost: signals.example.com', init)).toBe(403);
    expect(await rawRequest(port, `POST /mcp HTTP/1.1\r\nHost: signals.example.com:${port}`, init)).toBe(403);
    expect(await rawRequest(port, 'POST /api/keys HTTP/1.1\r\nHost: keys.example.com', '{}')).toBe(403);

    const warned = (name: string) =>
      service.lines.filter(
        (l) =>
          l.level === 40 &&
          l.msg ===
            `request refused 403 'Host not allowed': Host ${name} is not in ALLOWED_HOSTS (the DNS-rebinding guard of /mcp and /api/keys); if this service is reached by that name, add it to ALLOWED_HOSTS`,
      ).length;
    await expect.poll(() => warned('keys.example.com'), { interval: 100 }).toBe(1);
    // Once a minute per name, whatever the port.
    expect(warned('signals.example.com')).toBe(1);
  }, 120_000);
});
