import { describe, expect, it } from 'vitest';
import { type RegimeMetrics, RegimeReadingSchema } from '../../../contracts/signals.ts';
import {
  classifyRegime,
  type RegimeState,
  regimeConfidenceMeaning,
  regimeReading,
  scoreRegimes,
  stepRegime,
} from './regime.ts';

const calm: RegimeMetrics = {
  adx: 14,
  adx_slope: -0.5,
  plus_di: 20,
  minus_di: 19,
  choppiness: 63,
  atr_pct: 0.5,
  atr_pct_percentile: 50,
  bb_width: 0.02,
  bb_width_percentile: 50,
  volatility_ratio: 1,
  vol_forecast_percentile: 50,
};
const trendUp: RegimeMetrics = { ...calm, adx: 38, adx_slope: 2, plus_di: 32, minus_di: 11, choppiness: 35 };
const trendDown: RegimeMetrics = { ...trendUp, plus_di: 11, minus_di: 32 };
const wild: RegimeMetrics = {
  ...calm,
  atr_pct: 3,
  atr_pct_percentile: 99,
  volatility_ratio: 2,
  vol_forecast_percentile: 99,
};
const tight: RegimeMetrics = {
  ...calm,
  bb_width: 0.004,
  bb_width_percentile: 1,
  atr_pct_percentile: 10,
  vol_forecast_percentile: 1,
};

function run(seq: RegimeMetrics[], persist = 3): RegimeState[] {
  let s: RegimeState | null = null;
  const out: RegimeState[] = [];
  for (const m of seq) {
    s = stepRegime(s, m, { persist, margin: 0.1 });
    out.push(s);
  }
  return out;
}

describe('regime classifier', () => {
  it('labels clear cases', () => {
    expect(classifyRegime(calm).state.regime).toBe('ranging');
    expect(classifyRegime(trendUp).state.regime).toBe('trending-up');
    expect(classifyRegime(trendDown).state.regime).toBe('trending-down');
    expect(classifyRegime(wild).state.regime).toBe('volatile');
    expect(classifyRegime(tight).state.regime).toBe('squeeze');
  });

  it('scores stay in [0, 1]', () => {
    for (const m of [calm, trendUp, trendDown, wild, tight]) {
      for (const v of Object.values(scoreRegimes(m))) {
        expect(v).toBeGreaterThanOrEqual(0);
        expect(v).toBeLessThanOrEqual(1);
      }
    }
  });

  it('hysteresis: a challenger must lead for `persist` consecutive candles', () => {
    const states = run([calm, calm, trendUp, trendUp, trendUp, trendUp]);
    expect(states.map((s) => s.regime)).toEqual([
      'ranging',
      'ranging',
      'ranging',
      'ranging',
      'trending-up',
      'trending-up',
    ]);
    expect(states[3]!.candidate).toBe('trending-up');
    expect(states[3]!.challengerRuns).toBe(2);
    expect(states[4]!.held).toBe(0);
    expect(states[5]!.held).toBe(1);
  });

  it('hysteresis: a wobble shorter than `persist` never flips the label', () => {
    const seq = [calm, trendUp, trendUp, calm, trendUp, trendUp, calm, trendUp, calm];
    expect(new Set(run(seq).map((s) => s.regime))).toEqual(new Set(['ranging']));
  });

  it('hysteresis: an interrupted run by another challenger restarts the count', () => {
    const states = run([calm, trendUp, trendUp, wild, trendUp, trendUp]);
    expect(states.map((s) => s.regime).every((r) => r === 'ranging')).toBe(true);
    expect(states[4]!.challengerRuns).toBe(1);
  });

  it('a lead below the margin keeps the held label', () => {
    const near = { ...calm, adx: 21, choppiness: 52 };
    const s0 = stepRegime(null, calm);
    const scores = scoreRegimes(near);
    const s1 = stepRegime(s0, near, { persist: 1, margin: 0.5 });
    expect(Math.max(...Object.values(scores)) - scores.ranging).toBeLessThan(0.5);
    expect(s1.regime).toBe('ranging');
  });

  it('the reading is a valid contract object', () => {
    const { state } = classifyRegime(trendUp);
    const reading = regimeReading(state);
    expect(RegimeReadingSchema.parse(reading)).toEqual(reading);
    expect(reading.confidence).toBeGreaterThan(50);
    expect(reading.suggestion.length).toBeGreaterThan(10);
  });
});

describe('a regime reading’s confidence in words', () => {
  it('says how clearly the label leads when this close’s metrics favour it', () => {
    const [state] = run([tight]);
    const { confidence } = regimeReading(state!);
    expect(confidence).toBeGreaterThanOrEqual(50);
    expect(regimeConfidenceMeaning(state!)).toBe(
      `${confidence} = how clearly squeeze leads the other labels on the metrics (50 = level with the next, 100 = ahead by 0.5 or more; a heuristic, not a probability).`,
    );
  });

  it('says a held label is held from an earlier close, and why, not that it leads', () => {
    // Squeeze adopted, then a close whose metrics favour ranging: squeeze is held, trailing.
    const states = run([tight, tight, calm]);
    const held = states[2]!;
    expect(held).toMatchObject({ regime: 'squeeze', candidate: 'ranging', challengerRuns: 1, held: 2 });
    const { confidence } = regimeReading(held);
    expect(confidence).toBeLessThan(50);
    const meaning = regimeConfidenceMeaning(held);
    expect(meaning).not.toContain('how clearly squeeze leads the other labels on the metrics (');
    expect(meaning).toMatch(
      /^squeeze is held from an earlier close \(held 2 closed candles\), not led on this one/,
    );
    expect(meaning).toContain(
      "the label changes only when another leads it by 0.1 on 3 consecutive closed candles, and on this close's metrics ranging has led it by 0.1 or more on 1 of the 3 consecutive closes a switch needs",
    );
    const trails = held.scores.ranging - held.scores.squeeze;
    expect(meaning).toContain(
      `${confidence} = how clearly squeeze leads the other labels on the metrics, below 50 as it trails ranging by ${trails.toFixed(2)}`,
    );
    expect(meaning).toContain(
      "the metrics are this close's and need not meet squeeze's own conditions (it follows the bottom of vol_forecast_percentile, now 50.00).",
    );
    // The hysteresis it names is the market's own.
    const slow = stepRegime(stepRegime(null, tight, { persist: 5, margin: 0.2 }), calm, {
      persist: 5,
      margin: 0.2,
    });
    expect(regimeConfidenceMeaning(slow, { persist: 5, margin: 0.2 })).toContain(
      'another leads it by 0.2 on 5 consecutive closed candles',
    );
  });

  it('says when the challenger leads by less than a switch needs', () => {
    // Squeeze 0.65 against ranging 0.7: ranging leads by 0.05, under the 0.1 margin.
    const [, s1] = run([tight, { ...calm, vol_forecast_percentile: 5.5 }]);
    expect(s1).toMatchObject({ regime: 'squeeze', candidate: 'ranging', challengerRuns: 0, held: 1 });
    expect(regimeConfidenceMeaning(s1!)).toMatch(
      /^squeeze is held from an earlier close \(held 1 closed candle\), not led on this one: .* on this close's metrics ranging leads it by less than the 0.1 a switch needs\. 45 = how clearly squeeze leads the other labels on the metrics, below 50 as it trails ranging by 0.05 /,
    );
  });
});
