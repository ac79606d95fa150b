import type { x402ResourceServer } from '@x402/core/server';
import type { PaymentRequired } from '@x402/core/types';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { QUOTE_CACHE_SIZE, type Quote, Quoter, quoteJson, quoteJsonWith } from './quote.ts';
import { createQuoteOnlyFacilitator } from './quote-only-facilitator.ts';
import { type Rail, railPlan } from './rails.ts';
import { createResourceServer } from './resource-server.ts';

const resource = (url = 'http://api.test/x402/get_trade_call') => ({
  url,
  description: 'Composite verdict',
  mimeType: 'application/json',
});

function decodeHeader(quote: Quote): PaymentRequired {
  return JSON.parse(Buffer.from(quote.header, 'base64').toString('utf8')) as PaymentRequired;
}

let rails: Rail[];
let server: x402ResourceServer;

beforeAll(async () => {
  const plan = railPlan(loadConfig({ NODE_ENV: 'test', EVENT_STORE: 'memory' }));
  if (plan.kind === 'off') throw new Error('expected the development rail');
  rails = plan.rails;
  server = await createResourceServer(createQuoteOnlyFacilitator(rails, 'quotes only'), rails);
});

describe('Quoter.quote', () => {
  it('encodes what the resource server builds: the v2 header and the v1 body of the same quote', async () => {
    const quoter = new Quoter(server, rails);
    const quote = await quoter.quote(20_000, resource(), 'payment_required', 'payment required: x');
    const requirements = await quoter.requirements(20_000);
    expect(decodeHeader(quote)).toEqual(
      await server.createPaymentRequiredResponse(requirements, resource(), 'payment required: x'),
    );
    expect(quote.body).toEqual({
      x402Version: 1,
      error: 'payment required: x',
      code: 'payment_required',
      message: 'payment required: x',
      accepts: [
        expect.objectContaining({
          network: 'base-sepolia',
          maxAmountRequired: '20000',
          resource: resource().url,
          payTo: rails[0]!.payTo,
        }),
        // The second development rail: Ethereum Sepolia.
        expect.objectContaining({ network: 'sepolia', maxAmountRequired: '20000', payTo: rails[1]!.payTo }),
      ],
    });
    expect(`${quote.bodyOpen}}`).toBe(JSON.stringify(quote.body));
  });

  it('builds a quote once: asked again, the same quote comes back without a promise', async () => {
    const quoter = new Quoter(server, rails);
    const first = await quoter.quote(20_000, resource(), 'payment_required', 'm');
    const again = quoter.quote(20_000, resource(), 'payment_required', 'm');
    expect(again).not.toBeInstanceOf(Promise);
    expect(again).toBe(first);
  });

  it('hands out a frozen quote, so one answer cannot change what the next is sent', async () => {
    const quoter = new Quoter(server, rails);
    const quote = await quoter.quote(20_000, resource(), 'payment_required', 'm');
    expect(Object.isFrozen(quote)).toBe(true);
    expect(() => {
      (quote.body.accepts[0]!.extra as Record<string, unknown>).name = 'changed';
    }).toThrow(TypeError);
    expect(quote.body.accepts[0]!.extra).toEqual({ name: 'USDC', version: '2' });
    // The requirements the payment flow matches against stay the resource server's own.
    expect(Object.isFrozen(quote.requirements[0]!.extra)).toBe(false);
  });

  it.each([
    ['price', 50_000, resource(), 'payment_required', 'm'],
    ['URL', 20_000, resource('http://other.test/x402/get_trade_call'), 'payment_required', 'm'],
    ['code', 20_000, resource(), 'invalid_payment_header', 'm'],
    ['message', 20_000, resource(), 'payment_required', 'other'],
    ['description', 20_000, { ...resource(), description: 'Other' }, 'payment_required', 'm'],
  ] as const)('quotes a different %s separately', async (_name, price, res, code, message) => {
    const quoter = new Quoter(server, rails);
    const base = await quoter.quote(20_000, resource(), 'payment_required', 'm');
    const other = await quoter.quote(price, res, code, message);
    expect(other).not.toBe(base);
    expect(other.bodyOpen).not.toBe(base.bodyOpen);
  });

  it('keeps an absent description apart from an empty one', async () => {
    const quoter = new Quoter(server, rails);
    const { description: _absent, ...bare } = resource();
    const without = await quoter.quote(20_000, bare, 'payment_required', 'm');
    const empty = await quoter.quote(20_000, { ...bare, description: '' }, 'payment_required', 'm');
    expect(decodeHeader(without).resource).not.toHaveProperty('description');
    expect(decodeHeader(empty).resource).toHaveProperty('description', '');
  });

  it('cannot be confused by field contents that run into the next field', async () => {
    const quoter = new Quoter(server, rails);
    const a = await quoter.quote(20_000, resource(), 'ab', 'c');
    const b = await quoter.quote(20_000, resource(), 'a', 'bc');
    expect(b).not.toBe(a);
    expect(b.body.code).toBe('a');
  });

  it('quotes only url, description and mimeType of a resource', async () => {
    const quoter = new Quoter(server, rails);
    const quote = await quoter.quote(
      20_000,
      { ...resource(), serviceName: 'not quoted' } as ReturnType<typeof resource>,
      'payment_required',
      'm',
    );
    expect(decodeHeader(quote).resource).toEqual(resource());
  });

  it('stays bounded: past its size the oldest quote is dropped and built again when asked', async () => {
    const quoter = new Quoter(server, rails);
    const url = (i: number) => `http://host-${i}.test/x402/get_trade_call`;
    const first = await quoter.quote(20_000, resource(url(0)), 'payment_required', 'm');
    for (let i = 1; i <= QUOTE_CACHE_SIZE; i++) {
      await quoter.quote(20_000, resource(url(i)), 'payment_required', 'm');
    }
    const last = quoter.quote(20_000, resource(url(QUOTE_CACHE_SIZE)), 'payment_required', 'm');
    expect(last).not.toBeInstanceOf(Promise);
    const rebuilt = quoter.quote(20_000, resource(url(0)), 'payment_required', 'm');
    expect(rebuilt).toBeInstanceOf(Promise);
    const again = await rebuilt;
    expect(again).not.toBe(first);
    expect(again.header).toBe(first.header);
  });

  it('quotes each description apart, also after more descriptions than it keeps numbers for', async () => {
    const quoter = new Quoter(server, rails);
    const described = (description: string) => ({ ...resource(), description });
    const first = await quoter.quote(20_000, described('first'), 'payment_required', 'm');
    for (let i = 0; i <= QUOTE_CACHE_SIZE; i++) {
      const quote = await quoter.quote(20_000, described(`other ${i}`), 'payment_required', 'm');
      expect(decodeHeader(quote).resource.description).toBe(`other ${i}`);
    }
    const again = await quoter.quote(20_000, described('first'), 'payment_required', 'm');
    expect(decodeHeader(again).resource.description).toBe('first');
    expect(again.header).toBe(first.header);
    const other = await quoter.quote(20_000, described('other 0'), 'payment_required', 'm');
    expect(decodeHeader(other).resource.description).toBe('other 0');
  });

  it('caches no failure: a rail the server cannot quote fails every time it is asked', async () => {
    const unknown: Rail = { ...rails[0]!, network: 'eip155:999999' };
    const quoter = new Quoter(server, [unknown]);
    await expect(quoter.quote(20_000, resource(), 'payment_required', 'm')).rejects.toThrow();
    const retried = quoter.quote(20_000, resource(), 'payment_required', 'm');
    expect(retried).toBeInstanceOf(Promise);
    await expect(retried).rejects.toThrow();
  });
});

