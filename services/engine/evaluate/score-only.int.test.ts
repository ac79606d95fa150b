import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { gunzipSync, gzipSync } from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = new URL('../../../', import.meta.url).pathname;
const TABLES = [
  'services/engine/signals/calibration/table.json',
  'services/engine/signals/calibration/volatility.json',
  'services/engine/funding/carry.json',
  'services/engine/signals/calibration/baselines.json',
];
const dirs: string[] = [];
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe('npm run evaluate -- --score-only', () => {
  it('scores the shipped tables on a directory without a 2022 folder, refitting nothing', async () => {
    const out = await mkdtemp(join(tmpdir(), 'score-only-'));
    dirs.push(out);
    const before = await Promise.all(TABLES.map((t) => readFile(join(ROOT, t), 'utf8')));
    const report = join(out, 'report.md');
    const { stdout } = await run(
      process.execPath,
      [
        '--import',
        'tsx',
        'services/engine/evaluate/main.ts',
        '--score-only',
        '--data',
        join(ROOT, 'sample-data/market'),
        '--from',
        '2025-09-25',
        '--max-coins',
        '1',
        '--report',
        report,
      ],
      { cwd: ROOT },
    );
    // Named once, though each timeframe is collected on its own.
    expect(stdout.match(/skipped .*binance-spot-2022: not in this data directory/g)).toHaveLength(1);
    const text = await readFile(report, 'utf8');
    expect(text).toContain('Score-only: the shipped tables');
    // The run time with the load it ran at and its peak memory.
    expect(text).toMatch(
      /in \d+ s \(load \d+\.\d at the start, \d+\.\d at the end; \d\.\d\d GB peak RSS\)\./,
    );
    // The shipped gate: timing skill on spot:15m, but its calls did not beat the fee.
    expect(text).toContain('| spot:15m | fade | yes |');
    expect(text).toContain('| spot:15m | no (HOLD) | fade |');
    expect(text).toContain("### The risk forecast against a risk desk's forecasters");
    expect(text).toContain('## Volatility forecast and expected-move band');
    expect(text).toContain('expected / realised carry');
    // The day rows have too few closes from 2025-09-25 to score: named with their count, not dropped unsaid.
    expect(text).toMatch(
      /- Fewer than 200 points: not scored \(not among the \d+ rows\): [^\n]*spot 1d next \(1\), \d+ points/,
    );
    // Nothing refitted: the shipped tables are byte for byte what they were.
    const after = await Promise.all(TABLES.map((t) => readFile(join(ROOT, t), 'utf8')));
    expect(after).toEqual(before);
    // About 4 s on a quiet machine; the limit only ends a hung run, sized for a machine under load 30.
  }, 600_000);

  it('scores a folder of later months after a warm-up folder, with the shipped free rules', async () => {
    const out = await mkdtemp(join(tmpdir(), 'score-only-warmup-'));
    dirs.push(out);
    // A folder of one month: BTC 1h from 2025-10-01, the months before it only in the warm-up.
    const from = Date.parse('2025-10-01T00:00:00Z');
    const source = join(ROOT, 'sample-data/market/candles/binance-spot/BTCUSDT-1h.csv.gz');
    const lines = gunzipSync(await readFile(source))
      .toString('utf8')
      .trimEnd()
      .split('\n');
    const kept = [lines[0]!, ...lines.slice(1).filter((l) => Number(l.split(',')[0]) >= from)];
    await mkdir(join(out, 'data/candles/binance-spot'), { recursive: true });
    await writeFile(
      join(out, 'data/candles/binance-spot/BTCUSDT-1h.csv.gz'),
      gzipSync(`${kept.join('\n')}\n`),
    );
    const report = join(out, 'report.md');
    await run(
      process.execPath,
      [
        '--import',
        'tsx',
        'services/engine/evaluate/main.ts',
        '--score-only',
        '--data',
        join(out, 'data'),
        '--warmup',
        join(ROOT, 'sample-data/market'),
        '--report',
        report,
      ],
      { cwd: ROOT },
    );
    const text = await readFile(report, 'utf8');
    // Scored from the folder's first day, not from the warm-up's.
    expect(text).toContain('scored from 2025-10-01');
    // The free rule the shipped baselines chose on the training months, scored on the folder.
    const shipped = JSON.parse(await readFile(join(ROOT, TABLES[3]!), 'utf8')) as {
      cells: { cell: string; bestFreeRule: string }[];
    };
    const rule = shipped.cells.find((c) => c.cell === 'spot:1h')!.bestFreeRule;
    expect(text).toMatch(new RegExp(`\\| spot:1h \\| HOLD \\| [^\\n]*\\| ${rule} \\|`));
    // A day cell has test points: the warm-up months fed its indicators.
    const dayRow = text.split('\n').find((l) => l.startsWith('| spot:1d | no (HOLD) |'))!;
    expect(Number(dayRow.split('|')[4])).toBeGreaterThan(0);
    const risk = await readFile(join(out, 'report-risk.md'), 'utf8');
    expect(risk).toMatch(/\| spot \| 1h \| next \(1\) \| \d+ \|/);
  }, 600_000);

  it('refuses a missing or empty --data or --warmup folder and a malformed file: one line, exit 2, no report', async () => {
    const out = await mkdtemp(join(tmpdir(), 'score-only-refused-'));
    dirs.push(out);
    await mkdir(join(out, 'empty'));
    // A bad row, and a gzip cut short (zlib alone says 'unexpected end of file', naming no file).
    const bad = join(out, 'bad/candles/binance-spot/BTCUSDT-1h.csv.gz');
    const cut = join(out, 'cut/candles/binance-spot/BTCUSDT-1h.csv.gz');
    await mkdir(join(out, 'bad/candles/binance-spot'), { recursive: true });
    await mkdir(join(out, 'cut/candles/binance-spot'), { recursive: true });
    await writeFile(bad, gzipSync('open_time,open,high,low,close,volume\n1,2,3,1,2,5\n2,x,3,1,2,5\n'));
    const whole = await readFile(join(ROOT, 'sample-data/market/candles/binance-spot/BTCUSDT-1h.csv.gz'));
    await writeFile(cut, whole.subarray(0, 300));
    // A report from an earlier run: a refused run must not write over it.
    const report = join(out, 'report.md');
    await writeFile(report, 'earlier report\n');
    const sample = join(ROOT, 'sample-data/market');
    for (const [args, message] of [
      [['--data', join(out, 'nope')], `--data ${join(out, 'nope')} does not exist`],
      [['--data', join(out, 'empty')], `--data ${join(out, 'empty')} holds no market files`],
      [['--data', sample, '--warmup', join(out, 'nope')], `--warmup ${join(out, 'nope')} does not exist`],
      [
        ['--data', sample, '--warmup', join(out, 'empty')],
        `--warmup ${join(out, 'empty')} holds no market files`,
      ],
      [['--data', join(out, 'bad'), '--from', '2025-01-01'], `${bad}:3: column open is not a number (x)`],
      [
        ['--data', join(out, 'cut'), '--from', '2025-01-01'],
        `${cut}: not a readable gzip file (unexpected end of file)`,
      ],
    ] as const) {
      const failed = await run(
        process.execPath,
        ['--import', 'tsx', 'services/engine/evaluate/main.ts', '--score-only', ...args, '--report', report],
        { cwd: ROOT },
      ).catch((err: { code: number; stdout: string; stderr: string }) => err);
      const { code, stderr } = failed as { code: number; stdout: string; stderr: string };
      expect({ args, code }).toEqual({ args, code: 2 });
      // One line, naming the path: no stack trace.
      expect(stderr.startsWith(`npm run evaluate: ${message}`)).toBe(true);
      expect(stderr.trimEnd().split('\n')).toHaveLength(1);
    }
    expect(await readFile(report, 'utf8')).toBe('earlier report\n');
    await expect(readFile(join(out, 'report-risk.md'), 'utf8')).rejects.toThrow(/ENOENT/);
  }, 600_000);

  it('answers a mistyped option or value with the usage and exit code 2, not a stack trace', async () => {
    for (const [args, message] of [
      [['--bogus'], "Unknown option '--bogus'"],
      [['--split', 'someday'], 'invalid date in --split'],
      [['--warmup', 'sample-data/market'], '--warmup needs --score-only'],
      [['--until', '2025-05-01'], '--until needs --risk-only'],
      [['--baselines-only'], '--baselines-only needs --score-only and --baselines'],
      [['--risk-only', '--until', '2025-05-01'], 'writes a fold: name --vol-table and --baselines'],
    ] as const) {
      const failed = await run(
        process.execPath,
        ['--import', 'tsx', 'services/engine/evaluate/main.ts', ...args],
        {
          cwd: ROOT,
        },
      ).catch((err: { code: number; stdout: string; stderr: string }) => err);
      const { code, stdout, stderr } = failed as { code: number; stdout: string; stderr: string };
      expect({ args, code }).toEqual({ args, code: 2 });
      expect(stderr).toContain(message);
      expect(stderr).toContain('npm run evaluate -- [options]');
      expect(stderr).not.toMatch(/\n\s+at /);
      expect(stdout).toBe('');
    }
  });
});
