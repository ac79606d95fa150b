import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { serviceSignature } from '../contracts/webhook-verify.ts';
import { requireNats } from './nats-server.ts';
import { freePort } from './ports.ts';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from './webhooks-harness.ts';
import { selfSignedCert } from './webhooks-receiver.ts';

/**
 * The receivers of services/webhooks/README.md, run as printed (only their port changed) in a folder
 * laid out as the README says (key.pem and cert.pem beside it; contracts/ of this repository for the
 * TypeScript one, nothing but Python's standard library for services/webhooks/receiver-example.py,
 * which the README names), against the webhook
 * stack: each must verify and handle a real delivery, answer a redelivery of the same delivery_id
 * without handling it again, and refuse a bad signature.
 */
const reachable = await requireNats();
const repo = fileURLToPath(new URL('..', import.meta.url));
const readme = readFileSync(join(repo, 'services/webhooks/README.md'), 'utf8');
const printed = /## Receiver[\s\S]*?```ts\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
const printedPython = readFileSync(join(repo, 'services/webhooks/receiver-example.py'), 'utf8');
const python = spawnSync('python3', ['--version']).status === 0;
if (!python && process.env.CI === 'true') throw new Error('python3 is missing and CI=true: failing');
if (!python) process.stderr.write('\n*** python3 missing: SKIPPING the Python receiver example ***\n');
const root = mkdtempSync(join(tmpdir(), 'webhooks-receiver-example-'));

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });

