import { type FacilitatorClient, HTTPFacilitatorClient } from '@x402/core/server';

export interface RemoteFacilitatorOptions {
  url: string;
  /** Sent on every facilitator call (verify, settle, supported), e.g. an Authorization header. */
  headers?: Record<string, string>;
  timeoutMs: number;
}

/** A facilitator reached over HTTP (`/verify`, `/settle`, `/supported`) with the official client. */
export function createRemoteFacilitator(
  options: RemoteFacilitatorOptions,
): FacilitatorClient & { kind: 'remote' } {
  const headers = options.headers;
  const client = new HTTPFacilitatorClient({
    url: options.url,
    timeoutMs: options.timeoutMs,
    ...(headers && Object.keys(headers).length > 0
      ? { createAuthHeaders: async () => ({ verify: headers, settle: headers, supported: headers }) }
      : {}),
  });
  return {
    kind: 'remote',
    verify: (payload, requirements) => client.verify(payload, requirements),
    settle: (payload, requirements) => client.settle(payload, requirements),
    getSupported: () => client.getSupported(),
  };
}
