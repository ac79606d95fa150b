import Fastify, { type FastifyBaseLogger, type FastifyRequest } from 'fastify';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import {
  flushAccessLines,
  milliseconds,
  OneLinePerRequest,
  RequestLogger,
  requestLoggers,
} from './request-log.ts';

/** A destination that keeps each write it is given. */
function capture() {
  const writes: string[] = [];
  return {
    writes,
    stream: { write: (chunk: string) => writes.push(chunk) },
    lines: () =>
      writes
        .join('')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => JSON.parse(line) as Record<string, unknown>),
  };
}

async function appWith(logger: FastifyBaseLogger, onResponse?: (request: FastifyRequest) => void) {
  // As services/api/app.ts builds it.
  const app = Fastify({
    loggerInstance: logger,
    logController: new OneLinePerRequest(),
    childLoggerFactory: requestLoggers,
  });
  if (onResponse) {
    app.addHook('onResponse', (request, _reply, done) => {
      onResponse(request);
      done();
    });
  }
  app.post('/x402/quote', async (_request, reply) => reply.code(402).send({ code: 'payment_required' }));
  app.get('/boom', async () => {
    throw new Error('boom');
  });
  app.get('/warns', async (request) => {
    request.log.warn({ detail: 'x' }, 'something to say');
    request.log.child({ step: 'inner' }).error('from a child');
    return { ok: true };
  });
  app.get('/chatty', { logLevel: 'debug' }, async (request) => {
    request.log.debug('a debug line');
    return { ok: true };
  });
  app.get('/lazy', async () => ({ ok: true }));
  app.get('/readyz', async () => ({ ready: true }));
  await app.ready();
  return app;
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('the access log line', () => {
  it('of an answered /readyz probe is at debug, not info', async () => {
    for (const level of ['info', 'debug'] as const) {
      const out = capture();
      const app = await appWith(pino({ level }, out.stream));
      try {
        await app.inject({ method: 'GET', url: '/readyz' });
        await app.inject({ method: 'GET', url: '/readyz?verbose=1' });
        await app.inject({ method: 'GET', url: '/lazy' });
        await turn();
        flushAccessLines();
        const completed = out.lines().filter((l) => l.msg === 'request completed');
        expect(completed.map((l) => [l.url, l.level])).toEqual([
          ...(level === 'debug'
            ? [
                ['/readyz', 20],
                ['/readyz?verbose=1', 20],
              ]
            : []),
          ['/lazy', 30],
        ]);
      } finally {
        await app.close();
      }
    }
  });

  it('is what pino would write for the same fields, with the request id and the base bindings', async () => {
    const out = capture();
    const logger = pino({ level: 'info', base: { service: 'signal-service' } }, out.stream);
    const app = await appWith(logger);
    try {
      const res = await app.inject({ method: 'POST', url: '/x402/quote?x="y"&z=\\é', payload: {} });
      expect(res.statusCode).toBe(402);
      await turn();
      const [line] = out.lines();
      expect(line!.url).toBe('/x402/quote?x=%22y%22&z=\\%C3%A9');
      // What pino writes for the same call on a child with the same bindings.
      const reference = capture();
      pino({ level: 'info', base: { service: 'signal-service' } }, reference.stream)
        .child({ reqId: line!.reqId })
        .info(
          { method: 'POST', url: line!.url, statusCode: 402, responseTime: line!.responseTime },
          'request completed',
        );
      const [expected] = reference.lines();
      expect(Object.keys(line!)).toEqual(Object.keys(expected!));
      expect({ ...line, time: 0 }).toEqual({ ...expected, time: 0 });
      expect(Math.abs((line!.time as number) - (expected!.time as number))).toBeLessThan(5_000);
      expect(out.lines()).toHaveLength(1);
    } finally {
      await app.close();
    }
  });

  it('writes the lines of one turn together, each still its own line', async () => {
    const out = capture();
    const app = await appWith(pino({ level: 'info' }, out.stream));
    try {
      const before = out.writes.length;
      await Promise.all(
        Array.from({ length: 5 }, () => app.inject({ method: 'POST', url: '/x402/quote', payload: {} })),
      );
      await turn();
      const written = out.writes.slice(before);
      const completed = out.lines().filter((l) => l.msg === 'request completed');
      expect(completed).toHaveLength(5);
      expect(new Set(completed.map((l) => l.reqId)).size).toBe(5);
      expect(written.length).toBeLessThan(5);
    } finally {
      await app.close();
    }
  });

  it('is not written below info, and goes through pino for a logger that asks for each line', async () => {
    const quiet = capture();
    const quietApp = await appWith(pino({ level: 'warn' }, quiet.stream));
    const meta = capture();
    // A multistream reads each line's level and object from the stream as it is written.
    const multi = pino({ level: 'info' }, pino.multistream([{ stream: meta.stream }]));
    const metaApp = await appWith(multi);
    try {
      await quietApp.inject({ method: 'POST', url: '/x402/quote', payload: {} });
      await metaApp.inject({ method: 'POST', url: '/x402/quote', payload: {} });
      await turn();
      expect(quiet.lines()).toEqual([]);
      expect(meta.lines()).toMatchObject([{ msg: 'request completed', statusCode: 402, level: 30 }]);
      // To the microsecond, as the lines written without pino.
      expect(String(meta.lines()[0]!.responseTime)).toMatch(/^\d+(\.\d{1,3})?$/);
    } finally {
      await quietApp.close();
      await metaApp.close();
    }
  });

  it("hands the turn's access lines over at once when asked (before a SIGKILL of its own)", async () => {
    const out = capture();
    const app = await appWith(pino({ level: 'info' }, out.stream));
    try {
      await app.inject({ method: 'POST', url: '/x402/quote', payload: {} });
      // Held for the end of the turn.
      expect(out.lines()).toEqual([]);
      flushAccessLines();
      expect(out.lines()).toMatchObject([{ msg: 'request completed', statusCode: 402 }]);
      await turn();
      expect(out.lines()).toHaveLength(1);
    } finally {
      await app.close();
    }
  });

  it('redacts secret-looking query values, and key text anywhere in the URL, on every line that names it', async () => {
    const KEY = 'sk_live_WmWGq3b7Yx2cV9kP0aZ1fHnL4sDtR8uE6jIoM5yBwXe';
    for (const level of ['info', 'debug'] as const) {
      const out = capture();
      const app = await appWith(pino({ level }, out.stream));
      try {
        const urls = [
          `/lazy?api_key=${KEY}&coin=BTC`,
          '/lazy?token=t0k&access_token=at&code=c0de&client_secret=cs&window=7d&Api%5FKey=k2',
          '/lazy?q=sk_test_abc&after=12&x=Bearer%20sk_live_abc',
          '/lazy?accessToken=c4mel1&clientSecret=c4mel2&privateKey=c4mel3&refreshTOKEN=c4mel4&tokenCount=2&monkey=m&keyId=k',
          '/lazy?clientAPIToken=c4mel5&userAPIKey=c4mel6&errorCode=E42&zipCode=75001&statusCode=200',
          '/lazy?authCode=c0de1&otpCode=c0de2&verificationCode=c0de3&resetCode=c0de4&inviteCode=c0de5',
          `/lazy?${KEY}`,
          `/boom?key=${KEY}`,
          `/nowhere/${KEY}?api_key=${KEY}`,
          `/readyz?secret=${KEY}`,
        ];
        for (const url of urls) await app.inject({ method: 'GET', url });
        await turn();
        flushAccessLines();
        const text = out.writes.join('');
        for (const secret of [
          KEY,
          'sk_test_abc',
          'sk_live_abc',
          't0k',
          '=at',
          'c0de',
          '=cs',
          'k2',
          'c4mel1',
          'c4mel2',
          'c4mel3',
          'c4mel4',
          'c4mel5',
          'c4mel6',
          'c0de1',
          'c0de2',
          'c0de3',
          'c0de4',
          'c0de5',
        ]) {
          expect(text, `${level}: ${secret}`).not.toContain(secret);
        }
        const completed = out.lines().filter((l) => l.msg === 'request completed');
        // Sorted: an answered probe's line goes through pino at once, the others at the end of the turn.
        expect(completed.map((l) => l.url).sort()).toEqual(
          [
            '/lazy?api_key=[redacted]&coin=BTC',
            '/lazy?token=[redacted]&access_token=[redacted]&code=[redacted]&client_secret=[redacted]&window=7d&Api%5FKey=[redacted]',
            '/lazy?q=[redacted]&after=12&x=[redacted]',
            '/lazy?accessToken=[redacted]&clientSecret=[redacted]&privateKey=[redacted]&refreshTOKEN=[redacted]&tokenCount=2&monkey=m&keyId=k',
            '/lazy?clientAPIToken=[redacted]&userAPIKey=[redacted]&errorCode=E42&zipCode=75001&statusCode=200',
            '/lazy?authCode=[redacted]&otpCode=[redacted]&verificationCode=[redacted]&resetCode=[redacted]&inviteCode=[redacted]',
            '/lazy?[redacted]',
            '/boom?key=[redacted]',
            '/nowhere/[redacted]?api_key=[redacted]',
            ...(level === 'debug' ? ['/readyz?secret=[redacted]'] : []),
          ].sort(),
        );
        // The 500's error line names the request, as Fastify's does, with the URL redacted.
        expect(out.lines().find((l) => l.level === 50)).toMatchObject({
          req: { method: 'GET', url: '/boom?key=[redacted]' },
        });
        expect(out.lines().map((l) => l.msg)).toContain(
          'Route GET:/nowhere/[redacted]?api_key=[redacted] not found',
        );
        if (level === 'debug') {
          const incoming = out.lines().filter((l) => l.msg === 'incoming request');
          expect(incoming).toHaveLength(urls.length);
          expect(incoming[0]).toMatchObject({ req: { url: '/lazy?api_key=[redacted]&coin=BTC' } });
        }
      } finally {
        await app.close();
      }
    }
  });

  it('logs a failed request at once, at error level', async () => {
    const out = capture();
    const app = await appWith(pino({ level: 'info' }, out.stream));
    try {
      const res = await app.inject({ method: 'GET', url: '/boom' });
      expect(res.statusCode).toBe(500);
      // Before the turn ends: the error line is not held back with the access lines.
      expect(out.lines().some((l) => l.level === 50)).toBe(true);
    } finally {
      await app.close();
    }
  });

  it('writes a line logged through request.log with the request id, from the request and from its children', async () => {
    const out = capture();
    const app = await appWith(pino({ level: 'info' }, out.stream));
    try {
      await app.inject({ method: 'GET', url: '/warns' });
      await turn();
      const lines = out.lines();
      const completed = lines.find((l) => l.msg === 'request completed')!;
      expect(lines.find((l) => l.msg === 'something to say')).toMatchObject({
        level: 40,
        detail: 'x',
        reqId: completed.reqId,
      });
      expect(lines.find((l) => l.msg === 'from a child')).toMatchObject({
        level: 50,
        step: 'inner',
        reqId: completed.reqId,
      });
    } finally {
      await app.close();
    }
  });

  it('builds no pino child for a request that only completes, and a real one for a route with its own level', async () => {
    const out = capture();
    const seen: { lazy: boolean; pending: boolean }[] = [];
    const app = await appWith(pino({ level: 'info' }, out.stream), (request) => {
      const log = request.log as unknown;
      seen.push({
        lazy: log instanceof RequestLogger,
        pending: log instanceof RequestLogger && log.pending() !== null,
      });
    });
    try {
      await app.inject({ method: 'GET', url: '/lazy' });
      await app.inject({ method: 'GET', url: '/warns' });
      await app.inject({ method: 'GET', url: '/chatty' });
      await turn();
      expect(seen).toEqual([
        { lazy: true, pending: true },
        { lazy: true, pending: false },
        { lazy: false, pending: false },
      ]);
      // The route's own level applies: its debug line is written, with the request id.
      expect(out.lines().find((l) => l.msg === 'a debug line')).toMatchObject({
        level: 20,
        reqId: expect.any(String),
      });
    } finally {
      await app.close();
    }
  });

  it('is what pino would write when the request id is redacted or serialised, through the child itself', async () => {
    const configs: [pino.LoggerOptions, (reqId: unknown) => void][] = [
      [{ redact: { paths: ['reqId'], censor: 'x' } }, (reqId) => expect(reqId).toBe('x')],
      [{ redact: { paths: ['*.secret'], censor: 'x' } }, (reqId) => expect(reqId).toMatch(/^req-/)],
      [
        { serializers: { reqId: (id: string) => `id:${id.slice(0, 4)}` } },
        (reqId) => expect(reqId).toBe('id:req-'),
      ],
    ];
    for (const [config, check] of configs) {
      const out = capture();
      const app = await appWith(pino({ level: 'info', ...config }, out.stream));
      try {
        await app.inject({ method: 'POST', url: '/x402/quote', payload: {} });
        await turn();
        const [line] = out.lines();
        const reference = capture();
        pino({ level: 'info', ...config }, reference.stream)
          .child({ reqId: 'req-1' })
          .info(
            { method: 'POST', url: '/x402/quote', statusCode: 402, responseTime: line!.responseTime },
            'request completed',
          );
        const [expected] = reference.lines();
        expect(Object.keys(line!)).toEqual(Object.keys(expected!));
        expect({ ...line, time: 0, reqId: 0 }).toEqual({ ...expected, time: 0, reqId: 0 });
        check(line!.reqId);
      } finally {
        await app.close();
      }
    }
  });

  it('writes the response time to the microsecond, as the number it rounds to', () => {
    const cases: [number, string][] = [
      [0, '0'],
      [0.0004, '0'],
      [0.0005, '0.001'],
      [0.8123459999, '0.812'],
      [0.81, '0.81'],
      [0.8, '0.8'],
      [0.0999, '0.1'],
      [12.3456, '12.346'],
      [999.9996, '1000'],
      [0.1 + 0.2, '0.3'],
      // Past the small-integer range, and what is not finite: as pino writes them.
      [2_147_483.6479, '2147483.648'],
      [5_000_000.2504, '5000000.2504'],
      [-0.0001234, '-0.0001234'],
      [Number.NaN, 'null'],
      [Number.POSITIVE_INFINITY, 'null'],
    ];
    for (const [value, text] of cases) expect(milliseconds(value), String(value)).toBe(text);
    for (let i = 0; i < 20_000; i++) {
      // Up to 2^31 µs, the range written from integers.
      const value = Math.min(Math.random() * 10 ** (Math.random() * 8 - 2), 2_147_483.6);
      const text = milliseconds(value);
      expect(JSON.parse(text)).toBe(Math.round(value * 1_000) / 1_000);
      // No trailing zero after the point, as a number prints.
      expect(text).not.toMatch(/\.\d*0$/);
    }
  });

  it("writes the time of the line's own millisecond, and a time function of the logger's own", async () => {
    const out = capture();
    const app = await appWith(pino({ level: 'info' }, out.stream));
    const custom = capture();
    const customApp = await appWith(
      pino({ level: 'info', timestamp: () => ',"time":"then"' }, custom.stream),
    );
    try {
      for (let i = 0; i < 3; i++) {
        const before = Date.now();
        await app.inject({ method: 'POST', url: '/x402/quote', payload: {} });
        await turn();
        const time = out.lines().at(-1)!.time as number;
        expect(time).toBeGreaterThanOrEqual(before);
        expect(time).toBeLessThanOrEqual(Date.now());
        await new Promise((resolve) => setTimeout(resolve, 3));
      }
      await customApp.inject({ method: 'POST', url: '/x402/quote', payload: {} });
      await turn();
      expect(custom.lines()[0]!.time).toBe('then');
    } finally {
      await app.close();
      await customApp.close();
    }
  });
});
