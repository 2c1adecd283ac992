// The web UI of weft: one file, no framework. Hash routes render into
// <main id="view">; every string from the API goes into the DOM through
// textContent (h()) or esc(), never raw into innerHTML.
'use strict';

/* ---- Small helpers ---- */

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;
const RUN_STATES = ['running', 'succeeded', 'failed', 'timed_out', 'cancelled'];

// Escapes text for HTML (element content and quoted attributes).
const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (text) => String(text ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]);

// Builds an element: attrs (class, on<event>, properties for non-strings,
// attributes otherwise) and children (nodes, or strings as text).
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (typeof v !== 'string' && k in el) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid == null || kid === false) continue;
    el.append(kid instanceof Node ? kid : String(kid));
  }
  return el;
}

const pad = (n) => String(n).padStart(2, '0');

// Milliseconds since the epoch as local `YYYY-MM-DD HH:MM:SS`.
function fmtTime(ms) {
  if (ms == null || ms === '') return '';
  const d = new Date(Number(ms));
  if (Number.isNaN(d.getTime())) return String(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

const fmtDur = (us) => (us == null ? '' : us < 1000 ? `${us} µs`
  : us < 1e6 ? `${(us / 1000).toFixed(1)} ms` : `${(us / 1e6).toFixed(2)} s`);

function fmtBytes(n) {
  if (n == null) return '';
  let i = 0;
  while (n >= 1024 && i < 3) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${['B', 'KiB', 'MiB', 'GiB'][i]}`;
}

const shortDigest = (d) => String(d || '').replace(/^sha256:/, '').slice(0, 12);
const pretty = (v) => JSON.stringify(v, null, 2) ?? 'null';
const jsonBlock = (v) => h('pre', { class: 'json' }, pretty(v));
const thead = (cols) => h('thead', {}, h('tr', {}, cols.map((c) => h('th', {}, c))));
const td = (...content) => h('td', {}, ...content);
const code = (text, title) => h('code', { title }, text);
const runLink = (id) => h('a', { class: 'run-link', href: `#/runs/${enc(id)}` }, id);
const workflowLink = (id) => h('a', { href: `#/workflows/${enc(id)}` }, id);
const fact = (name, ...value) => [h('dt', {}, name), h('dd', {}, ...value)];
const emptyRow = (cols, text) => h('tr', { class: 'empty' }, h('td', { colspan: String(cols) }, text));

// A state badge: the state's text, coloured by class.
const badge = (state, attrs = {}) =>
  h('span', { ...attrs, class: `badge st-${String(state).replace(/[^a-z_]/g, '')}` }, String(state ?? ''));

// Resolves after `ms`, or at once when `signal` aborts.
const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

// A refresh that runs `fn` at most once at a time, coalescing calls made
// meanwhile into one more run.
function refresher(ctx, fn, wait = 150) {
  let timer = null, running = false, again = false;
  const go = async () => {
    timer = null;
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } catch (e) { ctx.fail(e); }
    running = false;
    if (again) { again = false; schedule(); }
  };
  const schedule = () => { if (!timer && !ctx.signal.aborted) timer = setTimeout(go, wait); };
  return schedule;
}

/* ---- Settings, API calls, banners ---- */

function setting(key) {
  try { return localStorage.getItem(key) || ''; } catch { return ''; }
}

function saveSetting(key, value) {
  try { if (value) localStorage.setItem(key, value); else localStorage.removeItem(key); } catch { /* off */ }
}

// The headers every request sends: the token and the tenant, when set.
function authHeaders() {
  const headers = {}, token = setting('weft.token'), tenant = setting('weft.tenant');
  if (token) headers.Authorization = `Bearer ${token}`;
  if (tenant) headers['Weft-Tenant'] = tenant;
  return headers;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    Object.assign(this, { name: 'ApiError', status, code });
  }
}

// The error of a response that is not ok: `{"error": {code, message}}`.
async function answerError(res) {
  const text = await res.text().catch(() => '');
  let body = null;
  try { body = JSON.parse(text); } catch { /* not JSON */ }
  const e = body && body.error;
  if (res.status === 401) return new ApiError(401, e?.code || 'unauthorized', 'token needed or refused');
  return new ApiError(res.status, e?.code || `http_${res.status}`,
    e?.message || text.slice(0, 300) || `HTTP ${res.status}`);
}

// One API call; answers the parsed JSON, or throws an ApiError.
async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = authHeaders();
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, signal, cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await answerError(res);
  const text = await res.text();
  return text ? JSON.parse(text) : {};
}

// The error banner; a failed fetch() is a TypeError naming the network.
function showError(e) {
  if (!e || e.name === 'AbortError') return;
  const offline = e instanceof TypeError && /fetch|network|load failed/i.test(e.message);
  const el = $('#error');
  el.textContent = offline ? `cannot reach the server: ${e.message}` : e.message || String(e);
  el.hidden = false;
}

function hideError() {
  Object.assign($('#error'), { hidden: true, textContent: '' });
}

let noticeTimer = null;

// A short notice (`resent`, `cleared`, ...), gone after a few seconds.
function notice(text) {
  hideError();
  const el = Object.assign($('#notice'), { hidden: false, textContent: text });
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { el.hidden = true; }, 4000);
}

