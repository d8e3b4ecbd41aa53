// Live page (live mode only): every interval, GET /api/live: the same per-server lines the
// terminal prints for the last interval, and the top groups of the current window.
import { header, api, el, fmtUs, fmtInt, fmtLoad, fmtPct, fmtTime, pageLink, showError } from './common.js';

let timer = null;
let interval = 2;

function renderLines(a) {
  const head = document.querySelector('#live-table thead tr');
  const names = a.header || [];
  if (head.dataset.cols !== names.join('\t')) {
    head.dataset.cols = names.join('\t');
    head.replaceChildren(...names.map((h) => el('th', { 'data-col': h }, h)));
  }
  const lines = a.lines || [];
  const si = Math.max(0, names.indexOf('server'));
  document.querySelector('#live-table tbody').replaceChildren(...(lines.length
    ? lines.map((cells) => el('tr', { 'data-server': cells[si] }, cells.map((c, i) => el('td', { 'data-col': names[i] || '' }, c))))
    : [el('tr', {}, el('td', { class: 'empty', colspan: Math.max(names.length, 1) }, 'no traffic in the last interval'))]));
}

function renderTop(rows) {
  const maxShare = Math.max(0, ...rows.map((g) => g.share || 0));
  document.querySelector('#live-top tbody').replaceChildren(...(rows.length ? rows.map((g) => {
    const bar = el('div', { class: 'loadbar' }, el('div', { style: `width:${maxShare > 0 ? ((g.share / maxShare) * 100).toFixed(1) : 0}%` }));
    return el('tr', { 'data-id': g.id },
      el('td', { class: 'fp', title: g.fingerprint }, el('span', { class: 'kind' }, `${g.protocol} ${g.command}`),
        el('a', { href: pageLink('/query', { proto: g.protocol, cmd: g.command, id: g.id }) }, g.fingerprint || g.id)),
      el('td', { class: 'load', 'data-value': g.load }, el('div', { class: 'loadcell' }, bar, el('span', { class: 'v' }, fmtLoad(g.load)))),
      el('td', { class: 'share', 'data-value': g.share }, fmtPct(g.share)),
      el('td', { class: 'count', 'data-value': g.count }, fmtInt(g.count)),
      el('td', { class: 'errors' + (g.errors ? ' num-bad' : ''), 'data-value': g.errors }, fmtInt(g.errors)),
      el('td', { class: 'p50', 'data-value': g.p50_us }, fmtUs(g.p50_us)),
      el('td', { class: 'p95', 'data-value': g.p95_us }, fmtUs(g.p95_us)),
      el('td', { class: 'p99', 'data-value': g.p99_us }, fmtUs(g.p99_us)));
  }) : [el('tr', {}, el('td', { class: 'empty', colspan: 8 }, 'no queries in the current window'))]));
}

async function tick() {
  clearTimeout(timer);
  if (!document.getElementById('paused').checked) {
    try {
      const a = await api('live', {}, ['token']);
      interval = Math.max(1, a.interval_s || interval);
      showError(null);
      renderLines(a);
      renderTop(a.top || []);
      if (a.ts === null || a.ts === undefined) {
        document.getElementById('live-ts').textContent = `waiting for the first interval (every ${interval} s)…`;
      } else {
        document.getElementById('live-ts').textContent = `interval ending ${fmtTime(a.ts)} · every ${interval} s`;
        document.getElementById('pulse').classList.remove('stale');
        document.body.dataset.ts = a.ts;
      }
      document.body.dataset.state = 'ready';
    } catch (e) {
      document.getElementById('pulse').classList.add('stale');
      if (e.status === 404) {
        showError(new Error('This server is not capturing live (it browses a store or captures): see Top and Compare.'));
        document.body.dataset.state = 'not-live';
        return;
      }
      showError(e);
      document.body.dataset.state = 'error';
    }
  }
  timer = setTimeout(tick, interval * 1000);
}

header('/live');
document.getElementById('paused').addEventListener('change', tick);
tick();
