// hostedtrain's dashboard: the jobs table and a job's page (charts, events, checkpoints, logs).
// Plain JavaScript over the API; the token is pasted once, kept in sessionStorage (gone when the
// tab closes) and sent as a header, never put in a URL.
'use strict';

const TOKEN_KEY = 'hostedtrain.token';
const app = document.getElementById('app');
const forget = document.getElementById('forget');
let leave = () => {}; // stops the current page's timers and streams

// The token is in sessionStorage (gone when the tab closes), or — when the user asked to be
// remembered on this device — in localStorage, so that a job link opened in a new tab works.
const token = () => sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);

forget.addEventListener('click', () => {
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
  route();
});

// el builds an element: el('td', {class: 'x'}, 'text', child).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

class APIError extends Error {
  constructor(status, problem) {
    const fields = (problem.errors || []).map((f) => `${f.pointer || f.parameter || ''}: ${f.message}`).join('; ');
    super(`${status} ${problem.title || ''}: ${problem.detail || ''}${fields ? ' (' + fields + ')' : ''}`);
    this.status = status;
  }
}

async function api(path, opts = {}) {
  const res = await fetch(path, {
    ...opts,
    headers: { Authorization: 'Bearer ' + token(), Accept: 'application/json', ...(opts.headers || {}) },
  });
  if (res.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
    route('the token was refused (expired, or not for this service): paste another');
    throw new APIError(401, { title: 'Unauthorized' });
  }
  if (res.status === 204) return null;
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new APIError(res.status, body);
  return body;
}

// stream reads a Server-Sent Events answer over fetch (EventSource cannot send a header),
// calling on(event) for each; it resolves when the stream ends.
async function stream(path, on, signal, lastId) {
  const headers = { Authorization: 'Bearer ' + token(), Accept: 'text/event-stream' };
  if (lastId) headers['Last-Event-ID'] = lastId;
  const res = await fetch(path, { headers, signal });
  if (!res.ok || !res.body) throw new APIError(res.status, await res.json().catch(() => ({})));
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let last = lastId;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return last;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const ev = { id: '', event: 'message', data: '' };
      for (const line of frame.split('\n')) {
        if (line.startsWith('id:')) ev.id = line.slice(3).trim();
        else if (line.startsWith('event:')) ev.event = line.slice(6).trim();
        else if (line.startsWith('data:')) ev.data += line.slice(5).trimStart();
      }
      if (ev.data) {
        if (ev.id) last = ev.id;
        on(ev.event, JSON.parse(ev.data), ev.id);
      }
    }
  }
}

// follow keeps a stream going while the job runs: a stream the service ends early (a
// deployment's stream limit) is resumed from its last event.
async function follow(path, on, signal, jobID) {
  let last = '';
  while (!signal.aborted) {
    try {
      last = await stream(path, on, signal, last);
    } catch (e) {
      if (signal.aborted) return;
      await new Promise((r) => setTimeout(r, 2000));
    }
    if (signal.aborted) return;
    const j = await api('/v1/jobs/' + jobID).catch(() => null);
    if (!j || terminal(j.status)) return;
  }
}

const terminal = (s) => s === 'COMPLETED' || s === 'FAILED' || s === 'STOPPED';
const badge = (s) => el('span', { class: 'badge s-' + s }, s);
const fmt = (v, d = 4) => (typeof v === 'number' ? v.toFixed(d) : '-');

