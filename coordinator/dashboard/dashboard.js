// SPDX-License-Identifier: Apache-2.0
// The dashboard's view of /api/status (ClusterStatus as JSON, field names as
// in build.proto) and /api/build (one BuildRecord with its spans). Every text
// from the coordinator goes in as textContent, never as markup.
'use strict';

const GiB = 1024 * 1024 * 1024;

function bytes(n) {
  n = Number(n || 0);
  if (n >= GiB) return (n / GiB).toFixed(1) + ' GiB';
  if (n >= 1024 * 1024) return (n / 1024 / 1024).toFixed(0) + ' MiB';
  return n + ' B';
}

function seconds(ms) {
  ms = Number(ms || 0);
  if (ms < 100000) return (ms / 1000).toFixed(1) + ' s';
  const s = Math.round(ms / 1000);
  return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function bar(used, reserved, cap) {
  const outer = el('div', 'bar');
  const share = (n) => (cap > 0 ? Math.min(100, (100 * Number(n || 0)) / cap) : 0) + '%';
  const r = el('div', 'reserved');
  r.style.width = share(Math.max(Number(used || 0), Number(reserved || 0)));
  const u = el('div', 'used');
  u.style.width = share(used);
  outer.append(r, u);
  outer.title = bytes(used) + ' in use, ' + bytes(reserved) + ' reserved of ' + bytes(cap);
  return outer;
}

function renderWorkers(status) {
  const box = document.getElementById('workers');
  box.replaceChildren();
  const workers = (status.workers || []).slice().sort((a, b) => a.name.localeCompare(b.name));
  if (workers.length === 0) box.append(el('p', '', 'No worker is connected.'));
  for (const w of workers) {
    const card = el('div', 'worker');
    card.dataset.worker = w.name;
    // Where its toolkit came from: installed on it, or served by the
    // coordinator (toolkitSource says how it was fetched).
    card.dataset.toolkit = w.toolkitSource ? 'served' : 'installed';
    const toolchain = w.toolchain || {};
    const version = (t) => t.nvccVersion || t.nvccRelease || '?';
    // Its own toolkit's nvcc, then those of the further served toolkits.
    const nvcc = 'nvcc ' + [toolchain].concat(w.moreToolchains || []).map(version).join(' and ');
    const head = el('div', 'head');
    head.append(el('span', 'name', w.name),
                bar(w.memoryUsedBytes, w.reservedBytes, Number(w.memoryCapBytes || 0)),
                el('span', '', bytes(w.memoryUsedBytes) + ' in use, ' + bytes(w.reservedBytes) +
                   ' reserved of ' + bytes(w.memoryCapBytes)),
                el('span', '', 'slots ' + (w.runningTasks || 0) + '/' + (w.slots || 0)));
    const toolkit = el('span', 'toolkit', w.toolkitSource ? nvcc + ', fetched from the coordinator'
                                                          : nvcc + ', installed');
    toolkit.title = w.toolkitSource || 'the toolkit installed on the worker';
    head.append(toolkit);
    card.append(head);
    for (const u of (status.running || []).filter((u) => u.workerName === w.name)) {
      const row = el('div', 'unit');
      row.dataset.unit = u.unitName;
      const elapsed = Number(u.elapsedMs || 0);
      const predicted = Number(u.predictedWallMs || 0);
      const progress = el('div', 'progress' + (predicted > 0 && elapsed > predicted ? ' late' : ''));
      const fill = el('div');
      fill.style.width = (predicted > 0 ? Math.min(100, (100 * elapsed) / predicted) : 100) + '%';
      progress.append(fill);
      row.append(el('span', 'uname', u.unitName), progress,
                 el('span', '', seconds(elapsed) + ' of ~' + seconds(predicted)),
                 el('span', '', 'reserved ' + bytes(u.reservedBytes) + ' (' +
                    (u.predictionSource || '') + ')'));
      card.append(row);
    }
    box.append(card);
  }
  // Worker names revoked (distcc-cuda-coordinator revoke, or a cross-check's
  // quarantine): refused, their cached results dropped.
  for (const r of status.revokedWorkers || []) {
    const card = el('div', 'worker revoked');
    card.dataset.revoked = r.name;
    const since = new Date(Number(r.sinceUnixSeconds || 0) * 1000).toISOString();
    const head = el('div', 'head');
    head.append(el('span', 'name', r.name),
                el('span', '', 'revoked since ' + since.slice(0, 19).replace('T', ' ') + ' UTC: ' +
                   (r.reason || 'no reason given')));
    card.append(head);
    box.append(card);
  }
}

function renderBuilds(status) {
  const body = document.querySelector('#builds tbody');
  body.replaceChildren();
  const now = Date.now() * 1000;
  for (const b of status.builds || []) {
    const row = el('tr');
    row.dataset.build = b.buildId;
    const end = b.outcome === 'running' ? now : Number(b.finishedUnixMicros || 0);
    const took = (end - Number(b.startedUnixMicros || 0)) / 1000;
    for (const text of [b.buildId.slice(-8), b.name, b.outcome,
                        (b.unitsDone || 0) + '/' + (b.unitsTotal || 0), b.unitsCompiled || 0,
                        b.unitsCached || 0, b.unitsFailed || 0, seconds(took)]) {
      row.append(el('td', '', String(text)));
    }
    row.addEventListener('click', () => showTimeline(b.buildId));
    body.append(row);
  }
}

async function showTimeline(id) {
  const answer = await fetch('/api/build?id=' + encodeURIComponent(id));
  if (!answer.ok) {
    document.getElementById('timeline-section').hidden = false;
    document.getElementById('timeline-title').textContent = id + ': ' + (await answer.text());
    return;
  }
  const build = await answer.json();
  document.getElementById('timeline-section').hidden = false;
  document.getElementById('timeline-title').textContent =
      (build.name || '') + ' (' + build.buildId.slice(-8) + ')';
  const spans = (build.spans || []).map((s) => ({
    name: s.unitName, worker: s.workerName || 'cache', cached: !!s.cached, failed: !!s.failed,
    start: Number(s.leasedUnixMicros || s.finishedUnixMicros || 0),
    end: Number(s.finishedUnixMicros || 0),
  }));
  spans.sort((a, b) => a.start - b.start);
  const t0 = Math.min(...spans.map((s) => s.start), Number(build.startedUnixMicros || 0));
  const t1 = Math.max(...spans.map((s) => s.end), t0 + 1);
  const width = 900, left = 260, row = 16;
  const svgNs = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(svgNs, 'svg');
  svg.setAttribute('width', left + width + 20);
  svg.setAttribute('height', spans.length * row + 24);
  spans.forEach((s, i) => {
    const label = document.createElementNS(svgNs, 'text');
    label.setAttribute('x', 4);
    label.setAttribute('y', i * row + 12);
    label.textContent = s.name + ' · ' + s.worker;
    const rect = document.createElementNS(svgNs, 'rect');
    const x = left + ((s.start - t0) / (t1 - t0)) * width;
    rect.setAttribute('x', x);
    rect.setAttribute('y', i * row + 2);
    rect.setAttribute('width', Math.max(2, ((s.end - s.start) / (t1 - t0)) * width));
    rect.setAttribute('height', row - 4);
    rect.setAttribute('class', s.failed ? 'failed' : s.cached ? 'cached' : 'compiled');
    rect.setAttribute('fill', s.failed ? '#d9534f' : s.cached ? '#5cb85c' : '#3c7dd9');
    const tip = document.createElementNS(svgNs, 'title');
    tip.textContent = s.name + ': ' + seconds((s.end - s.start) / 1000);
    rect.append(tip);
    svg.append(label, rect);
  });
  const axis = document.createElementNS(svgNs, 'text');
  axis.setAttribute('x', left);
  axis.setAttribute('y', spans.length * row + 18);
  axis.textContent = '0 … ' + seconds((t1 - t0) / 1000) +
      (build.spansLeftOut ? ' (' + build.spansLeftOut + ' more units not drawn)' : '');
  svg.append(axis);
  document.getElementById('timeline').replaceChildren(svg);
}

async function refresh() {
  try {
    const answer = await fetch('/api/status', {cache: 'no-store'});
    if (!answer.ok) throw new Error('status ' + answer.status);
    const status = await answer.json();
    document.getElementById('summary').textContent =
        (status.workers || []).length + ' workers · ' + (status.runningUnits || 0) +
        ' units running · ' + (status.queuedUnits || 0) + ' queued';
    document.getElementById('queue').textContent =
        (status.queuedUnits || 0) + ' units queued, ~' +
        seconds(status.queuedPredictedWallMs) + ' of predicted work';
    renderWorkers(status);
    renderBuilds(status);
    document.getElementById('updated').textContent =
        'updated ' + new Date().toLocaleTimeString();
  } catch (error) {
    document.getElementById('summary').textContent = 'no answer from the coordinator: ' + error;
  }
}

refresh();
setInterval(refresh, 1000);
// A link to one build's timeline: /?build=ID.
const linked = new URLSearchParams(window.location.search).get('build');
if (linked) showTimeline(linked);