/* ---- Live updates: Server-Sent Events over fetch() ---- */

// EventSource cannot send headers, so streams are read by hand.
function setLive(ctx, on) {
  if (ctx !== current) return;
  Object.assign($('#live'), { textContent: on ? 'live' : 'offline', className: on ? 'on' : 'off' });
}

// Reads an event stream, calling dispatch({type, data, id}) per event.
async function readSse(body, dispatch) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '', type = '', data = [], id = null;
  const line = (text) => {
    if (text === '') {
      if (data.length) dispatch({ type: type || 'message', data: data.join('\n'), id });
      type = ''; data = []; id = null;
      return;
    }
    if (text[0] === ':') return; // a comment: the keep-alive
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
    else if (field === 'id' && !value.includes('\0')) id = value;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    for (;;) {
      const at = buf.search(/[\r\n]/);
      if (at < 0) break;
      if (buf[at] === '\r' && at === buf.length - 1) break; // maybe \r\n split
      const step = buf[at] === '\r' && buf[at + 1] === '\n' ? 2 : 1;
      line(buf.slice(0, at));
      buf = buf.slice(at + step);
    }
  }
}

// Keeps a stream of `url` open for the page: on.event(data) per event,
// on.reset() after `event: reset` (events were lost), on.open(first) per
// connection. Reconnects after 1 s with Last-Event-ID; ends with the page.
function stream(ctx, url, on) {
  let lastId = null, first = true;
  (async () => {
    while (!ctx.signal.aborted) {
      let wait = 1000;
      try {
        const headers = { ...authHeaders(), Accept: 'text/event-stream' };
        if (lastId !== null) headers['Last-Event-ID'] = lastId;
        const res = await fetch(url, { headers, signal: ctx.signal, cache: 'no-store' });
        if (!res.ok) { wait = 5000; throw await answerError(res); }
        setLive(ctx, true);
        on.open?.(first);
        first = false;
        await readSse(res.body, (ev) => {
          if (ev.id !== null) lastId = ev.id;
          if (ev.type === 'reset') { on.reset?.(); return; }
          let data;
          try { data = JSON.parse(ev.data); } catch { return; }
          on.event(data);
        });
      } catch (e) {
        if (e instanceof ApiError) ctx.fail(e);
      }
      setLive(ctx, false);
      await sleep(wait, ctx.signal);
    }
  })();
}

/* ---- Router ---- */

let current = null; // the page shown: {signal, query, fail, get, send}

const ROUTES = {
  runs: (ctx, view, id) => (id ? runPage(ctx, view, id) : runsPage(ctx, view)),
  awaits: (ctx, view) => awaitsPage(ctx, view),
  deliveries: (ctx, view, id) => (id ? deliveryPage(ctx, view, id) : deliveriesPage(ctx, view)),
  schedules: (ctx, view) => schedulesPage(ctx, view),
  plugins: (ctx, view) => pluginsPage(ctx, view),
  workflows: (ctx, view, id) => (id ? workflowPage(ctx, view, id) : workflowsPage(ctx, view)),
};

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = q < 0 ? raw : raw.slice(0, q);
  const parts = path.split('/').filter(Boolean).map((p) => {
    try { return decodeURIComponent(p); } catch { return p; }
  });
  return { parts, query: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)) };
}

// Renders the page of the current hash; the previous page's requests and
// stream are aborted.
function render() {
  if (!location.hash || location.hash === '#' || location.hash === '#/') {
    location.replace('#/runs');
    return;
  }
  current?.abort();
  const { parts, query } = parseHash();
  const controller = new AbortController();
  const signal = controller.signal;
  const ctx = {
    signal, query, abort: () => controller.abort(),
    fail: (e) => { if (!signal.aborted) showError(e); },
    get: (path) => api(path, { signal }),
    send: (path, method, body) => api(path, { method, body, signal }),
  };
  current = ctx;
  hideError();
  setLive(ctx, false);
  for (const a of document.querySelectorAll('nav a[data-nav]')) {
    a.classList.toggle('active', a.dataset.nav === parts[0]);
  }
  const view = $('#view');
  view.replaceChildren();
  const page = ROUTES[parts[0]];
  if (!page || parts.length > 2) {
    view.append(h('p', { class: 'muted' }, 'No such page.'));
    return;
  }
  Promise.resolve().then(() => page(ctx, view, parts[1])).catch(ctx.fail);
}

/* ---- Runs ---- */

function runRow(r) {
  return h('tr', { 'data-run': r.id }, td(runLink(r.id)), td(workflowLink(r.workflow)),
    h('td', { class: 'state' }, badge(r.state)),
    h('td', { class: 'created' }, fmtTime(r.created_at)), h('td', { class: 'updated' }, fmtTime(r.updated_at)));
}

