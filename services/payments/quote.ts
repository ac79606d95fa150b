import type { x402ResourceServer } from '@x402/core/server';
import type { PaymentRequired, PaymentRequirements, ResourceInfo } from '@x402/core/types';
import { encodePaymentRequired, type V1Requirement, v1Accepts } from './codecs.ts';
import type { Rail } from './rails.ts';

/** The v1 402 body, plus `code`/`message` for people reading it. */
export interface QuoteBody {
  x402Version: 1;
  error: string;
  code: string;
  message: string;
  accepts: V1Requirement[];
}

export interface Quote {
  requirements: PaymentRequirements[];
  /** v2 `PAYMENT-REQUIRED` header value. */
  header: string;
  body: QuoteBody;
  /**
   * `body` already serialised, without its closing brace: an answer appends its own fields
   * (`_service`, a quota window) with {@link quoteJson} instead of serialising the quote again.
   */
  bodyOpen: string;
}

/**
 * Quotes kept per (price, code, message, resource). The resource URL carries the request's Host
 * and query, which a client chooses, so the cache is bounded: past this many, the oldest goes.
 */
export const QUOTE_CACHE_SIZE = 512;

/**
 * The longest resource description a quote carries. A quote rides in the PAYMENT-REQUIRED header
 * and comes back in the payer's PAYMENT-SIGNATURE, both kept under the 8 KiB many proxies buffer a
 * header in; a tool's whole description (up to ~930 characters, the bazaar extension beside it
 * ~4.8 KB) put get_track_record's header at 8,364 on two rails. The whole description is in
 * tools/list, /.well-known/x402 and the OpenAPI document.
 */
export const QUOTED_DESCRIPTION_CHARS = 160;

/** A description as a quote carries it: whole when short, else cut at a word with an ellipsis. */
export function quotedDescription(description: string): string {
  if (description.length <= QUOTED_DESCRIPTION_CHARS) return description;
  const cut = description.slice(0, QUOTED_DESCRIPTION_CHARS - 1);
  const space = cut.lastIndexOf(' ');
  return `${(space > 0 ? cut.slice(0, space) : cut).replace(/[\s,;:(]+$/, '')}…`;
}

/**
 * A resource as a quote names it, its description cut (quotedDescription): what the 402 carries,
 * and what a paid call names to the facilitator for a v1 payment, which carries no resource.
 */
export function quotedResource<R extends { description?: string }>(resource: R): R {
  return resource.description === undefined
    ? resource
    : { ...resource, description: quotedDescription(resource.description) };
}

const QUOTE_BODY_KEYS: ReadonlySet<string> = new Set(['x402Version', 'error', 'code', 'message', 'accepts']);

/**
 * The quote's body with `tail` after it, byte for byte what `JSON.stringify({ ...quote.body,
 * ...tail })` gives (JSON.stringify drops undefined values, and so does this). A tail key that
 * would overwrite a quote field is a programming error, not a shape to reproduce.
 */
export function quoteJson(quote: Quote, tail: Record<string, unknown>): string {
  let json = quote.bodyOpen;
  for (const key in tail) {
    if (QUOTE_BODY_KEYS.has(key)) throw new Error(`the quote body already has ${key}`);
    const value = tail[key];
    if (value === undefined) continue;
    json += `,${JSON.stringify(key)}:${JSON.stringify(value)}`;
  }
  return `${json}}`;
}