function ago(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + 's';
  if (s < 3600) return Math.round(s / 60) + 'm';
  if (s < 172800) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

function gpuTime(sec) {
  return sec < 3600 ? (sec / 60).toFixed(1) + ' GPU-minutes' : (sec / 3600).toFixed(2) + ' GPU-hours';
}

function size(b) {
  if (b >= 1 << 30) return (b / (1 << 30)).toFixed(1) + ' GiB';
  if (b >= 1 << 20) return (b / (1 << 20)).toFixed(1) + ' MiB';
  if (b >= 1 << 10) return (b / (1 << 10)).toFixed(1) + ' KiB';
  return b + ' B';
}

function showError(where, e) {
  where.replaceChildren(el('p', { class: 'error' }, e.message || String(e)));
}

// ---- the token ----

function loginPage(message) {
  forget.hidden = true;
  const input = el('textarea', { id: 'token', placeholder: 'eyJhbGciOi…', autocomplete: 'off', spellcheck: 'false' });
  const remember = el('input', { type: 'checkbox', id: 'remember' });
  const submit = () => {
    const t = input.value.trim();
    if (!t) return;
    if (remember.checked) localStorage.setItem(TOKEN_KEY, t);
    else sessionStorage.setItem(TOKEN_KEY, t);
    route();
  };
  app.replaceChildren(el('div', { class: 'card login' },
    el('h1', {}, 'Paste your API token'),
    el('p', { class: 'muted' }, 'It stays in this tab (sessionStorage) and goes only in the Authorization header. ',
      '`hostedtrain admin token --scopes jobs:read,jobs:write` makes one; `hostedtrain dev` writes admin.token.'),
    message ? el('p', { class: 'error' }, message) : null,
    input,
    el('p', {}, el('label', {}, remember, ' remember this token on this device (until you press Forget token)')),
    el('p', {}, el('button', { class: 'primary', id: 'use-token', type: 'button', onclick: submit }, 'Use this token'))));
  input.focus();
}

// ---- the jobs table ----

// shortID is the end of a job id: ids are UUIDv7s, whose starts are their creation times and
// alike for jobs made together; the CLI takes the end as well.
const shortID = (id) => '…' + id.slice(-8);

// duration of a job's run so far (or in all, once it ended), in seconds.
function runSeconds(j) {
  if (!j.started_at) return 0;
  const end = j.finished_at ? Date.parse(j.finished_at) : Date.now();
  return Math.max(0, (end - Date.parse(j.started_at)) / 1000);
}

function span(sec) {
  if (!sec) return '-';
  if (sec < 90) return Math.round(sec) + 's';
  if (sec < 5400) return Math.round(sec / 60) + 'm';
  return (sec / 3600).toFixed(1) + 'h';
}

// The operator's prices per GPU-hour by model, read once (cost columns).
let prices = null;
async function loadPrices() {
  if (prices) return prices;
  try {
    const page = await api('/v1/models');
    prices = Object.fromEntries((page.items || []).filter((m) => m.price_per_gpu_hour).map((m) => [m.name, m.price_per_gpu_hour]));
  } catch (e) {
    prices = {};
  }
  return prices;
}

const cost = (j) => (prices && prices[j.config.model] ? (j.gpu_seconds / 3600) * prices[j.config.model] : undefined);

// The jobs table's columns: header, cell, sort key; `narrow` ones stay on a phone.
const COLUMNS = [
  { name: 'Status', narrow: true, cell: (j) => badge(j.status), key: (j) => j.status },
  { name: 'Job', narrow: true, cell: (j) => el('a', { href: '#/jobs/' + j.id, title: j.id }, j.name || shortID(j.id)), key: (j) => j.name || j.id, cls: 'mono' },
  { name: 'Kind', cell: (j) => j.kind, key: (j) => j.kind },
  { name: 'Model', cell: (j) => j.config.model, key: (j) => j.config.model },
  { name: 'GPUs', cell: (j) => (j.config.resources.gpus ? `${j.config.resources.gpus}×${j.config.resources.gpu_type}` : '-'), key: (j) => j.config.resources.gpus || 0 },
  { name: 'Step', narrow: true, cell: (j) => (j.progress.max_steps ? `${j.progress.step}/${j.progress.max_steps}` : '-'), key: (j) => j.progress.step },
  { name: 'Score', cell: (j) => fmt(score(j)), key: (j) => score(j) ?? -Infinity },
  { name: 'Duration', cell: (j) => span(runSeconds(j)), key: runSeconds },
  { name: 'Cost', cell: (j) => (cost(j) === undefined ? '-' : cost(j).toFixed(2)), key: (j) => cost(j) ?? -1 },
  { name: 'Age', narrow: true, cell: (j) => ago(j.created_at), key: (j) => -Date.parse(j.created_at) },
];

function jobsPage() {
  const state = { status: '', kind: '', text: '', sort: 'Age', desc: false, picked: new Set() };
  let jobs = [];
  const body = el('tbody');
  const more = el('p');
  const status = el('select', { id: 'filter-status', onchange: () => { state.status = status.value; refilter(); } },
    ['', 'QUEUED', 'PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'STOPPED'].map((s) => el('option', { value: s }, s || 'any status')));
  const kind = el('select', { id: 'filter-kind', onchange: () => { state.kind = kind.value; refilter(); } },
    ['', 'rl', 'fft', 'gepa', 'eval'].map((k) => el('option', { value: k }, k || 'any kind')));
  const text = el('input', { id: 'filter-text', type: 'search', placeholder: 'name, model or id', oninput: () => { state.text = text.value.trim().toLowerCase(); draw(); } });
  const head = el('tr', {}, el('th', { class: 'pick', title: 'pick jobs to compare' }, '⇆'),
    COLUMNS.map((c) => el('th', { 'data-col': c.name, class: c.narrow ? 'narrow' : 'wide', onclick: () => sortBy(c.name) }, c.name)));
  // Jobs picked (two or more, up to eight) are compared: one metric overlaid, configs side by side.
  const compare = el('button', { type: 'button', id: 'compare', disabled: true,
    onclick: () => { location.hash = '#/compare/' + [...state.picked].join(','); } }, 'Compare');
  const picked = () => {
    compare.disabled = state.picked.size < 2 || state.picked.size > PALETTE.length;
    compare.textContent = state.picked.size ? `Compare ${state.picked.size}` : 'Compare';
  };
  const pickBox = (j) => el('input', { type: 'checkbox', class: 'pick', 'data-id': j.id, 'aria-label': 'compare ' + (j.name || j.id), checked: state.picked.has(j.id),
    onchange: (e) => { if (e.target.checked) state.picked.add(j.id); else state.picked.delete(j.id); picked(); } });
  app.replaceChildren(el('h1', {}, 'Jobs'), el('div', { class: 'filters' }, status, kind, text, compare),
    el('div', { class: 'scroll' }, el('table', { id: 'jobs' }, el('thead', {}, head), body)), more);
  function sortBy(name) {
    state.desc = state.sort === name ? !state.desc : false;
    state.sort = name;
    draw();
  }
  // draw shows the loaded jobs that match the text filter, in the chosen order.
  function draw() {
    const col = COLUMNS.find((c) => c.name === state.sort);
    const shown = jobs.filter((j) => !state.text || [j.name, j.id, j.config.model].some((v) => (v || '').toLowerCase().includes(state.text)));
    shown.sort((a, b) => {
      const x = col.key(a), y = col.key(b);
      const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return state.desc ? -c : c;
    });
    for (const th of head.children) th.dataset.sorted = th.dataset.col === state.sort ? (state.desc ? 'desc' : 'asc') : '';
    body.replaceChildren(...shown.map((j) => el('tr', { 'data-id': j.id }, el('td', { class: 'pick' }, pickBox(j)),
      COLUMNS.map((c) => el('td', { class: [c.cls, c.narrow ? 'narrow' : 'wide'].filter(Boolean).join(' ') }, c.cell(j))))));
    if (!shown.length) body.append(el('tr', {}, el('td', { colspan: COLUMNS.length + 1, class: 'muted' }, jobs.length ? 'no job matches' : 'no jobs')));
  }
  let loads = 0; // the newest load: an older answer (another filter's) arriving later is dropped
  let pages = 1; // how many pages More has shown: a refresh reads them all again
  const read = (cursor) => {
    const q = new URLSearchParams({ limit: '50' });
    if (state.status) q.set('status', state.status);
    if (state.kind) q.set('kind', state.kind);
    if (cursor) q.set('cursor', cursor);
    return api('/v1/jobs?' + q);
  };
  // load reads the pages shown again (a filter's change first resets them to one); with a
  // cursor (More) it adds the page after.
  let inFlight = 0; // the timer's refresh waits for a load in flight (More's, a filter's)
  async function load(cursor) {
    const mine = ++loads;
    inFlight++;
    try {
      await loadPrices();
      let items = cursor ? jobs : [];
      let next = cursor;
      for (let i = 0; i < (cursor ? 1 : pages); i++) {
        const page = await read(next);
        items = items.concat(page.items);
        next = page.next_cursor;
        if (!next) break;
      }
      if (mine !== loads) return;
      if (cursor) pages++;
      jobs = items;
      draw();
      more.replaceChildren(next ? el('button', { type: 'button', id: 'more-jobs', onclick: () => load(next) }, 'More') : '');
    } catch (e) {
      showError(more, e);
    } finally {
      inFlight--;
    }
  }
  const refilter = () => { pages = 1; load(); };
  load();
  const timer = setInterval(() => { if (!inFlight) load(); }, 5000);
  return () => clearInterval(timer);
}

// ---- charts ----

// The headline series, in the order they are charted: progress.series says which of
// prime-rl's metrics holds each in a job (jobdata.Headline in the Go code is the one table).
const HEADLINE = [['reward', 'Reward'], ['loss', 'Loss'], ['entropy', 'Entropy'], ['kl', 'Mismatch KL'],
  ['grad_norm', 'Grad norm'], ['throughput', 'Throughput (tokens/s)'], ['seq_len', 'Sequence length'],
  ['lr', 'Learning rate'], ['eval_reward', 'Eval reward'], ['gepa_best', 'GEPA best score']];
const PALETTE = ['#3558d6', '#d6553a', '#2a9d5c', '#9b59b6', '#c9a227', '#17a2b8', '#e83e8c', '#6c757d'];

// num writes a metric's value short: four significant digits, exponents for the very large
// and very small (a learning rate).
function num(v) {
  if (typeof v !== 'number' || !isFinite(v)) return '-';
  if (v === 0) return '0';
  const a = Math.abs(v);
  return a >= 1e5 || a < 1e-3 ? v.toExponential(2) : String(Number(v.toPrecision(4)));
}

// smooth is an exponential moving average of weight w (0: none), debiased at its start as
// TensorBoard's is; a gap stays a gap.
function smooth(vs, w) {
  if (!w) return vs;
  let last = 0, n = 0;
  return vs.map((v) => {
    if (v === null || v === undefined) return null;
    last = last * w + (1 - w) * v;
    n++;
    return last / (1 - Math.pow(w, n));
  });
}

// metricGroup is the group a metric is listed under: its upstream prefix (`loss`, `perf`,
// `optim`), and for the orchestrator's episode metrics the environment (`train/gsm8k`).
function metricGroup(key) {
  const p = key.split('/');
  if ((p[0] === 'train' || p[0] === 'eval') && p.length > 2) return p[0] + '/' + p[1];
  return p.length > 1 ? p[0] : 'other';
}

// metricPicker is a select of metrics grouped by prefix, the headline series first.
function metricPicker(id, catalog, headline) {
  const groups = new Map();
  for (const k of [...catalog].sort()) {
    const g = metricGroup(k);
    if (!groups.has(g)) groups.set(g, []);
    groups.get(g).push(k);
  }
  return el('select', { id },
    el('optgroup', { label: 'headline' }, headline.map(([value, label]) => el('option', { value }, label))),
    [...groups].map(([g, keys]) => el('optgroup', { label: g }, keys.map((k) => el('option', { value: k }, k)))));
}

// Steps and candidates are whole numbers: their axis ticks are too.
const STEP_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000];

function logRange(lo, hi) {
  if (lo === null || hi === null || !(lo > 0)) return [1, 10];
  const a = Math.pow(10, Math.floor(Math.log10(lo)));
  const b = Math.pow(10, Math.ceil(Math.log10(hi)));
  return [a, b > a ? b : a * 10];
}

// plotIn draws a uPlot in box: x on its axis, one line each; charts made with the same sync
// key share their cursor, and each one's legend reads out its values at the cursor — the
// values as stored (the plot's `raw`, set beside its data), not as smoothed for drawing.
function plotIn(box, lines, opts) {
  for (const old of box.querySelectorAll('.uplot')) old.remove();
  return new uPlot({
    width: Math.max(260, box.clientWidth - 24), height: 220,
    // A log scale spans whole decades, at least one (a constant learning rate has one).
    scales: { x: { time: false }, y: opts.log ? { distr: 3, range: (u, lo, hi) => logRange(lo, hi) } : {} },
    axes: [{ label: opts.xLabel || 'step', incrs: STEP_INCRS }, { size: 60, values: (u, splits) => splits.map((v) => (v === null ? '' : num(v))) }],
    cursor: { sync: { key: opts.sync } },
    legend: { show: true, live: true },
    hooks: { setCursor: [(u) => opts.onCursor && opts.onCursor(u.cursor.idx)] },
    series: [{ label: opts.xLabel || 'step' }, ...lines.map((l, i) => ({
      label: l.label, stroke: l.stroke || PALETTE[i % PALETTE.length], width: l.width || 2, dash: l.dash,
      spanGaps: true, value: (u, v, si, idx) => num(u.raw && idx !== null && idx !== undefined ? u.raw[si - 1][idx] : v),
    }))],
  }, [[], ...lines.map(() => [])], box);
}

// chartTools are the controls every chart on a page shares: smoothing and a log scale.
function chartTools(prefix, onChange) {
  const state = { smoothing: 0, log: false };
  const shown = el('span', { class: 'muted', id: prefix + 'smoothing-value' }, '0');
  const slider = el('input', { type: 'range', id: prefix + 'smoothing', min: '0', max: '0.99', step: '0.01', value: '0',
    oninput: () => { state.smoothing = Number(slider.value); shown.textContent = slider.value; onChange(false); } });
  const log = el('input', { type: 'checkbox', id: prefix + 'log-scale',
    onchange: () => { state.log = log.checked; onChange(true); } });
  state.view = [el('label', {}, 'smoothing ', slider, ' ', shown), el('label', {}, log, ' log scale')];
  return state;
}

// lineData is a line's values over steps, smoothed.
const lineData = (raw, tools) => smooth(raw, tools.smoothing);

// logFits says a log scale can draw these lines: every value positive. A chart asked for a log
// scale that has a zero or a negative value (a loss below zero) stays linear.
const logFits = (raws) => raws.every((r) => r.every((v) => v === null || v > 0));

// fitPlots keeps each uPlot as wide as its box when the page's width changes (a phone turned).
function fitPlots(container, plots) {
  if (!window.ResizeObserver) return () => {};
  const ro = new ResizeObserver(() => {
    for (const [box, u] of plots()) {
      const w = Math.max(260, box.clientWidth - 24);
      if (Math.abs(u.width - w) > 2) u.setSize({ width: w, height: u.height });
    }
  });
  ro.observe(container);
  return () => ro.disconnect();
}

// fetchRows reads the job's metric rows for keys from step `from` on, every page, into rows
// (step → values); it answers the newest step read.
async function fetchRows(id, keys, from, rows) {
  let min = from, newest = 0;
  for (;;) {
    const page = await api(`/v1/jobs/${id}/metrics?min_step=${min}&names=${encodeURIComponent(keys.join(','))}&limit=5000`);
    for (const r of page.items) {
      const row = rows.get(r.step) || {};
      for (const k of keys) if (typeof r[k] === 'number') row[k] = r[k];
      rows.set(r.step, row);
      newest = Math.max(newest, r.step);
    }
    if (!page.next_min_step) return newest;
    min = page.next_min_step;
  }
}

// catalogOf is every metric a job stores: the keys of its newest row (read whole) and its
// first.
async function catalogOf(id, step) {
  const keys = new Set();
  for (const min of [0, step]) {
    const page = await api(`/v1/jobs/${id}/metrics?min_step=${min}&limit=1`);
    for (const r of page.items) for (const k of Object.keys(r)) if (k !== 'step' && k !== 'time' && typeof r[k] === 'number') keys.add(k);
  }
  return keys;
}

// histogramView draws a distribution (count, mean, std, min, max, bins) as bars.
function histogramView(d, title, titleID) {
  const most = Math.max(1, ...d.bins.map((b) => b.count));
  return [
    el('p', { class: 'muted', id: titleID }, title),
    el('div', { class: 'bins' }, d.bins.map((b) => el('div', { class: 'bin', 'data-count': b.count, title: `${fmt(b.min)} … ${fmt(b.max)}: ${b.count}` },
      el('div', { class: 'fill', style: `height:${(100 * b.count) / most}%` })))),
    el('div', { class: 'row muted axis' }, el('span', {}, fmt(d.min)), el('span', { class: 'spacer' }), el('span', {}, fmt(d.max))),
  ];
}

// copyText puts text on the clipboard (the Clipboard API where the page may use it, else a
// selection copied).
async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const t = el('textarea', { style: 'position:fixed;opacity:0' });
  t.value = text;
  document.body.append(t);
  t.select();
  document.execCommand('copy');
  t.remove();
}

// ---- a job ----

// score is a job's headline number: the training reward, an eval's average, GEPA's best.
function score(j) {
  const p = j.progress || {};
  const m = p.metrics || {};
  const s = p.series || {};
  for (const name of ['reward', 'eval_reward', 'gepa_best']) {
    if (s[name] && typeof m[s[name]] === 'number') return m[s[name]];
  }
  const r = p.result;
  if (r && r.gepa && typeof r.gepa.best_score === 'number') return r.gepa.best_score;
  if (r && r.eval && r.eval.length && typeof r.eval[0].avg_reward === 'number') return r.eval[0].avg_reward;
  return undefined;
}

function jobPage(id) {
  const ctl = new AbortController();
  const facts = el('div', { class: 'card', id: 'facts' }, 'loading…');
  const bar = el('div', { class: 'bar' }, el('div', { style: 'width:0%' }));
  const charts = el('div', { class: 'charts', id: 'charts', hidden: true });
  const noMetrics = el('p', { class: 'muted', id: 'no-metrics' }, 'no metrics yet: the charts appear with the first step');
  const events = el('ul', { class: 'timeline', id: 'events' });
  const checkpoints = el('div', { id: 'checkpoints' });
  const rollouts = el('div', { id: 'rollouts' });
  const result = el('div', { id: 'result' });
  const artifacts = el('div', { id: 'artifacts' });
  const component = el('select', { id: 'log-component' },
    ['', 'trainer', 'orchestrator', 'inference', 'envs', 'pipeline', 'install', 'preflight', 'agent'].map((c) => el('option', { value: c }, c || 'all components')));
  const logs = el('pre', { class: 'logs', id: 'logs' });
  app.replaceChildren(
    el('p', {}, el('a', { href: '#/' }, '← jobs')),
    el('h1', { id: 'job-title' }, id), facts, bar, result,
    el('h2', { id: 'metrics-title' }, 'Metrics'), noMetrics, charts,
    el('h2', { id: 'rollouts-title', hidden: true }, 'Rollouts'), rollouts,
    el('h2', {}, 'Events'), events,
    el('h2', {}, 'Checkpoints'), checkpoints,
    el('h2', {}, 'Artifacts'), artifacts,
    el('div', { class: 'row' }, el('h2', {}, 'Logs'), component), logs);

  // The charts: first the headline series the job has (progress.series names the metric of
  // each), then any stored metric the user adds; steps on x, one cursor for all of them, a
  // read-out of every chart at the hovered step, smoothing and a log scale for all.
  let keys = {};
  let progressStep = 0;
  let run = 0; // the job's run (attempt since its creation): a new one rewrites steps
  let live = false;
  const m = { rows: new Map(), steps: [], newest: 0, fetched: new Set(), defs: [], plots: new Map(), catalog: null, busy: null, again: false,
    kind: '', run: 0, series: '', polls: 0 };
  const readout = el('p', { class: 'readout mono', id: 'readout' }, 'hover a chart to read every chart at that step');
  const tools = chartTools('', (rebuild) => drawCharts(rebuild));
  const addBox = el('span', { class: 'row', id: 'add-metric' });
  const toolbar = el('div', { class: 'row chart-tools', id: 'chart-tools', hidden: true }, tools.view, addBox);
  charts.before(toolbar, readout);
  readout.hidden = true;
  const unfit = fitPlots(charts, () => [...m.plots].map(([cid, u]) => [charts.querySelector(`.chart[data-metric="${CSS.escape(cid)}"]`), u]).filter(([b]) => b));
  ctl.signal.addEventListener('abort', unfit);

  // headlineDefs are the headline charts of a job: reward with its spread (p10, p90) and, on a
  // job of several environments, each one's; GEPA's best score with each candidate's.
  function headlineDefs(series, catalog) {
    const defs = [];
    for (const [name, title] of HEADLINE) {
      const key = series[name];
      if (!key || (m.kind === 'eval' && name === 'eval_reward')) continue;
      const lines = [{ label: name === 'gepa_best' ? 'best so far' : 'mean', key }];
      if (name === 'reward') {
        const base = key.replace(/mean$/, '');
        for (const s of ['p10', 'p90']) if (key.endsWith('/mean') && catalog.has(base + s)) lines.push({ label: s, key: base + s, dash: [4, 4], width: 1 });
        const envs = [...catalog].map((k) => k.match(/^train\/([^/]+)\/all\/[^/]+\/reward\/mean$/)).filter((x) => x && x[1] !== 'agg');
        if (envs.length > 1) for (const x of envs) lines.push({ label: x[1], key: x[0] });
      }
      if (name === 'gepa_best' && catalog.has('gepa/score')) lines.push({ label: 'candidate', key: 'gepa/score', dash: [4, 4], width: 1 });
      defs.push({ id: name, title, lines });
    }
    return defs;
  }

  function showReadout(idx) {
    if (idx === null || idx === undefined || !m.steps.length) return;
    const step = m.steps[idx];
    const row = m.rows.get(step) || {};
    readout.dataset.step = step;
    readout.replaceChildren(el('b', {}, `${m.kind === 'gepa' ? 'iteration' : 'step'} ${step}`),
      ...m.defs.map((d) => el('span', { 'data-metric': d.id }, ` · ${d.title} `,
        d.lines.map((l) => (d.lines.length > 1 ? `${l.label} ` : '') + num(row[l.key])).join(', '))));
  }

  // drawCharts makes the charts not drawn yet (never an empty box: only once a step arrived)
  // and gives each its data; a chart is made again when its scale changes (rebuild: the log
  // scale was switched).
  function drawCharts(rebuild) {
    if (!m.steps.length || !m.defs.length) return;
    charts.hidden = false;
    toolbar.hidden = false;
    readout.hidden = false;
    noMetrics.hidden = true;
    // All the boxes first, so each has its column's width when its chart is sized to it.
    const boxes = m.defs.map((d) => charts.querySelector(`.chart[data-metric="${CSS.escape(d.id)}"]`) ||
      el('div', { class: 'chart', 'data-metric': d.id }, el('div', { class: 'row' }, el('h3', {}, d.title),
        d.added ? el('button', { type: 'button', class: 'remove-chart', title: 'remove this chart', onclick: () => removeChart(d.id) }, '×') : null)));
    if (boxes.some((b, i) => charts.children[i] !== b)) charts.append(...boxes); // in the defs' order
    charts.dataset.scale = tools.log ? 'log' : 'linear';
    m.defs.forEach((d, i) => {
      const box = boxes[i];
      const raws = d.lines.map((l) => m.steps.map((s) => { const v = m.rows.get(s)[l.key]; return v === undefined ? null : v; }));
      const scale = tools.log && logFits(raws) ? 'log' : 'linear';
      let u = m.plots.get(d.id);
      if (rebuild || !u || box.dataset.scale !== scale) {
        if (u) u.destroy();
        u = plotIn(box, d.lines, { sync: 'job-' + id, log: scale === 'log', xLabel: m.kind === 'gepa' ? 'iteration' : 'step', onCursor: showReadout });
        m.plots.set(d.id, u);
        box.dataset.scale = scale;
      }
      const ys = raws.map((r) => lineData(r, tools));
      u.raw = raws;
      u.setData([m.steps, ...ys]);
      // What the chart draws, for a reader that cannot see it (and the browser test): the
      // points of each line, and the newest drawn value of the first.
      const drawn = ys.map((y) => y.filter((v) => v !== null).length);
      box.dataset.points = drawn[0];
      box.dataset.lines = drawn.join(',');
      box.dataset.last = num(ys[0].filter((v) => v !== null).pop());
    });
  }

  function addChart(key) {
    const head = HEADLINE.find(([name]) => name === key);
    if (head) key = keys[key];
    if (!key || m.defs.some((d) => d.id === key || d.lines[0].key === key)) return;
    m.defs.push({ id: key, title: key, lines: [{ label: key, key }], added: true });
    loadMetrics().catch((e) => showError(readout, e));
  }
  function forgetChart(cid) {
    if (m.plots.has(cid)) m.plots.get(cid).destroy();
    m.plots.delete(cid);
    const box = charts.querySelector(`.chart[data-metric="${CSS.escape(cid)}"]`);
    if (box) box.remove();
  }
  function removeChart(cid) {
    m.defs = m.defs.filter((d) => d.id !== cid);
    forgetChart(cid);
  }

  // loadMetrics reads what is new: the catalog and the headline charts (again when the job's
  // series change, and now and then while it runs), each new metric's whole history, then every
  // charted metric's steps from a few before the newest read. A call made while one runs (a
  // chart added) runs again after it.
  function loadMetrics() {
    if (m.busy) {
      m.again = true;
      return m.busy;
    }
    m.busy = (async () => {
      do {
        m.again = false;
        await readMetrics();
      } while (m.again);
    })().finally(() => { m.busy = null; });
    return m.busy;
  }
  const sameLines = (a, b) => a.lines.map((l) => l.key).join() === b.lines.map((l) => l.key).join();
  async function readMetrics() {
    if (!Object.keys(keys).length || m.kind === 'eval') return;
    // A new run of the job (a restart, a retry) redoes the steps after its checkpoint: read
    // them all again.
    if (m.run !== run) {
      m.run = run;
      m.rows.clear();
      m.fetched.clear();
      m.newest = 0;
    }
    const series = JSON.stringify(keys);
    if (!m.catalog || m.series !== series || (live && ++m.polls % 10 === 0)) {
      m.catalog = await catalogOf(id, progressStep);
      m.series = series;
      const head = headlineDefs(keys, m.catalog);
      for (const d of m.defs) {
        if (!d.added && !head.some((h) => h.id === d.id && sameLines(h, d))) forgetChart(d.id);
      }
      m.defs = [...head, ...m.defs.filter((d) => d.added && !head.some((h) => h.id === d.id))];
      const old = document.getElementById('metric-pick');
      const pick = metricPicker('metric-pick', m.catalog, HEADLINE.filter(([n]) => keys[n]));
      if (old) pick.value = old.value;
      addBox.replaceChildren(pick, el('button', { type: 'button', id: 'add-chart', onclick: () => addChart(pick.value) }, 'Add chart'));
    }
    if (!m.defs.length) return;
    const wanted = [...new Set(m.defs.flatMap((d) => d.lines.map((l) => l.key)))];
    const fresh = wanted.filter((k) => !m.fetched.has(k));
    if (fresh.length) {
      m.newest = Math.max(m.newest, await fetchRows(id, fresh, 0, m.rows));
      fresh.forEach((k) => m.fetched.add(k));
    }
    // The newest steps again: a step's row is the orchestrator's and the trainer's merged, and
    // the trainer writes its part after the orchestrator's, so a step read early lacks values.
    m.newest = Math.max(m.newest, await fetchRows(id, wanted, Math.max(0, m.newest - 3), m.rows));
    m.steps = [...m.rows.keys()].sort((a, b) => a - b);
    drawCharts(false);
  }

  // A GEPA or eval job's result: per environment, the eval's size, average reward and the
  // distribution of its rollouts' rewards; GEPA's best score and prompt (with a copy button)
  // and its Pareto frontier. GEPA's best score per candidate is a chart (gepa_best).
  let shownResult = '';
  function showResult(r) {
    const now = JSON.stringify(r || null);
    if (now === shownResult) return;
    shownResult = now;
    if (!r) { result.replaceChildren(); return; }
    const parts = [el('h2', {}, 'Result')];
    if (r.eval && r.eval.length) {
      parts.push(el('table', { id: 'eval-result' }, el('thead', {}, el('tr', {}, ['Environment', 'Examples', 'Rollouts per example', 'Rollouts scored', 'Average reward', 'Errors'].map((h) => el('th', {}, h)))),
        el('tbody', {}, r.eval.map((e) => el('tr', { 'data-env': e.env }, el('td', {}, e.env), el('td', {}, e.num_examples), el('td', {}, e.rollouts_per_example),
          el('td', {}, e.rollouts ?? '-'), el('td', {}, fmt(e.avg_reward)),
          el('td', { title: e.first_error || '' }, typeof e.avg_error === 'number' ? `${Math.round(e.avg_error * 100)} %` : '0 %'))))));
      const dists = r.eval.filter((e) => e.rewards && e.rewards.count);
      if (dists.length) {
        parts.push(el('div', { class: 'charts', id: 'eval-dist' }, dists.map((e) => el('div', { class: 'histogram', 'data-env': e.env },
          histogramView(e.rewards, `${e.env}: rewards of ${e.rewards.count} rollouts, mean ${fmt(e.rewards.mean)}, std ${fmt(e.rewards.std)}`)))));
      }
    }
    if (r.gepa) {
      const g = r.gepa;
      parts.push(el('p', { id: 'gepa-result' }, `Best score ${fmt(g.best_score)} of ${g.candidates} candidates (${g.metric_calls || 0} metric calls)`));
      const copied = el('span', { class: 'muted', id: 'copied' });
      parts.push(el('div', { class: 'row' }, el('h3', {}, 'Best prompt'),
        el('button', { type: 'button', id: 'copy-prompt', onclick: () => copyText(g.best_prompt || '').then(() => { copied.textContent = 'copied'; }, (e) => { copied.textContent = 'not copied: ' + e.message; }) }, 'Copy'), copied));
      parts.push(el('pre', { class: 'prompt', id: 'best-prompt' }, g.best_prompt || ''));
      if (g.prompt_truncated) parts.push(el('p', { class: 'muted' }, 'The prompt is cut here; the whole of it is the artifact system_prompt.txt.'));
      if (g.pareto && g.pareto.length) {
        const on = new Set(g.pareto.flatMap((p) => p.candidates));
        parts.push(el('h3', {}, 'Pareto frontier'),
          el('p', { class: 'muted', id: 'pareto-summary' }, `${on.size} candidate${on.size === 1 ? '' : 's'} best on at least one of ${g.pareto_rows || g.pareto.length} validation rows: `,
            [...on].sort((a, b) => a - b).join(', ')),
          el('div', { class: 'scroll' }, el('table', { id: 'pareto' }, el('thead', {}, el('tr', {}, ['Validation row', 'Best score', 'Candidates reaching it'].map((h) => el('th', {}, h)))),
            el('tbody', {}, g.pareto.map((p) => el('tr', { 'data-row': p.row }, el('td', {}, p.row), el('td', {}, fmt(p.best_score)), el('td', {}, p.candidates.join(', '))))))));
        if ((g.pareto_rows || 0) > g.pareto.length) parts.push(el('p', { class: 'muted' }, `The first ${g.pareto.length} of ${g.pareto_rows} rows; the whole frontier is the artifact pareto_frontier.jsonl.`));
      }
    }
    result.replaceChildren(...parts);
  }

  // A failed attempt's analysis: its class, whose fault, what the service did about it, and
  // the log lines it rests on.
  function failureBlock(a) {
    const fault = a.fault === 'unknown' ? 'fault unknown' : `${a.fault} fault`;
    const done = a.retried ? 'retried on another node' : (a.fault === 'user' ? 'not retried: the job\'s own fault' : 'not retried');
    return el('div', { id: 'failure', 'data-class': a.class },
      el('b', {}, a.class.replace(/_/g, ' ')), ` · attempt ${a.attempt || '?'} · ${fault} (confidence ${Math.round(a.confidence * 100)} %) · ${done}`,
      el('div', {}, a.summary),
      (a.evidence || []).length ? el('pre', { class: 'evidence' }, a.evidence.join('\n')) : null);
  }

  function showJob(j) {
    document.getElementById('job-title').replaceChildren(j.name || j.id, ' ', badge(j.status));
    const envs = (j.config.env || []).map((e) => e.id).join(', ');
    const pairs = [
      ['job', el('span', { class: 'mono' }, j.id)], ['kind', j.kind], ['model', j.config.model], ['environments', envs],
      ['gpus', j.config.resources.gpus ? `${j.config.resources.gpus}×${j.config.resources.gpu_type}` : 'none'],
      ...((j.kind === 'rl' || j.kind === 'fft') ? [['step', `${j.progress.step}/${j.progress.max_steps}`]] : []), ['score', fmt(score(j))],
      ['attempt', j.run > j.attempt ? `${j.run} (logs: attempt ${j.run}); ${j.attempt} of ${j.max_attempts} counted since its last restart` : `${j.attempt} of ${j.max_attempts}`],
      ['gpu time', gpuTime(j.gpu_seconds)],
      ...(j.budget_gpu_seconds ? [['budget', el('span', { id: 'budget' }, `${gpuTime(j.gpu_seconds)} of ${gpuTime(j.budget_gpu_seconds)} used (${Math.floor(100 * j.gpu_seconds / j.budget_gpu_seconds)} %)`)]] : []),
      ['created', new Date(j.created_at).toLocaleString()],
    ];
    if (j.runtime) pairs.push(['runs on', `${j.runtime.pipeline || ''}${j.runtime.emulated ? ' (emulated)' : ''} ${j.runtime.agent_id || ''}`]);
    if (j.runtime && j.runtime.upstream) {
      const u = j.runtime.upstream;
      pairs.push(['upstream', `prime-rl ${(u.prime_rl || '?').slice(0, 7)}, verifiers ${(u.verifiers || '?').slice(0, 7)}, prime ${u.prime_cli || '?'}`]);
    }
    if (j.config.warm_start) {
      const ws = j.config.warm_start;
      pairs.push(['started from', el('span', { id: 'lineage' }, el('a', { href: '#/jobs/' + ws.job, class: 'mono' }, ws.job), ` at step ${ws.step}`)]);
    }
    if ((j.progress.phases || []).length) pairs.push(['start-up', startupTimeline(j.progress.phases)]);
    if (j.queue_reason) pairs.push(['queue', `${j.queue_reason} (${j.runs_ahead} ahead)`]);
    if (j.error) pairs.push(['error', el('span', { class: 'error' }, j.error)]);
    if (j.failure_analysis) pairs.push(['failure', failureBlock(j.failure_analysis)]);
    // The facts are drawn anew at each look; the buttons only when the status changes, so a
    // button is not replaced under the pointer.
    const dl = el('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
    if (facts.firstChild && facts.firstChild.tagName === 'DL') facts.firstChild.replaceWith(dl);
    else {
      facts.replaceChildren(dl);
      delete facts.dataset.status;
    }
    if (facts.dataset.status === j.status) return moreOfJob(j);
    facts.dataset.status = j.status;
    for (const old of facts.querySelectorAll('p.actions')) old.remove();
    const actions = [];
    if (!terminal(j.status)) actions.push(el('button', { type: 'button', id: 'stop', onclick: () => act('cancel', `Stop job ${j.name || j.id}? Its newest checkpoint is kept.`) }, 'Stop'));
    if (j.status === 'FAILED' || j.status === 'STOPPED') actions.push(el('button', { type: 'button', id: 'restart', onclick: () => act('restart', `Restart job ${j.name || j.id} from its newest checkpoint?`) }, 'Restart'));
    if (terminal(j.status)) actions.push(el('button', { type: 'button', id: 'delete', onclick: () => remove(j) }, 'Delete'));
    if (actions.length) facts.append(el('p', { class: 'row actions' }, actions));
    moreOfJob(j);
  }

  // moreOfJob shows the rest of a job at each look: its progress bar, charts and result.
  function moreOfJob(j) {
    const pct = j.progress.max_steps ? (100 * j.progress.step) / j.progress.max_steps : (j.status === 'COMPLETED' ? 100 : 0);
    bar.firstChild.style.width = Math.min(100, pct) + '%';
    bar.hidden = j.kind !== 'rl' && !terminal(j.status);
    keys = j.progress.series || {};
    progressStep = j.progress.step || 0;
    run = j.run || j.attempt;
    live = !terminal(j.status);
    m.kind = j.kind;
    if (j.kind === 'eval') {
      document.getElementById('metrics-title').hidden = true;
      noMetrics.hidden = true;
    }
    showResult(j.progress.result);
  }

  // act asks first: a stop or a restart is not undone by a click.
  async function act(what, question) {
    if (!confirm(question)) return;
    try {
      showJob(await api(`/v1/jobs/${id}/${what}`, { method: 'POST' }));
    } catch (e) {
      alert(e.message);
    }
  }

  async function remove(j) {
    if (!confirm(`Delete job ${j.name || j.id} and all its data (metrics, logs, checkpoints)? This cannot be undone.`)) return;
    try {
      await api(`/v1/jobs/${id}`, { method: 'DELETE' });
      location.hash = '#/';
    } catch (e) {
      alert(e.message);
    }
  }

  const showEvent = (e) => events.append(el('li', { 'data-seq': e.seq },
    el('span', { class: 't' }, new Date(e.time).toLocaleTimeString()), badge(e.status), ' ', el('b', {}, e.type),
    e.detail ? el('span', { class: 'muted' }, ' — ' + e.detail) : null));

  async function loadCheckpoints(kind) {
    if (kind !== 'rl') { checkpoints.replaceChildren(el('p', { class: 'muted' }, 'none: only rl jobs checkpoint')); return; }
    const page = await api(`/v1/jobs/${id}/checkpoints`);
    if (!page.items.length) { checkpoints.replaceChildren(el('p', { class: 'muted' }, 'none yet')); return; }
    checkpoints.replaceChildren(el('table', {}, el('thead', {}, el('tr', {}, ['Step', 'Status', 'Reward', 'Eval reward', 'Size', 'Time', 'Download', ''].map((h) => el('th', {}, h)))),
      el('tbody', {}, page.items.map((c) => el('tr', { 'data-step': c.step, class: c.best ? 'best' : null },
        el('td', {}, c.step), el('td', {}, c.status, c.pinned ? ' · pinned' : '', c.best ? ' · ' : '', c.best ? el('b', {}, 'best') : ''),
        el('td', {}, fmt((c.metrics || {}).reward)), el('td', {}, fmt((c.metrics || {}).eval_reward)), el('td', {}, size(c.bytes)),
        el('td', {}, c.time ? new Date(c.time).toLocaleString() : '-'),
        el('td', {}, (c.download || []).map((f) => el('div', {}, el('a', { href: f.url, class: 'mono', rel: 'noopener' }, f.path), ' ', el('span', { class: 'muted' }, size(f.bytes))))),
        el('td', {}, c.status === 'committed' ? el('button', { type: 'button', class: 'deploy', onclick: () => deployStep(c.step) }, 'Deploy') : ''))))));
  }

  // Deploy: the checkpoint served for inference; its deployment is on the deployments page.
  async function deployStep(step) {
    try {
      await api('/v1/deployments', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ job: id, step }) });
      location.hash = '#/deployments';
    } catch (e) {
      alert(e.message);
    }
  }

  // Rollouts: a step's reward (or advantage) histogram over its whole batch, and the episodes
  // kept of it — prompt, completion, reward. The newest step is shown until one is picked.
  const roll = { steps: [], picked: 0, type: 'rewards', shown: '' };
  const stepPick = el('select', { id: 'rollout-step', onchange: () => { roll.picked = Number(stepPick.value); showRollouts(); } });
  const typePick = el('select', { id: 'rollout-type', onchange: () => { roll.type = typePick.value; showRollouts(); } },
    ['rewards', 'advantages'].map((t) => el('option', { value: t }, t)));
  const histogram = el('div', { class: 'histogram', id: 'histogram' });
  const samples = el('div', { id: 'samples' });
  async function loadRollouts(kind) {
    if (kind !== 'rl' && kind !== 'fft') return;
    const progress = await api(`/v1/jobs/${id}/progress`);
    const page = { steps: progress.steps_with_samples || [] };
    document.getElementById('rollouts-title').hidden = false;
    if (!page.steps.length) { rollouts.replaceChildren(el('p', { class: 'muted' }, 'none yet: a step\'s are kept once the trainer takes it')); return; }
    if (page.steps.length !== roll.steps.length) {
      roll.steps = page.steps;
      stepPick.replaceChildren(...roll.steps.slice().reverse().map((n) => el('option', { value: n }, 'step ' + n)));
      if (roll.picked) stepPick.value = String(roll.picked);
      if (!rollouts.contains(histogram)) {
        rollouts.replaceChildren(el('div', { class: 'row' }, stepPick, typePick), histogram, samples);
      }
    }
    if (!roll.picked) await showRollouts();
  }
  async function showRollouts() {
    const step = roll.picked || roll.steps[roll.steps.length - 1];
    const want = `${step}/${roll.type}`;
    if (want === roll.shown) return;
    roll.shown = want;
    let page, dist;
    try {
      [page, dist] = await Promise.all([api(`/v1/jobs/${id}/samples?step=${step}`), api(`/v1/jobs/${id}/distributions?step=${step}&type=${roll.type}`)]);
    } catch (e) {
      roll.shown = ''; // tried again on the next look
      throw e;
    }
    if (roll.shown !== want) return; // another step or type was picked meanwhile
    histogram.replaceChildren(...histogramView(dist, `${dist.type} at step ${step} over ${dist.count} episodes: mean ${fmt(dist.mean)}, std ${fmt(dist.std)}`, 'histogram-title'));
    samples.replaceChildren(el('p', { class: 'muted' }, `${page.total} of the step's ${page.episodes} episodes kept`),
      ...page.samples.map((x) => el('details', { class: 'sample', 'data-index': x.index },
        el('summary', {}, `episode ${x.index} · reward ${fmt(x.reward)} · advantage ${fmt(x.advantage)}`, x.ok ? '' : ' · failed',
          x.stop_condition ? ` · ${x.stop_condition}` : ''),
        ...[['prompt', x.prompt], ['completion', x.completion]].map(([part, msgs]) => el('div', { class: 'msgs ' + part },
          el('h4', {}, part), msgs.map((m) => el('div', { class: 'msg role-' + m.role }, el('span', { class: 'role' }, m.role), el('pre', {}, m.content))))),
        (x.errors || []).map((e) => el('p', { class: 'error' }, e)),
        x.rewards ? el('p', { class: 'muted' }, 'rewards: ' + Object.entries(x.rewards).map(([k, v]) => `${k}=${v}`).join(' ')) : null)));
  }

  async function loadArtifacts() {
    const page = await api(`/v1/jobs/${id}/artifacts`);
    artifacts.replaceChildren(page.items.length
      ? el('ul', {}, page.items.map((a) => el('li', {}, el('a', { href: a.url, class: 'mono', rel: 'noopener' }, a.name), ' ', el('span', { class: 'muted' }, size(a.bytes)))))
      : el('p', { class: 'muted' }, 'none'));
  }

  // The log tail: the last lines, then, while the job runs, new ones as they come.
  let logCtl = null;
  // At most 2,000 lines are kept (two nodes a line), and the view scrolls once a frame: a run
  // that logs hundreds of lines a second must not freeze the tab.
  let scrolling = false;
  function logLine(l) {
    logs.append(el('span', { class: 'c' }, l.component.padEnd(12) + ' '), l.line + '\n');
    while (logs.childNodes.length > 4000) logs.removeChild(logs.firstChild);
    if (!scrolling) {
      scrolling = true;
      requestAnimationFrame(() => {
        scrolling = false;
        logs.scrollTop = logs.scrollHeight;
      });
    }
  }
  async function loadLogs(running) {
    if (logCtl) logCtl.abort();
    logCtl = new AbortController();
    ctl.signal.addEventListener('abort', () => logCtl.abort());
    logs.replaceChildren();
    const q = new URLSearchParams({ tail_lines: '200' });
    if (component.value) q.set('component', component.value);
    if (!running) {
      const page = await api(`/v1/jobs/${id}/logs?` + q);
      page.items.forEach(logLine);
      if (!page.items.length) logs.append('no log lines');
      return;
    }
    q.set('follow', 'true');
    follow(`/v1/jobs/${id}/logs?` + q, (ev, data) => { if (ev === 'log') logLine(data); }, logCtl.signal, id);
  }

  let running = false;
  async function refresh() {
    const j = await api('/v1/jobs/' + id);
    showJob(j);
    await Promise.all([loadMetrics(), loadCheckpoints(j.kind), loadArtifacts(), loadRollouts(j.kind)]);
    return j;
  }

  (async () => {
    try {
      const j = await refresh();
      running = !terminal(j.status);
      component.addEventListener('change', () => loadLogs(running).catch((e) => showError(logs, e)));
      loadLogs(running).catch((e) => showError(logs, e));
      if (running) {
        follow(`/v1/jobs/${id}/events`, (_, e) => showEvent(e), ctl.signal, id);
        let looking = false; // one look at a time: a slow one is not overtaken by the next
        const timer = setInterval(async () => {
          if (looking) return;
          looking = true;
          try {
            const now = await refresh();
            if (terminal(now.status)) clearInterval(timer);
          } catch (e) { /* shown on the next look */ } finally {
            looking = false;
          }
        }, 3000);
        ctl.signal.addEventListener('abort', () => clearInterval(timer));
      } else {
        const page = await api(`/v1/jobs/${id}/events?limit=100`);
        page.items.forEach(showEvent);
      }
    } catch (e) {
      showError(facts, e);
    }
  })();
  return () => ctl.abort();
}

