import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type OAuthClientProvider, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import type { BrowserContext, Page } from 'playwright-core';
import { MemoryCache } from '../adapters/cache/memory.ts';
import type { Cache } from '../adapters/cache/port.ts';
import { launchChromium as launchProfile } from './chromium.ts';
import { startKeyedServer } from './keyed-harness.ts';
import { freePort } from './ports.ts';

/**
 * Test helpers that play an MCP host signing in: a redirect receiver on loopback, the SDK's
 * client provider kept in memory, and headless Chromium doing what the person does on the page.
 */

export { CHROMIUM } from './chromium.ts';

/** Where the authorization server sends the browser back: each visit resolves the next wait. */
export async function redirectReceiver(): Promise<{
  url: string;
  next(): Promise<URLSearchParams>;
  close(): Promise<void>;
}> {
  const waiting: ((params: URLSearchParams) => void)[] = [];
  const arrived: URLSearchParams[] = [];
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    // Only the redirect counts (the browser also asks for /favicon.ico).
    if (url.pathname !== '/callback') {
      res.writeHead(404).end();
      return;
    }
    const params = url.searchParams;
    const waiter = waiting.shift();
    if (waiter) waiter(params);
    else arrived.push(params);
    res.writeHead(200, { 'content-type': 'text/plain' }).end('signed in: you may close this window');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/callback`,
    next: () => {
      const early = arrived.shift();
      return early ? Promise.resolve(early) : new Promise((resolve) => waiting.push(resolve));
    },
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The SDK's OAuthClientProvider for a host that keeps everything in memory. */
export class MemoryHost implements OAuthClientProvider {
  info: OAuthClientInformationMixed | undefined;
  saved: OAuthTokens | undefined;
  verifier = '';
  authorizationUrl: URL | undefined;

  constructor(
    private readonly redirect: string,
    private readonly name = 'SDK test host',
  ) {}

  get redirectUrl() {
    return this.redirect;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: this.name,
      redirect_uris: [this.redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(info: OAuthClientInformationMixed) {
    this.info = info;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(tokens: OAuthTokens) {
    this.saved = tokens;
  }
  redirectToAuthorization(url: URL) {
    this.authorizationUrl = url;
  }
  saveCodeVerifier(verifier: string) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}

/** Chromium for the consent page. */
export const launchChromium = () => launchProfile('oauth');

/**
 * The sign-in suites' stage: a keyed server (in-process cache) on a free port whose issuer is its
 * own loopback origin, a pro key, and Chromium for the consent page. `rateLimited` puts the
 * service's rate limit in front, with `env`'s settings beside the issuer.
 */
export async function signinStage(
  options: { rateLimited?: boolean; env?: Record<string, string>; cache?: Cache } = {},
) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const server = await startKeyedServer({
    cache: options.cache ?? new MemoryCache(),
    port,
    env: { ...options.env, PUBLIC_BASE_URL: base },
    ...(options.rateLimited ? { rateLimited: true } : {}),
  });
  const key = (await server.issue('pro')).key;
  const chromium = await launchChromium().catch(async (err: unknown) => {
    await server.close();
    throw err;
  });
  return {
    server,
    base,
    url: new URL(`${base}/mcp/signin`),
    key,
    browser: chromium.browser,
    async close() {
      await chromium.close();
      await server.close();
    },
  };
}

/**
 * What the person does: opens the authorization URL, signs in with their API key on the page,
 * allows. Cookies are cleared first: each consent starts signed out, as a new person would.
 */
export async function consentWithKey(browser: BrowserContext, authorizationUrl: URL | string, key: string) {
  await browser.clearCookies();
  const page = await browser.newPage();
  try {
    await page.goto(String(authorizationUrl));
    await page.fill('#api_key', key);
    await page.click('#allow');
    await page.waitForURL(/\/callback\?/);
  } finally {
    await page.close();
  }
}

/**
 * A host signed in through the whole flow with the stage's key: the SDK client meets the 401 and
 * sends the person to the authorization URL (anything but UnauthorizedError there is thrown), the
 * person allows in Chromium, the host exchanges the code. The host's provider then holds an
 * access and a refresh token; the code it exchanged is returned beside it.
 */
export async function signInHost(
  stage: { url: URL; key: string; browser: BrowserContext },
  receiver: { url: string; next(): Promise<URLSearchParams> },
  name: string,
): Promise<{ host: MemoryHost; code: string }> {
  const host = new MemoryHost(receiver.url, name);
  const refused = await new Client({ name: 'agent', version: '1.0.0' })
    .connect(new StreamableHTTPClientTransport(stage.url, { authProvider: host }))
    .then(
      () => new Error('the host connected before signing in'),
      (err: unknown) => (err instanceof UnauthorizedError ? null : err),
    );
  if (refused !== null) throw refused;
  const returned = receiver.next();
  await consentWithKey(stage.browser, host.authorizationUrl!, stage.key);
  const code = (await returned).get('code')!;
  await new StreamableHTTPClientTransport(stage.url, { authProvider: host }).finishAuth(code);
  return { host, code };
}

/**
 * The same with a wallet: the page's Sign-In with Ethereum talks to `window.ethereum`, here a
 * stand-in whose requests are answered in Node by the test's account (the signature is real).
 */
export async function consentWithWallet(
  browser: BrowserContext,
  authorizationUrl: URL | string,
  wallet: { address: string; sign(message: string): Promise<string> },
  keyId: string,
  /** Looks at the key choice before the key is picked (an accessibility check). */
  inspect?: (page: Page) => Promise<void>,
) {
  await browser.clearCookies();
  const page = await browser.newPage();
  try {
    await page.exposeFunction('__testWallet', async (method: string, params: unknown[]) => {
      if (method === 'eth_requestAccounts') return [wallet.address];
      if (method === 'eth_chainId') return '0x1';
      if (method === 'personal_sign') return wallet.sign(String(params[0]));
      throw new Error(`unsupported wallet method ${method}`);
    });
    await page.addInitScript(
      'window.ethereum = { request: ({ method, params }) => window.__testWallet(method, params ?? []) };',
    );
    await page.goto(String(authorizationUrl));
    await page.click('#wallet-button');
    // The page either shows the key choice or says why the sign-in failed.
    await page.waitForSelector('#choose, #wallet-status:not(:empty), .error');
    const refused = await page.$('.error, #wallet-status:not(:empty)');
    if (refused) throw new Error(`wallet sign-in refused: ${await refused.textContent()}`);
    await inspect?.(page);
    await page.check(`input[name="key_id"][value="${keyId}"]`);
    await page.click('#choose');
    await page.waitForURL(/\/callback\?/);
  } finally {
    await page.close();
  }
}