async function runsPage(ctx, view) {
  const state = ctx.query.get('state') || '';
  const workflow = ctx.query.get('workflow') || '';
  const form = h('form', { id: 'runs-filter', class: 'filters' },
    h('label', {}, 'State ', h('select', { name: 'state', onchange: () => form.requestSubmit() },
      ['', ...RUN_STATES].map((s) => h('option', { value: s, selected: s === state }, s || 'any')))),
    h('label', {}, 'Workflow ', h('input', { name: 'workflow', value: workflow, placeholder: 'any', spellcheck: 'false' })),
    h('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (String(v).trim()) p.set(k, String(v).trim());
    const hash = `#/runs${p.toString() ? `?${p}` : ''}`;
    if (location.hash === hash) render(); else location.hash = hash;
  });
  const tbody = h('tbody');
  const more = h('button', { id: 'runs-more', type: 'button', hidden: true }, 'Older');
  view.append(h('h1', {}, 'Runs'), form,
    h('table', { id: 'runs' }, thead(['Run', 'Workflow', 'State', 'Created', 'Updated']), tbody), more);

  const rowOf = (id) => [...tbody.rows].find((tr) => tr.dataset.run === id);
  let next = null, older = false;
  // Loads the newest page, or with `before` the page after it (appended).
  const load = async (before) => {
    const p = new URLSearchParams({ limit: '50' });
    if (state) p.set('state', state);
    if (workflow) p.set('workflow', workflow);
    if (before) p.set('before', before);
    const data = await ctx.get(`/v1/runs?${p}`);
    const runs = data.runs || [];
    if (!before) tbody.replaceChildren();
    for (const r of runs) if (!rowOf(r.id)) tbody.append(runRow(r));
    if (!tbody.rows.length) tbody.append(emptyRow(5, 'No runs.'));
    next = data.next ?? null;
    more.hidden = next == null;
  };
  more.addEventListener('click', () => { older = true; load(next).catch(ctx.fail); });
  await load();

  const refresh = refresher(ctx, () => (older ? null : load()));
  const kinds = new URLSearchParams({ kind: 'started,ended,waiting,resumed' });
  if (workflow) kinds.set('workflow', workflow);
  stream(ctx, `/v1/events?${kinds}`, {
    open: (first) => first && refresh(),
    reset: () => refresh(),
    event: async (ev) => {
      const row = rowOf(ev.run);
      if (row) {
        $('td.state', row).replaceChildren(badge(ev.event === 'ended' ? ev.state : 'running'));
        $('td.updated', row).textContent = fmtTime(ev.at);
        return;
      }
      if (ev.event !== 'started' || (state && state !== 'running')) return;
      try {
        const { run } = await ctx.get(`/v1/runs/${enc(ev.run)}?steps=false`);
        if (run && !rowOf(run.id)) {
          $('tr.empty', tbody)?.remove();
          tbody.prepend(runRow(run));
        }
      } catch (e) { ctx.fail(e); }
    },
  });
}

/* ---- One run: header, graph, waiting steps, timeline ---- */

const LEAVES = new Set(['call', 'sleep', 'await', 'emit', 'subflow']);
const LOOPS = new Set(['foreach', 'while']);
// The state a leaf shows when its paths differ: the first one found.
const GRAPH_ORDER = ['failed', 'waiting', 'running', 'succeeded', 'skipped'];

// What a step record says of its leaf.
function recordState(r) {
  if (r.skipped) return 'skipped';
  if ('output' in r) return 'succeeded';
  if (r.error) return r.retry_in_ms != null ? 'waiting' : 'failed';
  if (r.awaiting || r.timer) return 'waiting';
  return 'running';
}

// A record's kind in the timeline: class and text.
function recordKind(r) {
  if (r.skipped) return ['skipped', 'skipped'];
  if (r.awaiting) return ['wait', 'wait (await)'];
  const err = r.error && `${r.error.code}: ${r.error.message}`;
  if (err && r.retry_in_ms != null) return ['retry', `retry scheduled in ${r.retry_in_ms} ms · ${err}`];
  if (err) return ['error', `error ${err}`];
  if ('output' in r) return ['result', 'result'];
  if (r.timer) return ['wait', `wait (${r.timer.kind === 'sleep' ? 'sleep' : 'timer'}) until ${fmtTime(r.timer.due)}`];
  if (r.child) return ['wait', 'wait (subflow)'];
  return ['other', 'started'];
}

// One timeline entry; its details are built when first opened.
function recordItem(r) {
  const [cls, text] = recordKind(r);
  const body = h('div', { class: 'record-body' });
  const details = h('details', {},
    h('summary', {}, h('span', { class: 'seq' }, `#${r.seq}`), h('code', { class: 'path' }, r.path || r.step_id),
      h('span', { class: 'attempt' }, `attempt ${r.attempt}`), h('span', { class: 'time' }, fmtTime(r.started_at)),
      h('span', { class: 'dur' }, fmtDur(r.duration_us)), h('span', { class: 'kind' }, text)),
    body);
  details.addEventListener('toggle', () => {
    if (!details.open || body.childElementCount) return;
    const part = (title, ...content) => h('div', { class: 'part' }, h('h4', {}, title), ...content);
    body.append(...[
      part('Input', jsonBlock(r.input)),
      'output' in r && part('Output', jsonBlock(r.output)),
      r.error && part('Error', jsonBlock(r.error)),
      r.child && part('Child run', runLink(r.child)),
      r.timer && part('Timer', jsonBlock(r.timer)),
      r.logs?.length && part('Logs', h('pre', { class: 'logs' },
        r.logs.map((l) => `${String(l.level).padEnd(5)} ${l.source ? `[${l.source}] ` : ''}${l.message}`).join('\n'))),
      r.http?.length && part('HTTP calls', jsonBlock(r.http)),
      r.kv_writes && Object.keys(r.kv_writes).length && part('Key-value writes', jsonBlock(r.kv_writes)),
      r.messages?.length && part('Messages', jsonBlock(r.messages)), r.host && part('Host', code(r.host)),
    ].filter(Boolean));
  });
  return h('li', { class: `record k-${cls}`, 'data-seq': String(r.seq) }, details);
}