// ---- comparing runs ----

// flatten writes a job's config as dotted keys (arrays by index: env.0.id).
function flatten(v, prefix, out) {
  if (v && typeof v === 'object') {
    for (const [k, x] of Object.entries(v)) flatten(x, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out[prefix] = v;
  }
  return out;
}

// comparePage overlays one metric of two or more jobs, each a line, and sets their configs
// side by side, the rows that differ marked (and, by default, the only ones shown).
function comparePage(ids) {
  const ctl = { live: true };
  const chartTitle = el('h3', {});
  const chartBox = el('div', { class: 'chart', id: 'compare-chart' }, chartTitle);
  const readout = el('p', { class: 'readout mono', id: 'compare-readout' });
  const config = el('div', { class: 'scroll' });
  const only = el('input', { type: 'checkbox', id: 'only-differences', checked: true, onchange: () => showConfig() });
  const tools = chartTools('compare-', () => draw(true));
  const pickBox = el('span', { id: 'compare-pick' });
  const note = el('p', { class: 'muted' });
  app.replaceChildren(el('p', {}, el('a', { href: '#/' }, '← jobs')), el('h1', {}, `Comparing ${ids.length} jobs`), note,
    el('div', { class: 'row chart-tools' }, pickBox, tools.view), readout, chartBox,
    el('div', { class: 'row' }, el('h2', {}, 'Configs'), el('label', {}, only, ' only what differs')), config);
  let jobs = [];
  let plot = null;
  let shown = { key: '', xs: [], ys: [], raws: [] };
  let asked = 0; // the newest metric picked: an older pick's answer arriving later is dropped
  const unfit = fitPlots(chartBox, () => (plot ? [[chartBox, plot]] : []));
  const label = (j) => j.name || shortID(j.id);

  function showConfig() {
    const flat = jobs.map((j) => flatten({ name: j.name || '', status: j.status, ...j.config }, '', {}));
    const keys = [...new Set(flat.flatMap((f) => Object.keys(f)))].sort();
    const rows = keys.map((k) => {
      const vs = flat.map((f) => (k in f ? JSON.stringify(f[k]) : ''));
      return { k, vs, differs: vs.some((v) => v !== vs[0]) };
    }).filter((r) => r.differs || !only.checked);
    config.replaceChildren(el('table', { id: 'compare-config' },
      el('thead', {}, el('tr', {}, el('th', {}, 'key'), jobs.map((j) => el('th', {}, el('a', { href: '#/jobs/' + j.id }, label(j)))))),
      el('tbody', {}, rows.map((r) => el('tr', { 'data-key': r.k, class: r.differs ? 'differs' : null }, el('td', { class: 'mono' }, r.k),
        r.vs.map((v) => el('td', { class: 'mono' }, v.replace(/^"|"$/g, ''))))))));
  }

  // The metric of each job: a headline series by its own key in that job, or a metric by name.
  async function pick(metric) {
    const mine = ++asked;
    const rows = jobs.map(() => new Map());
    await Promise.all(jobs.map((j, i) => {
      const key = (j.progress.series || {})[metric] || metric;
      return fetchRows(j.id, [key], 0, rows[i]).then(() => { for (const r of rows[i].values()) r.v = r[key]; });
    }));
    if (!ctl.live || mine !== asked) return;
    const xs = [...new Set(rows.flatMap((r) => [...r.keys()]))].sort((a, b) => a - b);
    const raws = rows.map((r) => xs.map((s) => (r.has(s) && typeof r.get(s).v === 'number' ? r.get(s).v : null)));
    shown = { key: metric, xs, raws };
    draw(true);
  }

  function draw(rebuild) {
    if (!jobs.length || !shown.key) return;
    const log = tools.log && logFits(shown.raws);
    if (rebuild || !plot) {
      if (plot) plot.destroy();
      plot = plotIn(chartBox, jobs.map((j) => ({ label: label(j) })), { sync: 'compare', log, onCursor: (idx) => {
        if (idx === null || idx === undefined) return;
        readout.replaceChildren(el('b', {}, `step ${shown.xs[idx]}`), ...jobs.map((j, i) => ` · ${label(j)} ${num(shown.raws[i][idx])}`));
      } });
      chartBox.dataset.scale = log ? 'log' : 'linear';
    }
    const ys = shown.raws.map((y) => lineData(y, tools));
    plot.raw = shown.raws;
    plot.setData([shown.xs, ...ys]);
    chartBox.dataset.metric = shown.key;
    chartTitle.textContent = (HEADLINE.find(([n]) => n === shown.key) || [0, shown.key])[1];
    chartBox.dataset.points = ys.map((y) => y.filter((v) => v !== null).length).join(',');
  }

  (async () => {
    try {
      jobs = await Promise.all(ids.map((id) => api('/v1/jobs/' + id)));
      if (!ctl.live) return;
      showConfig();
      const headline = HEADLINE.filter(([n]) => jobs.every((j) => (j.progress.series || {})[n]));
      const catalogs = await Promise.all(jobs.map((j) => catalogOf(j.id, j.progress.step || 0)));
      const common = new Set([...catalogs[0]].filter((k) => catalogs.every((c) => c.has(k))));
      if (!headline.length && !common.size) {
        note.textContent = 'These jobs have no metric in common to chart.';
        chartBox.hidden = true;
        return;
      }
      const select = metricPicker('compare-metric', common, headline);
      select.addEventListener('change', () => pick(select.value).catch((e) => showError(note, e)));
      pickBox.replaceChildren(select);
      await pick(select.value);
    } catch (e) {
      showError(note, e);
    }
  })();
  return () => { ctl.live = false; unfit(); if (plot) plot.destroy(); };
}

// ---- the nodes (an operator's token) ----

// scopes reads the token's scopes from its payload, only to decide what to show: the API checks
// the signature and the scopes on every request.
function scopes() {
  try {
    const part = token().split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return (JSON.parse(atob(part)).scope || '').split(' ');
  } catch (e) {
    return [];
  }
}

function nodesPage() {
  const body = el('tbody');
  const note = el('p', { class: 'muted' }, 'Cordoned, draining and quarantined nodes take no new jobs; ',
    '`hostedtrain admin nodes uncordon NODE` puts one back.');
  app.replaceChildren(el('h1', {}, 'Nodes'), el('table', { id: 'nodes' }, el('thead', {}, el('tr', {},
    ['Node', 'State', 'Since', 'Platform faults', 'Last seen', 'Free GPUs', 'Reason'].map((h) => el('th', {}, h)))), body), note);
  async function load() {
    try {
      const page = await api('/v1/admin/nodes');
      body.replaceChildren(...page.items.map((n) => el('tr', { 'data-node': n.id, 'data-state': n.state, class: n.state === 'ok' ? null : 'out' },
        el('td', { class: 'mono' }, n.id), el('td', {}, el('span', { class: 'badge ' + (n.state === 'ok' ? 's-COMPLETED' : 's-FAILED') }, n.state)),
        el('td', {}, n.since ? ago(n.since) : '-'), el('td', {}, n.recent_faults),
        el('td', {}, n.last_seen ? ago(n.last_seen) + ' ago' : '-'),
        el('td', {}, (n.free || []).map((g) => `${g.count}×${g.model}`).join(', ') || '-'), el('td', {}, n.reason || ''))));
      if (!page.items.length) body.append(el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'no nodes seen lately')));
    } catch (e) {
      showError(note, e);
    }
  }
  load();
  const timer = setInterval(load, 5000);
  return () => clearInterval(timer);
}