/** The quote's body with one more field whose value is already JSON: `{...body, [key]: JSON.parse(json)}`. */
export function quoteJsonWith(quote: Quote, key: string, json: string): string {
  if (QUOTE_BODY_KEYS.has(key)) throw new Error(`the quote body already has ${key}`);
  return `${quote.bodyOpen},${JSON.stringify(key)}:${json}}`;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** The parts of a resource a quote states; anything else a caller adds is not quoted. */
export type QuotedResource = Pick<ResourceInfo, 'url' | 'description' | 'mimeType'>;

/** Length-prefixed (`~` for absent), so no field's content can make two different quotes share a key. */
function field(value: string | undefined): string {
  return value === undefined ? '~' : `${value.length}:${value}`;
}

/**
 * Small numbers standing for the long, fixed strings of a quote (a tool's description): a quote's
 * key is built and hashed on every 402, and a description is hundreds of characters, while the
 * same string object hashes once and is then found by its cached hash.
 */
class Interned {
  private readonly ids = new Map<string, number>();
  /** Never reused: a key built with a forgotten number must not match another string's quote. */
  private next = 0;

  id(value: string | undefined): string {
    if (value === undefined) return '~';
    let id = this.ids.get(value);
    if (id === undefined) {
      // Descriptions come from the tool table; a flood of others only forgets the numbers given
      // so far, and the quotes keyed by them age out of their own bounded cache.
      if (this.ids.size >= QUOTE_CACHE_SIZE) this.ids.clear();
      id = this.next++;
      this.ids.set(value, id);
    }
    return `${id}`;
  }
}

/**
 * Builds quotes with the resource server (the scheme's own price parsing and requirement
 * enhancement). Requirements depend only on price and rails, and a quote only on those, the
 * resource and the message, all fixed per process: each is built and encoded once, so the 402
 * path does no facilitator round trip and, once warm, no encoding.
 */
export class Quoter {
  private readonly byPrice = new Map<number, Promise<PaymentRequirements[]>>();
  private readonly quotes = new Map<string, Quote>();
  private readonly interned = new Interned();

  constructor(
    private readonly server: x402ResourceServer,
    private readonly rails: Rail[],
    /** The v2 `extensions` of a resource's quote (discovery, payment-identifier), by its URL. */
    private readonly extensionsFor: (resource: QuotedResource) => Record<string, unknown> | undefined = () =>
      undefined,
  ) {}

  requirements(price: number): Promise<PaymentRequirements[]> {
    let cached = this.byPrice.get(price);
    if (!cached) {
      cached = Promise.all(
        this.rails.map(async (rail) => {
          const [requirement] = await this.server.buildPaymentRequirements({
            scheme: 'exact',
            payTo: rail.payTo,
            network: rail.network,
            maxTimeoutSeconds: rail.maxTimeoutSeconds,
            price: {
              amount: String(price),
              asset: rail.asset,
              extra: { name: rail.name, version: rail.version },
            },
          });
          if (!requirement) throw new Error(`no requirement built for ${rail.network}`);
          return requirement;
        }),
      );
      cached.catch(() => this.byPrice.delete(price));
      this.byPrice.set(price, cached);
    }
    return cached;
  }

  /** The v2 PaymentRequired of one request: what the header carries and the MCP transport sends as is. */
  async paymentRequired(price: number, resource: ResourceInfo, message: string): Promise<PaymentRequired> {
    return this.server.createPaymentRequiredResponse(
      await this.requirements(price),
      quotedResource(resource),
      message,
      this.extensionsFor(resource),
    );
  }

  /**
   * The quote of one request, shared between requests asking the same: treat it as read-only.
   * A cached quote comes back without a promise, so the common 402 takes no asynchronous hop.
   */
  quote(price: number, resource: QuotedResource, code: string, message: string): Quote | Promise<Quote> {
    const key =
      `${price}${field(code)}${field(message)}${field(resource.url)}` +
      `${this.interned.id(resource.description)}#${this.interned.id(resource.mimeType)}`;
    return this.quotes.get(key) ?? this.build(key, price, resource, code, message);
  }

  private async build(
    key: string,
    price: number,
    resource: QuotedResource,
    code: string,
    message: string,
  ): Promise<Quote> {
    const requirements = await this.requirements(price);
    const quoted: ResourceInfo = { url: resource.url };
    if (resource.description !== undefined) quoted.description = resource.description;
    if (resource.mimeType !== undefined) quoted.mimeType = resource.mimeType;
    const required = await this.paymentRequired(price, quoted, message);
    const body: QuoteBody = {
      x402Version: 1,
      error: message,
      code,
      message,
      // A copy: v1Accepts shares `extra` with the requirements, which are not ours to freeze.
      accepts: structuredClone(
        v1Accepts(requirements, resource.url, quotedDescription(resource.description ?? '')),
      ),
    };
    // Shared by every request asking the same: frozen so no answer can change another's quote.
    const quote: Quote = Object.freeze({
      requirements,
      header: encodePaymentRequired(required),
      body: deepFreeze(body),
      bodyOpen: JSON.stringify(body).slice(0, -1),
    });
    if (this.quotes.size >= QUOTE_CACHE_SIZE) {
      const oldest = this.quotes.keys().next();
      if (!oldest.done) this.quotes.delete(oldest.value);
    }
    this.quotes.set(key, quote);
    return quote;
  }
}
