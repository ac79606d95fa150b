import { Session } from 'node:inspector/promises';

/**
 * In-process CPU profile of one stretch of a benchmark (the V8 sampling profiler through the
 * inspector), summarised by self time: which functions, and which packages, the samples fell in.
 */

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}

export interface ProfileSummary {
  totalMs: number;
  byFunction: { name: string; ms: number; share: number }[];
  byPackage: { name: string; ms: number; share: number }[];
}

export async function profile<T>(work: () => Promise<T>): Promise<{ result: T; summary: ProfileSummary }> {
  const session = new Session();
  session.connect();
  try {
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 100 });
    await session.post('Profiler.start');
    const result = await work();
    const { profile: p } = (await session.post('Profiler.stop')) as unknown as {
      profile: { nodes: ProfileNode[]; startTime: number; endTime: number; samples: number[] };
    };
    return { result, summary: summarise(p) };
  } finally {
    session.disconnect();
  }
}

/** node_modules/<pkg> (scoped too), our own top-level folder, node internals, or V8's own entries. */
function packageOf(url: string, functionName: string): string {
  if (url === '') return `(${functionName || 'native'})`;
  const modules = url.lastIndexOf('node_modules/');
  if (modules >= 0) {
    const parts = url.slice(modules + 'node_modules/'.length).split('/');
    return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
  }
  if (url.startsWith('node:')) return 'node internals';
  const ours = /\/work\/[^/]+\/(?:main\/)?([^/]+\/[^/]+)/.exec(url);
  return ours ? `ours: ${ours[1]}` : url;
}

export function summarise(p: {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
}) {
  const totalMs = (p.endTime - p.startTime) / 1000;
  const perSample = totalMs / Math.max(1, p.samples.length);
  const hits = new Map<number, number>();
  for (const id of p.samples) hits.set(id, (hits.get(id) ?? 0) + 1);
  const fn = new Map<string, number>();
  const pkg = new Map<string, number>();
  for (const node of p.nodes) {
    const count = hits.get(node.id) ?? 0;
    if (count === 0) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    const file = url.split('/').slice(-2).join('/');
    const name = url ? `${functionName || '(anonymous)'} ${file}:${lineNumber + 1}` : `(${functionName})`;
    fn.set(name, (fn.get(name) ?? 0) + count);
    const where = packageOf(url, functionName);
    pkg.set(where, (pkg.get(where) ?? 0) + count);
  }
  const rank = (m: Map<string, number>) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .map(([name, count]) => ({
        name,
        ms: count * perSample,
        share: count / Math.max(1, p.samples.length),
      }));
  return { totalMs, byFunction: rank(fn), byPackage: rank(pkg) };
}

export function printProfile(summary: ProfileSummary, top = 15): void {
  console.log(
    `  CPU profile over ${(summary.totalMs / 1000).toFixed(1)} s (self time; idle = waiting on I/O):`,
  );
  console.log('  by package:');
  for (const row of summary.byPackage.slice(0, top)) {
    console.log(`    ${(row.share * 100).toFixed(1).padStart(5)}%  ${row.name}`);
  }
  console.log('  by function:');
  for (const row of summary.byFunction.slice(0, top)) {
    console.log(`    ${(row.share * 100).toFixed(1).padStart(5)}%  ${row.name}`);
  }
}
