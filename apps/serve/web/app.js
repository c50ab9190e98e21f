// diffq serve's web page: a form over POST /v1/jobs, live progress from GET /v1/jobs/{id}/events (server-sent
// events read with fetch() so that the API key travels in a header, never in a URL), and a gallery of this
// session's results. No framework, no build step. The API is described in docs/serve.md.
'use strict';

const $ = (sel, root = document) => root.querySelector(sel);
const KEY_STORE = 'diffq.apiKey';        // localStorage: the API key, when the server asks for one
const JOBS_STORE = 'diffq.sessionJobs';  // sessionStorage: this tab's job ids, so a reload keeps the gallery
const PARAM_FIELDS = ['prompt', 'negative_prompt', 'model', 'width', 'height', 'steps', 'guidance', 'seed', 'frames'];
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

let models = [];  // GET /v1/models -> data

// ---- HTTP ---------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || (typeof body === 'string' && body) || `HTTP ${status}`);
    this.status = status;
    this.field = e.field;
    this.limit = e.limit;
  }
}

function authHeaders() {
  const key = localStorage.getItem(KEY_STORE);
  return key ? { Authorization: `Bearer ${key}` } : {};
}

// fetch() with the stored key; a 401 asks for the key and retries; a non-2xx status throws ApiError.
async function api(path, opts = {}) {
  for (;;) {
    const res = await fetch(path, { ...opts, headers: { ...(opts.headers || {}), ...authHeaders() } });
    if (res.status === 401) {
      const hadKey = !!localStorage.getItem(KEY_STORE);
      if (await askKey(hadKey)) continue;
      throw new ApiError(401, await readBody(res));
    }
    if (!res.ok) throw new ApiError(res.status, await readBody(res));
    return res;
  }
}

async function readBody(res) {
  const text = await res.text().catch(() => '');
  try { return JSON.parse(text); } catch { return text.slice(0, 300); }
}

const apiJson = async (path, opts) => (await api(path, opts)).json();

// ---- the API key dialog ---------------------------------------------------------------------------------

let keyPrompt = null;  // one dialog at a time; concurrent 401s wait for the same answer

function askKey(rejected) {
  if (keyPrompt) return keyPrompt;
  const dlg = $('#key-dialog');
  $('#key-message').textContent = rejected
    ? 'The server rejected the stored API key. Enter the key it was started with (diffq serve --api-key).'
    : 'This server needs an API key (diffq serve --api-key).';
  $('#api-key').value = '';
  dlg.returnValue = '';
  keyPrompt = new Promise((resolve) => {
    dlg.addEventListener('close', () => {
      keyPrompt = null;
      const key = $('#api-key').value.trim();
      if (dlg.returnValue === 'ok' && key) {
        localStorage.setItem(KEY_STORE, key);
        $('#key-button').hidden = false;
        resolve(true);
      } else {
        resolve(false);
      }
    }, { once: true });
  });
  dlg.showModal();
  return keyPrompt;
}

// ---- server-sent events over fetch() ------------------------------------------------------------------

