import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrList, parsePortPolicy } from '../../../contracts/setting-lists.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../../../test/webhooks-receiver.ts';
import { forbiddenAddress, STRICT_POLICY } from './address-policy.ts';
import { guardedAgent } from './guarded-agent.ts';
import { checkWebhookUrl, type UrlPolicy } from './url-policy.ts';

/** A resolver with fixed answers, so name-based cases do not depend on the machine's DNS. */
const DNS: Record<string, string[]> = {
  'public.example.com': ['93.184.216.34'],
  'public6.example.com': ['2606:2800:220:1:248:1893:25c8:1946'],
  'loopback.example.com': ['127.0.0.1'],
  'metadata.example.com': ['169.254.169.254'],
  'private.example.com': ['10.1.2.3'],
  'cgnat.example.com': ['100.64.1.1'],
  'ula.example.com': ['fd00::1'],
  'mapped.example.com': ['::ffff:10.0.0.1'],
  'rebind.example.com': ['93.184.216.34', '127.0.0.1'],
  'nat64.example.com': ['64:ff9b::7f00:1'],
  'compat.example.com': ['::7f00:1'],
  'teredo.example.com': ['2001:0:5db8:d822::80ff:fffe'],
  '6to4.example.com': ['2002:a00:1::1'],
  'isatap.example.com': ['2606:4700::5efe:a9fe:a9fe'],
  'scoped.example.com': ['fe80::1%eth0'],
  'translated.example.com': ['::ffff:0:a9fe:a9fe'],
  'public-nat64.example.com': ['64:ff9b::5db8:d822'],
};
const resolve = async (host: string) => {
  const answer = DNS[host];
  if (!answer) throw new Error(`ENOTFOUND ${host}`);
  return answer;
};
const policy: UrlPolicy = { ports: parsePortPolicy('443'), addresses: STRICT_POLICY, resolve };

