// The operator's page (docs/operations/admin-page.md). It keeps the admin token in this tab's
// sessionStorage, calls the JSON admin API (/v1/admin/…) of its own origin with it and
// draws the answers. No framework, no build step; data reaches the page only through
// textContent, never as HTML.

const TOKEN_KEY = 'orderly.adminToken';
const OPERATOR_KEY = 'orderly.operator';
const REFRESH_MS = 10000;

const $ = (sel, root = document) => root.querySelector(sel);

// el builds an element: attrs sets properties (dataset for data, on* for listeners),
// children are nodes or text.
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e[k] = v;
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ''));
  return e;
}

const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

// api calls an admin route; it throws an Error with the problem's detail on a non-2xx
// answer, and forgets a token the server refuses (401).
async function api(method, path, body) {
  const headers = { Authorization: 'Bearer ' + token() };
  const operator = sessionStorage.getItem(OPERATOR_KEY);
  if (operator) headers['Orderly-Operator'] = operator;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON: reported below */ }
  if (!res.ok) {
    if (res.status === 401) signOut('The server refused the token (401): enter it again.');
    const err = new Error((data && (data.detail || data.title)) || `${method} ${path}: ${res.status}`);
    err.status = res.status;
    throw err;
  }
  return data;
}

function status(msg, isError = false) {
  const s = $('#status');
  s.textContent = msg;
  s.classList.toggle('error', isError);
}

// Durations in ms, shown with their unit.
function duration(ms) {
  const a = Math.abs(ms);
  const round = (x) => Number(x.toFixed(1)); // 2.5 stays 2.5, 60.0 shows as 60
  if (a < 1000) return `${round(ms)} ms`;
  if (a < 120000) return `${round(ms / 1000)} s`;
  if (a < 7200000) return `${Math.round(ms / 60000)} min`;
  if (a < 172800000) return `${round(ms / 3600000)} h`;
  return `${round(ms / 86400000)} d`;
}

const when = (t) => (t ? t.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '');

// section runs a loader for one section, showing its error in the section's .error line.
async function section(id, load) {
  const err = $(`#${id} .error`);
  try {
    await load();
    err.hidden = true;
  } catch (e) {
    err.textContent = e.message;
    err.hidden = false;
  }
}

function fill(tbody, rows, empty, cols) {
  tbody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colSpan: cols, className: 'muted' }, empty))]));
}

function button(label, className, onclick) {
  return el('button', { type: 'button', className, onclick: async (ev) => {
    ev.target.disabled = true;
    try { await onclick(); } catch (e) { status(e.message, true); } finally { ev.target.disabled = false; }
  } }, label);
}

function orderLink(id) {
  return el('a', { href: '#order-section', className: 'mono', onclick: () => showOrder(id) }, id);
}

async function loadOverview() {
  const o = await api('GET', '/v1/admin/overview?deadlines=15');
  fill($('#states tbody'), o.orders_by_state.map((c) => el('tr', {},
    el('td', {}, c.flow), el('td', {}, c.state),
    el('td', { className: 'num', dataset: { count: `${c.flow}/${c.state}` } }, c.count))), 'no orders', 3);
  $('#outbox').textContent = `Outbox: ${o.outbox.pending} pending, ${o.outbox.dead} dead` +
    (o.outbox.pending ? `, oldest pending ${duration(o.outbox.oldest_pending_age_ms)} old` : '');

  fill($('#deadlines tbody'), o.next_deadlines.map((d) => el('tr', {},
    el('td', {}, orderLink(d.order_id)), el('td', {}, d.flow), el('td', {}, d.state), el('td', {}, d.pay_status),
    el('td', {}, when(d.close_at)),
    el('td', { className: d.wake_in_ms < 0 ? 'error' : '' }, d.wake_in_ms < 0 ? `overdue ${duration(-d.wake_in_ms)}` : `in ${duration(d.wake_in_ms)}`))),
  'no open orders', 6);

  drawLateness(o.close_lateness);
}

// drawLateness draws one bar chart per trigger: closes per bucket (the cumulative counts
// of Prometheus, differenced), then those later than the last bucket.
function drawLateness(series) {
  const box = $('#lateness');
  const shown = series.filter((s) => s.count > 0);
  if (!shown.length) {
    box.replaceChildren(el('p', { className: 'muted' }, 'no order closed at its deadline yet'));
    return;
  }
  box.replaceChildren(...shown.map((s) => {
    let prev = 0;
    const rows = s.buckets.map((b) => {
      const n = b.count - prev;
      prev = b.count;
      return [`≤ ${duration(b.le_ms)}`, n];
    });
    rows.push([`> ${duration(s.buckets.at(-1).le_ms)}`, s.count - prev]);
    const top = Math.max(...rows.map(([, n]) => n), 1);
    const grid = el('div', { className: 'bars' });
    for (const [label, n] of rows) {
      const bar = el('div', { className: 'bar' });
      bar.style.width = `${(100 * n) / top}%`;
      grid.append(el('span', { className: 'muted' }, label), el('div', {}, bar), el('span', { className: 'num' }, n));
    }
    return el('div', { dataset: { trigger: s.trigger } },
      el('h3', {}, `${s.trigger}: ${s.count} ${s.count === 1 ? 'close' : 'closes'}, mean ${duration(s.sum_ms / s.count)}`), grid);
  }));
}

