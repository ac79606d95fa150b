import { describe, expect, it } from 'vitest';
import { GetTradeCallInput } from '../../contracts/tools.ts';
import {
  argumentsText,
  REMEMBERED_INPUTS,
  REMEMBERED_TEXT_CHARS,
  recall,
  remember,
} from './remembered-input.ts';

describe('remembered tool inputs', () => {
  it('gives back what the schema made of a text, as a fresh copy each time', () => {
    const text = '{"coin":"btc","timeframe":"1h"}';
    const parsed = GetTradeCallInput.parse(JSON.parse(text));
    remember(GetTradeCallInput, text, parsed);
    const first = recall(GetTradeCallInput, text);
    expect(first).toEqual(parsed);
    expect(first).toMatchObject({ coin: 'BTC', timeframe: '1h', includeReasoning: true });
    first!.coin = 'CHANGED';
    parsed.coin = 'CHANGED TOO';
    expect(recall(GetTradeCallInput, text)?.coin).toBe('BTC');
  });

  it('keeps each schema apart and forgets nothing it was not told', () => {
    const text = '{"coin":"ETH"}';
    remember(GetTradeCallInput, text, GetTradeCallInput.parse(JSON.parse(text)));
    const other = GetTradeCallInput.extend({});
    expect(recall(other, text)).toBeUndefined();
    expect(recall(GetTradeCallInput, '{"coin":"SOL"}')).toBeUndefined();
  });

  it('does not remember a long text or an input with a nested value', () => {
    const long = `{"coin":"BTC","pad":"${'x'.repeat(REMEMBERED_TEXT_CHARS)}"}`;
    remember(GetTradeCallInput, long, { coin: 'BTC' });
    expect(recall(GetTradeCallInput, long)).toBeUndefined();
    const nested = '{"coin":"BTC","list":[1]}';
    remember(GetTradeCallInput, nested, { coin: 'BTC', list: [1] });
    expect(recall(GetTradeCallInput, nested)).toBeUndefined();
  });

  it('forgets the oldest text past its limit', () => {
    const schema = GetTradeCallInput.extend({});
    for (let i = 0; i <= REMEMBERED_INPUTS; i++) remember(schema, `{"coin":"C${i}"}`, { coin: `C${i}` });
    expect(recall(schema, '{"coin":"C0"}')).toBeUndefined();
    expect(recall(schema, '{"coin":"C1"}')).toEqual({ coin: 'C1' });
    expect(recall(schema, `{"coin":"C${REMEMBERED_INPUTS}"}`)).toEqual({ coin: `C${REMEMBERED_INPUTS}` });
  });

  it('names parsed arguments by their JSON text only where the text stands for them exactly', () => {
    expect(argumentsText({ coin: 'BTC', timeframe: '1h', includeReasoning: false, n: 2, x: null })).toBe(
      '{"coin":"BTC","timeframe":"1h","includeReasoning":false,"n":2,"x":null}',
    );
    expect(argumentsText({})).toBe('{}');
    expect(argumentsText({ coin: 'BTC', nested: { a: 1 } })).toBeNull();
    expect(argumentsText({ coin: undefined })).toBeNull();
    expect(argumentsText({ n: Number.NaN })).toBeNull();
    expect(argumentsText({ n: Number.POSITIVE_INFINITY })).toBeNull();
    expect(argumentsText({ n: -0 })).toBeNull();
    expect(argumentsText(['BTC'])).toBeNull();
    expect(argumentsText('BTC')).toBeNull();
    expect(argumentsText(null)).toBeNull();
    expect(argumentsText(Object.create({ inherited: 1 }))).toBeNull();
    expect(argumentsText({ pad: 'x'.repeat(REMEMBERED_TEXT_CHARS) })).toBeNull();
  });
});
