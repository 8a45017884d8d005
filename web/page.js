// The page: builds the command line's words from the form, runs them in the WebAssembly
// build of vramscope (src/web), and shows the answer. The URL's hash holds the question.
import { load } from './vramscope.js';

let vs = null;

const $ = (id) => document.getElementById(id);
const PRESETS = ['2.7B', 'small', 'medium', 'large', 'xl', 'Llama-3.2-1B', 'Llama-3.2-3B', 'Llama-3.1-8B', 'Llama-3.1-70B', 'Qwen2.5-7B', 'Mistral-7B-v0.3'];
const GIB = 1024 ** 3;
const gib = (b) => (b / GIB).toFixed(3) + ' GiB';

// Words as a shell splits them, for the simple quoting flags need ('a b' or "a b").
function split(line) {
  const out = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  let m;
  while ((m = re.exec(line))) out.push(m[1] ?? m[2] ?? m[3]);
  return out;
}

function question() {
  return { command: $('command').value, source: $('model-source').value, preset: $('preset').value.trim(), flags: $('flags').value, config: $('config').value };
}

// The command line's words for the form's question; the page runs the meta device.
function words(q) {
  const extra = split(q.flags);
  const sub = q.command === 'compare' ? 'profile' : q.command;
  const w = [sub];
  if (q.source === 'config') w.push('--config', 'config.json');
  else if (q.preset) w.push('--preset', q.preset);
  if ((sub === 'profile') && !extra.includes('--device')) w.push('--device', 'meta');
  if (q.command === 'compare' && !extra.includes('--compare')) w.push('--compare');
  return w.concat(extra);
}

function toHash(q) {
  const p = new URLSearchParams({ command: q.command, flags: q.flags });
  if (q.source === 'config') p.set('config', q.config);
  else p.set('preset', q.preset);
  return '#' + p.toString();
}

function fromHash() {
  const p = new URLSearchParams(location.hash.slice(1));
  if (!p.has('command')) return false;
  $('command').value = p.get('command');
  $('flags').value = p.get('flags') ?? '';
  if (p.has('config')) {
    $('model-source').value = 'config';
    $('config').value = p.get('config');
  } else {
    $('model-source').value = 'preset';
    $('preset').value = p.get('preset') ?? '';
  }
  return true;
}

function table(head, rows) {
  const t = document.createElement('table');
  t.innerHTML = '<tr>' + head.map((h) => `<th>${h}</th>`).join('') + '</tr>';
  for (const r of rows) {
    const tr = t.insertRow();
    for (const c of r) tr.insertCell().textContent = c;
  }
  return t;
}

function showProfile(summary, box) {
  summary.runs.forEach((r, i) => {
    const h = document.createElement('h3');
    h.textContent = `${summary.preset}: context ${r.context_length}, ${r.profile_type}` + (r.rank != null ? `, rank ${r.rank}` : '') + (r.oom ? ` — OOM: ${r.oom}` : '');
    box.append(h);
    const p = document.createElement('p');
    p.className = 'peak';
    p.innerHTML = `peak allocated <b id="peak-allocated-${i}" data-bytes="${r.peak_allocated_bytes}">${gib(r.peak_allocated_bytes)}</b> (${r.peak_allocated_bytes} bytes), ` +
      `peak reserved <b id="peak-reserved-${i}" data-bytes="${r.peak_reserved_bytes}">${gib(r.peak_reserved_bytes)}</b>`;
    box.append(p);
    const pk = r.peak;
    const at = document.createElement('p');
    at.textContent = `The peak is reached in ${pk.peak_phase}, at ${pk.peak_op} in ${pk.peak_scope}. What holds it:`;
    box.append(at);
    box.append(table(['category', 'bytes', 'GiB'], pk.by_category.map(([c, b]) => [c, b, gib(b)])));
    box.append(table(['phase', 'peak allocated', 'GiB'], Object.entries(pk.phase_peaks).map(([ph, b]) => [ph, b, gib(b)])));
  });
}

