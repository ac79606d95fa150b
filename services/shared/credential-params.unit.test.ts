import { describe, expect, it } from 'vitest';
import { withoutCredentialParams } from './credential-params.ts';

describe("withoutCredentialParams (an x402 quote's resource)", () => {
  it('drops the parameters the access log redacts, and keeps the rest as sent', () => {
    expect(withoutCredentialParams('/x402/t')).toBe('/x402/t');
    expect(withoutCredentialParams('/x402/t?coin=BTC&x=1')).toBe('/x402/t?coin=BTC&x=1');
    expect(withoutCredentialParams('/x402/t?api_key=sk_live_abc')).toBe('/x402/t');
    expect(
      withoutCredentialParams('/x402/t?a=1&api_key=sk_live_abc&q=sk%5Ftest_x&accessToken=t&sk_live_z&b=2'),
    ).toBe('/x402/t?a=1&b=2');
  });
});
