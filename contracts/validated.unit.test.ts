import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { GetTradeCallInput } from './tools.ts';
import { parseOnce, safeParseRemembered } from './validated.ts';

describe('parse once', () => {
  it('takes a value its schema produced as it is, and parses anything else', () => {
    const entered = safeParseRemembered(GetTradeCallInput, { coin: 'BTC', timeframe: '1h' });
    expect(entered.success).toBe(true);
    const data = entered.success ? entered.data : null;
    expect(parseOnce(GetTradeCallInput, data)).toBe(data);

    // An equal object that did not come out of the schema is parsed (a copy, defaults filled in).
    const copy = { coin: 'BTC', timeframe: '1h' };
    const parsed = parseOnce(GetTradeCallInput, copy);
    expect(parsed).not.toBe(copy);
    expect(parsed).toEqual(data);
    // Never remembered as produced: a second call parses it again.
    expect(parseOnce(GetTradeCallInput, parsed)).not.toBe(parsed);
  });

  it('does not let one schema vouch for another, nor a failed parse for anything', () => {
    const loose = z.object({ coin: z.string() });
    const entered = safeParseRemembered(loose, { coin: 'NOT A COIN', extra: 1 });
    expect(entered.success).toBe(true);
    expect(() => parseOnce(GetTradeCallInput, entered.success ? entered.data : null)).toThrow();

    const bad = { coin: 'BTC', timeframe: '7m' };
    expect(safeParseRemembered(GetTradeCallInput, bad).success).toBe(false);
    expect(() => parseOnce(GetTradeCallInput, bad)).toThrow();
  });

  it('parses a set of flat arguments once, and gives every call a copy of its own', () => {
    const first = safeParseRemembered(GetTradeCallInput, { coin: 'BTC', timeframe: '1h' });
    const again = safeParseRemembered(GetTradeCallInput, { coin: 'BTC', timeframe: '1h' });
    if (!first.success || !again.success) throw new Error('should parse');
    expect(again.data).toEqual(first.data);
    expect(again.data).not.toBe(first.data);
    expect(Object.keys(again.data)).toEqual(Object.keys(first.data));
    expect(parseOnce(GetTradeCallInput, again.data)).toBe(again.data);
    // What one caller does to its copy, the next caller does not see.
    (again.data as Record<string, unknown>).coin = 'changed';
    const third = safeParseRemembered(GetTradeCallInput, { coin: 'BTC', timeframe: '1h' });
    expect(third.success ? third.data.coin : null).toBe('BTC');

    // Other values, another type for the same value, or an extra key: parsed on their own.
    const other = safeParseRemembered(GetTradeCallInput, { coin: 'ETH', timeframe: '1h' });
    expect(other.success ? other.data.coin : null).toBe('ETH');
    const flag = safeParseRemembered(GetTradeCallInput, {
      coin: 'BTC',
      timeframe: '1h',
      includeReasoning: false,
    });
    expect(flag.success ? flag.data.includeReasoning : null).toBe(false);
    const quoted = { coin: 'BTC', timeframe: '1h', includeReasoning: 'false' };
    expect(safeParseRemembered(GetTradeCallInput, quoted).success).toBe(false);
    expect(safeParseRemembered(GetTradeCallInput, { coin: 'BTC', timeframe: '1h', x: 1 }).success).toBe(
      false,
    );

    // Arguments holding an object are parsed every time.
    const nested = z.object({ coins: z.array(z.string()) });
    const a = safeParseRemembered(nested, { coins: ['BTC'] });
    const b = safeParseRemembered(nested, { coins: ['BTC'] });
    if (!a.success || !b.success) throw new Error('should parse');
    expect(b.data.coins).not.toBe(a.data.coins);
  });
});