const HOSTILE = [
  'http://93.184.216.34/hook', // not https
  'ftp://public.example.com/',
  'https://user:pass@public.example.com/',
  'https://user@public.example.com/',
  'https://public.example.com:8443/', // port policy
  'https://public.example.com:22/',
  'https://127.0.0.1/',
  'https://127.1/',
  'https://2130706433/', // decimal
  'https://0x7f000001/', // hex
  'https://0177.0.0.1/', // octal
  'https://0x7f.0.0.1/',
  'https://[::1]/',
  'https://[::ffff:127.0.0.1]/',
  'https://[::ffff:7f00:1]/',
  'https://[0:0:0:0:0:ffff:a9fe:a9fe]/', // mapped metadata
  'https://0.0.0.0/',
  'https://[::]/',
  'https://10.0.0.1/',
  'https://172.16.0.1/',
  'https://172.31.255.255/',
  'https://192.168.1.1/',
  'https://169.254.169.254/latest/meta-data/',
  'https://169.254.0.1/',
  'https://100.64.0.1/', // CGNAT
  'https://100.127.255.254/',
  'https://198.18.0.1/', // benchmarking
  'https://198.19.255.255/',
  'https://192.0.2.1/', // documentation
  'https://198.51.100.7/',
  'https://203.0.113.9/',
  'https://192.0.0.8/',
  'https://224.0.0.1/', // multicast
  'https://239.255.255.250/',
  'https://240.0.0.1/', // reserved
  'https://255.255.255.255/',
  'https://[fc00::1]/', // ULA
  'https://[fd12:3456::1]/',
  'https://[fe80::1]/', // link-local
  'https://[ff02::1]/', // multicast
  'https://[64:ff9b::7f00:1]/', // NAT64
  'https://[2002:7f00:1::]/', // 6to4
  'https://[2001:db8::1]/', // documentation
  'https://[100::1]/', // discard
  'https://localhost/',
  'https://LOCALHOST./',
  'https://app.localhost/',
  'https://printer.local/',
  'https://db.internal/',
  'https://intranet/',
  'https://loopback.example.com/',
  'https://metadata.example.com/',
  'https://private.example.com/',
  'https://cgnat.example.com/',
  'https://ula.example.com/',
  'https://mapped.example.com/',
  'https://rebind.example.com/', // one bad answer is enough
  'https://nat64.example.com/',
  'https://nxdomain.example.com/',
  'not a url',
  // IPv4 spellings the URL parser folds into a dotted quad.
  'https://127.0.0.1./', // trailing dot
  'https://127.1./',
  'https://0.0.0.0./',
  'https://0/',
  'https://017700000001/', // one octal number
  'https://127.000.000.001/',
  'https://0x7f.0x0.0x0.0x1/',
  'https://0300.0250.0.1/', // 192.168.0.1 in octal
  'https://3232235777/', // 192.168.1.1 in decimal
  'https://2852039166/', // 169.254.169.254 in decimal
  'https://0xa9fea9fe/', // and in hex
  'https://%31%32%37.0.0.1/', // percent-encoded
  'https://\uff11\uff12\uff17.\uff10.\uff10.\uff11/', // fullwidth digits
  'https://127\u30020\u30020\u30021/', // ideographic full stops
  'https://192.0.0.170/', // NAT64 discovery
  'https://192.88.99.1/', // 6to4 relay anycast
  'https://0.1.2.3/',
  'https://233.252.0.1/',
  'https://172.16.0.0/',
  // IPv6 forms that embed or translate an internal IPv4 address.
  'https://[::127.0.0.1]/', // IPv4-compatible
  'https://[::10.0.0.1]/',
  'https://[::169.254.169.254]/',
  'https://[::7f00:1]/',
  'https://[::ffff:169.254.169.254]/', // IPv4-mapped
  'https://[::ffff:a00:1]/',
  'https://[::ffff:0:127.0.0.1]/', // IPv4-translated (SIIT)
  'https://[64:ff9b::169.254.169.254]/', // NAT64
  'https://[64:ff9b::10.0.0.1]/',
  'https://[64:ff9b::c0a8:101]/',
  'https://[64:ff9b:1::a9fe:a9fe]/', // NAT64 local-use, /96 inside the /48
  'https://[64:ff9b:1:7f00:0:100::]/', // NAT64 local-use, RFC 6052 /48 position
  'https://[2002:a9fe:a9fe::1]/', // 6to4
  'https://[2002:a00:1::]/',
  'https://[2002:c0a8:101::1]/',
  'https://[2001:0:7f00:1::1]/', // Teredo, loopback server
  'https://[2001:0:5db8:d822::80ff:fffe]/', // Teredo, obfuscated loopback client
  'https://[2606:4700::5efe:7f00:1]/', // ISATAP interface id
  'https://[2606:4700::200:5efe:a9fe:a9fe]/',
  // The rest of IANA's IPv6 special-purpose registry.
  'https://[::]/',
  'https://[0::1]/',
  'https://[100:0:0:1::1]/', // dummy prefix
  'https://[2001:2::1]/', // benchmarking
  'https://[2001:10::1]/', // ORCHID
  'https://[2001:20::1]/', // ORCHIDv2
  'https://[2001:1::1]/', // PCP anycast
  'https://[2001:3::1]/', // AMT
  'https://[2001:4:112::1]/', // AS112
  'https://[3fff::1]/', // documentation (RFC 9637)
  'https://[5f00::1]/', // SRv6 SIDs
  'https://[fec0::1]/', // site-local
  'https://[ff05::1:3]/',
  'https://[fe80::1%25eth0]/', // zone id
  'https://[4000::1]/', // unassigned, outside 2000::/3
  // Userinfo and host confusion.
  'https://public.example.com@127.0.0.1/',
  'https://127.0.0.1:443@public.example.com/',
  'https://public.example.com%40127.0.0.1/',
  'https://a@b@127.0.0.1/',
  'https://localhost:443/',
  'https://localhost.localdomain/',
  'https://metadata.google.internal/',
  'https://router.home.arpa/',
  // Names resolving to embedded forms.
  'https://compat.example.com/',
  'https://teredo.example.com/',
  'https://6to4.example.com/',
  'https://isatap.example.com/',
  'https://scoped.example.com/',
  'https://translated.example.com/',
];

