import { describe, expect, it } from 'vitest';
import { ConfigSchema } from '../../contracts/config.ts';
import { TOOL_NAMES } from '../../contracts/tools.ts';
import { pricingPassages } from './generated.ts';

const payPerCall = (env: Record<string, string>) =>
  pricingPassages(ConfigSchema.parse(env)).find((p) => p.id === 'pricing#pay-per-call')!;

describe('pricing.md, generated from the tool table and the rails configured', () => {
  it('prices every sold tool, each at the amount its x402 quote asks', () => {
    const { text } = payPerCall({});
    for (const name of TOOL_NAMES) expect(text).toContain(`(${name}) costs`);
    // get_risk_forecast and get_track_record are priced like a regime reading (0.02 by default).
    expect(text).toMatch(/\(get_risk_forecast\) costs 0\.02 USD per call/);
    expect(text).toMatch(/\(get_track_record\) costs 0\.02 USD per call/);
    expect(text).toContain('a 1m trade call 0.05 USD');
    expect(text).toMatch(/\(scan_funding_arb\) costs 0\.01 USD per call/);
  });

  it('names the networks the 402 quote offers: the development rails on the defaults', () => {
    const { text, title } = payPerCall({});
    expect(text).toContain('base-sepolia (eip155:84532)');
    expect(text).toContain('sepolia (eip155:11155111)');
    expect(`${title} ${text}`).not.toMatch(/on the Base network|on Base\)/);
  });

  it('names Base mainnet when the service is paid there', () => {
    const { text } = payPerCall({
      X402_PAY_TO: '0x1111111111111111111111111111111111111111',
      X402_NETWORK: 'eip155:8453',
      X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
    });
    expect(text).toContain('base (eip155:8453)');
    expect(text).not.toContain('sepolia');
  });

  it('says pay-per-call is off in production without a recipient', () => {
    const { text } = payPerCall({ NODE_ENV: 'production' });
    expect(text).toMatch(/not offered/);
  });
});