// The graph: a vertical sequence of boxes joined by arrows.
function graphSeq(steps) {
  return h('div', { class: 'seq' }, (steps || []).map((node, i) => [i ? h('div', { class: 'arrow' }, '↓') : null, graphNode(node)]));
}

function graphBranches(branches, cls) {
  return h('div', { class: `branches ${cls}` }, branches.map((b) =>
    h('div', { class: 'branch' }, h('div', { class: 'blabel' }, b.label || ''), graphSeq(b.steps))));
}

// One step: a leaf box, or a frame holding its branches side by side;
// catch handlers go beside it.
function graphNode(n) {
  const branches = n.branches || [];
  const main = branches.filter((b) => b.label !== 'catch');
  const handlers = branches.filter((b) => b.label === 'catch');
  const title = [h('b', {}, n.id), ' ', h('span', { class: 'gkind' }, n.kind),
    n.label && n.label !== n.kind ? h('span', { class: 'glabel' }, n.label) : null];
  const box = LEAVES.has(n.kind) || !main.length
    ? h('div', { class: 'node s-unreached', 'data-step': n.id, 'data-kind': n.kind, 'data-state': 'unreached' }, ...title)
    : h('div', { class: `group g-${n.kind}${LOOPS.has(n.kind) ? ' loop' : ''}`, 'data-group': n.id },
      h('div', { class: 'ghead' }, ...title), graphBranches(main, ''));
  if (!handlers.length) return box;
  return h('div', { class: 'with-catch' }, box, graphBranches(handlers, 'catch'));
}

// Colours each leaf by the latest record of each of its paths.
function colourGraph(root, latest) {
  const byStep = new Map();
  for (const r of latest.values()) byStep.set(r.step_id, [...(byStep.get(r.step_id) || []), recordState(r)]);
  for (const node of root.querySelectorAll('.node')) {
    const states = byStep.get(node.dataset.step) || [];
    const state = GRAPH_ORDER.find((s) => states.includes(s)) || 'unreached';
    node.className = `node s-${state}`;
    node.dataset.state = state;
    const counts = GRAPH_ORDER.map((s) => [s, states.filter((x) => x === s).length]).filter(([, c]) => c);
    node.title = counts.length ? counts.map(([s, c]) => `${c} ${s}`).join(', ') : 'not reached';
  }
}

const GRAPH_LEGEND = () => h('div', { class: 'legend' }, [...GRAPH_ORDER, 'unreached'].map((s) =>
  h('span', { class: `swatch s-${s}` }, s === 'unreached' ? 'not reached' : s)));

// An inline form answering a waiting `await` step.
function awaitForm(run, path, done) {
  const output = h('textarea', { name: 'output', rows: 3, spellcheck: 'false' }, '{}');
  const reason = h('input', { name: 'message', placeholder: 'reason (for Fail)', spellcheck: 'false' });
  const buttons = [
    h('button', { type: 'submit', class: 'await-complete' }, 'Complete'),
    h('button', { type: 'button', class: 'await-fail danger' }, 'Fail'),
    h('button', { type: 'button', class: 'await-skip' }, 'Skip'),
  ];
  const form = h('form', { class: 'await-form', 'data-path': path }, output,
    h('div', { class: 'await-buttons' }, buttons[0], reason, buttons[1], buttons[2]));
  const url = `/v1/runs/${enc(run)}/steps/${path.split('/').map(enc).join('/')}/actions`;
  const send = async (body, word) => {
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await api(url, { method: 'POST', body });
      notice(`${word} ${path}`);
      done(path);
    } catch (e) { showError(e); }
    buttons.forEach((b) => { b.disabled = false; });
  };
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse(output.value); } catch (e) { showError(new Error(`output is not JSON: ${e.message}`)); return; }
    send({ action: 'complete', output: value }, 'completed');
  });
  buttons[1].addEventListener('click', () => send({ action: 'fail',
    error: { code: 'rejected', message: reason.value.trim() || 'rejected in the web UI' } }, 'failed'));
  buttons[2].addEventListener('click', () => send({ action: 'skip' }, 'skipped'));
  return form;
}