describe('SSRF guard at registration', () => {
  it(`has a table of at least 40 hostile URLs (${HOSTILE.length})`, () => {
    expect(HOSTILE.length).toBeGreaterThanOrEqual(40);
  });

  it.each(HOSTILE)('refuses %s', async (url) => {
    const result = await checkWebhookUrl(url, policy);
    expect(result.ok).toBe(false);
    if (!result.ok) expect(result.reason.length).toBeGreaterThan(0);
  });

  it.each([
    'https://93.184.216.34/hook',
    'https://public.example.com/hook?x=1',
    'https://public6.example.com/',
    'https://[2606:4700:4700::1111]/',
    'https://public.example.com:443/',
    'https://public.example.com./', // trailing dot
    'https://public-nat64.example.com/', // NAT64 of a public address
    'https://[64:ff9b::93.184.216.34]/',
    'https://[::ffff:93.184.216.34]/',
    'https://[2002:5db8:d822::1]/', // 6to4 of a public address
    'https://[2001:0:5db8:d822::f7f7:f7f7]/', // Teredo, public server and client (8.8.8.8)
    'https://[2620:4f:8000::1]/',
    'https://[64:ff9b:1::808:808]/', // NAT64 local-use of 8.8.8.8, /96 inside the /48
    'https://[64:ff9b:1:808:8:800::]/', // the same at the RFC 6052 /48 position
    // Special-purpose but globally reachable (IANA registry): accepted like any global address.
    'https://192.52.193.1/', // AMT
    'https://192.175.48.1/', // AS112 (RFC 7534)
    'https://192.31.196.1/', // AS112 (RFC 7535)
  ])('accepts %s', async (url) => {
    expect((await checkWebhookUrl(url, policy)).ok).toBe(true);
  });

  it('refuses a URL with a fragment, which is never sent over HTTP (an empty one too)', async () => {
    for (const url of ['https://public.example.com/ok#frag', 'https://public.example.com/ok#']) {
      expect(await checkWebhookUrl(url, policy)).toEqual({
        ok: false,
        reason: 'url must not contain a fragment (#…): it is never sent over HTTP',
      });
    }
    // An escaped '#' is part of the path, sent as it is.
    expect((await checkWebhookUrl('https://public.example.com/a%23b', policy)).ok).toBe(true);
  });

  it('refuses a URL with a control character, which URL parsing would drop or strip unseen', async () => {
    for (const url of [
      'https://public.example.com/\u0000',
      '\u0000https://public.example.com/',
      'https://public.exam\tple.com/',
      'https://public.example.com/a\nb',
      'https://public.example.com/\u007f',
    ]) {
      expect(await checkWebhookUrl(url, policy), JSON.stringify(url)).toEqual({
        ok: false,
        reason: 'url must not contain control characters',
      });
    }
    // A space is not dropped: it is sent escaped.
    expect((await checkWebhookUrl('https://public.example.com/a b', policy)).ok).toBe(true);
  });

  it('takes port lists, ranges and *', () => {
    const ports = parsePortPolicy('443,8000-8999');
    expect([443, 8000, 8443, 8999].map(ports)).toEqual([true, true, true, true]);
    expect([80, 444, 9000].map(ports)).toEqual([false, false, false]);
    expect(parsePortPolicy('*')(1)).toBe(true);
    expect(() => parsePortPolicy('0')).toThrow();
  });

  it('exempts only the allow-listed ranges', () => {
    const allow = { allow: parseCidrList('127.0.0.1/32') };
    expect(forbiddenAddress('127.0.0.1', allow)).toBeNull();
    expect(forbiddenAddress('::ffff:127.0.0.1', allow)).toBeNull();
    expect(forbiddenAddress('127.0.0.2', allow)).toMatch(/loopback/);
    expect(forbiddenAddress('10.0.0.1', allow)).toMatch(/private/);
  });

  it('judges embedded IPv4 by the IPv4 rule and says which form it saw', () => {
    expect(forbiddenAddress('::127.0.0.1')).toMatch(/IPv4-compatible for 127.0.0.1, a loopback/);
    expect(forbiddenAddress('64:ff9b::a9fe:a9fe')).toMatch(/NAT64 for 169.254.169.254, a link-local/);
    expect(forbiddenAddress('2001:0:5db8:d822::80ff:fffe')).toMatch(/Teredo client for 127.0.0.1/);
    expect(forbiddenAddress('2002:a00:1::')).toMatch(/6to4 for 10.0.0.1, a private/);
    expect(forbiddenAddress('fe80::1%eth0')).toMatch(/zone id/);
    expect(forbiddenAddress('2606:4700:4700::1111%eth0')).toMatch(/zone id/);
    expect(forbiddenAddress('2606:4700:4700::1111')).toBeNull();
    expect(forbiddenAddress('93.184.216.34')).toBeNull();
  });

  it('names IPv6 addresses for what they are, and finds the IPv4 a local-use NAT64 address carries', () => {
    // ::/96 holds the loopback and the unspecified address, not IPv4-compatible 0.0.0.1 and 0.0.0.0.
    expect(forbiddenAddress('::1')).toBe('::1 is the IPv6 loopback address');
    expect(forbiddenAddress('::')).toBe(':: is the IPv6 unspecified address');
    // Every RFC 6052 position inside 64:ff9b:1::/48 is read, and the refusal names the one that failed.
    expect(forbiddenAddress('64:ff9b:1::808:808')).toBeNull();
    expect(forbiddenAddress('64:ff9b:1::a00:1')).toBe(
      '64:ff9b:1::a00:1 is NAT64 local-use (/96) for 10.0.0.1, a private address',
    );
    expect(forbiddenAddress('64:ff9b:1:7f00:0:100::')).toBe(
      '64:ff9b:1:7f00:0:100:: is NAT64 local-use (/48) for 127.0.0.1, a loopback address',
    );
    expect(forbiddenAddress('64:ff9b:1:a:a:1::')).toBe(
      '64:ff9b:1:a:a:1:: is NAT64 local-use (/56) for 10.10.0.1, a private address',
    );
    // Global at /48 (8.8.10.0) and /96 (1.0.0.0), private at /64: refused.
    expect(forbiddenAddress('64:ff9b:1:808:a:0:100:0')).toBe(
      '64:ff9b:1:808:a:0:100:0 is NAT64 local-use (/64) for 10.0.0.1, a private address',
    );
    expect(forbiddenAddress('64:ff9b:1::1')).toMatch(
      /NAT64 local-use \(\/96\) for 0\.0\.0\.1, a "this network"/,
    );
    // The other embeddings read the right words.
    expect(forbiddenAddress('::ffff:0:a9fe:a9fe')).toMatch(/IPv4-translated for 169.254.169.254/);
    expect(forbiddenAddress('2001:0:808:808::f5ff:fffe')).toMatch(/Teredo client for 10.0.0.1, a private/);
    expect(forbiddenAddress('2606:4700::5efe:a00:1')).toMatch(/ISATAP for 10.0.0.1, a private/);
  });
});