describe('quoteJsonWith', () => {
  it('appends a field already serialised, as quoteJson would serialise it', async () => {
    const quote = await new Quoter(server, rails).quote(20_000, resource(), 'payment_required', 'm');
    const service = { auth: { outcome: 'ABSENT' }, quota: { used: 1 } };
    expect(quoteJsonWith(quote, '_service', JSON.stringify(service))).toBe(
      quoteJson(quote, { _service: service }),
    );
    expect(() => quoteJsonWith(quote, 'accepts', '[]')).toThrow(/already has/);
  });
});

describe('quoteJson', () => {
  const quote = { bodyOpen: '{"x402Version":1,"error":"e","code":"c","message":"m","accepts":[]' } as Quote;
  const body = { x402Version: 1, error: 'e', code: 'c', message: 'm', accepts: [] };

  it('serialises the quote with the tail after it, as JSON.stringify of the merged object would', () => {
    const tail = {
      window: 'daily',
      skipped: undefined,
      _service: { auth: { outcome: 'ABSENT', presented: false, tier: 'free' }, quota: null },
      text: 'quote "q" \u2028 \\ end',
    };
    expect(quoteJson(quote, tail)).toBe(JSON.stringify({ ...body, ...tail }));
    expect(JSON.parse(quoteJson(quote, tail))).toEqual(JSON.parse(JSON.stringify({ ...body, ...tail })));
  });

  it('closes the body when the tail is empty', () => {
    expect(quoteJson(quote, {})).toBe(JSON.stringify(body));
  });

  it.each(['x402Version', 'error', 'code', 'message', 'accepts'])(
    'refuses a tail that overwrites %s',
    (key) => {
      expect(() => quoteJson(quote, { [key]: 'x' })).toThrow(/already has/);
    },
  );
});
