import { pagePolicy } from '../shared/content-security-policy.ts';

/**
 * The public track-record page: plain HTML, one script, uPlot from /track-record/assets (served
 * out of node_modules). It reloads the figures as often as GET /api/track-record may be cached
 * (its Cache-Control max-age): polling faster only fetches the same bytes again. The charts take
 * the width of their column, so the page reads on a phone, and their value axes are as wide as
 * their longest tick label. A chart with nothing to plot is not drawn: a sentence says why in
 * its place. `window.trackRecordCharts` lists each chart's point count (0 = the sentence),
 * `window.trackRecordPlots` the uPlot instances drawn, `window.trackRecordRefreshMs` the refresh
 * period, for a person and a test. The refresh can be paused (WCAG 2.2.2: a screen reader's place in
 * a table is lost when its rows are replaced): `window.trackRecordNextLoad` is when the next load
 * is due (epoch ms), null while paused.
 */
export function trackRecordPage(): string {
  return PAGE;
}

/**
 * The page's Content-Security-Policy: its own origin's scripts, styles, API and images (the
 * favicon is a data: URL), its one inline script and one inline style by their hashes, and never
 * in a frame.
 */
export function trackRecordPolicy(): string {
  return POLICY;
}

function page(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Track record</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/track-record/assets/uPlot.min.css">
<style>
  *, *::before, *::after { box-sizing: border-box; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #222; }
  @media (max-width: 600px) { body { margin: 0.75rem; } h1 { font-size: 1.5rem; } }
  .table-wrap { max-width: 100%; overflow-x: auto; margin: 1rem 0; }
  table { border-collapse: collapse; }
  caption { text-align: left; font-weight: 600; padding: 0.25rem 0; }
  .table-wrap:focus-visible { outline: 2px solid #1f77b4; outline-offset: 2px; }
  th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; white-space: nowrap; }
  th:first-child, td:first-child, th:nth-child(2), td:nth-child(2) { text-align: left; }
  .charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 380px), 1fr)); gap: 1.5rem; }
  .chart { min-width: 0; }
  .chart h3 { margin: 0.5rem 0; }
  .note { color: #666; max-width: 60rem; overflow-wrap: anywhere; }
  .empty { color: #444; border: 1px dashed #ccc; padding: 0.75rem; }
  .feed { max-width: 60rem; border-left: 4px solid #a34f00; background: #fff4e5; padding: 0.5rem 0.75rem; }
  .feed[data-feed=live] { border-left-color: #2c7a2c; background: none; }
  .visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
  .u-legend { white-space: normal; }
  .u-legend [role=button] { cursor: pointer; }
  .u-legend [role=button]:focus-visible { outline: 2px solid #1f77b4; outline-offset: 2px; }
  .u-legend .u-series { display: inline-block; }
</style>
</head>
<body>
<main>
<h1>Track record</h1>
<p class="note">Every verdict is committed to a hash chain when it is made and revealed once its
six-candle horizon has closed; these figures are computed from the revealed verdicts and their
outcomes (hit = the call's direction beat a 10 bps fee over six candles). Baselines are scored on
the same points. <code>npm run history -- score</code> recomputes them from an export.</p>
<noscript><p>This page draws its figures with JavaScript, which is off. The same figures, as JSON:
<a href="/api/track-record?window=all">/api/track-record?window=all</a> (window 7d, 30d, 90d or all).</p></noscript>
<label>Window <select id="window">
  <option value="7d">7 days</option><option value="30d">30 days</option>
  <option value="90d">90 days</option><option value="all" selected>all</option>
</select></label>
<span id="asof"></span>
<p><label><input type="checkbox" id="auto-refresh" checked> Update the figures automatically as new
verdicts resolve</label></p>
<p class="feed" id="feed-note" hidden></p>
<p class="note" id="window-note" hidden></p>
<p class="note" id="status" role="status"></p>
<h2>Direction calls</h2>
<div class="table-wrap" tabindex="0" role="region" aria-labelledby="lines-caption"><table id="lines">
<caption id="lines-caption">Direction calls per venue and timeframe: hit rates against the baselines'</caption><thead><tr>
  <th>exchange</th><th>timeframe</th><th>calls</th><th>HOLD share</th><th>feed: live / replay</th><th>hit rate [95 % CI]</th>
  <th>always-BUY</th><th>always-SELL</th><th>random</th><th>mean net bps</th><th>Brier (base rate)</th>
</tr></thead><tbody></tbody></table></div>
<div class="charts">
  <div class="chart"><h3>Hit rate vs baselines (cumulative)</h3><div id="chart-hit"></div><div class="visually-hidden"><table id="chart-hit-table" hidden></table></div>
    <p class="empty" id="chart-hit-empty" hidden></p></div>
  <div class="chart"><h3>Calibration: hit rate by confidence</h3><div id="chart-calibration"></div><div class="visually-hidden"><table id="chart-calibration-table" hidden></table></div>
    <p class="empty" id="chart-calibration-empty" hidden></p>
    <p class="note" id="calibration-note" hidden></p></div>
  <div class="chart"><h3>Cumulative net return (bps)</h3><div id="chart-net"></div><div class="visually-hidden"><table id="chart-net-table" hidden></table></div>
    <p class="empty" id="chart-net-empty" hidden></p></div>
</div>
<h2>Risk forecast</h2>
<p class="note">Every verdict, HOLD included, serves a risk forecast: <code>expected_move_pct</code>
(the forecast σ of the log return over its horizon) and a band the close should end in that
often (80 %). Scored here on every resolved verdict: the share of closes inside the served band
(coverage, beside the share the band states) and the σ ratio, RMS of the σ served ÷ RMS of the
realised log return over the horizon (1 = right in level, above 1 = too wide). Coins move together,
so a few days' moves swing both figures far from a level forecast's: each carries its 95 % interval,
resampling whole days as the evaluation does, once its verdicts span 20 blocks of at least a day and
two horizons; before that it shows [–], and the figure alone cannot tell a forecast set too narrow
or too wide from the days it covers.</p>
<div class="charts">
  <div class="chart"><h3>Band coverage (cumulative)</h3><div id="chart-coverage"></div><div class="visually-hidden"><table id="chart-coverage-table" hidden></table></div>
    <p class="empty" id="chart-coverage-empty" hidden></p></div>
  <div class="chart"><h3>σ served ÷ realised (cumulative)</h3><div id="chart-sigma"></div><div class="visually-hidden"><table id="chart-sigma-table" hidden></table></div>
    <p class="empty" id="chart-sigma-empty" hidden></p></div>
</div>
<div class="table-wrap" tabindex="0" role="region" aria-labelledby="risk-record-caption"><table id="risk-record">
<caption id="risk-record-caption">Risk forecast scored per venue and timeframe, beside the test months' figures</caption><thead><tr>
  <th>exchange</th><th>timeframe</th><th>verdicts scored</th><th>blocks</th><th>band coverage [95%] (stated)</th>
  <th>σ served ÷ realised [95%]</th><th>without a forecast</th><th>test months: band coverage</th>
  <th>test months: σ served ÷ realised</th>
</tr></thead><tbody></tbody></table></div>
<h2>Against what a buyer could compute for free</h2>
<p class="note" id="baselines-note">Measured out of sample by <code>npm run evaluate</code> on the
test months: per cell, what following the service's answers earned per answer after the fee, what
its would-be calls (the economic gate ignored) earned, always-HOLD (0 bps), and the best free rule
(following or fading the last N candles, chosen on the training months), with the lift and its
95 % interval. Then the risk forecast's 80 % band and ranking against a free trailing-volatility band,
and its level and loss against the forecasters a risk desk already has (RiskMetrics EWMA, GARCH(1,1),
HAR-RV): QLIKE below 0 means the service's forecast beat that baseline on the test months.
[–]: no interval, as on the 1d six-candle rows: a resampled block lasts at least a day and two
horizons, and the test months hold too few of them.</p>
<div class="table-wrap" tabindex="0" role="region" aria-labelledby="baselines-caption"><table id="baselines">
<caption id="baselines-caption">Test months: following the service against the best free rule, per cell</caption><thead><tr>
  <th>cell</th><th>sells direction</th><th>service bps / answer</th><th>would-be bps / call</th>
  <th>best free rule</th><th>free bps / call</th><th>lift bps [95 % CI]</th>
</tr></thead><tbody></tbody></table></div>
<div class="table-wrap" tabindex="0" role="region" aria-labelledby="risk-caption"><table id="risk">
<caption id="risk-caption">Test months: the risk forecast against a free band and a risk desk's forecasters</caption><thead><tr>
  <th>set</th><th>timeframe</th><th>horizon</th><th>points</th><th>band coverage</th>
  <th>free band coverage</th><th>σ served ÷ realised</th>
  <th>QLIKE − EWMA</th><th>QLIKE − GARCH</th><th>QLIKE − HAR-RV</th><th>sized ÷ target</th><th>trailing-σ sized ÷ target</th>
</tr></thead><tbody></tbody></table></div>
<h2>Funding carry</h2>
<p class="note" id="carry-note"></p>
<div class="table-wrap" tabindex="0" role="region" aria-labelledby="carry-caption"><table id="carry">
<caption id="carry-caption">Funding carry: the share of a spread collected, fitted on the training months</caption><thead><tr>
  <th>spread from (bps / 8 h)</th><th>horizon</th><th>share of spread collected</th>
  <th>share net positive</th><th>training opportunities</th>
</tr></thead><tbody></tbody></table></div>
</main>
<script src="/track-record/assets/uPlot.iife.min.js"></script>
<script>
(function () {
  var charts = {};
  var last = null;
  var timer = null;
  window.trackRecordCharts = {};
  window.trackRecordPlots = charts;
  window.trackRecordRefreshMs = 60000;
  var compact = new Intl.NumberFormat('en-US', { notation: 'compact', maximumFractionDigits: 3 });
  function pct(x) { return x === null ? '–' : (100 * x).toFixed(1) + ' %'; }
  function num(x, d) { return x === null ? '–' : x.toFixed(d); }
  function row(l) {
    var f = l.following;
    var ci = f.interval ? ' [' + pct(f.interval.low) + ', ' + pct(f.interval.high) + ']' : '';
    var looped = l.feeds.replayLooped ? ' (' + l.feeds.replayLooped + ' looped, not counted)' : '';
    return '<tr><td>' + l.exchange + '</td><td>' + l.timeframe + '</td><td>' + l.calls + '</td><td>' +
      pct(l.holdShare) + '</td><td>' + l.feeds.live + ' / ' + l.feeds.replay + looped + '</td><td>' +
      pct(f.hitRate) + ci + '</td><td>' + pct(l.alwaysBuy.hitRate) +
      '</td><td>' + pct(l.alwaysSell.hitRate) + '</td><td>' + pct(l.random.hitRate) + '</td><td>' +
      num(f.meanNetBps, 2) + '</td><td>' + num(l.brier, 4) + ' (' + num(l.baseRateBrier, 4) + ')</td></tr>';
  }
  // The value axis is as wide as its longest label (uPlot's fixed default clips "-12,345" to "2,345").
  // Its labels' decimals follow the ticks (below), so a later layout pass may widen them: the size
  // then grows to fit and never shrinks within one layout, which keeps uPlot's passes converging.
  function axisSize(self, values, axisIdx, cycleNum) {
    var axis = self.axes[axisIdx];
    var size = axis.ticks.size + axis.gap + 4;
    var longest = (values || []).reduce(function (a, v) { return v != null && String(v).length > a.length ? String(v) : a; }, '');
    if (longest !== '') {
      self.ctx.font = axis.font[0];
      size += self.ctx.measureText(longest).width / (window.devicePixelRatio || 1);
    }
    return cycleNum > 1 ? Math.max(axis._size, Math.ceil(size)) : Math.ceil(size);
  }
  // Each formatter below takes an axis's splits and labels them all. A tick's label names its grid
  // line: as many decimals as the splits need (at least \`least\`), so a step of 0.25 reads 0.25 and
  // 0.75, not "0.3" and "0.8" beside lines a quarter apart.
  function decimals(splits, least) {
    var d = least;
    var off = function (v) { return v != null && Math.abs(Number(v.toFixed(d)) - v) > 1e-9 * Math.max(1, Math.abs(v)); };
    while (d < 6 && splits.some(off)) d++;
    return d;
  }
  function fixed(scale, least, unit) {
    return function (splits) {
      var xs = splits.map(function (v) { return v == null ? null : scale * v; });
      var d = decimals(xs, least);
      return xs.map(function (v) { return v == null ? '' : v.toFixed(d) + unit; });
    };
  }
  // Every axis says what it measures and in which unit (a tick's "%" does not say of what).
  function titled(axis, label) {
    axis.label = label;
    axis.labelSize = 20;
    axis.labelFont = '12px system-ui, sans-serif';
    return axis;
  }
  function valueAxis(format, label) {
    return titled({ size: axisSize, values: function (u, splits) { return format(splits); } }, label);
  }
  var asPercent = fixed(100, 0, ' %');
  var asPoints = fixed(1, 0, ' %');
  var asRatio = fixed(1, 1, '');
  // Compact from a thousand (12K), each tick with the fraction digits it has (1.25K, 0.25).
  var asBps = function (splits) {
    return splits.map(function (v) { return v == null ? '' : compact.format(v) + ' bps'; });
  };
  // Lines read at 3:1 or more on white (WCAG 1.4.11) and differ by dash as well as colour: the
  // service's calls solid, each baseline its own dash, references dashed grey.
  var RANDOM = '#666666';
  var REFERENCE = '#767676';
  function utc(ts) { return uPlot.tzDate(new Date(ts * 1000), 'Etc/UTC'); }
  // The x series of a chart over days: the hovered day as the API names it.
  function day() { return { label: 'day (UTC)', value: '{YYYY}-{MM}-{DD}' }; }
  // Its time axis: ticks on whole days only (an hour tick, "12am", says nothing of a day's figures),
  // each labelled with its day as the API, the tables and the hovered value name it (2025-07-14),
  // not uPlot's month/day ("7/14"), which most of the world reads day first. Ticks stand at least
  // a label's width and a gap apart, so the longer labels never run into each other.
  function dayLabelWidth(self) {
    self.ctx.font = self.axes[0].font[0];
    return Math.ceil(self.ctx.measureText('0000-00-00').width / (window.devicePixelRatio || 1));
  }
  function dayAxis() {
    return titled({
      incrs: [1, 2, 3, 7, 14, 30, 60, 90, 180, 365].map(function (n) { return n * 86400; }),
      space: function (self) { return dayLabelWidth(self) + 16; },
      values: function (u, splits) { return splits.map(function (t) { return t == null ? '' : dayOf(t); }); }
    }, 'day (UTC)');
  }
  // The axis ends a day after the last day, on a tick at the plot's right edge: half a label of
  // room there keeps that day whole (uPlot's default room fits a short "10/4", not "2025-10-04").
  function dayPadding() {
    return [null, function (self) { return Math.ceil(dayLabelWidth(self) / 2) + 4; }, null, null];
  }
  // The series a reader hid with the legend, per chart (labels): a redraw keeps them hidden.
  var hiddenSeries = {};
  // A chart with no points is not drawn (an empty frame says nothing): \`empty\` says why instead.
  // A redraw (the refresh, a resize or zoom) replaces the chart: the series hidden stay hidden and
  // a legend toggle that had the keyboard focus has it again, so the focus is not lost to the page.
  function draw(id, opts, data, points, empty, format) {
    var el = document.getElementById(id);
    var note = document.getElementById(id + '-empty');
    var focused = -1;
    if (charts[id]) {
      charts[id].root.querySelectorAll('.u-legend .u-series').forEach(function (row, i) {
        if (row.firstChild === document.activeElement) focused = i;
      });
      hiddenSeries[id] = charts[id].series.filter(function (s) { return !s.show; }).map(function (s) { return s.label; });
      charts[id].destroy();
      delete charts[id];
    }
    opts.series.forEach(function (s, i) { if (i > 0 && (hiddenSeries[id] || []).indexOf(s.label) >= 0) s.show = false; });
    window.trackRecordCharts[id] = points;
    el.hidden = points === 0;
    note.hidden = points > 0;
    document.getElementById(id + '-table').hidden = points === 0;
    if (points === 0) { note.textContent = empty; return; }
    // The legend reads as the chart's table does (a share in percent beside a percent axis, not
    // uPlot's raw fraction) and, with no point hovered, the last point's figures rather than
    // uPlot's blank "--". Every chart's last column only carries its reference lines.
    var latest = data[0].length - 2;
    opts.series.forEach(function (s, i) {
      s.value = function (u, raw, si, idx) {
        var v = u.data[si][idx == null ? latest : idx];
        return v == null ? '–' : format[i === 0 ? 0 : 1](v);
      };
    });
    // Days are UTC days (the API's): ticks and the hovered time in UTC, whatever the reader's zone.
    opts.tzDate = utc;
    opts.width = Math.max(240, Math.floor(el.clientWidth));
    opts.height = opts.width < 380 ? 220 : 260;
    charts[id] = new uPlot(opts, data, el);
    describe(el, charts[id].root.querySelector('.u-wrap'), opts, data, format);
    keyboardLegend(charts[id]);
    if (focused > 0) charts[id].root.querySelectorAll('.u-legend .u-series')[focused].firstChild.focus();
  }
  // A chart's text alternative (a canvas says nothing to a screen reader): a summary as the label
  // of its plot area (role img; the legend beside it stays its own) and its figures, row by row, in
  // a visually hidden table after it. The rows are the points (a chart's first and last columns
  // only carry its reference lines). format: [x, y] formatters, as the page's tables print such figures.
  function describe(el, plot, opts, data, format) {
    var title = el.parentNode.querySelector('h3').textContent;
    var labels = opts.series.map(function (s) { return s.label; });
    var rows = [];
    for (var i = 1; i < data[0].length - 1; i++) rows.push(i);
    var x = function (i) { return format[0](data[0][i]); };
    var values = function (i) { return data.slice(1).map(function (c) { return format[1](c[i]); }); };
    var end = rows[rows.length - 1];
    plot.setAttribute('role', 'img');
    plot.setAttribute('aria-label', title + ': ' + rows.length + (rows.length === 1 ? ' point, ' : ' points, ') +
      x(rows[0]) + ' to ' + x(end) + '; at ' + x(end) + ': ' + values(end).map(function (v, k) {
        return labels[k + 1] + ' ' + v;
      }).join(', ') + '. The figures are in the table that follows.');
    document.getElementById(el.id + '-table').innerHTML = '<caption>' + title + ': the figures charted</caption>' +
      '<thead><tr>' + labels.map(function (l) { return '<th scope="col">' + l + '</th>'; }).join('') +
      '</tr></thead><tbody>' + rows.map(function (i) {
        return '<tr><th scope="row">' + x(i) + '</th>' + values(i).map(function (v) { return '<td>' + v + '</td>'; }).join('') + '</tr>';
      }).join('') + '</tbody>';
  }
  // uPlot's legend shows or hides a series on a click only: each series' entry becomes a toggle
  // button a keyboard reaches (Tab) and works (Enter, Space), saying whether it is shown.
  function keyboardLegend(u) {
    var rows = u.root.querySelectorAll('.u-legend .u-series');
    var pressed = function () {
      rows.forEach(function (row, i) { if (i > 0) row.firstChild.setAttribute('aria-pressed', String(u.series[i].show)); });
    };
    rows.forEach(function (row, i) {
      if (i === 0) return;
      var label = row.firstChild;
      label.tabIndex = 0;
      label.setAttribute('role', 'button');
      label.addEventListener('keydown', function (e) {
        if (e.key !== 'Enter' && e.key !== ' ') return;
        e.preventDefault();
        label.click();
      });
      label.addEventListener('click', pressed);
    });
    pressed();
  }
  function dayOf(t) { return new Date(t * 1000).toISOString().slice(0, 10); }
  function points1(v) { return v.toFixed(1) + ' %'; }
  function two(v) { return num(v, 2); }
  function resolved(tr) {
    return tr.overall.calls + tr.overall.holds;
  }
  function noCalls(tr, what) {
    var n = resolved(tr);
    return n === 0
      ? 'No verdict has a resolved outcome in this window yet, so there is no ' + what + ' to chart.'
      : 'No BUY or SELL call has a resolved outcome in this window: all ' + n + ' resolved verdicts were HOLD, ' +
        'so there is no ' + what + ' to chart. What following their leans would have earned is in the ' +
        'history export (lean, lean_net_centi_bps).';
  }
  function days(series) { return series.map(function (p) { return Date.parse(p.day) / 1000; }); }
  // A chart over days: the days' columns, with a day either side where only the reference lines
  // run, so that one day is drawn inside an axis around it (uPlot's own range for a single time
  // spans years) and a reference is a line, not a dot.
  function overDays(s, columns, references) {
    var x = days(s);
    var ends = s.length ? [x[0] - 86400, x[x.length - 1] + 86400] : [];
    var edge = function (column) { return s.length ? [null].concat(column, [null]) : column; };
    var ref = function (v) { return s.length ? [v].concat(x.map(function () { return v; }), [v]) : []; };
    return [s.length ? [ends[0]].concat(x, [ends[1]]) : x].concat(columns.map(edge), (references || []).map(ref));
  }
  function calibration(tr) {
    var b = tr.overall.buckets.filter(function (x) { return x.calls > 0; });
    var note = document.getElementById('calibration-note');
    var lo = b.length ? Math.max(0, b[0].from - 5) : 0;
    var hi = b.length ? Math.min(100, b[b.length - 1].to + 5) : 100;
    // The ends of the range carry the "perfect" diagonal only, so it shows even beside one point.
    var x = [lo].concat(b.map(function (p) { return p.meanConfidence; }), [hi]);
    var hit = [null].concat(b.map(function (p) { return 100 * p.hitRate; }), [null]);
    draw('chart-calibration', {
      scales: { x: { time: false, range: [lo, hi] }, y: { range: [0, 100] } },
      axes: [titled({ values: function (u, s) { return asPoints(s); } }, 'confidence (%)'), valueAxis(asPoints, 'hit rate (%)')],
      series: [{ label: 'confidence' },
        { label: 'hit rate', stroke: '#1f77b4', width: 0, points: { show: true, size: 9, fill: '#1f77b4' } },
        { label: 'perfect', stroke: REFERENCE, dash: [4, 4], points: { show: false } }] },
      [x, hit, x], b.length, noCalls(tr, 'calibration'), [points1, points1]);
    if (b.length === 0 || b.length >= 3) { note.hidden = true; return; }
    var calls = b.reduce(function (n, p) { return n + p.calls; }, 0);
    note.textContent = 'Only ' + b.length + ' confidence bucket' + (b.length === 1 ? '' : 's') + ' of 10 points hold' +
        (b.length === 1 ? 's' : '') + ' calls (' + calls + ' calls, confidence ' + b[0].from + '–' +
        b[b.length - 1].to + '): confidence comes from a coarse calibration curve whose steps each hold ' +
        'at least a tenth of the training calls, so the calls sold share a few values and the chart has few points.';
    note.hidden = false;
  }
  // A figure that is not 0 never prints as ±0.00 (which reads as touching 0, or as below it when it
  // is above): at its first significant digit then, as the evaluation report prints its bounds, so
  // every interval counted below 0 reads below 0 here.
  function fig(x, d) { return x !== null && x !== 0 && Math.abs(x) < 0.5 * Math.pow(10, -d) ? x.toPrecision(1) : num(x, d); }
  function lift(l) {
    return l.value === null ? '–' : fig(l.value, 2) + (l.low === null ? ' [–]' : ' [' + fig(l.low, 2) + ', ' + fig(l.high, 2) + ']');
  }
  function share(l) { return l.value === null ? '–' : pct(l.value); }
  function baselines(b) {
    var cells = b ? b.cells : [];
    document.querySelector('#baselines tbody').innerHTML = cells.map(function (c) {
      return '<tr><td>' + c.cell + '</td><td>' + (c.emits ? 'yes' : 'no (HOLD)') + '</td><td>' +
        num(c.serviceNetBpsPerAnswer, 2) + '</td><td>' + num(c.wouldBeNetBpsPerCall, 2) + '</td><td>' +
        c.bestFreeRule + '</td><td>' + num(c.freeNetBpsPerCall, 2) + '</td><td>' + lift(c.liftNetBps) + '</td></tr>';
    }).join('');
    document.querySelector('#risk tbody').innerHTML = (b ? b.risk : []).map(function (r) {
      var d = r.desk;
      var desk = d
        ? '<td>' + lift(d.sigmaRatio) + '</td><td>' + lift(d.qlikeVs.ewma) + '</td><td>' + lift(d.qlikeVs.garch) +
          '</td><td>' + lift(d.qlikeVs.harRv) + '</td><td>' + lift(d.sizing.service) + '</td><td>' +
          lift(d.sizing.trailing) + '</td>'
        : '<td colspan="6">not yet scored</td>';
      return '<tr><td>' + r.set + '</td><td>' + r.timeframe + '</td><td>' + r.horizon + '</td><td>' + r.points +
        '</td><td>' + share(r.coverage) + '</td><td>' + share(r.freeCoverage) + '</td>' + desk + '</tr>';
    }).join('');
    if (!b) document.getElementById('baselines-note').textContent = 'No baseline figures are shipped with this build.';
  }
  // Beside each line, the evaluation's figures for its cell at the verdict's horizon (test months).
  function riskRow(baselines) {
    return function (l) {
      var r = l.risk;
      var set = l.exchange === 'BINANCE_SPOT' ? 'spot' : 'perp';
      var b = l.exchange === 'ALL' || !baselines ? null : baselines.risk.filter(function (x) {
        return x.set === set && x.timeframe === l.timeframe && x.horizon === 'verdict';
      })[0];
      var evaluated = !b ? '<td>–</td><td>–</td>'
        : '<td>' + share(b.coverage) + '</td><td>' + (b.desk ? lift(b.desk.sigmaRatio) : 'not yet scored') + '</td>';
      // The interval once the points span MIN_INTERVAL_BLOCKS blocks; [–] before, as the evaluation prints it.
      function within(x, iv, f) { return x === null ? '' : iv === null ? ' [–]' : ' [' + f(iv.low) + ', ' + f(iv.high) + ']'; }
      return '<tr><td>' + l.exchange + '</td><td>' + l.timeframe + '</td><td>' + r.points + '</td><td>' + r.blocks + '</td><td>' +
        pct(r.coverage) + within(r.coverage, r.coverageInterval, pct) + ' (' + pct(r.nominalCoverage) + ')</td><td>' +
        num(r.sigmaRatio, 2) + within(r.sigmaRatio, r.sigmaRatioInterval, two) + '</td><td>' +
        r.unscored + '</td>' + evaluated + '</tr>';
    };
  }
  function carry(c) {
    document.getElementById('carry-note').textContent = c.note + ' Training months: ' + c.trainFrom.slice(0, 10) +
      ' to ' + c.trainTo.slice(0, 10) + '.';
    document.querySelector('#carry tbody').innerHTML = c.buckets.map(function (b) {
      return b.horizons.map(function (h) {
        return '<tr><td>' + b.fromBps + '</td><td>' + h.hours + ' h</td><td>' + pct(h.retention) + '</td><td>' +
          pct(h.shareNetPositive) + '</td><td>' + h.samples + '</td></tr>';
      }).join('');
    }).join('');
  }
  function risk(tr) {
    // Days from the first one with a scored forecast: the cumulative figures start there.
    var s = tr.series.filter(function (p) { return p.riskPoints > 0; });
    var none = tr.overall.risk.unscored > 0
      ? 'None of the ' + tr.overall.risk.unscored + ' resolved verdicts in this window carries a risk forecast to score (recorded before verdicts served one), so there is nothing to chart.'
      : 'No verdict has a resolved outcome in this window yet, so the risk forecast has nothing to be scored on.';
    var nominal = tr.overall.risk.nominalCoverage;
    draw('chart-coverage', { scales: { y: { range: [0, 1] } }, padding: dayPadding(), axes: [dayAxis(), valueAxis(asPercent, 'closes inside the band (%)')],
      series: [day(), { label: 'inside the band', stroke: '#1f77b4' },
      { label: 'stated', stroke: REFERENCE, dash: [4, 4] }] },
      overDays(s, [s.map(function (p) { return p.coverage; })], [nominal]), s.length, none, [dayOf, pct]);
    var top = s.reduce(function (m, p) { return p.sigmaRatio === null ? m : Math.max(m, p.sigmaRatio); }, 1);
    draw('chart-sigma', { scales: { y: { range: [0, Math.ceil(top * 1.2 * 10) / 10] } },
      padding: dayPadding(), axes: [dayAxis(), valueAxis(asRatio, 'σ served ÷ realised (ratio)')],
      series: [day(), { label: 'σ served ÷ realised', stroke: '#1f77b4' },
      { label: 'right in level', stroke: REFERENCE, dash: [4, 4] }] },
      overDays(s, [s.map(function (p) { return p.sigmaRatio; })], [1]), s.length, none, [dayOf, two]);
    document.querySelector('#risk-record tbody').innerHTML =
      [tr.overall].concat(tr.lines).map(riskRow(tr.baselines)).join('');
  }
  function render(tr) {
    last = tr;
    baselines(tr.baselines);
    carry(tr.carry);
    // asOfPosition: with asOf, what \`history score --as-of --as-of-position\` reproduces them from.
    document.getElementById('asof').textContent = ' as of ' + tr.asOf + ', log position ' + tr.asOfPosition;
    // What the figures are built from (live venues, the replay of recorded data, or both), in words.
    var feedNote = document.getElementById('feed-note');
    feedNote.textContent = tr.feedNote;
    feedNote.dataset.feed = tr.feed;
    feedNote.hidden = false;
    document.querySelector('#lines tbody').innerHTML = [tr.overall].concat(tr.lines).map(row).join('');
    // Days from the first one with a resolved call: before it there is no rate to draw.
    var s = tr.series.filter(function (p) { return p.calls > 0; });
    draw('chart-hit', { scales: { y: { range: [0, 1] } }, padding: dayPadding(), axes: [dayAxis(), valueAxis(asPercent, 'hit rate (%)')],
      series: [day(), { label: 'calls', stroke: '#1f77b4' }, { label: 'always-BUY', stroke: '#2ca02c', dash: [10, 4] },
      { label: 'always-SELL', stroke: '#d62728', dash: [2, 3] }, { label: 'random', stroke: RANDOM, dash: [12, 4, 2, 4] }] },
      overDays(s, [s.map(function (p) { return p.hitRate; }), s.map(function (p) { return p.alwaysBuy; }),
       s.map(function (p) { return p.alwaysSell; }), s.map(function (p) { return p.random; })]), s.length,
      noCalls(tr, 'hit rate'), [dayOf, pct]);
    calibration(tr);
    draw('chart-net', { padding: dayPadding(), axes: [dayAxis(), valueAxis(asBps, 'cumulative net return (bps)')],
      series: [day(), { label: 'following the calls', stroke: '#1f77b4' },
      { label: 'random calls', stroke: RANDOM, dash: [12, 4, 2, 4] }] },
      overDays(s, [s.map(function (p) { return p.cumNetBps; }), s.map(function (p) { return p.cumRandomNetBps; })]),
      s.length, noCalls(tr, 'net return'), [dayOf, two]);
    risk(tr);
  }
  function maxAge(response) {
    var m = /max-age=(\\d+)/.exec(response.headers.get('cache-control') || '');
    return m ? Math.max(5, Number(m[1])) * 1000 : 60000;
  }
  var autoRefresh = document.getElementById('auto-refresh');
  window.trackRecordNextLoad = null;
  // The next load, unless the reader paused the updates (the box unticked): then none.
  function schedule(ms) {
    clearTimeout(timer);
    window.trackRecordNextLoad = autoRefresh.checked ? Date.now() + ms : null;
    if (autoRefresh.checked) timer = setTimeout(load, ms);
  }
  // Retry-After in seconds or as an HTTP date; null without one.
  function retryAfter(response) {
    var v = response.headers.get('retry-after');
    if (!v) return null;
    var ms = /^\\d+$/.test(v) ? Number(v) * 1000 : Date.parse(v) - Date.now();
    return isNaN(ms) ? null : Math.max(1000, ms);
  }
  function status(text) { document.getElementById('status').textContent = text; }
  // A failed load keeps what was shown, says why in the status line, and tries again after the
  // answer's Retry-After (else the refresh period).
  function failed(e) {
    var wait = e.retryAfter || window.trackRecordRefreshMs;
    var why = e.status === 429 ? 'too many requests (HTTP 429)'
      : e.status ? 'the server answered HTTP ' + e.status : 'the server could not be reached';
    status('The figures could not be loaded: ' + why + '.' + (autoRefresh.checked
      ? ' Trying again in ' + Math.ceil(wait / 1000) + ' s.' : ' Tick "Update the figures automatically" to try again.'));
    schedule(wait);
  }
  function load() {
    var w = document.getElementById('window').value;
    return fetch('/api/track-record?window=' + w).then(function (r) {
      if (!r.ok) {
        var e = new Error('track record answered ' + r.status);
        e.status = r.status;
        e.retryAfter = retryAfter(r);
        throw e;
      }
      window.trackRecordRefreshMs = maxAge(r);
      return r.json();
    }).then(render).then(function () {
      status('');
      document.body.dataset.loaded = 'true';
      schedule(window.trackRecordRefreshMs);
    }, failed);
  }
  var resizing = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { if (last) render(last); }, 150);
  });
  // The window is in the page's address (?window=30d), so a link or a reload keeps it; one the
  // API does not know is said, and the default shown.
  var select = document.getElementById('window');
  var windowNote = document.getElementById('window-note');
  var asked = new URLSearchParams(location.search).get('window');
  var known = [].map.call(select.options, function (o) { return o.value; });
  if (asked !== null && known.indexOf(asked) >= 0) select.value = asked;
  else if (asked !== null) {
    windowNote.textContent = 'There is no window "' + asked + '" (7d, 30d, 90d or all): showing ' + select.value + '.';
    windowNote.hidden = false;
  }
  autoRefresh.addEventListener('change', function () {
    if (autoRefresh.checked) load();
    else schedule(0);
  });
  select.addEventListener('change', function () {
    var url = new URL(location.href);
    url.searchParams.set('window', select.value);
    history.replaceState(null, '', url);
    windowNote.hidden = true;
    load();
  });
  load();
})();
</script>
</body>
</html>
`;
}

const PAGE = page();
const POLICY = pagePolicy(PAGE, {
  script: ["'self'"],
  style: ["'self'"],
  connect: ["'self'"],
  img: ["'self'", 'data:'],
});