async function runPage(ctx, view, id) {
  const base = `/v1/runs/${enc(id)}`;
  // run: the header's record; latest: path -> newest record known (from
  // unfiltered pages); tl: the timeline's paging.
  const S = { run: null, latest: new Map(), maxSeq: -1, failedOnly: false, answered: new Map() };
  let tl = { last: -1, next: null, shown: new Set(), gen: 0 };

  const head = h('section', { class: 'run-head' }, h('h1', {}, 'Run ', h('code', {}, id)));
  const graph = h('div', { id: 'graph', class: 'graph' }, h('p', { class: 'muted' }, 'loading…'));
  const awaits = h('div', { class: 'await-list' });
  const awaitSection = h('section', { id: 'run-awaits', hidden: true }, h('h2', {}, 'Waiting steps'), awaits);
  const failedOnly = h('input', { type: 'checkbox', id: 'failed-only' });
  const timeline = h('ol', { id: 'timeline' });
  const more = h('button', { id: 'steps-more', type: 'button', hidden: true }, 'More records');
  view.append(head, h('h2', {}, 'Graph'), graph, GRAPH_LEGEND(), awaitSection,
    h('h2', {}, 'Timeline ', h('label', { class: 'check' }, failedOnly, ' failed only')), timeline, more);

  // The header, from the run's record.
  const renderHead = () => {
    const r = S.run;
    const err = r.error?.error;
    head.replaceChildren(
      h('h1', {}, 'Run ', h('code', {}, r.id)),
      h('dl', { class: 'facts' },
        fact('Workflow', workflowLink(r.workflow), ` (version ${r.workflow_version})`),
        fact('State', badge(r.state, { id: 'run-state' })),
        fact('Created', fmtTime(r.created_at)),
        fact('Updated', h('span', { class: 'updated' }, fmtTime(r.updated_at))),
        fact('Records', String(r.step_records ?? '')),
        r.parent && fact('Parent', runLink(r.parent.run), ' at ', h('code', {}, r.parent.path)),
        r.trigger && fact('Trigger', h('code', {}, r.trigger.schedule), ` fired ${fmtTime(r.trigger.fire)}`)),
      h('div', { class: 'actions' },
        h('button', { id: 'run-cancel', type: 'button', class: 'danger', hidden: r.state !== 'running', onclick: cancel }, 'Cancel run')),
      h('div', { class: 'cols' },
        h('div', {}, h('h3', {}, 'Input'), jsonBlock(r.input)),
        'outputs' in r && h('div', {}, h('h3', {}, 'Outputs'), jsonBlock(r.outputs)),
        r.error && h('div', {}, h('h3', {}, 'Error'),
          h('p', { class: 'err' }, `${err?.code}: ${err?.message}`, r.error.step ? ` (step ${r.error.step})` : ''),
          jsonBlock(r.error))));
  };
  const loadHead = async () => { S.run = (await ctx.get(`${base}?steps=false`)).run; renderHead(); };
  // A state from an event, shown before the header is read again.
  const setState = (state) => {
    const el = $('#run-state', head);
    if (!el || !S.run || el.textContent === state) return;
    S.run.state = state;
    el.replaceWith(badge(state, { id: 'run-state' }));
    $('#run-cancel', head).hidden = state !== 'running';
    syncAwaits();
  };
  const cancel = () => ctx.send(`${base}/cancel`, 'POST').then(() => { notice('cancelled'); refresh(); }, ctx.fail);

  // Records: what the graph and the await forms read.
  const learn = (r) => {
    S.maxSeq = Math.max(S.maxSeq, r.seq);
    const key = r.path || r.step_id;
    const old = S.latest.get(key);
    if (!old || old.seq < r.seq) S.latest.set(key, r);
  };
  // Loads one page of the timeline after `after` (-1: the first).
  const loadSteps = async (after) => {
    const gen = tl.gen;
    const p = new URLSearchParams({ limit: '200' });
    if (after >= 0) p.set('after', String(after));
    if (S.failedOnly) p.set('failed', 'true');
    const data = await ctx.get(`${base}/steps?${p}`);
    if (gen !== tl.gen) return; // the filter changed meanwhile
    for (const r of data.steps || []) {
      if (!S.failedOnly) learn(r);
      if (tl.shown.has(r.seq)) continue;
      tl.shown.add(r.seq);
      tl.last = Math.max(tl.last, r.seq);
      timeline.append(recordItem(r));
    }
    tl.next = data.next ?? null;
    more.hidden = tl.next == null;
  };
  // New records: appended when the timeline has reached its end.
  const updateSteps = () => (tl.next == null ? loadSteps(tl.last) : null);
  // The newest records, for the graph, when the timeline does not hold
  // them (filtered, or not paged to its end): at most a few pages.
  const syncTail = async () => {
    const total = S.run?.step_records ?? 0;
    if (!(S.failedOnly || tl.next != null) || total - 1 <= S.maxSeq) return;
    let after = Math.max(S.maxSeq, total - 201);
    for (let i = 0; i < 5 && after != null; i++) {
      const p = new URLSearchParams({ limit: '200' });
      if (after >= 0) p.set('after', String(after));
      const data = await ctx.get(`${base}/steps?${p}`);
      (data.steps || []).forEach(learn);
      after = data.next ?? null;
    }
  };

  // Await forms: one per path whose newest record waits, while running.
  const formOf = (path) => [...awaits.querySelectorAll('form.await-form')].find((f) => f.dataset.path === path);
  const dropForm = (path) => formOf(path)?.closest('.await-item')?.remove();
  const answered = (path) => {
    S.answered.set(path, S.latest.get(path)?.seq);
    dropForm(path);
    awaitSection.hidden = !awaits.childElementCount;
    refresh();
  };
  function syncAwaits() {
    const want = new Map();
    if (S.run?.state === 'running') {
      for (const [path, r] of S.latest) {
        if (r.awaiting && S.answered.get(path) !== r.seq) want.set(path, r);
      }
    }
    for (const f of [...awaits.querySelectorAll('form.await-form')]) {
      if (!want.has(f.dataset.path)) dropForm(f.dataset.path);
    }
    for (const [path, r] of want) {
      if (!formOf(path)) awaits.append(h('div', { class: 'await-item' },
        h('h3', {}, h('code', {}, path), ' ', h('span', { class: 'muted' }, `since ${fmtTime(r.started_at)}`)),
        h('details', {}, h('summary', {}, 'input'), jsonBlock(r.input)),
        awaitForm(id, path, answered)));
    }
    awaitSection.hidden = !awaits.childElementCount;
  }
  const paint = () => { colourGraph(graph, S.latest); syncAwaits(); };

  const loadGraph = async () => {
    try {
      const g = await ctx.get(`${base}/graph`);
      // The workflow's own catch handlers go beside its steps.
      graph.replaceChildren(g.catch?.length
        ? h('div', { class: 'with-catch' }, graphSeq(g.steps), graphBranches(g.catch, 'catch'))
        : graphSeq(g.steps));
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      graph.replaceChildren(h('p', { class: 'muted' }, `no graph: ${e.message}`));
    }
  };

  const refresh = refresher(ctx, async () => { await loadHead(); await updateSteps(); await syncTail(); paint(); });

  failedOnly.addEventListener('change', () => {
    S.failedOnly = failedOnly.checked;
    tl = { last: -1, next: null, shown: new Set(), gen: tl.gen + 1 };
    timeline.replaceChildren();
    more.hidden = true;
    loadSteps(-1).then(syncTail).then(paint).catch(ctx.fail);
  });
  more.addEventListener('click', () => loadSteps(tl.next).then(paint, ctx.fail));

  await Promise.all([loadHead(), loadGraph(), loadSteps(-1)]);
  await syncTail();
  paint();

  stream(ctx, `/v1/events?run=${enc(id)}`, {
    open: (first) => first && refresh(),
    reset: () => refresh(),
    event: (ev) => {
      if (ev.state) setState(ev.state);
      if (ev.event === 'resumed' && ev.step?.path) dropForm(ev.step.path);
      refresh();
    },
  });
}

