// Top page: the groups of the chosen range (GET /api/top), sortable, each with its share of the
// load as a bar and a sparkline of its load; dimension chips (GET /api/dims) that filter.
import {
  header, onView, api, param, setParams, rangePicker, activeFilters, dimChips, searchBox, el,
  fmtUs, fmtInt, fmtBytes, fmtLoad, fmtPct, sparkSvg, pageLink, showError,
} from './common.js';

const SORTS = ['load', 'count', 'p99', 'errors'];
let generation = 0;

function cell(cls, value, text, extra = {}) {
  return el('td', { class: cls, 'data-value': value ?? '', ...extra }, text);
}

function row(g, maxShare) {
  const href = pageLink('/query', { proto: g.protocol, cmd: g.command, id: g.id });
  const fp = el('td', { class: 'fp', title: g.fingerprint },
    el('span', { class: 'kind' }, `${g.protocol} ${g.command}`),
    el('a', { href, class: 'group-link' }, g.fingerprint || g.id));
  const bar = el('div', { class: 'loadbar' }, el('div', { style: `width:${maxShare > 0 ? ((g.share / maxShare) * 100).toFixed(1) : 0}%` }));
  const load = el('td', { class: 'load', 'data-value': g.load }, el('div', { class: 'loadcell' }, bar, el('span', { class: 'v' }, fmtLoad(g.load))));
  const bytes = (g.bytes_in || 0) + (g.bytes_out || 0);
  return el('tr', { 'data-id': g.id, 'data-protocol': g.protocol, 'data-command': g.command },
    fp, load,
    cell('share', g.share, fmtPct(g.share)),
    cell('count', g.count, fmtInt(g.count)),
    cell('errors' + (g.errors ? ' num-bad' : ''), g.errors, fmtInt(g.errors)),
    cell('p50', g.p50_us, fmtUs(g.p50_us)),
    cell('p95', g.p95_us, fmtUs(g.p95_us)),
    cell('p99', g.p99_us, fmtUs(g.p99_us)),
    cell('max', g.max_us, fmtUs(g.max_us)),
    cell('rows', g.rows, fmtInt(g.rows)),
    cell('bytes', bytes, fmtBytes(bytes), { title: `in ${fmtBytes(g.bytes_in)}, out ${fmtBytes(g.bytes_out)}` }),
    el('td', { class: 'spark' }, sparkSvg(g.spark)));
}

function renderTable(top) {
  const tbody = document.querySelector('#top-table tbody');
  const maxShare = Math.max(0, ...top.groups.map((g) => g.share || 0));
  if (!top.groups.length) {
    tbody.replaceChildren(el('tr', {}, el('td', { class: 'empty', colspan: 12 }, 'no queries in this range and filter')));
  } else {
    tbody.replaceChildren(...top.groups.map((g) => row(g, maxShare)));
  }
  const om = document.getElementById('omitted');
  om.replaceChildren();
  if (top.omitted) {
    const more = Math.min(1000, top.groups.length * 4);
    om.append(`${fmtInt(top.omitted)} more group${top.omitted === 1 ? '' : 's'} not shown. `);
    if (more > top.groups.length) {
      om.append(el('a', { href: '#', id: 'show-more', onclick: (e) => { e.preventDefault(); setParams({ limit: more }); } }, `show ${more}`));
    }
  }
  const t = top.totals;
  document.getElementById('total-load').textContent = fmtLoad(t.load);
  document.getElementById('total-count').textContent = fmtInt(t.count);
  document.getElementById('total-errors').textContent = fmtInt(t.errors);
  document.getElementById('total-service').textContent = fmtUs(t.service_sum_us);
  document.getElementById('total-groups').textContent = fmtInt(top.groups.length + (top.omitted || 0));
}

function renderSort(sort) {
  document.getElementById('sort').value = sort;
  document.querySelectorAll('#top-table th.sortable').forEach((th) => th.classList.toggle('sorted', th.dataset.sort === sort));
}

async function render() {
  const gen = ++generation;
  document.body.dataset.state = 'loading';
  const sort = SORTS.includes(param('sort')) ? param('sort') : 'load';
  renderSort(sort);
  activeFilters(document.getElementById('active-filters'));
  try {
    const m = await metaP;
    const [top, dims] = await Promise.all([
      api('top', { sort, limit: param('limit', '50'), points: 30 }),
      api('dims'),
    ]);
    if (gen !== generation) return;
    showError(null);
    rangePicker(document.getElementById('range'), m, top);
    dimChips(document.getElementById('dims'), dims.dims);
    renderTable(top);
    document.body.dataset.state = 'ready';
  } catch (e) {
    if (gen !== generation) return;
    showError(e);
    document.body.dataset.state = 'error';
  }
}

const metaP = header('/');
searchBox(document.getElementById('search'));
document.getElementById('sort').addEventListener('change', (e) => setParams({ sort: e.target.value }));
document.querySelectorAll('#top-table th.sortable').forEach((th) => th.addEventListener('click', () => setParams({ sort: th.dataset.sort })));
window.addEventListener('popstate', () => {
  document.getElementById('search').value = param('q', '');
});
onView(render);
