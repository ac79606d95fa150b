import { describe, expect, it } from 'vitest';
import { UnsupportedExchangeError, UnsupportedTimeframeError } from '../../adapters/market/errors.ts';
import { ServiceError } from '../../contracts/errors.ts';
import { digestCoverage } from './digest-coverage.ts';

const refusing = (err: Error | null) => async () => err;
const recorded = () => ({ exchanges: ['BINANCE', 'OKX'] as const, timeframes: ['1h', '4h'] as const });

async function refusal(check: Promise<void>): Promise<ServiceError> {
  const err = await check.then(
    () => null,
    (e: unknown) => e,
  );
  if (!(err instanceof ServiceError)) throw new Error(`not refused: ${String(err)}`);
  return err;
}

describe('digestCoverage', () => {
  it("answers the scan's refusal in its code and words, naming the field", async () => {
    const venue = new UnsupportedExchangeError('BYBIT', 'replay', 'no candles');
    const e1 = await refusal(digestCoverage({ unserved: refusing(venue), recorded }).check('BYBIT', '1h'));
    expect([e1.code, e1.message, e1.field, e1.statusCode]).toEqual([
      'unsupported_exchange',
      venue.message,
      'exchange',
      422,
    ]);
    const tf = new UnsupportedTimeframeError('15m', 'BINANCE', '1h candles only');
    const e2 = await refusal(digestCoverage({ unserved: refusing(tf), recorded }).check('BINANCE', '15m'));
    expect([e2.code, e2.message, e2.field]).toEqual(['unsupported_timeframe', tf.message, 'timeframe']);
  });

  it('refuses a served venue or timeframe the schedule does not record, and accepts a recorded one', async () => {
    const coverage = digestCoverage({ unserved: refusing(null), recorded });
    const venue = await refusal(coverage.check('BINANCE_SPOT', '1h'));
    expect([venue.code, venue.field]).toEqual(['INVALID_FIELD', 'exchange']);
    expect(venue.message).toContain(
      'on BINANCE, OKX only; a verdict on BINANCE_SPOT is recorded only when a call asks',
    );
    const tf = await refusal(coverage.check('OKX', '2h'));
    expect([tf.code, tf.field]).toEqual(['INVALID_FIELD', 'timeframe']);
    expect(tf.message).toContain('at 1h, 4h only; a 2h verdict is recorded only when a call asks');
    await expect(coverage.check('OKX', '4h')).resolves.toBeUndefined();
  });
});