function showAnswer(q, out, ms, answer) {
  $('answer').hidden = false;
  document.body.dataset.exitCode = out.exit_code;
  $('status').textContent = `exit code ${out.exit_code}, answered in ${ms.toFixed(0)} ms`;
  $('error').hidden = !out.error;
  $('error').textContent = out.error ?? '';
  $('notes').replaceChildren(...out.notes.map((n) => Object.assign(document.createElement('li'), { textContent: 'note: ' + n })));
  $('text').textContent = out.text;
  const box = $('peaks');
  box.replaceChildren();
  if (out.answer && (q.command === 'profile')) showProfile(out.answer, box);
  if (out.answer && q.command === 'fit' && 'answer' in out.answer) {
    const p = document.createElement('p');
    p.className = 'peak';
    p.innerHTML = `fit's answer: <b id="fit-answer" data-value="${out.answer.answer}">${out.answer.answer ?? 'nothing fits'}</b>`;
    box.append(p);
  }
  const dl = $('downloads');
  dl.replaceChildren();
  let report = null;
  for (const f of out.files) {
    const bytes = answer.file(f.name);
    const url = URL.createObjectURL(new Blob([bytes], { type: f.name.endsWith('.html') ? 'text/html' : 'application/octet-stream' }));
    const a = Object.assign(document.createElement('a'), { href: url, download: f.name, textContent: `${f.name} (${f.bytes} bytes)` });
    dl.append(a);
    if (!report && f.name.endsWith('_report.html')) report = url;
  }
  $('report').hidden = !report;
  if (report) $('report').src = report;
}

async function go() {
  const q = question();
  const w = words(q);
  $('line').textContent = 'vramscope ' + w.join(' ');
  history.replaceState(null, '', toHash(q));
  $('share').href = location.href;
  document.body.dataset.state = 'running';
  const files = q.source === 'config' ? { 'config.json': q.config } : {};
  // The console lines time the run where performance.now() does not (tools/bench_web.sh reads
  // them from headless Chromium, whose virtual time stands still during a call).
  console.log('vramscope: run start');
  const t0 = performance.now();
  const answer = await vs.run(w, files);
  const ms = performance.now() - t0;
  console.log('vramscope: run done');
  showAnswer(q, answer.out, ms, answer);
  document.body.dataset.ms = ms.toFixed(1);
  document.body.dataset.state = 'done';
}

async function syncForm() {
  $('config-box').hidden = $('model-source').value !== 'config';
  $('preset-label').hidden = $('model-source').value === 'config';
  const sub = $('command').value === 'compare' ? 'profile' : $('command').value;
  $('help').textContent = await vs.help(sub);
}

async function main() {
  const t0 = performance.now();
  vs = await load();
  document.body.dataset.loadMs = (performance.now() - t0).toFixed(1);
  $('presets').replaceChildren(...PRESETS.map((p) => Object.assign(document.createElement('option'), { value: p })));
  const box = $('config-box');
  box.addEventListener('dragover', (e) => { e.preventDefault(); box.classList.add('drag'); });
  box.addEventListener('dragleave', () => box.classList.remove('drag'));
  box.addEventListener('drop', async (e) => {
    e.preventDefault();
    box.classList.remove('drag');
    const f = e.dataTransfer.files[0];
    if (f) $('config').value = await f.text();
  });
  $('model-source').addEventListener('change', syncForm);
  $('command').addEventListener('change', syncForm);
  $('run').addEventListener('click', () => go());
  $('run').disabled = false;
  $('run').textContent = 'Run';
  const asked = fromHash();
  await syncForm();
  document.body.dataset.state = 'ready';
  if (asked) await go();
}

main().catch((e) => {
  document.body.dataset.state = 'failed';
  $('status').textContent = 'failed to start: ' + e;
  $('answer').hidden = false;
});
