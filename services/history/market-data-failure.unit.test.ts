import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, it } from 'vitest';
import { MarketFileError } from '../../adapters/market/csv.ts';
import { unreadableMarketData } from './cli-commands.ts';

/** The thrown value of `fn`. */
function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('did not throw');
}

describe('unreadableMarketData: which failures of a --data folder are the data, not a bug', () => {
  it('takes a refused system call and a named bad market file', () => {
    // A directory read as a file: EISDIR from the read system call, as a candle file one may not read.
    const eisdir = thrown(() => readFileSync(tmpdir()));
    expect((eisdir as { code: string }).code).toBe('EISDIR');
    expect(unreadableMarketData(eisdir)).toBe(true);
    expect(unreadableMarketData(new MarketFileError('BTCUSDT-1h.csv.gz is not a readable gzip file'))).toBe(
      true,
    );
  });

  it("leaves Node's own ERR_* errors, which carry a string code but no system call, to keep their stack", () => {
    const bug = thrown(() => Buffer.alloc(-1));
    expect((bug as { code: string }).code).toMatch(/^ERR_/);
    expect(unreadableMarketData(bug)).toBe(false);
    expect(unreadableMarketData(new TypeError('x is undefined'))).toBe(false);
    expect(unreadableMarketData(null)).toBe(false);
  });
});