/** POSTs a body with these headers to the receiver on 127.0.0.1:port; its status and text. */
function post(port: number, ca: string, body: string, headers: Record<string, string>) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        ca,
        headers: { 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** What a test started, for its afterAll to stop. */
interface Run {
  stack?: WebhookStack;
  child?: ChildProcess;
}

/**
 * Starts the webhook stack and a receiver (`command` in `cwd`, listening on `port` with the
 * certificate `ca` signs), subscribes it to trade calls on `coin`, and checks that it verifies and
 * handles a real delivery and answers that delivery's resend (same delivery_id, newly signed) with
 * 200 without handling it again. Returns the subscription and a reader of what the receiver printed.
 */
async function deliverTo(
  run: Run,
  options: { port: number; ca: string; coin: string; command: string; args: string[]; cwd: string },
) {
  const stack = await startWebhookStack({ settings: { tls: { ca: options.ca } } });
  run.stack = stack;
  const key = await stack.issue();
  const created = await stack.request('POST', '/api/webhooks', key, {
    url: `https://127.0.0.1:${options.port}/`,
    events: ['trade_call'],
    assets: [options.coin],
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const sub = created.body as { id: string; secret: string };

  let out = '';
  const child = spawn(options.command, options.args, {
    cwd: options.cwd,
    env: { ...process.env, WEBHOOK_SECRET: sub.secret },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  run.child = child;
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  await until(
    async () => child.exitCode === null && (await listening(options.port)),
    (up) => up || child.exitCode !== null,
  );
  expect(child.exitCode, out).toBeNull();

  await appendVerdict(stack.store, { coin: options.coin, call: 'BUY', confidence: 50 });
  const log = await until(
    () => stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key),
    (res) =>
      res.body.deliveries[0]?.attempts?.at(-1)?.outcome !== undefined &&
      res.body.deliveries[0].attempts.at(-1).outcome !== 'pending',
  );
  const delivery = log.body.deliveries[0];
  expect(delivery.attempts.at(-1), out).toMatchObject({ outcome: 'succeeded', status: 200 });
  const deliveryId: string = delivery.delivery_id;
  await until(
    () => out,
    (o) => o.includes(deliveryId),
  );

  const resent = await stack.request('POST', `/api/webhooks/${sub.id}/deliveries/${deliveryId}/resend`, key);
  expect(resent.body, out).toMatchObject({ delivery_id: deliveryId, delivered: true, status: 200 });
  expect(child.exitCode, out).toBeNull();
  expect(out.split(deliveryId).length - 1, out).toBe(1);
  return { sub, output: () => out, exitCode: () => child.exitCode };
}

describe.runIf(reachable)("the README's receiver example", () => {
  const run: Run = {};
  afterAll(async () => {
    run.child?.kill('SIGKILL');
    await run.stack?.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('verifies and handles a delivery, handles a redelivery once, and refuses a bad signature', async () => {
    expect(printed).toContain('.listen(8443)');
    expect(printed).toContain("from './contracts/webhook-verify.ts'");
    const tls = selfSignedCert();
    writeFileSync(join(root, 'key.pem'), tls.key);
    writeFileSync(join(root, 'cert.pem'), tls.cert);
    symlinkSync(join(repo, 'contracts'), join(root, 'contracts'));
    symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'));
    const port = await freePort();
    writeFileSync(join(root, 'receiver.ts'), printed.replace('.listen(8443)', `.listen(${port})`));

    const { output } = await deliverTo(run, {
      port,
      ca: tls.cert,
      coin: 'RCVEXA',
      command: process.execPath,
      args: ['--import', 'tsx', 'receiver.ts'],
      cwd: root,
    });

    const refused = await post(
      port,
      tls.cert,
      JSON.stringify({ event: 'trade_call', delivery_id: 'forged', data: {} }),
      {
        'x-service-event': 'trade_call',
        'x-service-delivery': 'forged',
        'x-service-timestamp': String(Math.floor(Date.now() / 1000)),
        'x-service-signature': '0'.repeat(64),
      },
    );
    expect(refused).toEqual({ status: 400, body: 'bad_signature' });
    expect(output()).not.toContain('forged');
  });
});

describe.runIf(reachable && python)("the README's receiver example in Python", () => {
  const dir = mkdtempSync(join(tmpdir(), 'webhooks-receiver-python-'));
  const run: Run = {};
  afterAll(async () => {
    run.child?.kill('SIGKILL');
    await run.stack?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('verifies and handles a delivery, handles a redelivery once, and refuses what verifyWebhook refuses', async () => {
    expect(readme).toContain('`services/webhooks/receiver-example.py`');
    expect(printedPython).toContain("('', 8443)");
    expect(printedPython).not.toMatch(
      /^(?:import|from) (?!hashlib|hmac|json|os|ssl|threading|time|http\.server)/m,
    );
    const tls = selfSignedCert();
    writeFileSync(join(dir, 'key.pem'), tls.key);
    writeFileSync(join(dir, 'cert.pem'), tls.cert);
    const port = await freePort();
    writeFileSync(join(dir, 'receiver-example.py'), printedPython.replace("('', 8443)", `('', ${port})`));

    const { sub, output, exitCode } = await deliverTo(run, {
      port,
      ca: tls.cert,
      coin: 'RCVPYA',
      command: 'python3',
      args: ['receiver-example.py'],
      cwd: dir,
    });

    // What verifyWebhook refuses, the example refuses in the same words.
    const signed = (id: string, at = Math.floor(Date.now() / 1000)) => {
      const body = JSON.stringify({ event: 'trade_call', delivery_id: id, data: {} });
      return {
        body,
        headers: {
          'x-service-event': 'trade_call',
          'x-service-delivery': id,
          'x-service-timestamp': String(at),
          'x-service-signature': serviceSignature(sub.secret, at, body),
        },
      };
    };
    const forged = signed('forged-a');
    expect(
      await post(port, tls.cert, forged.body, { ...forged.headers, 'x-service-signature': '0'.repeat(64) }),
    ).toEqual({ status: 400, body: 'bad_signature' });
    const relabelled = signed('forged-b');
    expect(
      await post(port, tls.cert, relabelled.body, {
        ...relabelled.headers,
        'x-service-delivery': 'forged-c',
      }),
    ).toEqual({ status: 400, body: 'header_mismatch' });
    const stale = signed('forged-d', Math.floor(Date.now() / 1000) - 301);
    expect(await post(port, tls.cert, stale.body, stale.headers)).toEqual({
      status: 400,
      body: 'outside_tolerance',
    });
    const bare = signed('forged-e');
    expect(await post(port, tls.cert, bare.body, { ...bare.headers, 'x-service-timestamp': '12ab' })).toEqual(
      { status: 400, body: 'bad_timestamp' },
    );
    const { 'x-service-signature': _, ...unsigned } = signed('forged-f').headers;
    expect(await post(port, tls.cert, bare.body, unsigned)).toEqual({ status: 400, body: 'missing_header' });
    expect(output()).not.toContain('forged');

    // During a rotation's overlap a receiver already on the new secret finds its signature in
    // X-Service-Signature-New (the example is given the new one; X-Service-Signature is the old one's).
    const overlap = signed('rotated-a');
    expect(
      await post(port, tls.cert, overlap.body, {
        ...overlap.headers,
        'x-service-signature': serviceSignature(
          'whsec_previous',
          Number(overlap.headers['x-service-timestamp']),
          overlap.body,
        ),
        'x-service-signature-new': overlap.headers['x-service-signature'],
      }),
    ).toEqual({ status: 200, body: '' });
    await until(
      () => output(),
      (o) => o.includes('rotated-a'),
    );
    expect(exitCode(), output()).toBeNull();
  });
});