// Reads a text/event-stream body and calls onEvent(name, data) per event (data JSON-parsed when it parses).
// Follows the SSE rules: lines end in \n, \r\n or \r; "event:" / "data:" (several join with \n) / "id:";
// lines starting with ":" are comments; a blank line dispatches.
async function readEventStream(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = '', name = '', data = [];
  const dispatch = () => {
    if (data.length) {
      const raw = data.join('\n');
      let parsed = raw;
      try { parsed = JSON.parse(raw); } catch { /* plain text data */ }
      onEvent(name || 'message', parsed);
    }
    name = ''; data = [];
  };
  const line = (l) => {
    if (l === '') return dispatch();
    if (l[0] === ':') return;
    const c = l.indexOf(':');
    const field = c < 0 ? l : l.slice(0, c);
    let value = c < 0 ? '' : l.slice(c + 1);
    if (value[0] === ' ') value = value.slice(1);
    if (field === 'event') name = value;
    else if (field === 'data') data.push(value);
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let m;
      // keep a trailing \r: it may be the first half of \r\n
      while ((m = /\r\n|\n|\r(?=[^\n])/.exec(buf))) {
        line(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

// ---- jobs -----------------------------------------------------------------------------------------------

const fmtSeconds = (s) => {
  if (s == null || !isFinite(s)) return '';
  if (s < 10) return `${Math.max(0, s).toFixed(1)} s`;
  s = Math.round(s);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
};

function rememberJob(id) {
  const ids = JSON.parse(sessionStorage.getItem(JOBS_STORE) || '[]');
  if (!ids.includes(id)) ids.push(id);
  sessionStorage.setItem(JOBS_STORE, JSON.stringify(ids));
}

class JobView {
  constructor(id, params) {
    this.id = id;
    this.params = params;
    this.li = $('#job-template').content.firstElementChild.cloneNode(true);
    this.li.dataset.jobId = id;
    this.bar = $('.job-progress', this.li);
    this.text = $('.job-text', this.li);
    this.preview = $('.preview', this.li);
    this.cancelButton = $('.cancel', this.li);
    $('.job-prompt', this.li).textContent = params.prompt || '';
    $('.job-prompt', this.li).title = params.prompt || '';
    this.cancelButton.addEventListener('click', () => this.cancel());
    this.setSteps(0, params.steps || 1);
    $('#jobs').prepend(this.li);
    this.finished = false;
  }

  setSteps(step, steps) {
    // setAttribute (not only the property): the value shows in the DOM for tests and tools
    this.bar.setAttribute('max', String(Math.max(1, steps)));
    this.bar.setAttribute('value', String(step));
  }

  onEvent(name, d) {
    if (this.finished) return;
    switch (name) {
      case 'queued':
        this.text.textContent = d.position > 1 ? `queued: number ${d.position} in line` : 'queued: next in line';
        break;
      case 'step': {
        this.setSteps(d.step, d.steps);
        const eta = d.eta_s != null ? ` · ETA ${fmtSeconds(d.eta_s)}` : '';
        const el = d.elapsed_s != null ? ` · ${fmtSeconds(d.elapsed_s)} elapsed` : '';
        this.text.textContent = `step ${d.step} / ${d.steps}${eta}${el}`;
        if (d.preview) { this.preview.src = d.preview; this.preview.hidden = false; }
        break;
      }
      case 'done':
        this.finish('completed', d.result_url);
        break;
      case 'error':
        this.finish('failed', null, d.message || String(d));
        break;
      case 'cancelled':
        this.finish('cancelled');
        break;
    }
  }

  // Follows the job to its end: the event stream, reopened (after a look at the job's state) if it drops.
  async follow() {
    for (let attempt = 0; !this.finished; ++attempt) {
      // A watchdog: when no event came for a while, a look at the job's state ends a stream that missed it.
      const abort = new AbortController();
      let lastEvent = Date.now();
      const watchdog = setInterval(async () => {
        if (Date.now() - lastEvent < 10000) return;
        lastEvent = Date.now();
        try {
          const j = await apiJson(`/v1/jobs/${encodeURIComponent(this.id)}`);
          if (TERMINAL.has(j.status)) abort.abort();
        } catch { /* the stream's own error handling decides */ }
      }, 2000);
      try {
        const res = await api(`/v1/jobs/${encodeURIComponent(this.id)}/events`,
                              { headers: { Accept: 'text/event-stream' }, signal: abort.signal });
        await readEventStream(res, (n, d) => { lastEvent = Date.now(); this.onEvent(n, d); });
      } catch (e) {
        if (e instanceof ApiError && (e.status === 404 || e.status === 401)) {
          return this.finish('failed', null, e.message);
        }
      } finally {
        clearInterval(watchdog);
      }
      if (this.finished) return;
      // The stream ended without a final event: ask for the job's state, then reconnect after a pause.
      try {
        const j = await apiJson(`/v1/jobs/${encodeURIComponent(this.id)}`);
        if (TERMINAL.has(j.status)) return this.finish(j.status, j.result_url, j.error && (j.error.message || j.error));
      } catch (e) {
        if (e instanceof ApiError && e.status === 404) return this.finish('failed', null, e.message);
      }
      await new Promise((r) => setTimeout(r, Math.min(8000, 500 * 2 ** attempt)));
    }
  }

  async cancel() {
    this.cancelButton.disabled = true;
    this.text.textContent = 'cancelling…';
    try {
      await api(`/v1/jobs/${encodeURIComponent(this.id)}`, { method: 'DELETE' });
    } catch (e) {
      this.cancelButton.disabled = false;
      showError(e);
    }
  }

  async finish(status, resultUrl, message) {
    if (this.finished) return;
    this.finished = true;
    this.cancelButton.hidden = true;
    this.li.classList.add(status);
    if (status === 'completed') {
      this.setSteps(Number(this.bar.getAttribute('max')), Number(this.bar.getAttribute('max')));
      this.text.textContent = 'done';
      await addResult(this.id, resultUrl, this.params).catch(showError);
      this.li.remove();
    } else if (status === 'cancelled') {
      this.text.textContent = 'cancelled';
      setTimeout(() => this.li.remove(), 4000);
    } else {
      this.text.textContent = `failed: ${message || 'unknown error'}`;
    }
  }
}

// ---- the gallery ----------------------------------------------------------------------------------------

async function addResult(id, resultUrl, params) {
  let job = null;
  try { job = await apiJson(`/v1/jobs/${encodeURIComponent(id)}`); } catch { /* keep what we sent */ }
  const p = { ...params, ...((job && job.params) || {}) };
  if (job && job.model && !p.model) p.model = job.model;
  const url = resultUrl || (job && job.result_url) || `/v1/jobs/${encodeURIComponent(id)}/result`;
  const res = await api(url);  // with the key: <img src> could not send it
  const blob = await res.blob();
  const isVideo = (job && job.kind === 'video') || blob.type.startsWith('video/');
  const src = URL.createObjectURL(blob);

  const fig = document.createElement('figure');
  fig.className = 'result';
  fig.dataset.jobId = id;
  let media;
  if (isVideo) {
    media = document.createElement('video');
    Object.assign(media, { controls: true, loop: true, muted: true, playsInline: true, src });
  } else {
    media = document.createElement('img');
    media.alt = p.prompt || 'generated image';
    media.src = src;
  }
  fig.append(media);

  const cap = document.createElement('figcaption');
  const prompt = document.createElement('p');
  prompt.className = 'p';
  prompt.textContent = p.prompt || '';
  cap.append(prompt);
  const dl = document.createElement('dl');
  const add = (k, v) => {
    if (v === undefined || v === null || v === '') return;
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = String(v);
    dl.append(dt, dd);
  };
  add('negative', p.negative_prompt);
  add('model', p.model);
  add('size', p.width && p.height ? `${p.width}×${p.height}` : '');
  add('steps', p.steps);
  add('guidance', p.guidance);
  add('seed', p.seed);
  if (isVideo) add('frames', p.frames);
  const t = job && job.timings;
  if (t) {
    const total = t.running_s ?? t.total_s;
    if (total != null) add('time', fmtSeconds(total));
  }
  cap.append(dl);

  const actions = document.createElement('div');
  actions.className = 'actions';
  const save = document.createElement('a');
  save.href = src;
  save.download = `diffq-${id}.${isVideo ? 'mp4' : 'png'}`;
  save.textContent = 'Download';
  const reuse = document.createElement('button');
  reuse.type = 'button';
  reuse.textContent = 'Use these settings';
  reuse.addEventListener('click', () => fillForm(p));
  actions.append(save, reuse);
  cap.append(actions);
  fig.append(cap);

  $('#gallery').prepend(fig);
  $('#gallery-empty').hidden = true;
}

// ---- the form -------------------------------------------------------------------------------------------

function showError(e) {
  const box = $('#error');
  document.querySelectorAll('.invalid').forEach((el) => {
    el.classList.remove('invalid');
    el.removeAttribute('aria-invalid');
  });
  if (!e) { box.hidden = true; box.textContent = ''; return; }
  let msg = e.message || String(e);
  if (e.status === 429) msg = `The queue is full, try again shortly. (${msg})`;
  if (e.limit !== undefined && e.limit !== null && !msg.includes(String(e.limit))) msg += ` (limit: ${e.limit})`;
  box.textContent = msg;
  box.hidden = false;
  const field = e.field && document.getElementById(String(e.field).replace(/^cfg_scale$/, 'guidance'));
  if (field) {
    field.classList.add('invalid');
    field.setAttribute('aria-invalid', 'true');
    field.focus();
  }
}

const currentModel = () => models.find((m) => m.id === $('#model').value);

function applyModel(m) {
  const video = !!m && m.kind === 'video';
  $('#frames-row').hidden = !video;
  const d = (m && m.defaults) || {};
  for (const k of ['width', 'height', 'steps', 'guidance', 'frames']) {
    if (d[k] !== undefined && d[k] !== null) $('#' + k).value = d[k];
  }
}

function fillForm(p) {
  if (p.model && models.some((m) => m.id === p.model)) {
    $('#model').value = p.model;
    $('#frames-row').hidden = currentModel().kind !== 'video';
  }
  for (const k of PARAM_FIELDS) {
    if (k !== 'model' && p[k] !== undefined && p[k] !== null) $('#' + k).value = p[k];
  }
  window.scrollTo({ top: 0, behavior: 'smooth' });
}

function readForm() {
  const num = (id) => {
    const v = $('#' + id).value.trim();
    return v === '' ? undefined : Number(v);
  };
  const body = {
    prompt: $('#prompt').value.trim(),
    width: num('width'), height: num('height'), steps: num('steps'), guidance: num('guidance'), seed: num('seed'),
  };
  const neg = $('#negative_prompt').value.trim();
  if (neg) body.negative_prompt = neg;
  const m = currentModel();
  if (m) body.model = m.id;
  if (m && m.kind === 'video') body.frames = num('frames');
  for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
  return body;
}

async function submit(ev) {
  ev.preventDefault();
  showError(null);
  const body = readForm();
  if (!body.prompt) return showError({ message: 'Write a prompt first.', field: 'prompt' });
  for (const k of ['width', 'height', 'steps', 'guidance', 'seed', 'frames']) {
    if (k in body && !Number.isFinite(body[k])) return showError({ message: `${k} must be a number`, field: k });
  }
  const button = $('#generate');
  button.disabled = true;
  try {
    const job = await apiJson('/v1/jobs', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    rememberJob(job.id);
    const view = new JobView(job.id, body);
    if (job.status === 'queued') view.onEvent('queued', { position: job.position ?? 0 });
    view.follow();
    // one column (a phone): bring the new job's progress into view
    if (window.matchMedia('(max-width: 899px)').matches) view.li.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
  } catch (e) {
    showError(e);
  } finally {
    button.disabled = false;
  }
}

async function loadModels() {
  const sel = $('#model');
  try {
    const r = await apiJson('/v1/models');
    models = (r.data || []).filter((m) => m && m.id);
    sel.replaceChildren(...models.map((m) => {
      const o = document.createElement('option');
      o.value = m.id;
      o.textContent = m.kind === 'video' ? `${m.id} (video)` : m.id;
      return o;
    }));
    sel.disabled = models.length < 2;
    applyModel(models[0]);
    $('#server-status').textContent = models.length ? `${models.length} model${models.length > 1 ? 's' : ''}` : '';
  } catch (e) {
    sel.replaceChildren(new Option('(default)', ''));
    $('#server-status').textContent = 'could not list the models';
    showError(e);
  }
}

// Jobs of this tab from before a reload: completed ones go back into the gallery, live ones are followed.
async function restoreSession() {
  const ids = JSON.parse(sessionStorage.getItem(JOBS_STORE) || '[]');
  for (const id of ids) {
    try {
      const j = await apiJson(`/v1/jobs/${encodeURIComponent(id)}`);
      const params = j.params || {};
      if (j.status === 'completed') await addResult(id, j.result_url, params);
      else if (!TERMINAL.has(j.status)) {
        const view = new JobView(id, params);
        if (j.step) view.setSteps(j.step, j.steps || params.steps || 1);
        view.follow();
      }
    } catch { /* gone from the server (restarted): forget it */ }
  }
}

function init() {
  $('#form').addEventListener('submit', submit);
  $('#seed-random').addEventListener('click', () => {
    $('#seed').value = String(Math.floor(Math.random() * 2 ** 32));
  });
  $('#model').addEventListener('change', () => applyModel(currentModel()));
  $('#prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('#form').requestSubmit();
  });
  const keyButton = $('#key-button');
  keyButton.hidden = !localStorage.getItem(KEY_STORE);
  keyButton.addEventListener('click', () => askKey(false));
  loadModels().then(restoreSession);
}

init();
