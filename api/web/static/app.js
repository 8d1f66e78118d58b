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
  const state = { status: '', kind: '', text: '', sort: 'Age', desc: false };
  let jobs = [];
  const body = el('tbody');
  const more = el('p');
  const status = el('select', { id: 'filter-status', onchange: () => { state.status = status.value; load(); } },
    ['', 'QUEUED', 'PENDING', 'RUNNING', 'COMPLETED', 'FAILED', 'STOPPED'].map((s) => el('option', { value: s }, s || 'any status')));
  const kind = el('select', { id: 'filter-kind', onchange: () => { state.kind = kind.value; load(); } },
    ['', 'rl', 'fft', 'gepa', 'eval'].map((k) => el('option', { value: k }, k || 'any kind')));
  const text = el('input', { id: 'filter-text', type: 'search', placeholder: 'name, model or id', oninput: () => { state.text = text.value.trim().toLowerCase(); draw(); } });
  const head = el('tr', {}, COLUMNS.map((c) => el('th', { 'data-col': c.name, class: c.narrow ? 'narrow' : 'wide', onclick: () => sortBy(c.name) }, c.name)));
  app.replaceChildren(el('h1', {}, 'Jobs'), el('div', { class: 'filters' }, status, kind, text),
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
    body.replaceChildren(...shown.map((j) => el('tr', { 'data-id': j.id },
      COLUMNS.map((c) => el('td', { class: [c.cls, c.narrow ? 'narrow' : 'wide'].filter(Boolean).join(' ') }, c.cell(j))))));
    if (!shown.length) body.append(el('tr', {}, el('td', { colspan: COLUMNS.length, class: 'muted' }, jobs.length ? 'no job matches' : 'no jobs')));
  }
  async function load(cursor) {
    const q = new URLSearchParams({ limit: '50' });
    if (state.status) q.set('status', state.status);
    if (state.kind) q.set('kind', state.kind);
    if (cursor) q.set('cursor', cursor);
    try {
      await loadPrices();
      const page = await api('/v1/jobs?' + q);
      jobs = cursor ? jobs.concat(page.items) : page.items;
      draw();
      more.replaceChildren(page.next_cursor ? el('button', { type: 'button', onclick: () => load(page.next_cursor) }, 'More') : '');
    } catch (e) {
      showError(more, e);
    }
  }
  load();
  const timer = setInterval(() => { if (!more.querySelector('button')) load(); }, 5000);
  return () => clearInterval(timer);
}

// ---- a job ----

