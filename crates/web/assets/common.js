// dbtap web UI, shared by every page: the view's state in the URL query string, fetching the
// JSON API, the header bar, the range picker, the dimension filter chips, number formatting
// (durations arrive in microseconds), sparklines and uPlot charts.

// `host` (the agent) exists under `dbtap ui --clickhouse` only.
export const FILTERS = ['host', 'server', 'database', 'user', 'client', 'protocol', 'q'];
export const DIMS = ['host', 'server', 'database', 'user', 'client', 'protocol'];
const VIEW_KEYS = ['from', 'to', ...FILTERS, 'token'];

// ---------- URL state ----------

export function params() {
  return new URLSearchParams(location.search);
}

export function param(k, dflt = null) {
  const v = params().get(k);
  return v === null || v === '' ? dflt : v;
}

/** Sets (or, for null/'' values, removes) URL parameters and tells the page to redraw. */
export function setParams(patch, push = true) {
  const p = params();
  for (const [k, v] of Object.entries(patch)) {
    if (v === null || v === undefined || v === '') p.delete(k);
    else p.set(k, String(v));
  }
  const url = location.pathname + (p.toString() ? '?' + p.toString() : '');
  if (push) history.pushState(null, '', url);
  else history.replaceState(null, '', url);
  window.dispatchEvent(new Event('viewchange'));
}

/** Calls `fn` now and whenever the view changes (links within the page, back/forward). */
export function onView(fn) {
  window.addEventListener('viewchange', fn);
  window.addEventListener('popstate', fn);
  fn();
}

/** The query string of the current range, filters and token, plus `extra`; for links. */
export function viewQuery(extra = {}, keys = VIEW_KEYS) {
  const cur = params();
  const p = new URLSearchParams();
  for (const k of keys) {
    const v = cur.get(k);
    if (v) p.set(k, v);
  }
  for (const [k, v] of Object.entries(extra)) {
    if (v === null || v === undefined || v === '') p.delete(k);
    else p.set(k, String(v));
  }
  const s = p.toString();
  return s ? '?' + s : '';
}

export function pageLink(path, extra = {}, keys = VIEW_KEYS) {
  return path + viewQuery(extra, keys);
}

// ---------- API ----------

/** GET /api/<path> with the view's range and filters (unless `keys` says otherwise) and `extra`. */
export async function api(path, extra = {}, keys = VIEW_KEYS) {
  const url = '/api/' + path + viewQuery(extra, keys);
  const r = await fetch(url, { headers: { Accept: 'application/json' } });
  let body = null;
  try {
    body = await r.json();
  } catch (e) {
    body = null;
  }
  if (!r.ok) {
    const msg = body && body.error ? body.error : `HTTP ${r.status}`;
    const err = new Error(`${path}: ${msg}`);
    err.status = r.status;
    throw err;
  }
  return body;
}

let metaPromise = null;
export function meta() {
  if (!metaPromise) metaPromise = api('meta', {}, ['token']);
  return metaPromise;
}

export function showError(e) {
  const box = document.getElementById('error');
  if (!box) return;
  box.textContent = e ? String(e.message || e) : '';
}

// ---------- formatting ----------

function sig3(x) {
  if (x >= 100) return x.toFixed(0);
  if (x >= 10) return x.toFixed(1);
  return x.toFixed(2);
}

/** A duration given in microseconds, in the unit that reads best. */
export function fmtUs(us) {
  if (us === null || us === undefined || Number.isNaN(us)) return '–';
  const a = Math.abs(us);
  if (a === 0) return '0';
  if (a < 1000) return sig3(us) + ' µs';
  if (a < 1e6) return sig3(us / 1e3) + ' ms';
  if (a < 60e6) return sig3(us / 1e6) + ' s';
  return sig3(us / 60e6) + ' min';
}

export function fmtInt(n) {
  if (n === null || n === undefined) return '–';
  return Math.round(n).toLocaleString('en-US');
}

export function fmtCompact(n) {
  if (n === null || n === undefined) return '–';
  const a = Math.abs(n);
  if (a >= 1e9) return sig3(n / 1e9) + 'G';
  if (a >= 1e6) return sig3(n / 1e6) + 'M';
  if (a >= 1e4) return sig3(n / 1e3) + 'k';
  if (Number.isInteger(n)) return String(n);
  return a >= 1 ? sig3(n) : n.toPrecision(2);
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let x = n;
  while (Math.abs(x) >= 1024 && i < u.length - 1) {
    x /= 1024;
    i++;
  }
  return (i === 0 ? String(Math.round(x)) : sig3(x)) + ' ' + u[i];
}

