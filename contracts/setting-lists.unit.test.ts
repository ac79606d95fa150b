import { describe, expect, it } from 'vitest';
import { loadConfig, parseTrustProxy } from './config.ts';
import { EVENT_TYPES } from './events.ts';
import {
  MAX_TIMER_MS,
  parseCidrList,
  parseDuration,
  parseEventTypes,
  parseList,
  parsePortPolicy,
  parseSchedule,
  splitList,
  timerDelay,
} from './setting-lists.ts';

const takes = (parse: () => unknown) => {
  try {
    parse();
    return true;
  } catch {
    return false;
  }
};
const configTakes = (env: Record<string, string>) => takes(() => loadConfig(env));

describe('the list settings: the configuration refuses what the run-time parser refuses, and a list of no entry', () => {
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
      '443,,',
      ' 443 , 8000-8999 ',
      ',',
      '1-2-3',
      '443-',
    ]) {
      expect(configTakes({ WEBHOOK_ALLOWED_PORTS: spec }), spec).toBe(takes(() => parsePortPolicy(spec)));
    }
    expect(parsePortPolicy('443,8000-8999')(8443)).toBe(true);
    expect(parsePortPolicy('443,8000-8999')(9000)).toBe(false);
    expect(parsePortPolicy('443,,')(443)).toBe(true);
    expect(() => parsePortPolicy(',')).toThrow('no port');
    expect(() => parsePortPolicy('1-2-3')).toThrow('"1-2-3"');
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

  it('TRUST_PROXY: its list is read as WEBHOOK_TEST_ALLOW_CIDRS is, beside the hop counts and empty', () => {
    for (const raw of [
      '10.0.0.1,,',
      ' 10.0.0.1 , 10.0.0.0/8 ',
      '127.0.0.1/32, ::1',
      '10.0.0.0/33',
      '::1/129',
      '10.0.0.1 10.0.0.2',
    ]) {
      expect(configTakes({ TRUST_PROXY: raw }), raw).toBe(takes(() => parseCidrList(raw)));
      expect(
        takes(() => parseTrustProxy(raw)),
        raw,
      ).toBe(takes(() => parseCidrList(raw)));
    }
    const listed = parseTrustProxy(loadConfig({ TRUST_PROXY: '10.0.0.1,,' }).TRUST_PROXY);
    expect([listed.any, listed.trusts('10.0.0.1', 0), listed.trusts('10.0.0.2', 0)]).toEqual([
      true,
      true,
      false,
    ]);
    // A list of no entry believes no one, as an empty value does; the configuration refuses it
    // (parseList), offering 0 or unset for none.
    expect(configTakes({ TRUST_PROXY: ' , ' })).toBe(false);
    expect(parseTrustProxy(' , ').any).toBe(false);
    expect(parseTrustProxy(' , ').peer('10.0.0.1')).toBe(false);
    for (const hops of ['0', '1', '2']) expect(configTakes({ TRUST_PROXY: hops }), hops).toBe(true);
    expect(parseTrustProxy('2').trusts('203.0.113.9', 1)).toBe(true);
    expect(parseTrustProxy('::ffff:10.0.0.1').trusts('10.0.0.1', 0)).toBe(true);
    for (const word of ['yes', 'true', '10.0.0.0/8;rm'])
      expect(configTakes({ TRUST_PROXY: word }), word).toBe(false);
    // An IPv4 address is four decimal parts: a hop count with a stray comma ('1,') is no list of
    // 0.0.0.1, nor is '10.1' 10.0.0.1 (ipaddr.js reads both so), in either setting.
    for (const raw of ['1,', '1, 10.0.0.1', '10.1', '10.1/16', '1, 2', '010.0.0.1']) {
      expect(
        takes(() => parseCidrList(raw)),
        raw,
      ).toBe(false);
      expect(configTakes({ TRUST_PROXY: raw }), raw).toBe(false);
      expect(configTakes({ WEBHOOK_TEST_ALLOW_CIDRS: raw }), raw).toBe(false);
    }
    expect(() => parseCidrList('10.0.0.1, 10.1')).toThrow('10.1');
  });

  it('WEBHOOK_RETRY_SCHEDULE: split as every list setting, its refusal naming the variable and the entry', () => {
    for (const raw of [
      '0,5s,5m',
      ' 0 , 5s ,5m ',
      '0,5s,',
      '0,,5s',
      '5m,0,5s',
      ',',
      ' , ',
      '0,-5s',
      '0,5x',
      '5.5s',
      'abc',
    ]) {
      expect(configTakes({ WEBHOOK_RETRY_SCHEDULE: raw }), raw).toBe(takes(() => parseSchedule(raw)));
    }
    // Blanks around an entry and an empty entry (a trailing comma) as in every list setting.
    expect(parseSchedule(' 0 , 5s ,5m ')).toEqual([0, 5_000, 300_000]);
    expect(parseSchedule('0,5s,')).toEqual([0, 5_000]);
    expect(parseSchedule('0,,5s')).toEqual([0, 5_000]);
    expect(configTakes({ WEBHOOK_RETRY_SCHEDULE: ' 0 , 5s ,5m ' })).toBe(true);
    // No order is asked: each delay counts from the attempt before it.
    expect(parseSchedule('5m,0,5s')).toEqual([300_000, 0, 5_000]);
    const refusal = (raw: string) => {
      try {
        loadConfig({ WEBHOOK_RETRY_SCHEDULE: raw });
      } catch (err) {
        return (err as Error).message;
      }
      throw new Error(`${raw} was taken`);
    };
    expect(refusal(' , ')).toContain('WEBHOOK_RETRY_SCHEDULE: names no delay');
    for (const [raw, entry] of [
      ['0,-5s,5m', '-5s'],
      ['0, 5x', '5x'],
      ['0,5.5s', '5.5s'],
      ['five', 'five'],
    ]) {
      expect(refusal(raw!)).toContain(`WEBHOOK_RETRY_SCHEDULE: "${entry}" is no delay`);
      expect(() => parseSchedule(raw!)).toThrow(`"${entry}" is no delay`);
    }
    // A delay becomes the dispatcher's timer: past 2^31 - 1 ms Node fires it at once, and
    // 99999999999d made the retry's due time no date (the outcome went unrecorded, and the
    // attempt was sent again as stuck). The one bound, named with the largest value taken.
    expect(parseSchedule('0,2147483647,24d')).toEqual([0, MAX_TIMER_MS, 24 * 86_400_000]);
    for (const [raw, entry] of [
      ['0,99999999999d', '99999999999d'],
      ['0,25d', '25d'],
      ['0, 2147483648 ,5s', '2147483648'],
      [`0,${'9'.repeat(400)}`, '9'.repeat(400)],
    ]) {
      expect(refusal(raw!)).toContain(
        `WEBHOOK_RETRY_SCHEDULE: "${entry}" is too long a delay: at most 24d or 2147483647 ms (about 24.8 days)`,
      );
      expect(() => parseDuration(entry!)).toThrow('at most 24d or 2147483647 ms');
    }
    // A timer setting written in ms alone is not offered a unit it does not take (24d).
    expect(() => loadConfig({ SHUTDOWN_TIMEOUT_MS: '3000000000' })).toThrow(
      'SHUTDOWN_TIMEOUT_MS: at most 2147483647 ms (about 24.8 days), the longest a timer can wait (got "3000000000")',
    );
  });

  it('timerDelay keeps a computed wait within what a timer takes', () => {
    expect(timerDelay(-5)).toBe(0);
    expect(timerDelay(1_500)).toBe(1_500);
    expect(timerDelay(2 * MAX_TIMER_MS)).toBe(MAX_TIMER_MS);
  });

  it("RELAY_EVENT_TYPES: a name the event catalog does not hold is refused, listing the catalog's", () => {
    for (const raw of [
      'VerdictRecorded',
      ' VerdictRecorded, ,RegimeShifted,',
      '*',
      ',',
      'VerdictRecordd',
      'Regime-Shifted',
    ]) {
      expect(configTakes({ RELAY_EVENT_TYPES: raw }), raw).toBe(takes(() => parseEventTypes(raw)));
    }
    expect(parseEventTypes(' VerdictRecorded, ,RegimeShifted,')).toEqual(
      new Set(['VerdictRecorded', 'RegimeShifted']),
    );
    expect(parseEventTypes(' * ')).toBeNull();
    // A list of no entry, the empty value too (which loadConfig reads as unset: the default list).
    for (const empty of ['', ',', ' , ,']) {
      expect(() => parseEventTypes(empty), empty).toThrow(
        /^names no event type: unset it for the default list, or set \* for every type$/,
      );
    }
    expect(() => loadConfig({ RELAY_EVENT_TYPES: 'VerdictRecorded,VerdictRecordd' })).toThrow(
      `RELAY_EVENT_TYPES: names unknown event types: VerdictRecordd; the event types are ${EVENT_TYPES.join(', ')} (got`,
    );
  });

  it('parseList refuses a list of no entry, saying what to set instead', () => {
    expect(parseList(' a, ,b,', 'thing', 'unset it')).toEqual(['a', 'b']);
    for (const none of ['', ',', ' ', ' , ,', '\t,\n']) {
      expect(() => parseList(none, 'thing', 'unset it for the default'), JSON.stringify(none)).toThrow(
        /^names no thing: unset it for the default$/,
      );
    }
    // The run-time parsers of the list settings refuse it in the same words.
    expect(() => parseSchedule(' , ')).toThrow(
      /^names no delay: unset it for the default, 0,5s,5m,30m,2h,5h,10h,10h$/,
    );
  });

  it('splits a comma-separated value into its trimmed entries, the empty ones dropped', () => {
    expect(splitList(' a, ,b,')).toEqual(['a', 'b']);
    expect(splitList('')).toEqual([]);
    const chat = { CHAT_PROVIDER: 'openai-compatible', CHAT_BASE_URL: 'http://127.0.0.1:1/v1' };
    expect(loadConfig({ ...chat, CHAT_MODELS: ' m1, ,m2,' }).CHAT_MODELS).toEqual(['m1', 'm2']);
    const venues = loadConfig({ LIVE_EXCHANGES: 'binance, ,OKX,', SCHEDULE_EXCHANGE: 'BINANCE,' });
    expect([venues.LIVE_EXCHANGES, venues.SCHEDULE_EXCHANGE]).toEqual([['BINANCE', 'OKX'], ['BINANCE']]);
    expect(loadConfig({ SCHEDULE_TIMEFRAMES: '1h,,4h ' }).SCHEDULE_TIMEFRAMES).toEqual(['1h', '4h']);
    // A list of none is refused (parseList): a feed or a schedule needs a venue, an engine a
    // timeframe (SCHEDULE_TIMEFRAMES=" " would schedule nothing), and an empty value is the default.
    for (const setting of ['LIVE_EXCHANGES', 'SCHEDULE_EXCHANGE', 'SCHEDULE_TIMEFRAMES', 'CHAT_MODELS']) {
      expect(configTakes({ [setting]: ',' }), setting).toBe(false);
      expect(configTakes({ [setting]: ' ' }), setting).toBe(false);
    }
    expect(loadConfig({ SCHEDULE_TIMEFRAMES: '' }).SCHEDULE_TIMEFRAMES).toEqual(['15m', '1h', '4h']);
  });
});
