import { existsSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CHROMIUM,
  type MemoryHost,
  redirectReceiver,
  signInHost,
  signinStage,
} from '../../../test/oauth-host.ts';

/**
 * An agent host that makes tool calls in parallel, as a trading agent does, meets its access
 * token's expiry (OAUTH_ACCESS_TOKEN_TTL_S, 10 minutes) on all of them at once: the official MCP
 * SDK client then refreshes once per call, each with the same refresh token. A walk as an agent
 * developer found the second refresh read as a stolen token replayed: the grant was revoked, the
 * parallel calls failed ("401 after successful authentication", invalid_grant) and so did every
 * later one, until the person signed in again. A rotated refresh token now refreshes again within
 * REFRESH_REUSE_GRACE_S (adapter.ts), and the grant lives on. The same walk sent the access token
 * to /mcp, the URL most examples name: served as anonymous, it was told only that it is not shaped
 * like a key; now it is told the path that takes it.
 */
const present = existsSync(CHROMIUM);

describe.runIf(present || process.env.CI === 'true')(
  'an agent host signed in: parallel refreshes, the wrong path',
  () => {
    let stage: Awaited<ReturnType<typeof signinStage>>;
    let receiver: Awaited<ReturnType<typeof redirectReceiver>>;

    beforeAll(async () => {
      stage = await signinStage();
      receiver = await redirectReceiver();
    });
    afterAll(async () => {
      await receiver?.close();
      await stage?.close();
    });

    /** A host signed in with the stage's key: its provider holds an access and a refresh token. */
    const signedInHost = async (): Promise<MemoryHost> =>
      (await signInHost(stage, receiver, 'parallel agent')).host;

    const regime = (client: Client) =>
      client.callTool({ name: 'get_market_regime', arguments: { coin: 'ETH', exchange: 'BINANCE' } }).then(
        (result) => (result.isError ? `tool error ${JSON.stringify(result.structuredContent)}` : 'served'),
        (err: Error) => `${err.constructor.name}: ${err.message}`,
      );

    it('three parallel calls that meet an expired token each refresh, and all are served, then the next', async () => {
      const host = await signedInHost();
      const client = new Client({ name: 'agent', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(stage.url, { authProvider: host }));
      expect(await regime(client)).toBe('served');
      // The access token is refused as an expired one is: 401 invalid_token, and the SDK refreshes.
      host.saved = { ...host.saved!, access_token: 'expired-access-token' };
      expect(await Promise.all([regime(client), regime(client), regime(client)])).toEqual([
        'served',
        'served',
        'served',
      ]);
      expect(await regime(client)).toBe('served');
      await client.close();
    });

    it('an access token sent to /mcp instead of /mcp/signin is served as anonymous, and told where it applies', async () => {
      const host = await signedInHost();
      const res = await fetch(new URL('/mcp', stage.url), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          authorization: `Bearer ${host.saved!.access_token}`,
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'tools/call',
          params: { name: 'get_market_regime', arguments: { coin: 'ETH', exchange: 'BINANCE' } },
        }),
      });
      const body = (await res.json()) as {
        result: { structuredContent: { _service: { auth: Record<string, unknown> } } };
      };
      expect(body.result.structuredContent._service.auth).toEqual({
        outcome: 'MALFORMED',
        presented: true,
        tier: 'free',
        detail:
          'the Bearer token is not shaped like a live key (sk_live_…); an OAuth access token is accepted only at /mcp/signin',
      });
    });

    it('revoking one access token ends the sign-in: its refresh token no longer refreshes (README)', async () => {
      const host = await signedInHost();
      const form = (fields: Record<string, string>) => ({
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams({ client_id: host.info!.client_id, ...fields }),
      });
      const revoked = await fetch(
        new URL('/oauth/revoke', stage.url),
        form({ token: host.saved!.access_token }),
      );
      expect(revoked.status).toBe(200);
      const refreshed = await fetch(
        new URL('/oauth/token', stage.url),
        form({ grant_type: 'refresh_token', refresh_token: host.saved!.refresh_token! }),
      );
      expect([refreshed.status, ((await refreshed.json()) as { error?: string }).error]).toEqual([
        400,
        'invalid_grant',
      ]);
    });

    it('a refresh token never outlives its grant: rotation hands on the time the grant has left', async () => {
      const host = await signedInHost();
      const provider = stage.server.channel.oauth!.provider();
      const clientId = host.info!.client_id;
      const first = (await provider.RefreshToken.find(host.saved!.refresh_token!))!;
      const grant = (await provider.Grant.find(first.grantId!))!;
      // The sign-in's own refresh token ends with its grant (OAUTH_REFRESH_TOKEN_TTL_S from the consent).
      expect(first.exp!).toBeLessThanOrEqual(grant.exp!);
      // A grant near its end, as one signed in OAUTH_REFRESH_TOKEN_TTL_S ago less ten minutes is.
      grant.exp = Math.floor(Date.now() / 1_000) + 600;
      await grant.save();
      let refresh = host.saved!.refresh_token!;
      for (let rotation = 1; rotation <= 2; rotation += 1) {
        const res = await fetch(new URL('/oauth/token', stage.url), {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({
            grant_type: 'refresh_token',
            refresh_token: refresh,
            client_id: clientId,
          }),
        });
        const body = (await res.json()) as { refresh_token?: string; error_description?: string };
        expect(res.status, body.error_description).toBe(200);
        refresh = body.refresh_token!;
        const rotated = (await provider.RefreshToken.find(refresh))!;
        expect(rotated.exp!, `rotation ${rotation}`).toBeLessThanOrEqual(grant.exp!);
        expect((await provider.Grant.find(first.grantId!))!.exp, `rotation ${rotation}`).toBe(grant.exp);
      }
    });

    it('a refresh token presented again just after its rotation refreshes, and the first answer stays good', async () => {
      const host = await signedInHost();
      const refresh = host.saved!.refresh_token!;
      const clientId = host.info!.client_id;
      const token = async () => {
        const res = await fetch(new URL('/oauth/token', stage.url), {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: new URLSearchParams({
            grant_type: 'refresh_token',
            refresh_token: refresh,
            client_id: clientId,
          }),
        });
        return { status: res.status, body: (await res.json()) as { access_token?: string; error?: string } };
      };
      const first = await token();
      expect(first.status).toBe(200);
      const second = await token();
      expect(second.status, JSON.stringify(second.body)).toBe(200);
      // Neither answer ended the grant: both access tokens call a tool.
      for (const access of [first.body.access_token!, second.body.access_token!]) {
        const res = await fetch(stage.url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            authorization: `Bearer ${access}`,
          },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'get_market_regime', arguments: { coin: 'ETH', exchange: 'BINANCE' } },
          }),
        });
        expect(res.status).toBe(200);
      }
    });
  },
);
