// Compare page: two ranges A (before) and B (after) of the same data, compared by the engine of
// `dbtap diff` (GET /api/compare returns its JSON unchanged): groups in its rank order, status,
// verdicts, new and gone groups. Ranges are a_from/a_to/b_from/b_to in the URL; with a second
// store (`dbtap ui --store A --compare-store B`) each side also names its store (a_store, b_store).
import {
  header, onView, api, param, setParams, activeFilters, el, fmtUs, fmtInt, fmtLoad, fmtTime, fmtSpan,
  pageLink, showError,
} from './common.js';

const KEYS = ['a_from', 'a_to', 'b_from', 'b_to'];
const STORE_KEYS = ['a_store', 'b_store'];

/** The sources that are stores (`dbtap ui --store A --compare-store B`): [A, B], else null. */
function storeSources(m) {
  const st = ((m && m.sources) || []).filter((s) => s.store);
  return st.length >= 2 ? st : null;
}
function storeOf(k) {
  return param(k) === 'b' ? 'b' : 'a';
}
let generation = 0;

function pad(n) {
  return String(n).padStart(2, '0');
}
function toLocalInput(ts) {
  const d = new Date(ts * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}
function fromLocalInput(v) {
  const t = new Date(v).getTime();
  return Number.isNaN(t) ? null : Math.floor(t / 1000);
}

/** The two ranges: from the URL, else the two stores' spans, else the first two captures, else
 * the last hour and the one before. With two stores, also each side's store. */
function ranges(m) {
  const stores = storeSources(m);
  const r = Object.fromEntries(KEYS.map((k) => [k, param(k) === null ? null : Number(param(k))]));
  if (stores) for (const k of STORE_KEYS) r[k] = storeOf(k);
  if (KEYS.every((k) => r[k] !== null && !Number.isNaN(r[k]))) return r;
  let d = null;
  if (stores) {
    const [a, b] = stores;
    d = { a_from: a.from, a_to: a.to, b_from: b.from, b_to: b.to, a_store: a.store, b_store: b.store };
  } else if (m && m.sources && m.sources.length >= 2) {
    const [a, b] = m.sources;
    d = { a_from: a.from, a_to: a.to, b_from: b.from, b_to: b.to };
  } else if (m && m.span) {
    const end = m.span.to;
    const len = Math.min(3600, Math.max(60, Math.floor((m.span.to - m.span.from) / 2)));
    d = { a_from: end - 2 * len, a_to: end - len, b_from: end - len, b_to: end };
  }
  if (!d) return null;
  const p = new URLSearchParams(location.search);
  for (const k of Object.keys(d)) p.set(k, String(d[k]));
  history.replaceState(null, '', location.pathname + '?' + p.toString());
  return d;
}

function sideRow(name, key, r, m) {
  const fIn = el('input', { type: 'datetime-local', id: `${key}-from`, step: 60 });
  const tIn = el('input', { type: 'datetime-local', id: `${key}-to`, step: 60 });
  fIn.value = toLocalInput(r[`${key}_from`]);
  tIn.value = toLocalInput(r[`${key}_to`]);
  const parts = [el('span', { class: 'lbl' }, name)];
  const row = el('div', { class: 'row' });
  const stores = storeSources(m);
  if (stores) {
    const sel = el('select', { id: `${key}-store` });
    for (const s of stores) {
      sel.append(el('option', { value: s.store, selected: s.store === r[`${key}_store`], title: s.label },
        `store ${s.store.toUpperCase()}: ${s.label.split('/').pop()}`));
    }
    sel.addEventListener('change', () => {
      const s = stores.find((x) => x.store === sel.value);
      if (s) setParams({ [`${key}_store`]: s.store, [`${key}_from`]: s.from, [`${key}_to`]: s.to });
    });
    row.append(sel);
  } else if (m && m.sources && m.sources.length > 1) {
    const sel = el('select', { id: `${key}-source` }, el('option', { value: '' }, 'capture…'));
    m.sources.forEach((s, i) => {
      const on = s.from === r[`${key}_from`] && s.to === r[`${key}_to`];
      sel.append(el('option', { value: String(i), selected: on, title: s.label }, s.label.split('/').pop()));
    });
    sel.addEventListener('change', () => {
      const s = m.sources[+sel.value];
      if (s) setParams({ [`${key}_from`]: s.from, [`${key}_to`]: s.to });
    });
    row.append(sel);
  }
  const apply = el('button', { type: 'button', class: 'btn', id: `${key}-apply` }, 'Apply');
  apply.addEventListener('click', () => {
    const f = fromLocalInput(fIn.value);
    const t = fromLocalInput(tIn.value);
    if (f !== null && t !== null) setParams({ [`${key}_from`]: f, [`${key}_to`]: t });
  });
  row.append(fIn, el('span', { class: 'muted' }, '→'), tIn, apply);
  parts.push(row, el('span', { class: 'muted' }, `${fmtTime(r[`${key}_from`])} – ${fmtTime(r[`${key}_to`])} (${fmtSpan(r[`${key}_to`] - r[`${key}_from`])})`));
  return parts;
}

function presets(r) {
  const box = document.getElementById('compare-presets');
  const len = r.b_to - r.b_from;
  const same = r.b_store ? { a_store: r.b_store } : {};
  const shift = (by) => setParams({ a_from: r.b_from - by, a_to: r.b_to - by, ...same });
  box.replaceChildren(
    el('button', { type: 'button', 'data-preset': 'previous', onclick: () => shift(len) }, 'A = period before B'),
    el('button', { type: 'button', 'data-preset': 'day', onclick: () => shift(86400) }, 'A = B a day earlier'),
    el('button', { type: 'button', 'data-preset': 'week', onclick: () => shift(7 * 86400) }, 'A = B a week earlier'),
    el('button', { type: 'button', 'data-preset': 'swap', onclick: () => setParams({ a_from: r.b_from, a_to: r.b_to, b_from: r.a_from, b_to: r.a_to, a_store: r.b_store, b_store: r.a_store }) }, 'swap'));
}

const msUs = (v) => (v === null || v === undefined ? null : v * 1000);

function metricCell(g, name) {
  const m = (g.metrics || []).find((x) => x.name === name);
  if (!m) return el('td', { class: name }, '–');
  const chg = m.change_pct === null || m.change_pct === undefined ? '' : ` (${m.change_pct > 0 ? '+' : ''}${m.change_pct.toFixed(0)}%)`;
  return el('td', { class: `${name} v-${m.verdict}`, 'data-before': m.before ?? '', 'data-after': m.after ?? '', 'data-verdict': m.verdict,
    title: `${m.verdict}${chg}; ${m.test}: p=${m.p_adjusted ?? '–'} (adjusted)` },
  `${fmtUs(msUs(m.before))} → ${fmtUs(msUs(m.after))}`);
}

function verdictCell(g) {
  const notable = (g.metrics || []).filter((m) => !['no_change', 'not_tested'].includes(m.verdict));
  const td = el('td', { class: 'fp verdict', 'data-value': g.status, 'data-verdicts': (g.metrics || []).map((m) => `${m.name}:${m.verdict}`).join(',') });
  if (!notable.length) {
    td.append(el('span', { class: 'muted' }, g.status === 'new' || g.status === 'gone' ? '' : 'no significant change'));
  }
  notable.forEach((m, i) => {
    const chg = m.change_pct === null || m.change_pct === undefined ? '' : ` ${m.change_pct > 0 ? '+' : ''}${m.change_pct.toFixed(0)}%`;
    if (i) td.append(', ');
    td.append(el('span', { class: `v-${m.verdict}`, title: `${m.verdict}, ${m.test}, p adj ${m.p_adjusted}` }, `${m.name}${chg}`));
  });
  return td;
}

function row(g, maxAbs, r) {
  const lc = g.load_change || 0;
  const w = maxAbs > 0 ? (Math.abs(lc) / maxAbs) * 50 : 0;
  const delta = el('div', { class: 'delta' }, el('div', { class: 'mid' }), el('div', { class: lc >= 0 ? 'pos' : 'neg', style: `width:${w.toFixed(1)}%` }));
  // The Query page reads store A: link to the side on store A (B's when both are).
  const side = r.b_store === 'b' ? (r.a_store === 'b' ? null : 'a') : 'b';
  const fp = g.fingerprint || g.id;
  const link = side === null ? el('span', {}, fp)
    : el('a', { href: pageLink('/query', { proto: g.protocol, cmd: g.command, id: g.id, from: r[`${side}_from`], to: r[`${side}_to`] }) }, fp);
  return el('tr', { 'data-id': g.id, 'data-status': g.status, 'data-rank': g.rank },
    el('td', { class: 'rank' }, g.rank),
    el('td', { class: 'fp status', 'data-value': g.status }, el('span', { class: `pill status-${g.status}` }, g.status)),
    el('td', { class: 'fp', title: g.fingerprint }, el('span', { class: 'kind' }, `${g.protocol} ${g.command}`), link),
    el('td', { class: 'count', 'data-before': g.count_before, 'data-after': g.count_after }, `${fmtInt(g.count_before)} → ${fmtInt(g.count_after)}`),
    el('td', { class: 'load' }, `${fmtLoad(g.load_before)} → ${fmtLoad(g.load_after)}`),
    el('td', { class: 'load-change', 'data-value': g.load_change ?? '', title: `${lc >= 0 ? '+' : ''}${fmtLoad(lc)}` }, delta),
    metricCell(g, 'p50'), metricCell(g, 'p99'), verdictCell(g));
}

function sideStat(label, s, from, to, st) {
  return el('div', { class: 'stat' }, el('span', { class: 'k' }, label),
    el('span', { class: 'v small' }, `${fmtInt(s.queries)} queries · ${s.qps === null ? '–' : s.qps.toFixed(1)}/s · load ${fmtLoad(s.load)}`),
    el('span', { class: 'muted' }, `${st ? `store ${st.toUpperCase()} · ` : ''}${fmtTime(from)} – ${fmtTime(to)}${s.complete ? '' : ' (incomplete: losses)'}`));
}

function renderDiff(d, r) {
  const sum = document.getElementById('compare-summary');
  sum.textContent = d.summary.line;
  sum.dataset.regressed = d.summary.regressed;
  document.getElementById('side-stats').replaceChildren(sideStat('A (before)', d.before, r.a_from, r.a_to, r.a_store),
    sideStat('B (after)', d.after, r.b_from, r.b_to, r.b_store));
  const tbody = document.querySelector('#compare-table tbody');
  const maxAbs = Math.max(0, ...d.groups.map((g) => Math.abs(g.load_change || 0)));
  tbody.replaceChildren(...(d.groups.length ? d.groups.map((g) => row(g, maxAbs, r))
    : [el('tr', {}, el('td', { class: 'empty', colspan: 9 }, 'no queries on either side'))]));
}

async function render() {
  const gen = ++generation;
  document.body.dataset.state = 'loading';
  activeFilters(document.getElementById('active-filters'));
  try {
    const m = await metaP;
    const r = ranges(m);
    if (!r) throw new Error('no data to compare yet');
    document.getElementById('sides').replaceChildren(...sideRow('A', 'a', r, m), ...sideRow('B', 'b', r, m));
    presets(r);
    const d = await api('compare', r, ['server', 'database', 'user', 'client', 'protocol', 'q', 'token']);
    if (gen !== generation) return;
    showError(null);
    renderDiff(d, r);
    document.body.dataset.state = 'ready';
  } catch (e) {
    if (gen !== generation) return;
    showError(e);
    document.body.dataset.state = 'error';
  }
}

const metaP = header('/compare');
onView(render);