/** Load: average active sessions (service time per second). */
export function fmtLoad(x) {
  if (x === null || x === undefined) return '–';
  if (x === 0) return '0';
  if (x >= 10) return x.toFixed(1);
  if (x >= 0.001) return x.toFixed(3);
  return x.toExponential(1);
}

export function fmtPct(share, digits = 1) {
  if (share === null || share === undefined) return '–';
  return (share * 100).toFixed(digits) + '%';
}

function pad(n) {
  return String(n).padStart(2, '0');
}

export function fmtTime(ts, seconds = true) {
  if (ts === null || ts === undefined) return '–';
  const d = new Date(ts * 1000);
  const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return seconds ? s + ':' + pad(d.getSeconds()) : s;
}

export function fmtSpan(s) {
  if (s === null || s === undefined) return '–';
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.round(s / 60)} min`;
  if (s < 86400 * 2) return `${+(s / 3600).toFixed(1)} h`;
  return `${+(s / 86400).toFixed(1)} d`;
}

function toLocalInput(ts) {
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function fromLocalInput(v) {
  const t = new Date(v).getTime();
  return Number.isNaN(t) ? null : Math.floor(t / 1000);
}

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// ---------- header bar ----------

const PAGES = [['/', 'Top'], ['/compare', 'Compare'], ['/live', 'Live']];

/** Fills `header.bar`: page links that keep the view, and what is being shown. */
export async function header(active) {
  const bar = document.querySelector('header.bar');
  const nav = el('nav');
  for (const [path, name] of PAGES) {
    nav.append(el('a', { href: pageLink(path), class: path === active ? 'active' : null, 'data-page': name.toLowerCase() }, name));
  }
  const info = el('span', { class: 'meta', id: 'meta' });
  bar.replaceChildren(el('span', { class: 'brand' }, 'dbtap'), nav, info);
  window.addEventListener('viewchange', () => {
    nav.querySelectorAll('a').forEach((a, i) => a.setAttribute('href', pageLink(PAGES[i][0])));
  });
  try {
    const m = await meta();
    const span = m.span ? `${fmtTime(m.span.from, false)} – ${fmtTime(m.span.to, false)}` : 'no data yet';
    const mode = m.mode === 'captures' ? `${m.sources.length} capture${m.sources.length === 1 ? '' : 's'}` : m.mode;
    info.textContent = m.fleet ? fleetInfo(m, span) : `${mode} · ${span} · v${m.version}`;
    if (m.mode !== 'live') nav.querySelector('[data-page=live]')?.classList.add('muted');
    if (m.fleet && m.fleet.refresh_s > 0 && active === '/') followFleet(info, m.fleet.refresh_s);
    return m;
  } catch (e) {
    showError(e);
    return null;
  }
}

/** The header's text under `dbtap ui --clickhouse`: hosts, span, rows held and left out. */
function fleetInfo(m, span) {
  const f = m.fleet;
  const n = m.sources.length;
  const out = f.rows_left_out ? ` (${fmtInt(f.rows_left_out)} left out)` : '';
  const err = f.last_error ? ` · ClickHouse: ${f.last_error}` : '';
  return `fleet: ${n} host${n === 1 ? '' : 's'} · ${span} · ${fmtInt(f.rows_held)} rows${out}${err} · v${m.version}`;
}

/** The Top page over the fleet redraws after each of the server's reads of new rows. */
function followFleet(info, refreshS) {
  setInterval(async () => {
    metaPromise = null;
    try {
      const m = await meta();
      const span = m.span ? `${fmtTime(m.span.from, false)} – ${fmtTime(m.span.to, false)}` : 'no data yet';
      info.textContent = fleetInfo(m, span);
      window.dispatchEvent(new Event('viewchange'));
    } catch (e) {
      showError(e);
    }
  }, Math.max(5, refreshS) * 1000);
}

// ---------- range picker ----------

const PRESETS = [['-15m', '15m'], ['-1h', '1h'], ['-6h', '6h'], ['-24h', '24h'], ['-7d', '7d']];

/**
 * The range picker in `box`: presets relative to the end of the data, "all", the capture files
 * (captures mode) and absolute from/to. `answered` is {from, to} as the API covered it.
 */
export function rangePicker(box, m, answered) {
  const from = param('from');
  const to = param('to');
  const presets = el('span', { class: 'presets', id: 'range-presets' });
  const pick = (f, t) => setParams({ from: f, to: t });
  for (const [v, label] of PRESETS) {
    const on = from === v && !to;
    presets.append(el('button', { type: 'button', 'data-range': v, class: on ? 'active' : null, onclick: () => pick(v, null) }, label));
  }
  if (m && m.span) {
    const on = from === String(m.span.from) && to === String(m.span.to);
    presets.append(el('button', { type: 'button', 'data-range': 'all', class: on ? 'active' : null, onclick: () => pick(m.span.from, m.span.to) }, 'all'));
  }
  const parts = [presets];
  if (m && m.sources && m.sources.length > 1) {
    const sel = el('select', { id: 'range-source', title: 'one capture file' }, el('option', { value: '' }, 'capture…'));
    m.sources.forEach((s, i) => {
      const on = from === String(s.from) && to === String(s.to);
      sel.append(el('option', { value: String(i), selected: on, title: s.label }, s.label.split('/').pop()));
    });
    sel.addEventListener('change', () => {
      const s = m.sources[+sel.value];
      if (s) pick(s.from, s.to);
    });
    parts.push(sel);
  }
  const fIn = el('input', { type: 'datetime-local', id: 'range-from', step: 60 });
  const tIn = el('input', { type: 'datetime-local', id: 'range-to', step: 60 });
  if (answered) {
    fIn.value = toLocalInput(answered.from);
    tIn.value = toLocalInput(answered.to);
  }
  const apply = el('button', { type: 'button', class: 'btn', id: 'range-apply' }, 'Apply');
  apply.addEventListener('click', () => {
    const f = fromLocalInput(fIn.value);
    const t = fromLocalInput(tIn.value);
    if (f !== null && t !== null) pick(f, t);
  });
  const label = el('span', { class: 'range-label', id: 'range-label' });
  if (answered) label.textContent = `${fmtTime(answered.from, false)} – ${fmtTime(answered.to, false)} (${fmtSpan(answered.to - answered.from)})`;
  parts.push(fIn, el('span', { class: 'muted' }, '→'), tIn, apply, label);
  box.replaceChildren(...parts);
}

// ---------- filters ----------

/** The filters in force, as removable chips (search included). */
export function activeFilters(box) {
  const chips = [];
  for (const k of FILTERS) {
    const v = param(k);
    if (v === null) continue;
    chips.push(el('span', { class: 'chip', 'data-filter': k, title: 'remove this filter', onclick: () => setParams({ [k]: null }) },
      el('span', {}, `${k === 'q' ? 'search' : k}: ${v}`), el('span', { class: 'x' }, '×')));
  }
  box.replaceChildren(...chips);
  box.style.display = chips.length ? '' : 'none';
}

/** One line of chips per dimension: each value with its share of service time; click to filter. */
export function dimChips(box, dims) {
  const lines = [];
  for (const d of DIMS) {
    const vals = (dims && dims[d]) || [];
    if (!vals.length) continue;
    const cur = param(d);
    const line = el('div', { class: 'chips', 'data-dim': d }, el('span', { class: 'dim-name' }, d));
    for (const s of vals) {
      // The summed rest ("other", last) cannot be filtered on; an absent value ('', shown as
      // -) is filtered on as "-".
      const isOther = s.value === 'other' && s === vals[vals.length - 1] && vals.length > 20;
      const fv = s.value === '' ? '-' : s.value;
      const on = cur !== null && cur === fv;
      const chip = el('span', {
        class: 'chip' + (on ? ' active' : '') + (isOther ? ' other' : ''), 'data-value': s.value,
        title: `${s.value}: ${fmtInt(s.count)} queries, ${fmtUs(s.service_sum_us)} service time`,
      }, el('span', { class: 'fill', style: `width:${Math.min(100, (s.share || 0) * 100).toFixed(1)}%` }),
      el('span', {}, s.value === '' ? '-' : s.value), el('span', { class: 'pct' }, fmtPct(s.share, 0)));
      if (!isOther) chip.addEventListener('click', () => setParams({ [d]: on ? null : fv }));
      line.append(chip);
    }
    lines.push(line);
  }
  box.replaceChildren(...lines);
}

/** A search box bound to `q` (applied on Enter or after a pause). */
export function searchBox(input) {
  input.value = param('q', '');
  let t = null;
  const go = () => {
    if ((param('q', '') || '') !== input.value.trim()) setParams({ q: input.value.trim() || null });
  };
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') {
      clearTimeout(t);
      go();
    }
  });
  input.addEventListener('input', () => {
    clearTimeout(t);
    t = setTimeout(go, 600);
  });
}

// ---------- small charts ----------

/** An SVG sparkline of `values` (area + line), scaled to its own maximum. */
export function sparkSvg(values) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('class', 'spark');
  svg.setAttribute('viewBox', '0 0 100 24');
  svg.setAttribute('preserveAspectRatio', 'none');
  const n = values ? values.length : 0;
  if (n === 0) return svg;
  const max = Math.max(...values.map((v) => v || 0)) || 1;
  const x = (i) => (n === 1 ? 50 : (i / (n - 1)) * 100);
  const y = (v) => 23 - ((v || 0) / max) * 21;
  let d = '';
  values.forEach((v, i) => {
    d += `${i ? 'L' : 'M'}${x(i).toFixed(2)},${y(v).toFixed(2)}`;
  });
  const area = document.createElementNS(ns, 'path');
  area.setAttribute('class', 'area');
  area.setAttribute('d', `${d}L${x(n - 1).toFixed(2)},24L${x(0).toFixed(2)},24Z`);
  const line = document.createElementNS(ns, 'path');
  line.setAttribute('class', 'line');
  line.setAttribute('d', d);
  svg.append(area, line);
  return svg;
}

export function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export const PALETTE = ['#5b8def', '#e8833a', '#c8372d', '#1d8a4e', '#8e6bd8', '#b7791f'];

/**
 * A uPlot line chart in `box` (replacing any chart there): x = unix seconds, `series` =
 * [{label, values, color}], y formatted by `fmt`. Resizes with its box.
 */
export function lineChart(box, ts, series, fmt = fmtCompact, opts = {}) {
  if (box._chart) {
    box._chart.destroy();
    box._chart = null;
  }
  if (box._ro) box._ro.disconnect();
  box.replaceChildren();
  if (typeof uPlot === 'undefined') {
    box.textContent = 'uPlot did not load';
    return null;
  }
  const fg = cssVar('--muted') || '#888';
  const grid = cssVar('--line') || '#ddd';
  const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  const u = new uPlot({
    width: Math.max(200, box.clientWidth || 480),
    height: opts.height || 200,
    cursor: { points: { size: 6 } },
    legend: { live: true },
    scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, hi > 0 ? hi * 1.08 : 1] } },
    axes: [{ ...axis }, { ...axis, size: 62, values: (u, vals) => vals.map((v) => fmt(v)) }],
    series: [{}, ...series.map((s, i) => ({
      label: s.label, stroke: s.color || PALETTE[i % PALETTE.length], width: 1.6,
      fill: s.fill ? (s.color || PALETTE[i % PALETTE.length]) + '22' : undefined,
      value: (u, v) => (v === null || v === undefined ? '–' : fmt(v)),
      paths: opts.bars && typeof uPlot.paths?.bars === 'function' ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined,
      // Isolated points (a gap on each side) draw no line: show points when there are few.
      points: { show: s.values.filter((v) => v !== null && v !== undefined).length < 40, size: 5 },
    }))],
  }, [ts, ...series.map((s) => s.values)], box);
  box._chart = u;
  box._ro = new ResizeObserver(() => {
    const w = box.clientWidth;
    if (w && Math.abs(w - u.width) > 2) u.setSize({ width: w, height: u.height });
  });
  box._ro.observe(box);
  return u;
}

/** A device-pixel-sized 2D context for a canvas filling its box. */
export function canvas2d(cv) {
  const r = cv.getBoundingClientRect();
  const dpr = window.devicePixelRatio || 1;
  cv.width = Math.max(1, Math.round(r.width * dpr));
  cv.height = Math.max(1, Math.round(r.height * dpr));
  const ctx = cv.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return { ctx, w: r.width, h: r.height };
}
