import type { x402ResourceServer } from '@x402/core/server';
import type { PaymentRequired, PaymentRequirements, ResourceInfo } from '@x402/core/types';
import type { Rail } from '../../payments/rails.ts';
import { encodePaymentRequired, type V1Requirement, v1Accepts } from './codecs.ts';

export interface Quote {
  requirements: PaymentRequirements[];
  /** v2 `PAYMENT-REQUIRED` header value. */
  header: string;
  /** v1 402 body, plus `code`/`message` for people reading it. */
  body: { x402Version: 1; error: string; code: string; message: string; accepts: V1Requirement[] };
}

/**
 * Builds quotes with the resource server (the scheme's own price parsing and requirement
 * enhancement), once per price: requirements depend only on price and rails, so the 402 path
 * does no facilitator round trip.
 */
export class Quoter {
  private readonly byPrice = new Map<number, Promise<PaymentRequirements[]>>();

  constructor(
    private readonly server: x402ResourceServer,
    private readonly rails: Rail[],
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
    return this.server.createPaymentRequiredResponse(await this.requirements(price), resource, message);
  }

  async quote(price: number, resource: ResourceInfo, code: string, message: string): Promise<Quote> {
    const requirements = await this.requirements(price);
    const required = await this.paymentRequired(price, resource, message);
    return {
      requirements,
      header: encodePaymentRequired(required),
      body: {
        x402Version: 1,
        error: message,
        code,
        message,
        accepts: v1Accepts(requirements, resource.url, resource.description ?? ''),
      },
    };
  }
}