/* ---- Waiting steps ---- */

async function awaitsPage(ctx, view) {
  const tbody = h('tbody');
  view.append(h('h1', {}, 'Waiting steps'),
    h('table', { id: 'awaits' }, thead(['Run', 'Workflow', 'Step', 'Since', 'Input', 'Answer']), tbody));
  const key = (run, path) => `${run}\n${path}`;
  const row = (a, done) => h('tr', { 'data-run': a.run, 'data-path': a.path },
    td(runLink(a.run)), td(workflowLink(a.workflow)),
    td(code(a.path), a.step_id && a.step_id !== a.path ? h('div', { class: 'muted' }, a.step_id) : null),
    td(fmtTime(a.since)), td(h('details', {}, h('summary', {}, 'input'), jsonBlock(a.input))),
    td(awaitForm(a.run, a.path, done)));

  // Keeps rows that are still waiting (and what is typed in them).
  const load = async () => {
    const data = await ctx.get('/v1/awaits');
    const list = data.awaits || [];
    const want = new Set(list.map((a) => key(a.run, a.path)));
    $('tr.empty', tbody)?.remove();
    for (const tr of [...tbody.rows]) if (!want.has(key(tr.dataset.run, tr.dataset.path))) tr.remove();
    const have = new Set([...tbody.rows].map((tr) => key(tr.dataset.run, tr.dataset.path)));
    for (const a of list) if (!have.has(key(a.run, a.path))) tbody.append(row(a, refresh));
    if (!tbody.rows.length) tbody.append(emptyRow(6, 'No step is waiting.'));
  };
  const refresh = refresher(ctx, load);
  await load();
  stream(ctx, '/v1/events?kind=waiting,resumed,ended', { open: (first) => first && refresh(), reset: refresh, event: refresh });
}

/* ---- Deliveries ---- */

// Resend and clear, for a dead letter; `after(action)` once done.
function deliveryActions(ctx, d, after) {
  if (d.state !== 'error') return null;
  const act = (method, path, word) => ctx.send(path, method).then(() => { notice(word); return after(word); }).catch(ctx.fail);
  const url = `/v1/deliveries/${enc(d.id)}`;
  return [
    h('button', { type: 'button', class: 'resend', onclick: () => act('POST', `${url}/resend`, 'resent') }, 'Resend'),
    ' ',
    h('button', { type: 'button', class: 'clear danger', onclick: () => act('DELETE', url, 'cleared') }, 'Clear'),
  ];
}

