// Query page: one group over the chosen range (GET /api/group): summary, latency percentiles and
// count/errors/bytes/rows per step (uPlot), a latency heatmap and the range's distribution drawn
// on canvases, errors, examples, and the group's breakdown by dimension.
import {
  header, onView, api, param, setParams, rangePicker, activeFilters, el, fmtUs, fmtInt, fmtBytes,
  fmtLoad, fmtPct, fmtTime, fmtSpan, fmtCompact, lineChart, canvas2d, cssVar, pageLink, showError, DIMS,
} from './common.js';

let generation = 0;
let last = null;

function setStat(id, value, text) {
  const e = document.getElementById(id);
  e.textContent = text;
  e.dataset.value = value ?? '';
}

function renderSummary(a) {
  const s = a.summary;
  const g = a.group;
  document.getElementById('group-kind').textContent = `${g.protocol} · ${g.command} · ${g.id}`;
  document.getElementById('fingerprint').textContent = g.fingerprint || '(no text)';
  document.getElementById('group-seen').textContent = g.first_seen
    ? `first seen ${fmtTime(g.first_seen, false)} · last seen ${fmtTime(g.last_seen, false)}` : '';
  const span = a.to - a.from;
  const load = span > 0 ? s.service_sum_us / 1e6 / span : null;
  setStat('sum-count', s.count, fmtInt(s.count));
  setStat('sum-errors', s.errors, fmtInt(s.errors));
  setStat('sum-load', load, fmtLoad(load));
  setStat('sum-p50', s.p50_us, fmtUs(s.p50_us));
  setStat('sum-p95', s.p95_us, fmtUs(s.p95_us));
  setStat('sum-p99', s.p99_us, fmtUs(s.p99_us));
  setStat('sum-max', s.max_us, fmtUs(s.max_us));
  setStat('sum-rows', s.rows, fmtInt(s.rows));
  setStat('sum-bytes', (s.bytes_in || 0) + (s.bytes_out || 0), `${fmtBytes(s.bytes_in)} / ${fmtBytes(s.bytes_out)}`);
  document.getElementById('sum-errors').classList.toggle('num-bad', s.errors > 0);
}

function renderCharts(a) {
  const ser = a.series || [];
  const ts = ser.map((p) => p.ts);
  const col = (k) => ser.map((p) => (p[k] === undefined ? null : p[k]));
  document.getElementById('count-title').textContent = `Queries and errors per ${fmtSpan(a.step_s)}`;
  lineChart(document.getElementById('chart-latency'), ts, [
    { label: 'p50', values: col('p50_us'), color: '#5b8def' },
    { label: 'p95', values: col('p95_us'), color: '#e8833a' },
    { label: 'p99', values: col('p99_us'), color: '#c8372d' },
  ], fmtUs);
  lineChart(document.getElementById('chart-count'), ts, [
    { label: 'count', values: col('count'), color: '#5b8def', fill: true },
    { label: 'errors', values: col('errors'), color: '#c8372d' },
  ], fmtCompact);
  lineChart(document.getElementById('chart-bytes'), ts, [
    { label: 'in', values: col('bytes_in'), color: '#8e6bd8' },
    { label: 'out', values: col('bytes_out'), color: '#1d8a4e' },
  ], fmtBytes);
  lineChart(document.getElementById('chart-rows'), ts, [{ label: 'rows', values: col('rows'), color: '#b7791f', fill: true }], fmtCompact);
}