async function loadDead() {
  const d = await api('GET', '/v1/admin/outbox/dead?limit=100');
  fill($('#dead tbody'), d.messages.map((m) => el('tr', { dataset: { messageId: m.id } },
    el('td', { className: 'mono' }, m.id), el('td', {}, m.topic), el('td', { className: 'mono' }, m.key),
    el('td', { className: 'num' }, m.attempts), el('td', {}, m.last_error), el('td', {}, duration(m.age_ms)),
    el('td', {},
      button('Re-drive', 'redrive', async () => {
        await api('POST', `/v1/admin/outbox/dead/${m.id}/redrive`);
        status(`Message ${m.id} re-driven: pending again, the relay delivers it.`);
        await refresh();
      }),
      ' ',
      button('Discard…', 'discard', async () => {
        const reason = prompt(`Discard message ${m.id} (${m.topic}, key ${m.key}) for good. Reason (written to the audit):`);
        if (!reason || !reason.trim()) return;
        await api('POST', `/v1/admin/outbox/dead/${m.id}/discard`, { reason: reason.trim() });
        status(`Message ${m.id} discarded.`);
        await refresh();
      })))), 'no dead letters', 7);
}

async function loadSagas() {
  let d;
  try {
    d = await api('GET', '/v1/admin/sagas/stuck?limit=100');
  } catch (e) {
    if (e.status !== 404) throw e;
    fill($('#sagas tbody'), [], 'sagas are not enabled on this server', 7);
    return;
  }
  fill($('#sagas tbody'), d.sagas.map((s) => el('tr', { dataset: { sagaId: s.id } },
    el('td', { className: 'mono' }, s.id), el('td', {}, s.definition), el('td', { className: 'num' }, s.current_step),
    el('td', { className: 'num' }, s.attempts), el('td', {}, s.last_error || ''), el('td', {}, when(s.updated_at)),
    el('td', {}, button('Re-drive', 'redrive', async () => {
      await api('POST', `/v1/admin/sagas/${encodeURIComponent(s.id)}/redrive`);
      status(`Saga ${s.id} re-driven: compensating again from step ${s.current_step}.`);
      await refresh();
    })))), 'no stuck sagas', 7);
}

async function loadGroups() {
  const d = await api('GET', '/v1/admin/groups?state=stuck&limit=100');
  const now = Date.now();
  fill($('#groups tbody'), d.groups.map((g) => el('tr', { dataset: { groupId: g.id } },
    el('td', { className: 'mono' }, g.id), el('td', { className: 'mono' }, g.deal_id), el('td', {}, when(g.deadline_at)),
    el('td', { className: 'num' }, `${g.paid_members} / ${g.min_members}`), el('td', { className: 'num' }, `${g.seats_taken} / ${g.max_members}`),
    el('td', { className: 'error' }, duration(now - Date.parse(g.deadline_at))))), 'no stuck groups', 6);
}

async function loadJobs() {
  const d = await api('GET', '/v1/admin/jobs/runs?limit=20');
  fill($('#jobs tbody'), d.runs.map((r) => el('tr', {},
    el('td', {}, r.job), el('td', { className: 'mono' }, r.instance), el('td', {}, when(r.started_at)),
    el('td', { className: 'num' }, duration(r.duration_ms)), el('td', { className: 'num' }, r.scanned),
    el('td', { className: 'num' }, r.changed),
    el('td', { className: r.outcome === 'ok' ? 'ok' : 'error' }, r.error ? `${r.outcome}: ${r.error}` : r.outcome))), 'no runs yet', 7);
}

function findingsList(findings, withRepair) {
  if (!findings.length) return el('p', { className: 'ok' }, 'no findings: all agree');
  return el('ul', {}, ...findings.map((f) => el('li', { dataset: { kind: f.kind } },
    el('strong', {}, f.kind), ' ', f.order_id ? orderLink(f.order_id) : '', f.sku ? el('span', { className: 'mono' }, ` sku ${f.sku}`) : '',
    `: ${f.detail}`, f.repaired ? el('span', { className: 'ok' }, ' (repaired)') : '',
    f.error ? el('span', { className: 'error' }, ` (repair failed: ${f.error})`) : '',
    withRepair && f.order_id && !f.repaired ? button('Repair', 'repair', () => repairOrder(f.order_id)) : '')));
}

async function repairOrder(id) {
  const r = await api('POST', `/v1/admin/orders/${encodeURIComponent(id)}/reconcile`);
  const n = r.findings.filter((f) => f.repaired).length;
  status(`Order ${id}: ${r.findings.length} finding(s), ${n} repaired now.`);
  await refresh();
}

