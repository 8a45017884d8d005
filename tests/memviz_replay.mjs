// What PyTorch's memory_viz computes for a snapshot pickle, from the viewer's own code, in node
// without a browser: MemoryViz.js's `unpickle` and `annotate_snapshot` (the page's load path),
// then process_alloc_data.js's `process_alloc_data` for the Active Memory Timeline
// (plot_segments=false) and the Active Cached Segment Timeline (plot_segments=true), and the
// Allocator State History's `MemoryView.draw` (reserved and allocated after each event), its
// d3 drawing calls answered by an inert stand-in. Functions are cut out of MemoryViz.js by
// name, verbatim, so a newer viewer is what is run.
// usage: node memviz_replay.mjs VIEWER_DIR FILE.pickle  -> JSON on stdout
import fs from 'node:fs';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [viewer, file] = process.argv.slice(2);
const src = fs.readFileSync(path.join(viewer, 'MemoryViz.js'), 'utf8');

/** The top-level `function NAME(...) {...}` of MemoryViz.js, verbatim. */
function cut(name) {
  const start = src.indexOf(`\nfunction ${name}(`);
  if (start < 0) throw new Error(`MemoryViz.js has no function ${name}`);
  const end = src.indexOf('\n}\n', start);
  return src.slice(start, end + 3);
}

const notes = [];
// PyTorch's own typo (`snapshot.categores`) throws for any snapshot whose entries carry
// categories without 'unknown' (as _profile_to_snapshot's do): the page cannot open those.
// The fix is applied, and said, so the numbers of such files can still be compared.
let annotate = cut('annotate_snapshot');
if (annotate.includes('snapshot.categores.push')) {
  annotate = annotate.replace('snapshot.categores.push', 'snapshot.categories.push');
}
const {scaleLinear} = await import(pathToFileURL(path.join(viewer, 'vendor', 'd3-scale.mjs')).href);
// process_alloc_data.js is an ES module in a folder without "type": "module": loaded as its
// header says node tests load it, the export line stripped.
const pad_src = fs.readFileSync(path.join(viewer, 'process_alloc_data.js'), 'utf8').replace(/^export \{[^}]*\};?\s*$/m, '');
const pad = new Function(`${pad_src}\nreturn {process_alloc_data, isPrivatePoolId, formatSize, format_user_metadata, format_frames, format_forward_frames};`)();

// An inert d3 selection / zoom: every call answers itself; callbacks are never run.
const inert = new Proxy(function () {}, {get: (_t, k) => (k === Symbol.toPrimitive ? () => 0 : inert), apply: () => inert});
const body = [
  'version_space', 'unpickle', 'unpickleData', 'Segment', 'Block', 'MemoryView', 'addStroke', 'removeStroke', 'hashCode',
].map(cut).join('\n') + annotate;
const make = new Function('scaleLinear', 'zoom', 'schemeTableau10', 'process_alloc_data', 'isPrivatePoolId', 'formatSize',
  'format_user_metadata', 'format_frames', 'format_forward_frames',
  `${body}\nreturn {unpickle, annotate_snapshot, MemoryView};`);
const viz = make(scaleLinear, () => inert, [], pad.process_alloc_data, pad.isPrivatePoolId, pad.formatSize,
  pad.format_user_metadata, pad.format_frames, pad.format_forward_frames);

const buf = fs.readFileSync(file);
// unpickle logs its (expected) JSON attempt; stdout carries only the answer.
const log = console.log;
console.log = () => {};
let snap = viz.unpickle(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
console.log = log;
// The viewer needs `segments` and `device_traces`; a legacy bare list of segments, or a
// dict without traces, opens in it only with empty traces added (vramscope's reading too).
if (Array.isArray(snap)) {
  snap = {segments: snap};
  notes.push('bare segment list: wrapped as {segments}');
}
if (!('device_traces' in snap)) {
  const n = Math.max(-1, ...snap.segments.map(s => (typeof s.device === 'number' ? s.device : -1))) + 1;
  snap.device_traces = Array.from({length: Math.max(n, 1)}, () => []);
  notes.push(`no device_traces: ${snap.device_traces.length} empty traces added`);
}
viz.annotate_snapshot(snap);
if (annotate !== cut('annotate_snapshot') && snap.categories.length > 0 && !snap.categories.slice(0, -1).includes('unknown')) {
  notes.push("MemoryViz.js's typo snapshot.categores fixed (the page throws on this file)");
}

// snapshot_change's device list and default device.
const has_segments = {};
for (const s of snap.segments) has_segments[s.device] = true;
const devices = [];
let best = -1, default_device = null;
for (const [i, trace] of snap.device_traces.entries()) {
  if (trace.length > 0 || i in has_segments) {
    devices.push(i);
    if (trace.length > best) { best = trace.length; default_device = i; }
  }
}

const num = x => (typeof x === 'bigint' ? Number(x) : x);
const peak = d => d.max_at_time.reduce((m, x) => (x > m ? x : m), 0);
const out = {default_device, notes, devices: []};
for (const device of devices) {
  const active = pad.process_alloc_data(snap, device, false, 15000, false);
  const segs = pad.process_alloc_data(snap, device, true, 15000, false);
  const r = {
    device,
    events: snap.device_traces[device].length,
    active_peak: num(peak(active)),
    active_max_size: num(active.max_size),
    segment_timeline_peak: num(peak(segs)),
  };
  // Allocator State History: reserved/allocated after each event (the panel's numbers).
  try {
    const view = viz.MemoryView(inert, {register: () => {}}, snap, device);
    const n = snap.device_traces[device].length;
    let reserved_peak = 0;
    let last = null;
    for (let i = -1; i < n; i++) {
      const [reserved, allocated] = view.draw(i);
      reserved_peak = Math.max(reserved_peak, num(reserved));
      last = [num(reserved), num(allocated)];
    }
    r.state_reserved_peak = reserved_peak;
    r.state_reserved_end = last[0];
    r.state_allocated_end = last[1];
  } catch (e) {
    r.state_error = String(e);
  }
  out.devices.push(r);
}
process.stdout.write(JSON.stringify(out, null, 1) + '\n');