/** Heatmap: x = series point, y = latency bucket (log scale), shade = count (log). */
function drawHeatmap(a) {
  const cv = document.getElementById('heatmap');
  const { ctx, w, h } = canvas2d(cv);
  const bounds = (a.heatmap && a.heatmap.bounds_us) || [];
  const cells = (a.heatmap && a.heatmap.cells) || [];
  const series = a.series || [];
  ctx.clearRect(0, 0, w, h);
  const muted = cssVar('--muted');
  ctx.fillStyle = muted;
  ctx.font = '11px system-ui, sans-serif';
  let kmin = Infinity;
  let kmax = -1;
  let cmax = 0;
  cells.forEach((r) => (r || []).forEach((c, k) => {
    if (c > 0) {
      kmin = Math.min(kmin, k);
      kmax = Math.max(kmax, k);
      cmax = Math.max(cmax, c);
    }
  }));
  if (kmax < 0 || bounds.length < 2) {
    ctx.fillText('no timed events in this range', 10, 20);
    cv.onmousemove = null;
    return;
  }
  const edge = (k) => bounds[Math.min(Math.max(k, 0), bounds.length - 1)] || 1;
  const lo = Math.max(edge(kmin), 0.001);
  const hi = Math.max(edge(kmax + 1), lo * 1.01);
  const left = 60;
  const bottom = 18;
  const pw = w - left - 4;
  const ph = h - bottom - 4;
  const ly = (v) => 4 + ph - ((Math.log(Math.max(v, lo)) - Math.log(lo)) / (Math.log(hi) - Math.log(lo))) * ph;
  const n = cells.length;
  const cw = pw / Math.max(n, 1);
  const accent = cssVar('--accent') || '#2f6fdb';
  for (let i = 0; i < n; i++) {
    const r = cells[i] || [];
    for (let k = kmin; k <= kmax; k++) {
      const c = r[k] || 0;
      if (!c) continue;
      const y0 = ly(edge(k + 1));
      const y1 = ly(edge(k));
      ctx.globalAlpha = 0.12 + 0.88 * (Math.log1p(c) / Math.log1p(cmax));
      ctx.fillStyle = accent;
      ctx.fillRect(left + i * cw, y0, Math.max(cw - 0.5, 1), Math.max(y1 - y0, 1));
    }
  }
  ctx.globalAlpha = 1;
  ctx.fillStyle = muted;
  for (let j = 0; j <= 4; j++) {
    const v = Math.exp(Math.log(lo) + (j / 4) * (Math.log(hi) - Math.log(lo)));
    ctx.fillText(fmtUs(v), 2, ly(v) + 4);
  }
  if (series.length) {
    ctx.fillText(fmtTime(series[0].ts, false).slice(11), left, h - 4);
    const endLabel = fmtTime(series[series.length - 1].ts, false).slice(11);
    ctx.fillText(endLabel, w - ctx.measureText(endLabel).width - 4, h - 4);
  }
  const hover = document.getElementById('heatmap-hover');
  cv.onmousemove = (e) => {
    const r = cv.getBoundingClientRect();
    const i = Math.floor((e.clientX - r.left - left) / cw);
    const y = e.clientY - r.top;
    let k = kmin;
    while (k <= kmax && ly(edge(k + 1)) > y) k++;
    if (i < 0 || i >= n || k > kmax) return;
    const t = series[i] ? fmtTime(series[i].ts, false) : `#${i}`;
    hover.textContent = `${t} · ${fmtUs(edge(k))}–${fmtUs(edge(k + 1))}: ${fmtInt((cells[i] || [])[k] || 0)}`;
  };
}

/** Distribution: one bar per bucket, bucket edges on a log axis. */
function drawDistribution(a) {
  const cv = document.getElementById('distribution');
  const { ctx, w, h } = canvas2d(cv);
  const d = (a.distribution || []).filter((b) => b.count > 0);
  ctx.clearRect(0, 0, w, h);
  const muted = cssVar('--muted');
  ctx.font = '11px system-ui, sans-serif';
  ctx.fillStyle = muted;
  if (!d.length) {
    ctx.fillText('no timed events in this range', 10, 20);
    cv.onmousemove = null;
    return;
  }
  const lo = Math.max(d[0].lo_us, 0.001);
  const hi = Math.max(d[d.length - 1].hi_us, lo * 1.01);
  const cmax = Math.max(...d.map((b) => b.count));
  const left = 48;
  const bottom = 18;
  const pw = w - left - 8;
  const ph = h - bottom - 6;
  const lx = (v) => left + ((Math.log(Math.max(v, lo)) - Math.log(lo)) / (Math.log(hi) - Math.log(lo))) * pw;
  ctx.fillStyle = cssVar('--bar') || '#5b8def';
  for (const b of d) {
    const x0 = lx(b.lo_us);
    const x1 = lx(b.hi_us);
    const bh = (b.count / cmax) * ph;
    ctx.fillRect(x0, 6 + ph - bh, Math.max(x1 - x0 - 1, 1), bh);
  }
  ctx.fillStyle = muted;
  ctx.fillText(fmtCompact(cmax), 2, 14);
  ctx.fillText('0', 2, 6 + ph);
  for (let j = 0; j <= 4; j++) {
    const v = Math.exp(Math.log(lo) + (j / 4) * (Math.log(hi) - Math.log(lo)));
    const s = fmtUs(v);
    ctx.fillText(s, Math.min(lx(v) - ctx.measureText(s).width / 2, w - ctx.measureText(s).width - 2), h - 4);
  }
  const hover = document.getElementById('dist-hover');
  cv.onmousemove = (e) => {
    const x = e.clientX - cv.getBoundingClientRect().left;
    const b = d.find((q) => lx(q.lo_us) <= x && x < lx(q.hi_us));
    if (b) hover.textContent = `${fmtUs(b.lo_us)}–${fmtUs(b.hi_us)}: ${fmtInt(b.count)}`;
  };
}

