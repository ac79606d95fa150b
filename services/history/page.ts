/**
 * The public track-record page: plain HTML, one script, uPlot from /track-record/assets (served
 * out of node_modules). It reloads the figures every 10 s, so the charts fill in as a replay
 * runs. `window.trackRecordCharts` lists each chart's point count, for a person and a test.
 */
export function trackRecordPage(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Track record</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/track-record/assets/uPlot.min.css">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
  table { border-collapse: collapse; margin: 1rem 0; }
  th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; }
  th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
  .charts { display: flex; flex-wrap: wrap; gap: 1.5rem; }
  .note { color: #666; max-width: 60rem; }
</style>
</head>
<body>
<h1>Track record</h1>
<p class="note">Every verdict is committed to a hash chain when it is made and revealed once its
six-candle horizon has closed; these figures are computed from the revealed verdicts and their
outcomes (hit = the call's direction beat a 10 bps fee over six candles). Baselines are scored on
the same points. <code>npm run history -- score</code> recomputes them from an export.</p>
<label>Window <select id="window">
  <option value="7d">7 days</option><option value="30d">30 days</option>
  <option value="90d">90 days</option><option value="all" selected>all</option>
</select></label>
<span id="asof"></span>
<table id="lines"><thead><tr>
  <th>exchange</th><th>timeframe</th><th>calls</th><th>HOLD share</th><th>hit rate [95 % CI]</th>
  <th>always-BUY</th><th>always-SELL</th><th>random</th><th>mean net bps</th><th>Brier (base rate)</th>
</tr></thead><tbody></tbody></table>
<div class="charts">
  <div><h3>Hit rate vs baselines (cumulative)</h3><div id="chart-hit"></div></div>
  <div><h3>Calibration: hit rate by confidence</h3><div id="chart-calibration"></div></div>
  <div><h3>Cumulative net return (bps)</h3><div id="chart-net"></div></div>
</div>
<script src="/track-record/assets/uPlot.iife.min.js"></script>
<script>
(function () {
  var charts = {};
  window.trackRecordCharts = {};
  function pct(x) { return x === null ? '–' : (100 * x).toFixed(1) + ' %'; }
  function num(x, d) { return x === null ? '–' : x.toFixed(d); }
  function row(l) {
    var f = l.following;
    var ci = f.interval ? ' [' + pct(f.interval.low) + ', ' + pct(f.interval.high) + ']' : '';
    return '<tr><td>' + l.exchange + '</td><td>' + l.timeframe + '</td><td>' + l.calls + '</td><td>' +
      pct(l.holdShare) + '</td><td>' + pct(f.hitRate) + ci + '</td><td>' + pct(l.alwaysBuy.hitRate) +
      '</td><td>' + pct(l.alwaysSell.hitRate) + '</td><td>' + pct(l.random.hitRate) + '</td><td>' +
      num(f.meanNetBps, 2) + '</td><td>' + num(l.brier, 4) + ' (' + num(l.baseRateBrier, 4) + ')</td></tr>';
  }
  function draw(id, opts, data) {
    var el = document.getElementById(id);
    if (charts[id]) charts[id].destroy();
    opts.width = 420; opts.height = 260;
    charts[id] = new uPlot(opts, data, el);
    window.trackRecordCharts[id] = data[0].length;
  }
  function days(series) { return series.map(function (p) { return Date.parse(p.day) / 1000; }); }
  function render(tr) {
    document.getElementById('asof').textContent = ' as of ' + tr.asOf;
    document.querySelector('#lines tbody').innerHTML = [tr.overall].concat(tr.lines).map(row).join('');
    var s = tr.series;
    draw('chart-hit', { series: [{}, { label: 'calls', stroke: '#1f77b4' }, { label: 'always-BUY', stroke: '#2ca02c' },
      { label: 'always-SELL', stroke: '#d62728' }, { label: 'random', stroke: '#999' }] },
      [days(s), s.map(function (p) { return p.hitRate; }), s.map(function (p) { return p.alwaysBuy; }),
       s.map(function (p) { return p.alwaysSell; }), s.map(function (p) { return p.random; })]);
    var b = tr.overall.buckets.filter(function (x) { return x.calls > 0; });
    draw('chart-calibration', { scales: { x: { time: false } }, series: [{ label: 'confidence' },
      { label: 'hit rate', stroke: '#1f77b4', points: { show: true, size: 8 } },
      { label: 'perfect', stroke: '#bbb', dash: [4, 4] }] },
      [b.map(function (x) { return x.meanConfidence; }), b.map(function (x) { return 100 * x.hitRate; }),
       b.map(function (x) { return x.meanConfidence; })]);
    draw('chart-net', { series: [{}, { label: 'following the calls', stroke: '#1f77b4' },
      { label: 'random calls', stroke: '#999' }] },
      [days(s), s.map(function (p) { return p.cumNetBps; }), s.map(function (p) { return p.cumRandomNetBps; })]);
  }
  function load() {
    var w = document.getElementById('window').value;
    return fetch('/api/track-record?window=' + w).then(function (r) {
      if (!r.ok) throw new Error('track record answered ' + r.status);
      return r.json();
    }).then(render).then(function () { document.body.dataset.loaded = 'true'; });
  }
  document.getElementById('window').addEventListener('change', load);
  load();
  setInterval(load, 10000);
})();
</script>
</body>
</html>
`;
}