// A job's headline series (reward, loss, ...) are named by the API: progress.series says which
// of prime-rl's metrics holds each (jobdata.Headline in the Go code is the one table).
const CHARTS = {
  rl: [['reward', 'Reward'], ['loss', 'Loss'], ['entropy', 'Entropy']],
  gepa: [['gepa_best', 'GEPA best score']],
  eval: [],
};

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

  // The charts: one uPlot a headline series of the job's kind, steps on x; each reads the
  // metric progress.series names for it.
  const plots = {};
  const series = { step: [] };
  let chartList = null;
  let keys = {};
  function makeCharts(kind) {
    chartList = CHARTS[kind] || CHARTS.rl;
    document.getElementById('metrics-title').hidden = chartList.length === 0;
    noMetrics.hidden = chartList.length === 0;
    for (const [name] of chartList) series[name] = [];
  }
  // drawCharts makes the charts once the first step's row has arrived: never an empty box.
  function drawCharts() {
    if (Object.keys(plots).length) return;
    charts.hidden = false;
    noMetrics.hidden = true;
    // All the boxes first, so each has its column's width when its chart is sized to it.
    const boxes = chartList.map(([name, title]) => el('div', { class: 'chart', 'data-metric': name }, el('h3', {}, title)));
    charts.append(...boxes);
    chartList.forEach(([name], i) => {
      plots[name] = new uPlot({
        width: Math.max(260, boxes[i].clientWidth - 24), height: 220,
        scales: { x: { time: false } },
        axes: [{ label: 'step' }, {}],
        series: [{ label: 'step' }, { label: name, stroke: '#3558d6', width: 2 }],
        legend: { show: false },
      }, [[], []], boxes[i]);
    });
  }
  let lastStep = 0;
  async function loadMetrics() {
    const wanted = chartList.filter(([name]) => keys[name]);
    if (!wanted.length) return;
    const names = wanted.map(([name]) => keys[name]).join(',');
    for (;;) {
      const page = await api(`/v1/jobs/${id}/metrics?min_step=${lastStep + 1}&names=${encodeURIComponent(names)}&limit=5000`);
      for (const r of page.items) {
        series.step.push(r.step);
        for (const [name] of chartList) series[name].push(typeof r[keys[name]] === 'number' ? r[keys[name]] : null);
        lastStep = r.step;
      }
      if (!page.next_min_step) break;
    }
    if (!series.step.length) return;
    drawCharts();
    for (const [name] of chartList) {
      plots[name].setData([series.step, series[name]]);
      charts.querySelector(`.chart[data-metric="${name}"]`).dataset.points = series[name].filter((v) => v !== null).length;
    }
  }

  // A GEPA or eval job's result: per environment, the eval's size and average reward; GEPA's
  // best score and prompt.
  function showResult(r) {
    if (!r) { result.replaceChildren(); return; }
    const parts = [el('h2', {}, 'Result')];
    if (r.eval && r.eval.length) {
      parts.push(el('table', { id: 'eval-result' }, el('thead', {}, el('tr', {}, ['Environment', 'Examples', 'Rollouts per example', 'Rollouts scored', 'Average reward', 'Errors'].map((h) => el('th', {}, h)))),
        el('tbody', {}, r.eval.map((e) => el('tr', {}, el('td', {}, e.env), el('td', {}, e.num_examples), el('td', {}, e.rollouts_per_example),
          el('td', {}, e.rollouts ?? '-'), el('td', {}, fmt(e.avg_reward)),
          el('td', { title: e.first_error || '' }, typeof e.avg_error === 'number' ? `${Math.round(e.avg_error * 100)} %` : '0 %'))))));
    }
    if (r.gepa) {
      parts.push(el('p', { id: 'gepa-result' }, `Best score ${fmt(r.gepa.best_score)} of ${r.gepa.candidates} candidates (${r.gepa.metric_calls || 0} metric calls)`));
      parts.push(el('pre', { class: 'prompt', id: 'best-prompt' }, r.gepa.best_prompt || ''));
      if (r.gepa.prompt_truncated) parts.push(el('p', { class: 'muted' }, 'The prompt is cut here; the whole of it is the artifact system_prompt.txt.'));
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
    if (j.queue_reason) pairs.push(['queue', `${j.queue_reason} (${j.runs_ahead} ahead)`]);
    if (j.error) pairs.push(['error', el('span', { class: 'error' }, j.error)]);
    if (j.failure_analysis) pairs.push(['failure', failureBlock(j.failure_analysis)]);
    const actions = [];
    if (!terminal(j.status)) actions.push(el('button', { type: 'button', id: 'stop', onclick: () => act('cancel', `Stop job ${j.name || j.id}? Its newest checkpoint is kept.`) }, 'Stop'));
    if (j.status === 'FAILED' || j.status === 'STOPPED') actions.push(el('button', { type: 'button', id: 'restart', onclick: () => act('restart', `Restart job ${j.name || j.id} from its newest checkpoint?`) }, 'Restart'));
    if (terminal(j.status)) actions.push(el('button', { type: 'button', id: 'delete', onclick: () => remove(j) }, 'Delete'));
    facts.replaceChildren(el('dl', { class: 'facts' }, pairs.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])));
    if (actions.length) facts.append(el('p', { class: 'row' }, actions));
    const pct = j.progress.max_steps ? (100 * j.progress.step) / j.progress.max_steps : (j.status === 'COMPLETED' ? 100 : 0);
    bar.firstChild.style.width = Math.min(100, pct) + '%';
    bar.hidden = j.kind !== 'rl' && !terminal(j.status);
    keys = j.progress.series || {};
    if (!chartList) makeCharts(j.kind);
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
    checkpoints.replaceChildren(el('table', {}, el('thead', {}, el('tr', {}, ['Step', 'Status', 'Reward', 'Eval reward', 'Size', 'Time', 'Download'].map((h) => el('th', {}, h)))),
      el('tbody', {}, page.items.map((c) => el('tr', { 'data-step': c.step, class: c.best ? 'best' : null },
        el('td', {}, c.step), el('td', {}, c.status, c.pinned ? ' · pinned' : '', c.best ? ' · ' : '', c.best ? el('b', {}, 'best') : ''),
        el('td', {}, fmt((c.metrics || {}).reward)), el('td', {}, fmt((c.metrics || {}).eval_reward)), el('td', {}, size(c.bytes)),
        el('td', {}, c.time ? new Date(c.time).toLocaleString() : '-'),
        el('td', {}, (c.download || []).map((f) => el('div', {}, el('a', { href: f.url, class: 'mono', rel: 'noopener' }, f.path), ' ', el('span', { class: 'muted' }, size(f.bytes))))))))));
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
    const most = Math.max(1, ...dist.bins.map((b) => b.count));
    histogram.replaceChildren(
      el('p', { class: 'muted', id: 'histogram-title' }, `${dist.type} at step ${step} over ${dist.count} episodes: mean ${fmt(dist.mean)}, std ${fmt(dist.std)}`),
      el('div', { class: 'bins' }, dist.bins.map((b) => el('div', { class: 'bin', 'data-count': b.count, title: `${fmt(b.min)} … ${fmt(b.max)}: ${b.count}` },
        el('div', { class: 'fill', style: `height:${(100 * b.count) / most}%` })))),
      el('div', { class: 'row muted axis' }, el('span', {}, fmt(dist.min)), el('span', { class: 'spacer' }), el('span', {}, fmt(dist.max))));
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
  function logLine(l) {
    logs.append(el('span', { class: 'c' }, l.component.padEnd(12) + ' '), l.line + '\n');
    if (logs.childNodes.length > 4000) logs.removeChild(logs.firstChild);
    logs.scrollTop = logs.scrollHeight;
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
        const timer = setInterval(async () => {
          try {
            const now = await refresh();
            if (terminal(now.status)) clearInterval(timer);
          } catch (e) { /* shown on the next look */ }
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
  if (admin && location.hash === '#/nodes') leave = nodesPage();
  else leave = m ? jobPage(m[1]) : jobsPage();
}

window.addEventListener('hashchange', () => route());
route();
