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
});