async function loadReports() {
  const d = await api('GET', '/v1/admin/reconcile/reports?limit=5');
  const box = $('#reports');
  if (!d.reports.length) {
    box.replaceChildren(el('p', { className: 'muted' }, 'no report yet: the reconcile job runs every --reconcile-interval (or run orderly reconcile)'));
    return;
  }
  box.replaceChildren(...d.reports.map((r) => el('div', { className: 'report' },
    el('div', {}, `${when(r.started_at)} on ${r.instance}: ${r.findings} finding(s), ${r.repaired} repaired`),
    findingsList((r.report && r.report.findings) || [], true))));
}

async function showOrder(id) {
  $('#order-id').value = id;
  await section('order-section', async () => {
    const d = await api('GET', `/v1/admin/orders/${encodeURIComponent(id)}`);
    const o = d.order;
    const result = el('div', { id: 'order-findings' });
    $('#order').replaceChildren(
      el('p', {}, el('strong', { className: 'mono' }, o.id), ` ${o.flow}, ${o.state}, pay ${o.pay_status}, ` +
        `${o.amount} ${o.currency} (minor units), user ${o.user_id}, close at ${when(o.close_at)}` +
        (o.closed_at ? `, closed ${when(o.closed_at)} (${o.close_reason})` : '')),
      el('table', { id: 'timeline' },
        el('thead', {}, el('tr', {}, ...['at', 'from', 'to', 'event', 'pay status', 'cause', 'actor', 'trace'].map((h) => el('th', {}, h)))),
        el('tbody', {}, ...d.transitions.map((t) => el('tr', {},
          el('td', {}, when(t.at)), el('td', {}, t.from), el('td', {}, t.to), el('td', {}, t.event),
          el('td', {}, t.pay_status_from && t.pay_status_from !== t.pay_status_to ? `${t.pay_status_from} → ${t.pay_status_to}` : (t.pay_status_to || '')), el('td', {}, t.cause || ''),
          el('td', {}, t.actor), el('td', { className: 'mono' }, t.trace_id || ''))))),
      d.operator_actions.length ? el('p', { className: 'muted' }, 'Operator actions: ' +
        d.operator_actions.map((a) => `${when(a.at)} ${a.operator} ${a.action}${a.reason ? ` (${a.reason})` : ''}`).join('; ')) : '',
      el('p', {},
        button('Check', 'check', async () => {
          const r = await api('GET', `/v1/admin/orders/${encodeURIComponent(id)}/reconcile`);
          result.replaceChildren(findingsList(r.findings, true));
        }), ' ',
        button('Repair', 'repair', async () => {
          const r = await api('POST', `/v1/admin/orders/${encodeURIComponent(id)}/reconcile`);
          result.replaceChildren(findingsList(r.findings, false));
        })),
      result);
  });
}

let timer = 0;

async function refresh() {
  if (!token()) return;
  await Promise.all([
    section('states-section', loadOverview).then(() => {
      // one request feeds three sections: copy its error, if any
      for (const id of ['lateness-section', 'deadlines-section']) {
        $(`#${id} .error`).hidden = $('#states-section .error').hidden;
        $(`#${id} .error`).textContent = $('#states-section .error').textContent;
      }
    }),
    section('dead-section', loadDead),
    section('sagas-section', loadSagas),
    section('groups-section', loadGroups),
    section('jobs-section', loadJobs),
    section('reports-section', loadReports),
  ]);
  $('#updated').textContent = `updated ${new Date().toISOString().replace('T', ' ').slice(0, 19)}Z`;
  document.body.dataset.loaded = String(Number(document.body.dataset.loaded || 0) + 1);
}

function signIn() {
  $('#token-form').hidden = true;
  $('#dashboard').hidden = false;
  $('#refresh').hidden = false;
  $('#sign-out').hidden = false;
  clearInterval(timer);
  timer = setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
  refresh();
}

function signOut(msg) {
  sessionStorage.removeItem(TOKEN_KEY);
  clearInterval(timer);
  $('#dashboard').hidden = true;
  $('#refresh').hidden = true;
  $('#sign-out').hidden = true;
  $('#token-form').hidden = false;
  status(msg || '', Boolean(msg));
}

$('#token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $('#token').value.trim());
  sessionStorage.setItem(OPERATOR_KEY, $('#operator').value.trim());
  $('#token').value = '';
  status('');
  signIn();
});
$('#order-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  showOrder($('#order-id').value.trim());
});
$('#refresh').addEventListener('click', () => refresh());
$('#sign-out').addEventListener('click', () => signOut());
$('#redrive-all').addEventListener('click', async () => {
  if (!confirm('Re-drive every dead letter?')) return;
  try {
    const r = await api('POST', '/v1/admin/outbox/dead/redrive', {});
    status(`${r.redriven} message(s) re-driven.`);
    await refresh();
  } catch (e) { status(e.message, true); }
});

if (token()) signIn();