describe('SSRF guard at connect time', () => {
  const tls = selfSignedCert();
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver(tls);
  });
  afterAll(async () => receiver?.close());

  async function post(
    url: string,
    options: { allow?: string; resolve?: (h: string) => Promise<string[]> } = {},
  ) {
    const agent = guardedAgent({
      addresses: { allow: parseCidrList(options.allow ?? '') },
      connectTimeoutMs: 2_000,
      connectionsPerOrigin: 1,
      tls: { ca: tls.cert },
      ...(options.resolve ? { resolve: options.resolve } : {}),
    });
    try {
      const res = await request(url, { method: 'POST', dispatcher: agent, body: '{}' });
      await res.body.text();
      return res.statusCode;
    } catch (err) {
      return (err as { code?: string }).code ?? (err as Error).message;
    } finally {
      await agent.close();
    }
  }

  it('reaches the loopback receiver only through the allow-list', async () => {
    expect(await post(receiver.url, { allow: '127.0.0.1/32' })).toBe(200);
    expect(receiver.received).toHaveLength(1);
  });

  it.each([
    (port: number) => `https://127.0.0.1:${port}/`,
    (port: number) => `https://[::ffff:127.0.0.1]:${port}/`,
    (port: number) => `https://2130706433:${port}/`,
    (port: number) => `https://0x7f000001:${port}/`,
    (port: number) => `https://[::127.0.0.1]:${port}/`,
    (port: number) => `https://[::ffff:0:127.0.0.1]:${port}/`,
    (port: number) => `https://[64:ff9b::127.0.0.1]:${port}/`,
    (port: number) => `https://[2002:7f00:1::1]:${port}/`,
  ])('refuses IP literals in the connector (%#)', async (make) => {
    const before = receiver.received.length;
    expect(await post(make(receiver.port))).toBe('ERR_SSRF_FORBIDDEN');
    expect(receiver.received).toHaveLength(before);
  });

  it('checks the address a name resolves to when connecting (DNS rebinding)', async () => {
    let calls = 0;
    // Public at registration, loopback when the dispatcher connects.
    const rebinding = async () => (calls++ === 0 ? ['93.184.216.34'] : ['127.0.0.1']);
    const url = `https://localhost.rebind.test:${receiver.port}/`;
    expect(
      (await checkWebhookUrl(url, { ports: () => true, addresses: STRICT_POLICY, resolve: rebinding })).ok,
    ).toBe(true);
    const before = receiver.received.length;
    expect(await post(url, { resolve: rebinding })).toBe('ERR_SSRF_FORBIDDEN');
    expect(receiver.received).toHaveLength(before);
  });

  it.each([['::7f00:1'], ['64:ff9b::7f00:1'], ['2002:7f00:1::1'], ['fe80::1%lo']])(
    'refuses a name resolving to %s when connecting',
    async (address) => {
      const before = receiver.received.length;
      const url = `https://hook.example.test:${receiver.port}/`;
      expect(await post(url, { resolve: async () => [address] })).toBe('ERR_SSRF_FORBIDDEN');
      expect(receiver.received).toHaveLength(before);
    },
  );

  it('verifies the certificate against the name after resolving it', async () => {
    const url = `https://localhost:${receiver.port}/`;
    expect(await post(url, { allow: '127.0.0.1/32', resolve: async () => ['127.0.0.1'] })).toBe(200);
    const wrongName = `https://wrong-name.test:${receiver.port}/`;
    expect(await post(wrongName, { allow: '127.0.0.1/32', resolve: async () => ['127.0.0.1'] })).toBe(
      'ERR_TLS_CERT_ALTNAME_INVALID',
    );
  });
});