async function deliveriesPage(ctx, view) {
  const dead = ctx.query.has('dead');
  const tbody = h('tbody');
  view.append(h('h1', {}, 'Deliveries'),
    h('div', { class: 'tabs' },
      h('button', { id: 'deliveries-all', type: 'button', class: dead ? '' : 'active', onclick: () => { location.hash = '#/deliveries'; } }, 'All'),
      h('button', { id: 'deliveries-dead', type: 'button', class: dead ? 'active' : '', onclick: () => { location.hash = '#/deliveries?dead'; } }, 'Dead letters')),
    h('table', { id: 'deliveries' },
      thead(['Delivery', 'Subscription', 'Seq', 'Run', 'State', 'Attempts', 'Last error', '']), tbody));
  const load = async () => {
    const data = await ctx.get(`/v1/deliveries${dead ? '?state=error' : ''}`);
    const list = data.deliveries || [];
    tbody.replaceChildren(...list.map((d) => h('tr', { 'data-delivery': d.id },
      td(h('a', { class: 'delivery-link', href: `#/deliveries/${enc(d.id)}` }, d.id)),
      td(code(d.subscription)), td(String(d.seq)), td(runLink(d.run)), h('td', { class: 'state' }, badge(d.state)),
      td(String(d.attempts)), h('td', { class: 'last-error' }, d.last_error || ''),
      h('td', { class: 'act' }, deliveryActions(ctx, d, load)))));
    if (!list.length) tbody.append(emptyRow(8, dead ? 'No dead letters.' : 'No deliveries.'));
  };
  await load();
}

async function deliveryPage(ctx, view, id) {
  const box = h('div');
  view.append(h('p', {}, h('a', { href: '#/deliveries' }, '← Deliveries')), h('h1', {}, 'Delivery ', h('code', {}, id)), box);
  const load = async () => {
    const { delivery: d } = await ctx.get(`/v1/deliveries/${enc(id)}`);
    box.replaceChildren(
      h('dl', { class: 'facts' }, fact('State', badge(d.state)), fact('Run', runLink(d.run)),
        fact('Subscription', code(d.subscription)), fact('Attempts', String(d.attempts)),
        fact('Created', fmtTime(d.created_at)), d.next_at && fact('Next', fmtTime(d.next_at)),
        d.last_error && fact('Last error', d.last_error)),
      h('div', { class: 'actions' }, deliveryActions(ctx, d, (word) => {
        if (word === 'cleared') { location.hash = '#/deliveries?dead'; return null; }
        return load();
      })),
      jsonBlock(d));
  };
  await load();
}

/* ---- Schedules ---- */

async function schedulesPage(ctx, view) {
  const tbody = h('tbody');
  view.append(h('h1', {}, 'Schedules'),
    h('table', { id: 'schedules' }, thead(['Trigger', 'Workflow', 'Cron', 'Next fire', 'Paused', 'Last run', '']), tbody));
  const toggle = async (s) => {
    // The key is `<workflow>/<trigger>`.
    const trigger = s.key.startsWith(`${s.workflow}/`) ? s.key.slice(s.workflow.length + 1) : s.key.split('/').slice(1).join('/');
    const action = s.paused ? 'resume' : 'pause';
    try {
      await ctx.send(`/v1/schedules/${enc(s.workflow)}/${enc(trigger)}/${action}`, 'POST');
      notice(`${action}d`);
      await load();
    } catch (e) { ctx.fail(e); }
  };
  const load = async () => {
    const data = await ctx.get('/v1/schedules');
    const list = data.schedules || [];
    tbody.replaceChildren(...list.map((s) => h('tr', { 'data-schedule': s.key },
      td(code(s.key)), td(workflowLink(s.workflow)), td(code(s.spec?.cron || ''), s.spec?.timezone ? ` ${s.spec.timezone}` : ''),
      td(s.next_fire ? fmtTime(s.next_fire) : '—'), h('td', { class: 'paused' }, s.paused ? 'yes' : 'no'),
      td(s.last_run ? runLink(s.last_run) : ''),
      td(h('button', { type: 'button', class: s.paused ? 'resume' : 'pause', onclick: () => toggle(s) },
        s.paused ? 'Resume' : 'Pause')))));
    if (!list.length) tbody.append(emptyRow(7, 'No schedules.'));
  };
  await load();
}

/* ---- Plugins ---- */

async function pluginsPage(ctx, view) {
  const data = await ctx.get('/v1/plugins');
  const list = data.plugins || [];
  const schema = (title, s) => h('div', {}, h('h4', {}, title), s == null ? h('p', { class: 'muted' }, 'not published') : jsonBlock(s));
  view.append(h('h1', {}, 'Plugins'),
    h('table', { id: 'plugins' }, thead(['Name', 'Version', 'Digest', 'Size', 'Added', 'Description', 'Schemas']),
      h('tbody', {}, list.map((p) => h('tr', { 'data-plugin': `${p.name}@${p.version}` },
        td(code(p.name), p.shared ? h('span', { class: 'tag' }, 'shared') : null), td(p.version),
        td(code(shortDigest(p.digest), p.digest)), td(fmtBytes(p.size)), td(fmtTime(p.added_at)), td(p.description || ''),
        td(h('details', {}, h('summary', {}, 'schemas'), schema('Input', p.input_schema), schema('Output', p.output_schema))))),
      list.length ? null : emptyRow(7, 'No plugins.'))));
}

/* ---- Workflows, revisions and their diff ---- */

