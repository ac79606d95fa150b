import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { rawRequest } from './raw-http.ts';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

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
    // A raw request: fetch will not send a Host of our choosing.
    const refused = async (path: string, host: string, body: string) =>
      (
        await rawRequest(`${url}${path}`, {
          headers: {
            host,
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
          },
          body,
        })
      ).status;

    const init = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
    });
    expect(await refused('/mcp', 'signals.example.com', init)).toBe(403);
    expect(await refused('/mcp', `signals.example.com:${port}`, init)).toBe(403);
    expect(await refused('/api/keys', 'keys.example.com', '{}')).toBe(403);

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
