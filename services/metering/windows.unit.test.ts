import { describe, expect, it } from 'vitest';
import { quotaPeriod } from './windows.ts';

describe('quotaPeriod', () => {
  it('names the UTC day and month of each instant, across midnights, month ends and a clock going back', () => {
    const instants = [
      Date.UTC(2031, 0, 31, 23, 59, 59, 999),
      Date.UTC(2031, 1, 1, 0, 0, 0, 0),
      Date.UTC(2031, 1, 1, 12),
      Date.UTC(2031, 0, 31, 12),
      Date.UTC(2031, 1, 1, 23, 59, 59, 999),
      Date.UTC(2031, 1, 2),
      Date.UTC(2030, 11, 31, 23),
      Date.UTC(2031, 0, 1),
    ];
    const seen = instants.map((at) => {
      const { day, month, dayResetsAt, monthResetsAt } = quotaPeriod(at);
      return { day, month, dayResetsAt, monthResetsAt };
    });
    expect(seen).toEqual([
      {
        day: '2031-01-31',
        month: '2031-01',
        dayResetsAt: Date.UTC(2031, 1, 1),
        monthResetsAt: Date.UTC(2031, 1, 1),
      },
      {
        day: '2031-02-01',
        month: '2031-02',
        dayResetsAt: Date.UTC(2031, 1, 2),
        monthResetsAt: Date.UTC(2031, 2, 1),
      },
      {
        day: '2031-02-01',
        month: '2031-02',
        dayResetsAt: Date.UTC(2031, 1, 2),
        monthResetsAt: Date.UTC(2031, 2, 1),
      },
      {
        day: '2031-01-31',
        month: '2031-01',
        dayResetsAt: Date.UTC(2031, 1, 1),
        monthResetsAt: Date.UTC(2031, 1, 1),
      },
      {
        day: '2031-02-01',
        month: '2031-02',
        dayResetsAt: Date.UTC(2031, 1, 2),
        monthResetsAt: Date.UTC(2031, 2, 1),
      },
      {
        day: '2031-02-02',
        month: '2031-02',
        dayResetsAt: Date.UTC(2031, 1, 3),
        monthResetsAt: Date.UTC(2031, 2, 1),
      },
      {
        day: '2030-12-31',
        month: '2030-12',
        dayResetsAt: Date.UTC(2031, 0, 1),
        monthResetsAt: Date.UTC(2031, 0, 1),
      },
      {
        day: '2031-01-01',
        month: '2031-01',
        dayResetsAt: Date.UTC(2031, 0, 2),
        monthResetsAt: Date.UTC(2031, 1, 1),
      },
    ]);
  });

  it('hands out a period no caller can change for the others of the day', () => {
    const period = quotaPeriod(Date.UTC(2031, 5, 10, 8));
    expect(Object.isFrozen(period)).toBe(true);
    expect(quotaPeriod(Date.UTC(2031, 5, 10, 9))).toBe(period);
  });
});
