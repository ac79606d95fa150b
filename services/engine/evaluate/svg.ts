import type { ReliabilityBin } from './stats.ts';

/**
 * Reliability diagram as a plain SVG: one panel per timeframe, predicted probability on x,
 * observed hit share on y, the diagonal is perfect calibration, circle area ∝ calls in the bin.
 */
export function reliabilitySvg(panels: ReadonlyArray<{ title: string; bins: ReliabilityBin[] }>): string {
  const size = 220;
  const pad = 34;
  const cols = Math.min(3, Math.max(1, panels.length));
  const rows = Math.ceil(panels.length / cols);
  const width = cols * (size + pad * 2);
  const height = rows * (size + pad * 2) + 24;
  const values = panels.flatMap((p) => p.bins.flatMap((b) => [b.meanPredicted, b.observed]));
  const lo = Math.max(0, Math.floor((Math.min(0.4, ...values) - 0.02) * 10) / 10);
  const hi = Math.min(1, Math.ceil((Math.max(0.6, ...values) + 0.02) * 10) / 10);
  const maxN = Math.max(1, ...panels.flatMap((p) => p.bins.map((b) => b.n)));
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="8" y="16" font-size="13">Reliability on test months: predicted P(direction beats fee) vs observed (axes ${lo.toFixed(1)}–${hi.toFixed(1)})</text>`,
  ];
  panels.forEach((panel, i) => {
    const ox = (i % cols) * (size + pad * 2) + pad;
    const oy = Math.floor(i / cols) * (size + pad * 2) + pad + 24;
    const x = (v: number) => ox + ((v - lo) / (hi - lo)) * size;
    const y = (v: number) => oy + size - ((v - lo) / (hi - lo)) * size;
    out.push(`<rect x="${ox}" y="${oy}" width="${size}" height="${size}" fill="none" stroke="#999"/>`);
    out.push(
      `<line x1="${x(lo)}" y1="${y(lo)}" x2="${x(hi)}" y2="${y(hi)}" stroke="#bbb" stroke-dasharray="4 3"/>`,
    );
    for (let t = lo; t <= hi + 1e-9; t += 0.1) {
      out.push(`<text x="${x(t) - 8}" y="${oy + size + 13}">${t.toFixed(1)}</text>`);
      out.push(`<text x="${ox - 26}" y="${y(t) + 4}">${t.toFixed(1)}</text>`);
    }
    out.push(`<text x="${ox + 4}" y="${oy - 6}" font-size="12">${escapeXml(panel.title)}</text>`);
    const pts = panel.bins.filter((b) => b.meanPredicted >= lo && b.meanPredicted <= hi);
    if (pts.length > 1) {
      const path = pts.map(
        (b) => `${x(b.meanPredicted).toFixed(1)},${y(clamp(b.observed, lo, hi)).toFixed(1)}`,
      );
      out.push(`<polyline points="${path.join(' ')}" fill="none" stroke="#1f6feb"/>`);
    }
    for (const b of pts) {
      const r = 2 + 8 * Math.sqrt(b.n / maxN);
      out.push(
        `<circle cx="${x(b.meanPredicted).toFixed(1)}" cy="${y(clamp(b.observed, lo, hi)).toFixed(1)}" r="${r.toFixed(1)}" fill="#1f6feb" fill-opacity="0.5"><title>n=${b.n} predicted ${b.meanPredicted.toFixed(3)} observed ${b.observed.toFixed(3)}</title></circle>`,
      );
    }
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(hi, Math.max(lo, v));
}

function escapeXml(s: string): string {
  return s.replace(/[<>&"]/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;' })[c]!);
}
