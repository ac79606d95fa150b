import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from '../../../test/service-harness.ts';

/**
 * The consent page's forms refused (a field left out, a value not accepted, a field the form does
 * not have), posted over plain HTTP as the page's own forms post them: the page answers 400 with
 * the refusal in the words every other channel uses (contracts/issue-text.ts: what the field must
 * be), never zod's ("Invalid input: expected string, received undefined"), and never shows back
 * the API key or the signature that was sent.
 */

const ZOD_WORDING = /Invalid input|received|expected|Too (small|big)|Unrecognized key/;
const SECRET_KEY = `sk_live_${'S'.repeat(43)}`;
const SECRET_SIGNATURE = `0xZZ${'5e'.repeat(40)}`;

let running: TestService;
let url: string;
/** The cookies of the interaction (name=value), as the browser keeps them. */
const cookies = new Map<string, string>();
let uid: string;

const keep = (res: Response) => {
  for (const line of res.headers.getSetCookie()) {
    const [pair] = line.split(';');
    const at = pair!.indexOf('=');
    cookies.set(pair!.slice(0, at).trim(), pair!.slice(at + 1));
  }
};
const cookieHeader = () => [...cookies].map(([name, value]) => `${name}=${value}`).join('; ');

beforeAll(async () => {
  running = await startTestService(['api']);
  url = running.service.url;
  const registered = await fetch(`${url}/oauth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      client_name: 'form refusals host',
      redirect_uris: ['http://127.0.0.1:9/callback'],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
      scope: 'mcp',
    }),
  });
  expect(registered.status).toBe(201);
  const client = (await registered.json()) as { client_id: string };
  const verifier = randomBytes(32).toString('base64url');
  const authorize = new URL(`${url}/oauth/authorize`);
  for (const [name, value] of Object.entries({
    response_type: 'code',
    client_id: client.client_id,
    redirect_uri: 'http://127.0.0.1:9/callback',
    scope: 'mcp',
    state: randomBytes(8).toString('hex'),
    resource: `${url}/mcp/signin`,
    code_challenge_method: 'S256',
    code_challenge: createHash('sha256').update(verifier).digest('base64url'),
  }))
    authorize.searchParams.set(name, value);
  const started = await fetch(authorize, { redirect: 'manual' });
  expect(started.status).toBe(303);
  keep(started);
  const to = new URL(started.headers.get('location')!, url);
  expect(to.pathname).toMatch(/^\/oauth\/interaction\/[^/]+$/);
  uid = to.pathname.split('/').at(-1)!;
  const page = await fetch(to, { headers: { cookie: cookieHeader() } });
  expect(page.status).toBe(200);
  keep(page);
}, 60_000);
afterAll(async () => {
  await running?.stop();
});

/** Posts the consent page's form `step` as the page does; the answer's status, page and refusal text. */
async function post(step: 'key' | 'wallet', form: Record<string, string>) {
  const res = await fetch(`${url}/oauth/interaction/${uid}/${step}`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', cookie: cookieHeader() },
    body: new URLSearchParams(form).toString(),
  });
  keep(res);
  const page = await res.text();
  const shown = /<p class="error" id="consent-error"[^>]*>([^<]*)<\/p>/.exec(page)?.[1];
  const error = shown?.replace(/&#(\d+);/g, (_, code: string) => String.fromCharCode(Number(code)));
  return { status: res.status, type: res.headers.get('content-type'), page, error };
}

describe("the consent page's forms refused in words of ours, the key and signature never shown back", () => {
  const cases: { name: string; step: 'key' | 'wallet'; form: Record<string, string>; error: string }[] = [
    {
      name: 'an API key form without api_key',
      step: 'key',
      form: {},
      error: 'api_key is required: it must be a string of 1 to 200 characters',
    },
    {
      name: 'an API key form with a field it does not have',
      step: 'key',
      form: { api_key: SECRET_KEY, remember: 'yes' },
      error: 'unknown field "remember"',
    },
    {
      name: 'an API key past its bounds',
      step: 'key',
      form: { api_key: `${SECRET_KEY}${'x'.repeat(200)}` },
      error: 'api_key must be a string of 1 to 200 characters',
    },
    {
      name: 'a wallet form without signature',
      step: 'wallet',
      form: { message: 'example.com wants you to sign in' },
      error: 'signature is required: it must be a string',
    },
    {
      name: 'a wallet form with a signature that is not hex',
      step: 'wallet',
      form: { message: 'example.com wants you to sign in', signature: SECRET_SIGNATURE },
      error: 'signature: 0x-prefixed hex',
    },
  ];

  for (const c of cases) {
    it(c.name, async () => {
      const answer = await post(c.step, c.form);
      expect(answer.status).toBe(400);
      expect(answer.type).toMatch(/^text\/html/);
      expect(answer.page).toContain('<title>Error: Sign in — allow an MCP host</title>');
      expect(answer.error).toBe(c.error);
      expect(answer.error).not.toMatch(ZOD_WORDING);
      expect(answer.page).not.toContain(SECRET_KEY);
      expect(answer.page).not.toContain(SECRET_SIGNATURE);
      expect(answer.page).not.toContain(SECRET_SIGNATURE.slice(4, 40));
    });
  }

  it('a JSON body is refused 415 naming the form type the page takes, not application/json', async () => {
    const res = await fetch(`${url}/oauth/interaction/${uid}/key`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/json', cookie: cookieHeader() },
      body: JSON.stringify({ api_key: SECRET_KEY }),
    });
    expect(res.status).toBe(415);
    const body = (await res.json()) as { code: string; message: string };
    expect(body.code).toBe('UNSUPPORTED_MEDIA_TYPE');
    expect(body.message).toBe('send the form as application/x-www-form-urlencoded');
  });

  it('the interaction is still live after the refusals: the key form still answers its page', async () => {
    const answer = await post('key', { api_key: '' });
    expect(answer.status).toBe(400);
    expect(answer.error).toBe('api_key: enter your API key');
  });
});
