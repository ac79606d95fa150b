import { describe, expect, it } from 'vitest';
import { loadConfig } from './config.ts';
import { parseCidrList, parsePortPolicy, splitList } from './setting-lists.ts';

const takes = (parse: () => unknown) => {
  try {
    parse();
    return true;
  } catch {
    return false;
  }
};
const configTakes = (env: Record<string, string>) => takes(() => loadConfig(env));

describe('the list settings: the configuration refuses what the run-time parser refuses, no more', () => {
  it('WEBHOOK_ALLOWED_PORTS', () => {
    for (const spec of [
      '443',
      '*',
      '1-65535',
      '443,8000-8999',
      '0',
      '65536',
      '99999',
      '9000-8000',
      '443,0-1',
    ]) {
      expect(configTakes({ WEBHOOK_ALLOWED_PORTS: spec }), spec).toBe(takes(() => parsePortPolicy(spec)));
    }
    expect(parsePortPolicy('443,8000-8999')(8443)).toBe(true);
    expect(parsePortPolicy('443,8000-8999')(9000)).toBe(false);
  });

  it('WEBHOOK_TEST_ALLOW_CIDRS', () => {
    for (const raw of [
      '127.0.0.1/32',
      '127.0.0.1/32, ::1',
      '10.0.0.0/33',
      '::1/129',
      'garbage',
      '127.0.0.1/32,,',
    ]) {
      expect(configTakes({ WEBHOOK_TEST_ALLOW_CIDRS: raw }), raw).toBe(takes(() => parseCidrList(raw)));
    }
    expect(parseCidrList(' ::1 ,10.0.0.0/8').map(([ip, bits]) => `${ip.toString()}/${bits}`)).toEqual([
      '::1/128',
      '10.0.0.0/8',
    ]);
  });

  it('splits a comma-separated value into its trimmed entries, the empty ones dropped', () => {
    expect(splitList(' a, ,b,')).toEqual(['a', 'b']);
    expect(splitList('')).toEqual([]);
    expect(loadConfig({ CHAT_MODELS: ' m1, ,m2,' }).CHAT_MODELS).toEqual(['m1', 'm2']);
  });
});