// startupTimeline draws a run's start-up: each phase a bar as wide as its share, named, timed.
function startupTimeline(phases) {
  const total = phases.reduce((n, p) => n + p.seconds, 0) || 1;
  const secs = (s) => (s < 1 ? Math.round(s * 1000) + ' ms' : s.toFixed(1) + ' s');
  return el('div', { id: 'startup', class: 'startup' },
    el('div', { class: 'bar' }, phases.map((p, i) => el('span', { class: 'phase p' + (i % 6), 'data-phase': p.name, title: `${p.name.replace('_', ' ')} ${secs(p.seconds)}`,
      style: `width:${Math.max(1, (100 * p.seconds) / total)}%` }))),
    el('div', { class: 'muted' }, secs(total) + ': ' + phases.map((p) => `${p.name.replace('_', ' ')} ${secs(p.seconds)}` +
      (p.cached ? ' (cached)' : p.bytes ? ` (${(p.bytes / 1048576).toFixed(1)} MiB)` : '')).join(' · ')));
}

// ---- deployments: where each runs, its requests, tokens, latency and errors; a chat box ----

function deploymentsPage() {
  const body = el('tbody');
  const note = el('p', { class: 'muted' }, 'Deploy a committed checkpoint from its job\'s page (or `hostedtrain deploy JOB`). ',
    'An adapter no request reached for a while is unloaded and comes back on the next request.');
  const pick = el('select', { id: 'chat-model' });
  const input = el('input', { id: 'chat-input', type: 'text', placeholder: 'say something', size: 60 });
  const answer = el('pre', { id: 'chat-answer', class: 'chat' });
  const send = el('button', { type: 'button', id: 'chat-send', onclick: () => chat() }, 'Send');
  app.replaceChildren(el('h1', {}, 'Deployments'), el('table', { id: 'deployments' }, el('thead', {}, el('tr', {},
    ['Model', 'Job', 'Step', 'Status', 'Node', 'Requests', 'Tokens', 'p50 / p99', 'Errors', ''].map((h) => el('th', {}, h)))), body), note,
  el('h2', {}, 'Chat'), el('p', {}, pick, ' ', input, ' ', send), answer);
  const ms = (v) => (v ? v.toFixed(1) + ' ms' : '-');
  async function load() {
    try {
      const page = await api('/v1/deployments?limit=100');
      body.replaceChildren(...page.items.map((d) => el('tr', { 'data-id': d.id, 'data-status': d.deployment_status },
        el('td', { class: 'mono' }, d.model), el('td', {}, el('a', { href: '#/jobs/' + d.job, class: 'mono' }, d.job_name || shortID(d.job))),
        el('td', {}, d.step), el('td', {}, el('span', { class: 'badge ' + (d.deployment_status === 'DEPLOYED' ? 's-COMPLETED' : d.deployment_status.endsWith('FAILED') ? 's-FAILED' : 's-RUNNING') }, d.deployment_status)),
        el('td', { class: 'mono' }, d.node || '-'), el('td', {}, d.requests), el('td', {}, d.prompt_tokens + d.completion_tokens),
        el('td', {}, ms(d.latency_p50_ms) + ' / ' + ms(d.latency_p99_ms)), el('td', {}, d.failures || 0, d.error ? el('div', { class: 'muted' }, d.error) : ''),
        el('td', {}, d.deployment_status === 'DEPLOYED' || d.deployment_status === 'DEPLOYING'
          ? el('button', { type: 'button', class: 'unload', onclick: () => unload(d) }, 'Unload') : ''))));
      if (!page.items.length) body.append(el('tr', {}, el('td', { colspan: 10, class: 'muted' }, 'none yet')));
      const live = page.items.filter((d) => d.deployment_status === 'DEPLOYED').map((d) => d.model);
      const was = pick.value;
      if (live.join() !== [...pick.options].map((o) => o.value).join()) {
        pick.replaceChildren(...live.map((m) => el('option', { value: m }, m)));
        if (live.includes(was)) pick.value = was;
      }
    } catch (e) {
      showError(note, e);
    }
  }
  async function unload(d) {
    if (!confirm(`Unload ${d.model}? Deploy it again at will.`)) return;
    try {
      await api('/v1/deployments/' + d.id, { method: 'DELETE' });
      load();
    } catch (e) {
      alert(e.message);
    }
  }
  // chat streams the answer through the inference gateway (the API's origin in hostedtrain dev).
  async function chat() {
    answer.textContent = '';
    try {
      const res = await fetch('/api/v1/chat/completions', {
        method: 'POST',
        headers: { Authorization: 'Bearer ' + token(), 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: pick.value, stream: true, messages: [{ role: 'user', content: input.value }] }),
      });
      if (!res.ok) {
        const b = await res.json().catch(() => ({}));
        answer.textContent = res.status + ': ' + ((b.error || {}).message || '');
        return;
      }
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim();
          buf = buf.slice(i + 1);
          if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
          const ev = JSON.parse(line.slice(6));
          if (ev.error) { answer.textContent += '\n[' + ev.error.message + ']'; continue; }
          for (const c of ev.choices || []) answer.textContent += (c.delta || {}).content || '';
        }
      }
      answer.dataset.done = '1';
    } catch (e) {
      answer.textContent = e.message;
    }
  }
  load();
  const timer = setInterval(load, 3000);
  return () => clearInterval(timer);
}

// ---- routing ----

function route(message) {
  leave();
  leave = () => {};
  if (!token()) {
    loginPage(message);
    return;
  }
  forget.hidden = false;
  const admin = scopes().includes('admin');
  document.getElementById('nodes-link').hidden = !admin;
  const m = location.hash.match(/^#\/jobs\/([A-Za-z0-9-]+)/);
  const cmp = location.hash.match(/^#\/compare\/([A-Za-z0-9,-]+)/);
  if (admin && location.hash === '#/nodes') leave = nodesPage();
  else if (location.hash === '#/deployments') leave = deploymentsPage();
  else if (cmp) leave = comparePage(cmp[1].split(',').filter(Boolean).slice(0, PALETTE.length));
  else leave = m ? jobPage(m[1]) : jobsPage();
}

window.addEventListener('hashchange', () => route());
route();