function renderTables(a) {
  const errs = a.errors || [];
  document.querySelector('#errors-table tbody').replaceChildren(...(errs.length ? errs.map((e) => el('tr', { 'data-code': e.code },
    el('td', { class: 'fp code' }, e.code), el('td', { class: 'count', 'data-value': e.count }, fmtInt(e.count)),
    el('td', { class: 'fp message', title: e.message || '' }, e.message || ''))) : [el('tr', {}, el('td', { class: 'empty', colspan: 3 }, 'no errors'))]));
  const ex = a.examples || [];
  document.querySelector('#examples-table tbody').replaceChildren(...(ex.length ? ex.map((x) => el('tr', { 'data-kind': x.kind },
    el('td', { class: 'fp kind' }, x.kind), el('td', { class: 'fp' }, fmtTime(x.ts)),
    el('td', { class: 'latency', 'data-value': x.latency_us }, fmtUs(x.latency_us)),
    el('td', { class: 'fp mono', title: x.text || '' }, x.text || ''),
    el('td', { class: 'fp', title: `${x.database || '-'} · ${x.user || '-'} · ${x.client || '-'}` }, `${x.database || '-'} · ${x.user || '-'} · ${x.client || '-'}`),
    el('td', { class: 'fp', title: x.message || '' }, x.code ? `${x.code} ${x.message || ''}` : ''))) : [el('tr', {}, el('td', { class: 'empty', colspan: 6 }, 'no examples (examples are kept only when enabled)'))]));
}

function renderDims(dims) {
  const box = document.getElementById('group-dims');
  const parts = [];
  for (const d of DIMS) {
    const vals = (dims && dims[d]) || [];
    const rows = vals.map((s) => {
      const name = s.value === '' ? '-' : s.value;
      const v = el('td', { class: 'v', title: name }, name);
      if (!(s.value === 'other' && vals.length > 20)) {
        v.replaceChildren(el('a', { href: '#', onclick: (e) => { e.preventDefault(); setParams({ [d]: s.value === '' ? '-' : s.value }); } }, name));
      }
      return el('tr', { 'data-value': s.value }, v,
        el('td', { class: 'bar' }, el('div', { class: 'loadbar' }, el('div', { style: `width:${((s.share || 0) * 100).toFixed(1)}%` }))),
        el('td', { class: 'n' }, fmtPct(s.share)), el('td', { class: 'n count', 'data-value': s.count }, fmtInt(s.count)));
    });
    parts.push(el('div', { 'data-dim': d }, el('h2', {}, d), el('table', { class: 'share-list' }, el('tbody', {}, rows.length ? rows : [el('tr', {}, el('td', { class: 'muted' }, '–'))]))));
  }
  box.replaceChildren(...parts);
}

async function render() {
  const gen = ++generation;
  document.body.dataset.state = 'loading';
  activeFilters(document.getElementById('active-filters'));
  document.getElementById('back').setAttribute('href', pageLink('/'));
  // The group is `proto`, `cmd`, `id` in the page's URL (`protocol` there stays a filter).
  const protocol = param('proto');
  const command = param('cmd');
  const id = param('id');
  try {
    const m = await metaP;
    if (!id || !command) throw new Error('no group chosen: open a query from the Top page');
    const a = await api('group', { protocol, command, id, points: 120 });
    if (gen !== generation) return;
    last = a;
    showError(null);
    rangePicker(document.getElementById('range'), m, a);
    renderSummary(a);
    renderCharts(a);
    drawHeatmap(a);
    drawDistribution(a);
    renderTables(a);
    renderDims(a.dims);
    document.body.dataset.state = 'ready';
  } catch (e) {
    if (gen !== generation) return;
    showError(e.status === 404 ? new Error('This group has no queries in this range and filter: choose another range, or go back to Top.') : e);
    document.body.dataset.state = 'error';
    // The range picker stays usable to go to a range that holds the group.
    metaP.then((m) => rangePicker(document.getElementById('range'), m, null));
  }
}

const metaP = header('/query');
let resizeT = null;
window.addEventListener('resize', () => {
  clearTimeout(resizeT);
  resizeT = setTimeout(() => {
    if (last) {
      drawHeatmap(last);
      drawDistribution(last);
    }
  }, 150);
});
onView(render);
