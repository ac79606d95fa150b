import { existsSync } from 'node:fs';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { BrowserContext } from 'playwright-core';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CHROMIUM,
  consentWithWallet,
  MemoryHost,
  redirectReceiver,
  signinStage,
} from '../../../test/oauth-host.ts';
import { issueKey } from '../../keys/key-commands.ts';

/**
 * The consent page's wallet sign-in fetches its nonce on the sign-in budget: a network whose
 * anonymous product budget is spent (its /mcp traffic, a NAT's) still signs in with a wallet. Past
 * the sign-in budget the page says when to try again, in words.
 */
const present = existsSync(CHROMIUM);

describe.runIf(present || process.env.CI === 'true')('the consent page’s wallet nonce', () => {
  let server: Awaited<ReturnType<typeof signinStage>>['server'];
  let base: string;
  let receiver: Awaited<ReturnType<typeof redirectReceiver>>;
  let stage: Awaited<ReturnType<typeof signinStage>>;
  let browser: BrowserContext;

  beforeAll(async () => {
    stage = await signinStage({
      rateLimited: true,
      env: { RATE_LIMIT_WINDOW_MS: '3600000', RATE_LIMIT_ANONYMOUS: '2' },
    });
    ({ server, base, browser } = stage);
    receiver = await redirectReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
    await stage?.close();
  });

  /** An authorization request as a host starts it: the URL the person's browser opens. */
  const authorizationUrl = async (): Promise<URL> => {
    const host = new MemoryHost(receiver.url, 'wallet host');
    await expect(
      new Client({ name: 'wallet-host', version: '1.0.0' }).connect(
        new StreamableHTTPClientTransport(new URL(`${base}/mcp/signin`), { authProvider: host }),
      ),
    ).rejects.toThrow(UnauthorizedError);
    return host.authorizationUrl!;
  };

  it('signs in with a wallet after the anonymous product budget is spent', async () => {
    const ping = () =>
      fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
    const statuses = [];
    for (let i = 0; i < 3; i++) statuses.push((await ping()).status);
    expect(statuses).toEqual([200, 200, 429]);

    const account = privateKeyToAccount(generatePrivateKey());
    const free = await issueKey(server.store, {
      plan: 'free',
      owner: account.address,
      via: 'siwe',
      stream: `wallet-${account.address.toLowerCase()}`,
    });
    await server.channel.registry.waitFor(free.position);
    const returned = receiver.next();
    await consentWithWallet(
      browser,
      await authorizationUrl(),
      { address: account.address, sign: (message) => account.signMessage({ message }) },
      free.keyId,
    );
    expect((await returned).get('code')).toBeTruthy();
  });

  it('past the sign-in budget, the page says when to try again', async () => {
    const url = await authorizationUrl();
    await browser.clearCookies();
    const page = await browser.newPage();
    try {
      await page.addInitScript(
        'window.ethereum = { request: async ({ method }) => method === "eth_chainId" ? "0x1" : ["0x0000000000000000000000000000000000000001"] };',
      );
      // The sign-in budget's refusal of the nonce, as the rate limit answers it.
      await page.route('**/nonce', (route) =>
        route.fulfill({
          status: 429,
          headers: { 'retry-after': '42', 'content-type': 'text/html; charset=utf-8' },
          body: '<!doctype html><p>Too many sign-in requests</p>',
        }),
      );
      await page.goto(String(url));
      await page.click('#wallet-button');
      await page.waitForSelector('#wallet-status:not(:empty)');
      expect(await page.textContent('#wallet-status')).toBe(
        'Too many sign-in requests came from your network just now. Please try again in 42 seconds.',
      );
    } finally {
      await page.close();
    }
  });
});
