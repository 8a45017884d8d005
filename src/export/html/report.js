// vramscope's offline memory report. Reads the JSON in #vramscope-data (written by
// src/export/html/mod.rs), lays allocations out as memory_viz's Active Memory Timeline does
// (stacked in allocation order; a free lets everything above it sink) and draws on a canvas.
// Only what the current view needs is drawn: sub-pixel allocations are skipped and the total
// is drawn as a per-pixel-column max envelope, so a million events stay interactive.
// Sizes: B, KiB, MiB, GiB are 1024-based.
"use strict";
(function () {
  const T_START = performance.now();
  const dataEl = document.getElementById("vramscope-data");
  const DATA = JSON.parse(dataEl.textContent);
  dataEl.remove(); // the text is no longer needed: free it and keep --dump-dom small
  const T_PARSED = performance.now();

  // ---------- formatting ----------
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  function fmtBytes(b) {
    if (!isFinite(b)) return "—";
    let u = 0, v = Math.abs(b);
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    const s = u === 0 ? String(Math.round(v)) : v.toFixed(v >= 100 ? 1 : 2);
    return (b < 0 ? "−" : "") + s + " " + UNITS[u];
  }
  const fmtInt = (n) => Number(n).toLocaleString("en-US");
  function fmtExact(b) { return fmtBytes(b) + " (" + fmtInt(b) + " B)"; }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "class") e.className = attrs[k];
      else if (k === "text") e.textContent = attrs[k];
      else if (k === "html") e.innerHTML = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of kids) if (c != null) e.append(c);
    return e;
  }

  // ---------- colours ----------
  const CAT_COLOURS = {
    parameter: "#4e79a7", gradient: "#f28e2b", optimizer_state: "#76b7b2", activation: "#e15759",
    temporary: "#edc948", input: "#59a14f", buffer: "#b07aa1", autocast_cache: "#ff9da7", workspace: "#9c755f",
  };
  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#86bcb6", "#d37295", "#8cd17d"];
  const PHASE_COLOURS = { setup: "#9aa0a6", zero_grad: "#c7a500", forward: "#4e79a7", loss: "#b07aa1", backward: "#e15759", optimizer: "#59a14f" };
  const OTHER = "#8d8d8d", MERGED = "#dfe3e8";
  function shade(hex, k) { // three shades per group so neighbouring allocations stay distinguishable
    const f = [1.0, 0.86, 1.12][k];
    const n = parseInt(hex.slice(1), 16);
    const c = [n >> 16, (n >> 8) & 255, n & 255].map((x) => Math.max(0, Math.min(255, Math.round(x * f))));
    return "rgb(" + c.join(",") + ")";
  }

  // ---------- decoding ----------
  function decode(p) {
    const n = p.z.length, N = p.events;
    const A = {
      n, N,
      start: new Int32Array(n), end: new Int32Array(n), req: new Float64Array(n), rnd: new Float64Array(n),
      cat: new Int16Array(n), mod: new Int32Array(n), op: new Int32Array(n), ph: new Int16Array(n), fl: new Int32Array(n),
      t0: new Float64Array(n), t1: new Float64Array(n),
    };
    let s = -1, t = p.t_ref == null ? 0 : p.t_ref;
    for (let i = 0; i < n; i++) {
      s += p.s[i];
      A.start[i] = s; A.end[i] = s + p.d[i];
      A.req[i] = p.z[i]; A.rnd[i] = p.z[i] + p.r[i];
      A.cat[i] = p.c[i]; A.mod[i] = p.m[i]; A.op[i] = p.o[i]; A.ph[i] = p.p[i]; A.fl[i] = p.f[i];
      if (p.t[i] != null) { t += p.t[i]; A.t0[i] = t; } else A.t0[i] = NaN;
      A.t1[i] = p.u[i] == null ? NaN : (isNaN(A.t0[i]) ? (p.t_ref || 0) : A.t0[i]) + p.u[i];
    }
    // Allocations by end, for the layout sweep (computed once; the slider only filters).
    const byEnd = new Int32Array(n);
    for (let i = 0; i < n; i++) byEnd[i] = i;
    byEnd.sort((a, b) => A.end[a] - A.end[b]);
    A.byEnd = byEnd;
    for (const k of ["s", "d", "z", "r", "c", "m", "o", "p", "f", "t", "u"]) delete p[k];
    return A;
  }

  // ---------- one snapshot's view ----------
  class Panel {
    constructor(p, shared, root) {
      this.p = p; this.shared = shared; this.A = decode(p);
      this.N = p.events;
      this.sizeMode = "req";
      this.colourMode = p.categorised ? "category" : "module";
      this.view = [-1, Math.max(this.N, 1)];
      this.selected = -1; this.hover = -1;
      this.at = p.peak.at; // event of the breakdown (default: the peak)
      this.build(root);
      this.prepareSizes();
      this.prepareGroups();
    }

    // Active bytes per event position: cur[k] for u in [k-1, k).
    prepareSizes() {
      const A = this.A, N = this.N, sz = this.sizeMode === "req" ? A.req : A.rnd;
      this.sz = sz;
      const diff = new Float64Array(N + 2);
      for (let i = 0; i < A.n; i++) { diff[A.start[i] + 1] += sz[i]; diff[A.end[i] + 1] -= sz[i]; }
      const cur = new Float64Array(N + 1);
      let c = 0, max = 0, maxAt = 0;
      for (let k = 0; k <= N; k++) { c += diff[k]; cur[k] = c; if (c > max) { max = c; maxAt = k; } }
      this.cur = cur; this.curMax = max; this.curMaxAt = maxAt - 1;
      const order = new Int32Array(A.n);
      for (let i = 0; i < A.n; i++) order[i] = i;
      order.sort((a, b) => sz[b] - sz[a] || a - b);
      this.bySize = order;
    }

    prepareGroups() {
      const A = this.A, p = this.p, mode = this.colourMode;
      const gid = new Int32Array(A.n);
      const names = [], colours = [];
      if (mode === "category") {
        p.cats.forEach((c, i) => { names.push(c); colours.push(CAT_COLOURS[c] || PALETTE[i % PALETTE.length]); });
        names.push("unknown (no category)"); colours.push(OTHER);
        for (let i = 0; i < A.n; i++) gid[i] = A.cat[i] >= 0 ? A.cat[i] : names.length - 1;
      } else if (mode === "phase") {
        p.phases.forEach((c, i) => { names.push(c); colours.push(PHASE_COLOURS[c] || PALETTE[i % PALETTE.length]); });
        names.push("no phase"); colours.push(OTHER);
        for (let i = 0; i < A.n; i++) gid[i] = A.ph[i] >= 0 ? A.ph[i] : names.length - 1;
      } else {
        // The 11 modules holding the most bytes × events get colours; the rest are "other".
        const w = new Map();
        for (let i = 0; i < A.n; i++) w.set(A.mod[i], (w.get(A.mod[i]) || 0) + A.req[i] * (A.end[i] - A.start[i]));
        const top = [...w.entries()].sort((a, b) => b[1] - a[1]).slice(0, 11).map((e) => e[0]);
        const idx = new Map(top.map((m, i) => [m, i]));
        top.forEach((m, i) => { names.push(p.strs[m]); colours.push(PALETTE[i]); });
        names.push("other modules"); colours.push(OTHER);
        for (let i = 0; i < A.n; i++) { const g = idx.get(A.mod[i]); gid[i] = g === undefined ? names.length - 1 : g; }
      }
      this.gid = gid; this.groupNames = names; this.groupColours = colours;
      this.renderLegend();
    }

    // memory_viz's layout of the `k` largest allocations; the rest form the merged band.
    layout(k) {
      const t0 = performance.now();
      const A = this.A, n = A.n, sz = this.sz;
      k = Math.max(0, Math.min(n, k));
      // A group of equal sizes at the cut (the 100 MiB gradients of 40 steps, say) is not
      // cut by trace order, which would look as if the trace changed halfway: take it whole
      // when that at most quadruples the count, else leave it out, or when that would leave
      // almost nothing, draw every m-th of it so the picture stays uniform over time.
      let lo = k, hi = k, stride = 1;
      if (k > 0 && k < n && sz[this.bySize[k - 1]] === sz[this.bySize[k]]) {
        const v = sz[this.bySize[k]];
        while (lo > 0 && sz[this.bySize[lo - 1]] === v) lo--;
        while (hi < n && sz[this.bySize[hi]] === v) hi++;
        if (hi <= 4 * k) lo = k = hi;
        else if (lo >= k / 4) hi = k = lo;
        else stride = Math.ceil((hi - lo) / (k - lo));
      }
      const on = new Uint8Array(n);
      let count = 0;
      for (let j = 0; j < lo; j++) { on[this.bySize[j]] = 1; count++; }
      for (let j = lo; j < hi; j += stride) { on[this.bySize[j]] = 1; count++; } // by trace order within the group
      this.detailCount = count;
      this.threshold = k < n ? sz[this.bySize[k]] : 0;
      let cap = Math.max(1024, 2 * k);
      let sE = new Int32Array(cap), sT0 = new Float64Array(cap), sT1 = new Float64Array(cap), sB = new Float64Array(cap);
      let ns = 0;
      const last = new Int32Array(n).fill(-1), pos = new Int32Array(n), stack = [];
      const grow = () => {
        cap *= 2;
        const g = (a, T) => { const b = new T(cap); b.set(a); return b; };
        sE = g(sE, Int32Array); sT0 = g(sT0, Float64Array); sT1 = g(sT1, Float64Array); sB = g(sB, Float64Array);
      };
      const seg = (e, t, base) => {
        if (last[e] >= 0) {
          if (sT0[last[e]] === t) { sB[last[e]] = base; return; } // moved twice at one instant
          sT1[last[e]] = t;
        }
        if (ns === cap) grow();
        sE[ns] = e; sT0[ns] = t; sT1[ns] = A.end[e]; sB[ns] = base; last[e] = ns++;
      };
      let total = 0, ia = 0, ib = 0;
      const byEnd = A.byEnd;
      while (true) {
        while (ia < n && !on[ia]) ia++;
        while (ib < n && !on[byEnd[ib]]) ib++;
        const ta = ia < n ? A.start[ia] : Infinity;
        const tb = ib < n ? A.end[byEnd[ib]] : Infinity;
        if (ta === Infinity && (tb === Infinity || tb >= this.N)) break; // still live at the end: nothing moves
        if (tb <= ta) {
          const e = byEnd[ib++], p0 = pos[e];
          for (let j = p0 + 1; j < stack.length; j++) {
            const f = stack[j];
            stack[j - 1] = f; pos[f] = j - 1;
            seg(f, tb, sB[last[f]] - sz[e]);
          }
          stack.pop();
          total -= sz[e];
        } else {
          const e = ia++;
          pos[e] = stack.length; stack.push(e);
          seg(e, Math.max(ta, -1), total);
          total += sz[e];
        }
      }
      this.segs = { n: ns, e: sE, t0: sT0, t1: sT1, b: sB };
      this.lods = new Map();
      // Build the coarse levels while the user looks, so the first zoom is as fast as later ones.
      const top = Math.ceil(Math.log2(Math.max(2, this.N)));
      const idle = window.requestIdleCallback || ((f) => setTimeout(f, 50));
      const segsNow = this.segs;
      const build = (lv) => { if (lv < 1 || this.segs !== segsNow) return; this.lod(lv); idle(() => build(lv - 1)); };
      idle(() => build(top));
      // Detail total per event, for the merged band's tooltip.
      const N = this.N, diff = new Float64Array(N + 2);
      for (let i = 0; i < n; i++) if (on[i]) { diff[A.start[i] + 1] += sz[i]; diff[A.end[i] + 1] -= sz[i]; }
      const det = new Float64Array(N + 1);
      let c = 0;
      for (let j = 0; j <= N; j++) { c += diff[j]; det[j] = c; }
      this.detailCur = det;
      this.layoutMs = performance.now() - t0;
    }

    // Segments coarsened for drawing at 2^level events per pixel: an allocation's moves
    // within one bucket collapse into its first position there (built once per level).
    lod(level) {
      if (level <= 0) return this.segs;
      let L = this.lods.get(level);
      if (L) return L;
      const S = this.segs, w = Math.pow(2, level), n = this.A.n;
      const lastB = new Float64Array(n).fill(-Infinity), lastI = new Int32Array(n);
      const e = new Int32Array(S.n), t0 = new Float64Array(S.n), t1 = new Float64Array(S.n), b = new Float64Array(S.n);
      let m = 0;
      const tStart = performance.now();
      for (let i = 0; i < S.n; i++) {
        const x = S.e[i], bucket = Math.floor(S.t0[i] / w);
        if (bucket === lastB[x]) { t1[lastI[x]] = S.t1[i]; continue; }
        lastB[x] = bucket; lastI[x] = m;
        e[m] = x; t0[m] = S.t0[i]; t1[m] = S.t1[i]; b[m] = S.b[i]; m++;
      }
      // A level that saves little is not worth its memory: draw from the full list.
      L = m > 0.8 * S.n ? S : { n: m, e: e.slice(0, m), t0: t0.slice(0, m), t1: t1.slice(0, m), b: b.slice(0, m), ms: performance.now() - tStart };
      this.lods.set(level, L);
      return L;
    }

    // ---------- DOM ----------
    build(root) {
      const p = this.p;
      this.root = el("section", { class: "panel" });
      root.append(this.root);
      const peak = p.peak;
      this.root.append(el("h2", { text: p.name }));
      this.root.append(el("div", { class: "facts" },
        el("span", { html: "peak active <b>" + esc(fmtBytes(peak.bytes)) + "</b> at event " + (peak.at >= 0 ? fmtInt(peak.at) : "start") }),
        el("span", { html: "peak reserved <b>" + esc(fmtBytes(peak.reserved_bytes)) + "</b>" }),
        el("span", { text: fmtInt(p.events) + " events · " + fmtInt(this.A.n) + " allocations · device " + p.device }),
        this.shared.capacity ? el("span", { text: this.shared.capacity.label + ": " + fmtBytes(this.shared.capacity.bytes) }) : null,
        p.ooms.length ? el("span", { class: "oom", text: p.ooms.length + " out-of-memory event(s), first at event " + fmtInt(p.ooms[0].at) }) : null));
      if (p.ooms.length) this.root.append(this.oomBox(p.ooms[0]));
      const wrap = el("div", { class: "canvas-wrap" });
      this.canvas = el("canvas", { class: "timeline" });
      this.tip = el("div", { class: "tooltip", hidden: "" });
      wrap.append(this.canvas, this.tip);
      this.root.append(wrap);
      this.legend = el("div", { class: "legend" });
      this.root.append(this.legend);
      this.status = el("div", { class: "status" });
      this.root.append(this.status);
      this.details = el("div", { class: "details" });
      this.root.append(this.details);
      this.bindMouse();
    }

    // The first out-of-memory: the request that failed, who made it, and what held the memory.
    oomBox(o) {
      const p = this.p;
      const list = (rows, n) => rows.slice(0, n).map(([k, b]) => k + " " + fmtBytes(b)).join(" · ") + (rows.length > n ? " · …" : "");
      const kv = el("table", { class: "kv" });
      const add = (k, v) => kv.append(el("tr", {}, el("th", { text: k }), el("td", { text: v })));
      add("failed request", fmtExact(o.requested_segment_bytes) + " (rounded block size) · device free " + fmtBytes(o.device_free_bytes) +
        (this.shared.capacity ? " of " + this.shared.capacity.label + " " + fmtBytes(this.shared.capacity.bytes) : ""));
      add("made by", "op " + p.strs[o.op] + " in module " + p.strs[o.module]);
      add("phase", o.phase >= 0 ? p.phases[o.phase] : "—");
      add("category", o.category || "—");
      add("live just before (requested)", fmtExact(o.live_bytes));
      add("live by category", list(o.live_by_category, 8));
      add("live by module", list(o.live_by_module, 8));
      add("peak so far (requested)", fmtExact(p.peak.bytes) + " at event " + (p.peak.at >= 0 ? fmtInt(p.peak.at) : "start"));
      add("frames", p.frame_lists[o.frames].map((i) => p.strs[i]).join(" ← "));
      return el("div", { class: "oom-box" }, el("h3", { text: "Out of memory at event " + fmtInt(o.at) + " (the history ends at the failing allocation)" }), kv);
    }

    renderLegend() {
      const items = this.groupNames.map((n, i) => el("span", { class: "item" }, el("i", { style: "background:" + this.groupColours[i] }), n));
      items.push(el("span", { class: "item" }, el("i", { style: "background:" + MERGED }), "merged: allocations below the detail threshold"));
      items.push(el("span", { class: "item" }, el("i", { class: "line reserved" }), "reserved"));
      items.push(el("span", { class: "item" }, el("i", { class: "line peak" }), "peak"));
      if (this.shared.capacity) items.push(el("span", { class: "item" }, el("i", { class: "line capacity" }), "capacity"));
      this.legend.replaceChildren(...items);
    }

    // ---------- geometry ----------
    geom() {
      const W = this.canvas.clientWidth, H = this.canvas.clientHeight;
      const g = { W, H, l: 74, r: 14, t: this.p.phased ? 26 : 10, b: 34 };
      g.pw = Math.max(10, W - g.l - g.r); g.ph = Math.max(10, H - g.t - g.b);
      const [u0, u1] = this.view;
      g.x = (u) => g.l + (u - u0) / (u1 - u0) * g.pw;
      g.u = (x) => u0 + (x - g.l) / g.pw * (u1 - u0);
      const [b0, b1] = this.shared.yview || [0, this.shared.ymax()];
      g.b0 = b0; g.b1 = b1;
      g.y = (b) => g.t + g.ph - (b - b0) / (b1 - b0) * g.ph;
      g.b = (y) => b0 + (g.t + g.ph - y) / g.ph * (b1 - b0);
      return g;
    }

    // ---------- drawing ----------
    draw() {
      const t0 = performance.now();
      const cv = this.canvas, dpr = window.devicePixelRatio || 1;
      const W = cv.clientWidth, H = cv.clientHeight;
      if (cv.width !== Math.round(W * dpr) || cv.height !== Math.round(H * dpr)) { cv.width = Math.round(W * dpr); cv.height = Math.round(H * dpr); }
      const ctx = cv.getContext("2d");
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, H);
      const g = this.geom(), [u0, u1] = this.view, N = this.N;
      ctx.save();
      ctx.beginPath(); ctx.rect(g.l, 0, g.pw, g.t + g.ph); ctx.clip();
      // Phase bands: a tint behind the plot and a labelled strip above it.
      const bands = this.p.bands;
      for (const [s, e, ph] of bands) {
        if (e <= u0 || s >= u1) continue;
        const name = this.p.phases[ph], col = PHASE_COLOURS[name] || OTHER;
        const x0 = Math.max(g.l, g.x(s)), x1 = Math.min(g.l + g.pw, g.x(e));
        ctx.globalAlpha = 0.07; ctx.fillStyle = col; ctx.fillRect(x0, g.t, x1 - x0, g.ph);
        ctx.globalAlpha = 0.85; ctx.fillRect(x0, 4, Math.max(1, x1 - x0), 16);
        ctx.globalAlpha = 1;
        if (x1 - x0 > ctx.measureText(name).width + 8) {
          ctx.fillStyle = "#fff"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "middle";
          ctx.fillText(name, x0 + 4, 12);
        }
      }
      const tA = performance.now();
      // Envelope: the largest total within each pixel column (what the merged band tops out at).
      const cur = this.cur;
      const k0 = Math.max(0, Math.floor(u0) + 1), k1 = Math.min(N, Math.ceil(u1) + 1);
      ctx.fillStyle = MERGED;
      ctx.beginPath(); ctx.moveTo(g.x(k0 - 1), g.y(0));
      const perPx = (u1 - u0) / g.pw;
      if (perPx <= 1) {
        for (let k = k0; k <= k1; k++) { const y = g.y(cur[Math.min(k, N)]); ctx.lineTo(g.x(k - 1), y); ctx.lineTo(g.x(k), y); }
      } else {
        for (let px = 0; px < g.pw; px++) {
          const a = Math.max(0, Math.floor(u0 + px * perPx) + 1), b = Math.min(N, Math.floor(u0 + (px + 1) * perPx) + 1);
          let m = 0;
          for (let k = a; k <= b; k++) if (cur[k] > m) m = cur[k];
          const y = g.y(m); ctx.lineTo(g.l + px, y); ctx.lineTo(g.l + px + 1, y);
        }
      }
      ctx.lineTo(g.x(Math.min(k1, N)), g.y(0)); ctx.closePath(); ctx.fill();
      const tB = performance.now();
      // Per allocation, one pending rectangle that grows to the right while the allocation
      // stays within half a pixel of where it was; it is emitted when it moves further. Pixel
      // columns already covered are skipped (segments are in time order), so an allocation
      // that sinks many times within one column costs one rectangle there.
      const n = this.A.n;
      if (!this.pend || this.pend.x1.length !== n) {
        this.pend = { x0: new Float64Array(n), x1: new Float64Array(n), yt: new Float64Array(n), yb: new Float64Array(n), list: new Int32Array(n) };
      }
      const P = this.pend;
      P.x1.fill(-Infinity);
      let np = 0;
      // The individually drawn allocations, batched into one path per colour shade.
      const S = this.lod(Math.floor(Math.log2(Math.max(1, (u1 - u0) / g.pw)))), sz = this.sz, gid = this.gid, nG = this.groupColours.length;
      const paths = new Array(nG * 3);
      for (let i = 0; i < paths.length; i++) paths[i] = new Path2D();
      const bpp = (g.b1 - g.b0) / g.ph; // bytes per pixel
      let drawn = 0;
      const emit = (e) => { paths[gid[e] * 3 + (e % 3)].rect(P.x0[e], P.yt[e], P.x1[e] - P.x0[e], P.yb[e] - P.yt[e]); drawn++; };
      const xs = g.pw / (u1 - u0);
      for (let i = 0; i < S.n; i++) {
        const a = S.t0[i], b = S.t1[i];
        if (a >= u1) break; // segments are in time order
        if (b <= u0) continue;
        const e = S.e[i], h = sz[e];
        // Thin allocations are drawn too (antialiased): a stack of many sub-pixel ones must
        // show their colour, not the merged band's. Only the truly invisible are skipped.
        if (h < bpp * 0.02) continue;
        let x0 = Math.floor(g.l + (Math.max(a, u0 - 1) - u0) * xs), x1 = Math.ceil(g.l + (Math.min(b, u1 + 1) - u0) * xs);
        if (x1 <= x0) x1 = x0 + 1;
        const px1 = P.x1[e];
        if (x1 <= px1) continue;
        if (x0 < px1) x0 = px1;
        const yt = g.y(S.b[i] + h), yb = g.y(S.b[i]);
        if (px1 !== -Infinity) {
          if (x0 === px1 && Math.abs(yt - P.yt[e]) < 0.5) { P.x1[e] = x1; continue; }
          emit(e);
        } else P.list[np++] = e;
        P.x0[e] = x0; P.x1[e] = x1; P.yt[e] = yt; P.yb[e] = yb;
      }
      for (let j = 0; j < np; j++) emit(P.list[j]);
      const tC = performance.now();
      for (let i = 0; i < paths.length; i++) { ctx.fillStyle = shade(this.groupColours[(i / 3) | 0], i % 3); ctx.fill(paths[i]); }
      const tD = performance.now();
      this.drawnRects = drawn;
      // Selected and hovered allocations: outlined.
      for (const [e, col] of [[this.selected, "#000"], [this.hover, "#333"]]) {
        if (e < 0) continue;
        ctx.strokeStyle = col; ctx.lineWidth = e === this.selected ? 2 : 1;
        for (const [a, b, base] of this.segmentsOf(e)) {
          const x0 = g.x(Math.max(a, u0 - 1)), x1 = Math.max(g.x(Math.min(b, u1 + 1)), x0 + 1);
          ctx.strokeRect(x0, g.y(base + sz[e]), x1 - x0, g.y(base) - g.y(base + sz[e]));
        }
      }
      // Reserved memory: a step line.
      const R = this.p.reserved;
      ctx.strokeStyle = "#222"; ctx.lineWidth = 1.5; ctx.setLineDash([]);
      ctx.beginPath();
      for (let i = 0; i < R.length; i++) {
        const [at, bytes] = R[i], next = i + 1 < R.length ? R[i + 1][0] : N;
        const x0 = g.x(Math.max(at, -1)), x1 = g.x(next), y = g.y(bytes);
        if (i === 0) ctx.moveTo(x0, y); else ctx.lineTo(x0, y);
        ctx.lineTo(x1, y);
      }
      ctx.stroke();
      // Peak marker.
      const pk = this.sizeMode === "req" ? { at: this.p.peak.at, bytes: this.p.peak.bytes } : { at: this.curMaxAt, bytes: this.curMax };
      const px = g.x(pk.at + 0.5), py = g.y(pk.bytes);
      ctx.strokeStyle = "#c00"; ctx.setLineDash([4, 3]); ctx.lineWidth = 1;
      ctx.beginPath(); ctx.moveTo(px, g.t); ctx.lineTo(px, g.t + g.ph); ctx.stroke(); ctx.setLineDash([]);
      ctx.fillStyle = "#c00"; ctx.beginPath(); ctx.arc(px, py, 4, 0, 2 * Math.PI); ctx.fill();
      // The breakdown's event when it is not the peak.
      if (this.at !== this.p.peak.at) {
        ctx.strokeStyle = "#1565c0"; ctx.setLineDash([2, 2]);
        ctx.beginPath(); ctx.moveTo(g.x(this.at + 0.5), g.t); ctx.lineTo(g.x(this.at + 0.5), g.t + g.ph); ctx.stroke(); ctx.setLineDash([]);
      }
      ctx.restore();
      ctx.font = "11px system-ui, sans-serif";
      ctx.fillStyle = "#c00"; ctx.textBaseline = "middle";
      const label = "peak " + fmtBytes(pk.bytes) + (this.sizeMode === "req" ? " requested" : " rounded");
      if (px >= g.l && px <= g.l + g.pw && py >= g.t && py <= g.t + g.ph) {
        // Beside the dot, on whichever side has room.
        const w = ctx.measureText(label).width, right = px + 8 + w < g.l + g.pw;
        const ly = Math.max(py, g.t + 20);
        ctx.fillStyle = "rgba(255,255,255,0.8)"; ctx.fillRect(right ? px + 6 : px - 10 - w, ly - 7, w + 4, 14);
        ctx.fillStyle = "#c00"; ctx.fillText(label, right ? px + 8 : px - 8 - w, ly);
      }
      // Capacity line (or a note when it is above the scale).
      const cap = this.shared.capacity;
      if (cap) {
        ctx.strokeStyle = "#7b1fa2"; ctx.fillStyle = "#7b1fa2"; ctx.setLineDash([8, 4]); ctx.lineWidth = 1.5;
        const text = cap.label + " capacity " + fmtBytes(cap.bytes);
        if (cap.bytes <= g.b1) {
          const y = g.y(cap.bytes);
          ctx.beginPath(); ctx.moveTo(g.l, y); ctx.lineTo(g.l + g.pw, y); ctx.stroke();
          ctx.textBaseline = "bottom"; ctx.fillText(text, g.l + g.pw - ctx.measureText(text).width - 4, y - 2);
        } else {
          const t2 = "↑ " + text + " (above this scale)";
          ctx.textBaseline = "top"; ctx.fillText(t2, g.l + g.pw - ctx.measureText(t2).width - 4, g.t + 2);
        }
        ctx.setLineDash([]);
      }
      this.drawAxes(ctx, g);
      this.frameMs = performance.now() - t0;
      this.frameParts = { bands: tA - t0, envelope: tB - tA, rects: tC - tB, fill: tD - tC, rest: performance.now() - tD };
      this.status.textContent = "events " + fmtInt(Math.max(0, Math.ceil(u0))) + "–" + fmtInt(Math.min(N, Math.floor(u1))) +
        " of " + fmtInt(N) + " · " + fmtInt(drawn) + " rectangles drawn in " + this.frameMs.toFixed(1) + " ms · wheel: zoom time · shift+wheel: zoom bytes · drag: pan · double-click: reset · click: details";
    }

    drawAxes(ctx, g) {
      ctx.strokeStyle = "#888"; ctx.lineWidth = 1; ctx.fillStyle = "#333"; ctx.font = "11px system-ui, sans-serif";
      ctx.beginPath(); ctx.moveTo(g.l, g.t); ctx.lineTo(g.l, g.t + g.ph); ctx.lineTo(g.l + g.pw, g.t + g.ph); ctx.stroke();
      // y: a 1024-based unit and a 1/2/5 step in it.
      let u = 0;
      while (u < UNITS.length - 1 && g.b1 / Math.pow(1024, u) >= 1024) u++;
      const unit = Math.pow(1024, u), span = (g.b1 - g.b0) / unit;
      const raw = span / 6, mag = Math.pow(10, Math.floor(Math.log10(raw)));
      const step = ([1, 2, 2.5, 5, 10].find((m) => m * mag >= raw) || 10) * mag;
      ctx.textBaseline = "middle"; ctx.textAlign = "right";
      for (let v = Math.ceil(g.b0 / unit / step) * step; v <= g.b1 / unit + 1e-9; v += step) {
        const y = g.y(v * unit);
        ctx.fillText(Number(v.toPrecision(6)) + " " + UNITS[u], g.l - 6, y);
        ctx.strokeStyle = "rgba(0,0,0,0.07)"; ctx.beginPath(); ctx.moveTo(g.l, y); ctx.lineTo(g.l + g.pw, y); ctx.stroke();
      }
      // x: event index.
      const [u0, u1] = this.view;
      const rawx = (u1 - u0) / 8, magx = Math.pow(10, Math.floor(Math.log10(Math.max(rawx, 1))));
      const stepx = Math.max(1, ([1, 2, 5, 10].find((m) => m * magx >= rawx) || 10) * magx);
      ctx.textAlign = "center"; ctx.textBaseline = "top";
      for (let v = Math.ceil(Math.max(u0, 0) / stepx) * stepx; v <= u1; v += stepx) {
        const x = g.x(v);
        ctx.fillText(fmtInt(v), x, g.t + g.ph + 4);
        ctx.beginPath(); ctx.strokeStyle = "#888"; ctx.moveTo(x, g.t + g.ph); ctx.lineTo(x, g.t + g.ph + 3); ctx.stroke();
      }
      ctx.fillText("trace event index", g.l + g.pw / 2, g.t + g.ph + 18);
      ctx.textAlign = "left";
    }

    segmentsOf(e) {
      const S = this.segs, out = [];
      if (!S) return out;
      for (let i = 0; i < S.n; i++) if (S.e[i] === e) out.push([S.t0[i], S.t1[i], S.b[i]]);
      return out;
    }

    // ---------- hit testing ----------
    hitTest(u, bytes) {
      const S = this.segs, sz = this.sz;
      for (let i = 0; i < S.n && S.t0[i] <= u; i++) {
        if (u < S.t1[i]) {
          const b = S.b[i];
          if (b <= bytes && bytes < b + sz[S.e[i]]) return { elem: S.e[i] };
        }
      }
      const k = Math.max(0, Math.min(this.N, Math.floor(u) + 1));
      if (bytes >= 0 && bytes < this.cur[k]) return { merged: k };
      return { empty: k };
    }

    phaseAt(ev) {
      for (const [s, e, ph] of this.p.bands) if (s <= ev && ev < e) return this.p.phases[ph];
      return null;
    }

    describe(e) {
      const A = this.A, p = this.p;
      const when = (ev, t, none) => {
        if (ev < 0) return "before the trace";
        if (ev >= this.N) return none;
        let s = "event " + fmtInt(ev);
        if (!isNaN(t) && p.t_ref != null) s += " · +" + ((t - p.t_ref) / 1000).toFixed(3) + " ms";
        return s;
      };
      const rows = [
        ["requested", fmtExact(A.req[e])],
        ["rounded", fmtExact(A.rnd[e]) + " (the allocator's round_size)"],
        ["category", A.cat[e] >= 0 ? p.cats[A.cat[e]] : "—"],
        ["module", p.strs[A.mod[e]]],
        ["op", p.strs[A.op[e]]],
        ["phase", A.ph[e] >= 0 ? p.phases[A.ph[e]] : "—"],
        ["allocated", when(A.start[e], A.t0[e], "")],
        ["freed", when(A.end[e], A.t1[e], "still live at the end")],
        ["lifetime", fmtInt(A.end[e] - Math.max(A.start[e], 0)) + " events"],
      ];
      const frames = p.frame_lists[A.fl[e]].map((i) => p.strs[i]);
      return { rows, frames };
    }

    showTip(hit, cx, cy) {
      const tip = this.tip;
      let html;
      if (hit.elem !== undefined) {
        const d = this.describe(hit.elem);
        html = "<b>" + esc(fmtBytes(this.sz[hit.elem])) + "</b> " + esc(this.groupNames[this.gid[hit.elem]]) +
          "<table>" + d.rows.map(([k, v]) => "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>").join("") + "</table>" +
          "<div class=frames>" + d.frames.slice(0, 12).map((f) => "<div>" + esc(f) + "</div>").join("") +
          (d.frames.length > 12 ? "<div>… " + (d.frames.length - 12) + " more</div>" : "") + "</div>";
      } else if (hit.merged !== undefined) {
        const k = hit.merged, m = this.cur[k] - this.detailCur[k];
        html = "<b>merged band</b><table><tr><th>event</th><td>" + fmtInt(Math.max(k - 1, 0)) + "</td></tr><tr><th>merged</th><td>" + esc(fmtBytes(m)) +
          " in allocations smaller than " + esc(fmtBytes(this.threshold)) + "</td></tr><tr><th>active</th><td>" + esc(fmtBytes(this.cur[k])) + "</td></tr></table>" +
          "<div class=hint>move the detail slider right to draw them individually</div>";
      } else {
        tip.hidden = true;
        return;
      }
      tip.innerHTML = html;
      tip.hidden = false;
      const wrap = this.canvas.getBoundingClientRect();
      const x = cx - wrap.left, y = cy - wrap.top;
      const tw = tip.offsetWidth, th = tip.offsetHeight;
      tip.style.left = Math.max(0, x + 16 + tw > wrap.width ? x - tw - 16 : x + 16) + "px";
      tip.style.top = Math.max(0, Math.min(y + 12, wrap.height - th)) + "px";
    }

    bindMouse() {
      const cv = this.canvas;
      let drag = null;
      const pos = (ev) => { const r = cv.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
      cv.addEventListener("mousemove", (ev) => {
        const [x, y] = pos(ev), g = this.geom();
        if (drag) {
          const du = (drag.x - x) / g.pw * (drag.v[1] - drag.v[0]);
          if (Math.abs(drag.x - x) > 3 || Math.abs(drag.y - y) > 3) drag.moved = true;
          this.view = [drag.v[0] + du, drag.v[1] + du];
          if (drag.yv) { // the y view is shared: comparisons stay on one scale
            const db = (y - drag.y) / g.ph * (drag.yv[1] - drag.yv[0]);
            const lo = Math.max(0, drag.yv[0] + db);
            this.shared.yview = [lo, lo + drag.yv[1] - drag.yv[0]];
            this.shared.drawAll();
          } else this.draw();
          return;
        }
        if (x < g.l || x > g.l + g.pw || y < g.t || y > g.t + g.ph) { this.tip.hidden = true; return; }
        const hit = this.hitTest(g.u(x), g.b(y));
        const h = hit.elem === undefined ? -1 : hit.elem;
        if (h !== this.hover) { this.hover = h; this.draw(); }
        this.showTip(hit, ev.clientX, ev.clientY);
      });
      cv.addEventListener("mouseleave", () => { this.tip.hidden = true; if (this.hover >= 0) { this.hover = -1; this.draw(); } });
      cv.addEventListener("mousedown", (ev) => {
        const [x, y] = pos(ev);
        drag = { x, y, v: this.view.slice(), yv: this.shared.yview && this.shared.yview.slice(), moved: false };
      });
      window.addEventListener("mouseup", (ev) => {
        if (!drag) return;
        const moved = drag.moved;
        drag = null;
        if (moved || ev.target !== cv) return;
        const [x, y] = pos(ev), g = this.geom();
        if (x < g.l || x > g.l + g.pw) return;
        const u = g.u(x), hit = this.hitTest(u, g.b(y));
        this.selected = hit.elem === undefined ? -1 : hit.elem;
        this.at = Math.max(-1, Math.min(this.N - 1, Math.floor(u)));
        this.renderDetails();
        this.draw();
      });
      cv.addEventListener("dblclick", () => { this.view = [-1, Math.max(this.N, 1)]; this.shared.yview = null; this.shared.drawAll(); });
      cv.addEventListener("wheel", (ev) => {
        ev.preventDefault();
        const g = this.geom(), [x, y] = pos(ev), u = g.u(x);
        const f = Math.pow(1.0015, ev.deltaY);
        if (ev.shiftKey || ev.ctrlKey) { // y zoom around the cursor
          const b = g.b(y), full = this.shared.ymax();
          const w = Math.max(1024, Math.min(full, (g.b1 - g.b0) * f));
          let lo = Math.max(0, b - (b - g.b0) / (g.b1 - g.b0) * w);
          lo = Math.min(lo, full - w);
          this.shared.yview = w >= full ? null : [lo, lo + w];
          this.shared.drawAll();
          return;
        }
        const [u0, u1] = this.view, w = Math.max(4, Math.min(this.N + 1, (u1 - u0) * f));
        const a = (u - u0) / (u1 - u0);
        let n0 = u - a * w;
        n0 = Math.max(-1, Math.min(n0, this.N - w));
        this.view = [n0, n0 + w];
        this.draw();
      }, { passive: false });
    }

    // ---------- breakdown, largest, stats ----------
    breakdown(at) {
      const A = this.A, byCat = new Map(), byMod = new Map();
      let total = 0, count = 0;
      for (let i = 0; i < A.n; i++) {
        if (A.start[i] <= at && A.end[i] > at) {
          const s = this.sz[i];
          total += s; count++;
          const c = A.cat[i] >= 0 ? this.p.cats[A.cat[i]] : "<uncategorised>";
          byCat.set(c, (byCat.get(c) || 0) + s);
          const m = this.p.strs[A.mod[i]];
          byMod.set(m, (byMod.get(m) || 0) + s);
        }
      }
      // Equal sizes in reading order: layers.2 before layers.10.
      const sort = (m) => [...m.entries()].sort((a, b) => b[1] - a[1] || String(a[0]).localeCompare(String(b[0]), "en", { numeric: true }));
      return { total, count, byCat: sort(byCat), byMod: sort(byMod) };
    }

    renderDetails() {
      const p = this.p, A = this.A, at = this.at, bd = this.breakdown(at);
      const isPeak = at === p.peak.at;
      const ph = this.phaseAt(at);
      const head = el("h3", {
        text: (isPeak ? "Live at the peak" : "Live at event " + fmtInt(at)) + ": " + fmtBytes(bd.total) + " in " + fmtInt(bd.count) +
          " allocations" + (ph ? " (" + ph + ")" : "") + (this.sizeMode === "req" ? ", requested sizes" : ", rounded sizes"),
      });
      const back = isPeak ? null : el("button", { text: "back to the peak", onclick: () => { this.at = p.peak.at; this.selected = -1; this.renderDetails(); this.draw(); } });
      const colourOf = (name) => p.categorised ? (CAT_COLOURS[name] || OTHER) : OTHER;
      const bar = el("div", { class: "stackbar" }, ...bd.byCat.map(([c, b]) =>
        el("span", { style: "flex:" + Math.max(b, 0) + ";background:" + colourOf(c), title: c + ": " + fmtBytes(b) })));
      const table = (title, rows, colour, limit) => {
        const t = el("table", { class: "breakdown" });
        t.append(el("tr", {}, el("th", { text: title }), el("th", { class: "num", text: "bytes" }), el("th", { class: "num", text: "share" }), el("th", {})));
        const max = rows.length ? rows[0][1] : 1;
        for (const [k, b] of rows.slice(0, limit)) {
          t.append(el("tr", {}, el("td", { text: k }), el("td", { class: "num", text: fmtBytes(b) }),
            el("td", { class: "num", text: bd.total ? (100 * b / bd.total).toFixed(1) + " %" : "—" }),
            el("td", { class: "barcell" }, el("span", { class: "bar", style: "width:" + (100 * b / max).toFixed(1) + "%;background:" + colour(k) }))));
        }
        if (rows.length > limit) t.append(el("tr", {}, el("td", { class: "muted", text: "… " + (rows.length - limit) + " more" })));
        return t;
      };
      const tables = el("div", { class: "tables" },
        el("div", {}, el("h4", { text: "By category" }), table("category", bd.byCat, colourOf, 20)),
        el("div", {}, el("h4", { text: "By module" + (p.phased ? "" : " (innermost user frame)") }), table("module", bd.byMod, () => "#7f8c9d", 15)));
      // Largest allocations over the whole trace.
      const lg = el("table", { class: "largest" });
      lg.append(el("tr", {}, ...["size", "category", "module", "op", "phase", "alloc → free (events)"].map((h) => el("th", { text: h }))));
      for (let j = 0; j < Math.min(15, A.n); j++) {
        const e = this.bySize[j];
        const tr = el("tr", { class: "clickable" + (e === this.selected ? " sel" : "") },
          el("td", { class: "num", text: fmtBytes(this.sz[e]) }),
          el("td", { text: A.cat[e] >= 0 ? p.cats[A.cat[e]] : "—" }),
          el("td", { text: p.strs[A.mod[e]] }), el("td", { text: p.strs[A.op[e]] }),
          el("td", { text: A.ph[e] >= 0 ? p.phases[A.ph[e]] : "—" }),
          el("td", { text: (A.start[e] < 0 ? "before" : fmtInt(A.start[e])) + " → " + (A.end[e] >= this.N ? "end" : fmtInt(A.end[e])) }));
        tr.addEventListener("click", () => { this.select(e); });
        lg.append(tr);
      }
      // Allocator facts and settings.
      const kv = el("table", { class: "kv" });
      const add = (k, v) => kv.append(el("tr", {}, el("th", { text: k }), el("td", { text: v })));
      add("peak active (requested)", fmtExact(p.peak.bytes));
      add("peak reserved", fmtExact(p.peak.reserved_bytes));
      add("reserved at the end", fmtExact(p.reserved_end));
      add("allocated at the end (blocks)", fmtExact(p.allocated_end));
      add("cached but unused at the end", fmtBytes(Math.max(0, p.reserved_end - p.allocated_end)) + " (reserved − allocated)");
      add("segments at the end", fmtInt(p.segments_end));
      add("out-of-memory events", p.ooms.length ? p.ooms.map((o) => "event " + fmtInt(o.at) + ": " + fmtBytes(o.requested_segment_bytes) + " requested by " + p.strs[o.op] + " in " + p.strs[o.module] + (o.phase >= 0 ? " (" + p.phases[o.phase] + ")" : "") + ", " + fmtBytes(o.device_free_bytes) + " free").join("; ") : "none");
      const flat = (obj, prefix) => {
        for (const [k, v] of Object.entries(obj || {})) {
          const key = prefix ? prefix + "." + k : k;
          if (v && typeof v === "object" && !Array.isArray(v)) {
            if ("current" in v && "peak" in v) add(key, /bytes/.test(key) ? "current " + fmtBytes(v.current) + ", peak " + fmtBytes(v.peak) : "current " + fmtInt(v.current) + ", peak " + fmtInt(v.peak));
            else flat(v, key);
          } else if (typeof v === "string") add(key, v || "(empty)");
          else if (key.endsWith("max_split_size") && v < 0) add(key, "unlimited");
          else add(key, typeof v === "number" && /bytes|size/.test(key) && v > 0 ? fmtExact(v) : JSON.stringify(v));
        }
      };
      if (p.stats) flat(p.stats, "");
      if (p.settings) {
        const s = Object.assign({}, p.settings);
        const d = s.roundup_power2_divisions;
        if (d && typeof d === "object") {
          const nz = Object.entries(d).filter(([, v]) => v > 0);
          s.roundup_power2_divisions = nz.length ? nz.map(([k, v]) => k + " MiB: " + v).join(", ") : "off";
        }
        flat(s, "allocator_settings");
      }
      this.details.replaceChildren(
        el("div", { class: "headrow" }, head, back), bar, tables,
        el("h3", { text: "Largest allocations (" + (this.sizeMode === "req" ? "requested" : "rounded") + " size; click to show)" }), lg,
        el("h3", { text: "Allocator" }), kv);
    }

    select(e) {
      this.selected = e;
      const A = this.A;
      // Bring it into view and show its details where it lives.
      const s = Math.max(A.start[e], -1), t = Math.min(A.end[e], this.N);
      const [u0, u1] = this.view;
      if (t <= u0 || s >= u1) { const w = u1 - u0, mid = (s + t) / 2; this.view = [Math.max(-1, mid - w / 2), Math.max(-1, mid - w / 2) + w]; }
      this.at = Math.max(-1, Math.min(this.N - 1, s));
      this.renderDetails();
      this.draw();
      const pt = this.pointOf(e);
      if (pt) this.showTip({ elem: e }, pt[0], pt[1]);
    }

    // Client coordinates of the middle of an allocation's visible part (null: not drawn).
    pointOf(e) {
      const g = this.geom(), [u0, u1] = this.view, r = this.canvas.getBoundingClientRect();
      for (const [a, b, base] of this.segmentsOf(e)) {
        const lo = Math.max(a, u0), hi = Math.min(b, u1);
        if (hi <= lo) continue;
        const u = (lo + hi) / 2;
        return [r.left + g.x(u), r.top + g.y(base + this.sz[e] / 2)];
      }
      return null;
    }
  }

  // ---------- page ----------
  const capacity = DATA.capacity;
  const shared = {
    capacity,
    fitCapacity: false,
    yview: null, // [bytes, bytes] when zoomed in y; null: 0 to ymax()
    drawAll() { for (const pn of this.panels) pn.draw(); },
    panels: [],
    ymax() {
      let m = 1;
      for (const pn of this.panels) m = Math.max(m, pn.p.peak.reserved_bytes, pn.curMax || 0, pn.p.peak.bytes);
      if (capacity && this.fitCapacity) m = Math.max(m, capacity.bytes);
      return m * 1.06;
    },
  };
  const compare = DATA.panels.length > 1;
  document.body.append(el("header", {},
    el("h1", { text: "vramscope memory report" }),
    el("div", { class: "sub", text: (compare ? "Comparison on one y scale · " : "") + "active memory timeline like memory_viz's, offline · " + DATA.generator + " · sizes in 1024-based units" })));
  const controls = el("div", { class: "controls" });
  document.body.append(controls);
  if (compare) document.body.append(el("div", { id: "comparison" }));
  const grid = el("div", { class: compare ? "grid two" : "grid" });
  document.body.append(grid);

  const T_LAYOUT0 = performance.now();
  for (const p of DATA.panels) shared.panels.push(new Panel(p, shared, grid));
  const maxN = Math.max(1, ...shared.panels.map((x) => x.A.n));

  // Detail slider: log scale over the share of allocations drawn individually (0.01 %–100 %).
  const slider = el("input", { type: "range", min: "0", max: "1000", step: "1", id: "detail" });
  const sliderLabel = el("span", { id: "detail-label" });
  const pctOf = (v) => Math.pow(10, -2 + 4 * v / 1000);
  const valueOfCount = (k) => Math.round(Math.max(0, Math.min(1000, (Math.log10(Math.max(k / maxN * 100, 0.01)) + 2) / 4 * 1000)));
  slider.value = String(valueOfCount(Math.min(maxN, 15000))); // memory_viz draws 15,000 by default
  function applyDetail() {
    const pct = pctOf(Number(slider.value));
    for (const pn of shared.panels) pn.layout(Math.ceil(pn.A.n * pct / 100));
    const pn = shared.panels[0];
    // The share actually drawn: equal sizes at the cut move it (see layout).
    const shown = 100 * shared.panels.reduce((a, x) => a + x.detailCount, 0) / Math.max(1, shared.panels.reduce((a, x) => a + x.A.n, 0));
    sliderLabel.textContent = "largest " + (shown < 1 ? shown.toPrecision(2) : shown.toFixed(shown < 10 ? 1 : 0)) + " % drawn individually (" +
      shared.panels.map((x) => fmtInt(x.detailCount) + " of " + fmtInt(x.A.n)).join(" | ") + "); the rest merged" +
      (pn.threshold ? " (smaller than " + fmtBytes(pn.threshold) + ")" : "");
    drawAll();
  }
  const drawAll = () => shared.drawAll();
  slider.addEventListener("input", applyDetail);
  const colourSel = el("select", { id: "colour" });
  const first = DATA.panels[0];
  const modes = [];
  if (DATA.panels.every((p) => p.categorised)) modes.push(["category", "category"]);
  modes.push(["module", "module"]);
  if (DATA.panels.every((p) => p.phased)) modes.push(["phase", "phase"]);
  for (const [v, t] of modes) colourSel.append(el("option", { value: v, text: t }));
  colourSel.value = shared.panels[0].colourMode;
  colourSel.addEventListener("change", () => { for (const pn of shared.panels) { pn.colourMode = colourSel.value; pn.prepareGroups(); } drawAll(); });
  const sizeSel = el("select", { id: "sizes" }, el("option", { value: "req", text: "requested (like memory_viz)" }), el("option", { value: "rnd", text: "rounded by the allocator" }));
  sizeSel.addEventListener("change", () => { for (const pn of shared.panels) { pn.sizeMode = sizeSel.value; pn.prepareSizes(); pn.renderDetails(); } applyDetail(); });
  const fit = el("input", { type: "checkbox", id: "fitcap" });
  fit.addEventListener("change", () => { shared.fitCapacity = fit.checked; shared.yview = null; drawAll(); });
  controls.append(...[
    el("label", {}, "Detail ", slider), sliderLabel,
    el("label", {}, "Colour by ", colourSel),
    el("label", {}, "Sizes ", sizeSel),
    capacity ? el("label", {}, fit, " y scale up to the capacity") : null].filter((x) => x));
  void first;

  if (compare) {
    const [a, b] = shared.panels;
    const t = el("table", { class: "kv compare" });
    t.append(el("tr", {}, el("th", { text: "" }), el("th", { text: a.p.name }), el("th", { text: b.p.name }), el("th", { text: "B − A" })));
    const row = (k, x, y) => t.append(el("tr", {}, el("th", { text: k }), el("td", { text: fmtBytes(x) }), el("td", { text: fmtBytes(y) }), el("td", { text: (y - x >= 0 ? "+" : "") + fmtBytes(y - x) })));
    row("peak active", a.p.peak.bytes, b.p.peak.bytes);
    row("peak reserved", a.p.peak.reserved_bytes, b.p.peak.reserved_bytes);
    const ca = new Map(a.p.peak.by_category), cb = new Map(b.p.peak.by_category);
    for (const k of new Set([...ca.keys(), ...cb.keys()])) row("at the peak: " + k, ca.get(k) || 0, cb.get(k) || 0);
    document.getElementById("comparison").append(el("h3", { text: "A vs B" }), t);
  }

  applyDetail();
  for (const pn of shared.panels) pn.renderDetails();
  const T_DRAWN = performance.now();
  window.addEventListener("resize", drawAll);

  const timings = {
    load_ms: T_DRAWN, // since navigation start: HTML parse + JSON parse + layout + first draw
    parse_ms: T_PARSED - T_START,
    build_ms: T_DRAWN - T_LAYOUT0,
    layout_ms: shared.panels.map((x) => x.layoutMs),
    first_frame_ms: shared.panels.map((x) => x.frameMs),
  };
  window.vramscopeReport = { shared, timings, slider, applyDetail };

  if (/selftest/.test(location.hash)) selftest();

  // Drives the page as a user would and writes what happened into #selftest (read by
  // tests/html.rs through chromium --dump-dom).
  function selftest() {
    const out = { ok: true, errors: [], timings };
    const fail = (m) => { out.ok = false; out.errors.push(m); };
    try {
      const pn = shared.panels[0], cv = pn.canvas;
      const painted = () => {
        const ctx = cv.getContext("2d"), g = pn.geom(), dpr = window.devicePixelRatio || 1;
        const img = ctx.getImageData(Math.round(g.l * dpr), Math.round(g.t * dpr), Math.round(g.pw * dpr), Math.round(g.ph * dpr)).data;
        let n = 0, h = 0;
        for (let i = 0; i < img.length; i += 4) {
          if (img[i + 3] > 0) n++;
          h = (h * 31 + img[i] + 7 * img[i + 1] + 13 * img[i + 2] + img[i + 3]) >>> 0;
        }
        return { n, h, total: img.length / 4 };
      };
      const before = painted();
      out.painted_fraction = before.n / before.total;
      out.rects_default = pn.drawnRects;
      out.detail_default = pn.detailCount;
      out.allocations = pn.A.n;
      out.events = pn.N;
      if (before.n === 0) fail("nothing drawn");
      // Frame time: zoom in and out and pan, as a user's wheel and drag would. The first
      // pass visits zoom levels for the first time (their coarse segments get built); the
      // second is what redrawing costs after that.
      const full = pn.view.slice();
      const pass = () => {
        const frames = [];
        for (let i = 0; i < 30; i++) {
          const w = (full[1] - full[0]) / Math.pow(1.25, i % 15), c = full[0] + (full[1] - full[0]) * (0.3 + 0.02 * i);
          pn.view = [c - w / 2, c + w / 2];
          pn.draw(); frames.push(pn.frameMs);
          if (!out.slowest_frame || pn.frameMs > out.slowest_frame.ms) out.slowest_frame = { ms: pn.frameMs, parts: pn.frameParts, view: pn.view.slice() };
        }
        frames.sort((a, b) => a - b);
        return { median: frames[frames.length >> 1], max: frames[frames.length - 1], mean: frames.reduce((a, b) => a + b, 0) / frames.length };
      };
      out.frame_ms_first_visit = pass();
      out.frame_ms = pass();
      out.segments = pn.segs.n;
      out.lods = [...pn.lods.entries()].map(([k, v]) => [k, v.n, v.ms]);
      pn.view = full; pn.draw();
      // Slider: fewer allocations drawn individually must change the picture.
      const v0 = slider.value;
      slider.value = "0";
      slider.dispatchEvent(new Event("input"));
      const low = painted();
      out.detail_low = pn.detailCount;
      out.rects_low = pn.drawnRects;
      out.slider_label_low = sliderLabel.textContent;
      out.slider_changed = low.h !== before.h && pn.detailCount < out.detail_default;
      if (!out.slider_changed) fail("moving the slider did not change the drawing");
      let t0;
      if (/full/.test(location.hash)) { // every allocation drawn individually (slow on a million events)
        slider.value = "1000";
        t0 = performance.now();
        slider.dispatchEvent(new Event("input"));
        out.full_detail = { detail: pn.detailCount, rects: pn.drawnRects, relayout_and_draw_ms: performance.now() - t0 };
      }
      slider.value = v0;
      slider.dispatchEvent(new Event("input"));
      const again = painted();
      out.slider_restored = again.h === before.h;
      // Tooltip: hover the largest allocation and read what the tooltip says.
      const e = pn.bySize[0];
      out.expected = e === undefined ? null : {
        requested: pn.A.req[e], rounded: pn.A.rnd[e], start: pn.A.start[e], end: pn.A.end[e],
        category: pn.A.cat[e] >= 0 ? pn.p.cats[pn.A.cat[e]] : null, module: pn.p.strs[pn.A.mod[e]], op: pn.p.strs[pn.A.op[e]],
        requested_text: fmtExact(pn.A.req[e]),
      };
      if (e !== undefined) {
        // Zoom in on it as a user would (wheel, shift+wheel) so that it spans many pixels.
        const a = Math.max(pn.A.start[e], -1), b = Math.min(pn.A.end[e], pn.N), w = Math.max(b - a, 4);
        pn.view = [Math.max(-1, a - w / 2), Math.min(pn.N, b + w / 2)];
        const mid = (Math.max(a, pn.view[0]) + Math.min(b, pn.view[1])) / 2;
        const sg = pn.segmentsOf(e).find(([s0, s1]) => s0 <= mid && mid < s1);
        if (sg) shared.yview = [Math.max(0, sg[2] - 3 * pn.sz[e]), Math.max(0, sg[2] - 3 * pn.sz[e]) + 7 * pn.sz[e]];
        shared.drawAll();
        out.zoomed_view = { x: pn.view, y: shared.yview };
        const pt = pn.pointOf(e);
        if (!pt) fail("largest allocation not drawn");
        else {
          cv.dispatchEvent(new MouseEvent("mousemove", { clientX: pt[0], clientY: pt[1], bubbles: true }));
          out.tooltip = pn.tip.hidden ? null : pn.tip.innerText;
          out.hovered = pn.hover;
          if (pn.hover !== e) fail("hover found allocation " + pn.hover + ", expected " + e);
        }
      }
      // The breakdown at the peak agrees with the Rust replay.
      const bd = pn.breakdown(pn.p.peak.at);
      out.peak_total_js = bd.total;
      out.by_category_js = bd.byCat;
      out.by_category_rust = pn.p.peak.by_category;
      out.by_module_top = bd.byMod.slice(0, 5);
      out.phases = pn.p.bands.length;
      t0 = performance.now();
      for (const x of shared.panels) x.renderDetails();
      out.details_ms = performance.now() - t0;
    } catch (err) {
      fail(String(err && err.stack || err));
    }
    // Hidden: --dump-dom serialises it anyway, and screenshots stay unchanged.
    document.body.append(el("pre", { id: "selftest", hidden: "", text: JSON.stringify(out) }));
  }
})();