async function workflowsPage(ctx, view) {
  const data = await ctx.get('/v1/workflows');
  const list = data.workflows || [];
  view.append(h('h1', {}, 'Workflows'),
    h('table', { id: 'workflows' }, thead(['Workflow', 'Version', 'Revision', 'Digest', 'Steps', 'Description', '']),
      h('tbody', {}, list.map((w) => h('tr', { 'data-workflow': w.id },
        td(workflowLink(w.id)), td(String(w.version ?? '')), td(String(w.revision ?? '')),
        td(code(shortDigest(w.digest), w.digest)), td(String(w.steps?.length ?? '')), td(w.description || ''),
        td(h('a', { href: `#/runs?workflow=${enc(w.id)}` }, 'runs')))),
      list.length ? null : emptyRow(7, 'No workflows.'))));
}

// A line diff of `a` to `b` by longest common subsequence: [op, line]
// with op ' ', '-' or '+'.
function lineDiff(a, b) {
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const A = a.slice(pre, a.length - suf), B = b.slice(pre, b.length - suf);
  const out = a.slice(0, pre).map((l) => [' ', l]);
  const n = A.length, m = B.length;
  if (n * m > 4e6) { // too large for the table: all out, all in
    out.push(...A.map((l) => ['-', l]), ...B.map((l) => ['+', l]));
  } else {
    const w = m + 1;
    const L = new Uint32Array((n + 1) * w); // L[i][j]: LCS of A[i..], B[j..]
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        L[i * w + j] = A[i] === B[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (A[i] === B[j]) { out.push([' ', A[i]]); i++; j++; }
      else if (L[(i + 1) * w + j] >= L[i * w + j + 1]) out.push(['-', A[i++]]);
      else out.push(['+', B[j++]]);
    }
    while (i < n) out.push(['-', A[i++]]);
    while (j < m) out.push(['+', B[j++]]);
  }
  a.slice(a.length - suf).forEach((l) => out.push([' ', l]));
  return out;
}

async function workflowPage(ctx, view, id) {
  const revision = ctx.query.get('revision');
  const base = `/v1/workflows/${enc(id)}`;
  const data = await ctx.get(revision ? `${base}?revision=${enc(revision)}` : base);
  const w = data.workflow;
  const versions = data.versions || [];
  const revs = versions.map((v) => v.revision);
  const option = (r, chosen) => h('option', { value: String(r), selected: r === chosen }, `revision ${r}`);
  const from = h('select', { id: 'diff-from' }, revs.map((r) => option(r, Math.max(revs[0] ?? 1, w.revision - 1))));
  const to = h('select', { id: 'diff-to' }, revs.map((r) => option(r, w.revision)));
  const diff = h('pre', { id: 'diff', class: 'diff' });
  const form = h('form', { id: 'diff-form', class: 'filters' }, 'Diff ', from, ' → ', to, ' ',
    h('button', { id: 'diff-show', type: 'submit' }, 'Show diff'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const [a, b] = await Promise.all([from.value, to.value].map((r) => ctx.get(`${base}?revision=${enc(r)}`)));
      const lines = lineDiff(a.workflow.source.split(/\r?\n/), b.workflow.source.split(/\r?\n/));
      diff.innerHTML = lines.map(([op, line]) => (op === ' '
        ? `<span class="same">  ${esc(line)}</span>`
        : `<span class="${op === '+' ? 'add' : 'del'}">${op} ${esc(line)}</span>`)).join('\n');
      if (!lines.some(([op]) => op !== ' ')) diff.prepend(h('span', { class: 'muted' }, '(no changes)\n'));
    } catch (e) { ctx.fail(e); }
  });

  view.append(h('p', {}, h('a', { href: '#/workflows' }, '← Workflows')),
    h('h1', {}, 'Workflow ', h('code', {}, w.id), ' ', h('a', { class: 'small', href: `#/runs?workflow=${enc(w.id)}` }, 'runs')),
    h('dl', { class: 'facts' }, fact('Revision', String(w.revision), w.served ? ' (served)' : ' (not served)'),
      fact('Version', String(w.version)), fact('Digest', code(w.digest)), fact('Deployed', fmtTime(w.deployed_at)),
      w.origin && fact('Origin', code(w.origin))),
    h('h2', {}, 'Revisions'),
    h('table', { id: 'revisions' }, thead(['Revision', 'Version', 'Digest', 'Deployed', 'Origin']),
      h('tbody', {}, [...versions].reverse().map((v) => h('tr', { 'data-revision': String(v.revision), class: v.revision === w.revision ? 'current' : '' },
        td(h('a', { href: `#/workflows/${enc(id)}?revision=${v.revision}` }, String(v.revision))),
        td(String(v.version)), td(code(shortDigest(v.digest), v.digest)), td(fmtTime(v.deployed_at)),
        td(code(v.origin || '')))))),
    h('h2', {}, `Source (revision ${w.revision}${w.format ? `, ${w.format}` : ''})`),
    h('pre', { id: 'source', class: 'source' }, w.source ?? ''),
    h('h2', {}, 'Compare revisions'), form, diff);
}

/* ---- Start ---- */

function init() {
  const token = $('#token'), tenant = $('#tenant');
  token.value = setting('weft.token');
  tenant.value = setting('weft.tenant');
  $('#auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    saveSetting('weft.token', token.value.trim());
    saveSetting('weft.tenant', tenant.value.trim());
    render();
    notice('saved');
  });
  $('#error').addEventListener('click', hideError);
  window.addEventListener('hashchange', render);
  render();
}

init();
