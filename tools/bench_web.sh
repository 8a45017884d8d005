#!/usr/bin/env bash
# The page's speed beside the native binary's: a Llama-3.1-8B training-step profile and a fit
# search, answered in headless Chromium and by the command line, plus the page's load size.
# The page's time is the run alone (the page loaded and the module compiled before), from the
# console lines page.js logs around it, timestamped by Chromium's log (its virtual time, which
# --dump-dom needs to wait for the answer, stands still during a call, so performance.now()
# reads 0 there); the native time is the whole process's wall clock, files written.
# Needs web/dist/ (tools/build_web.sh) and chromium; VRAMSCOPE names the native binary
# (default: target/release/vramscope, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
dist=web/dist
[ -f "$dist/vramscope.wasm" ] || { echo "web/dist/ is not built: run tools/build_web.sh" >&2; exit 1; }
bin=${VRAMSCOPE:-${CARGO_TARGET_DIR:-target}/release/vramscope}
[ -x "$bin" ] || cargo build --release --bin vramscope
tmp="$(mktemp -d)"
python3 -u -m http.server --bind 127.0.0.1 --directory "$dist" 0 > "$tmp/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
port=""
for _ in $(seq 50); do
  port="$(grep -o 'port [0-9]*' "$tmp/server.log" | grep -o '[0-9]*' || true)"
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "the static server did not start" >&2; exit 1; }
cpu="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "CPU: $cpu ($(nproc) cores); $(chromium --version 2>/dev/null | head -1)"
wasm=$(stat -c %s "$dist/vramscope.wasm"); js=$(cat "$dist"/*.js | wc -c); rest=$(cat "$dist"/*.html "$dist"/*.css | wc -c)
gz=$(gzip -9 -c "$dist/vramscope.wasm" | wc -c)
echo "load size: wasm $wasm bytes ($gz gzipped), js $js bytes, html+css $rest bytes"
enc() { python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
# Seconds between the page's "vramscope: run start" and "run done" console lines.
page_s() {
  python3 - "$1" <<'PY'
import re, sys
t = {}
for line in open(sys.argv[1], errors="replace"):
    m = re.search(r":(\d{4})/(\d\d)(\d\d)(\d\d\.\d+):INFO:CONSOLE.*\"vramscope: run (start|done)\"", line)
    if m:
        t[m.group(5)] = int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))
print(t["done"] - t["start"] if len(t) == 2 else "")
PY
}
printf "%-8s %-60s %10s %10s %7s\n" job flags page_s native_s ratio
for job in "profile|Llama-3.1-8B|--profile-type training" "fit|Llama-3.1-8B|--gpu RTX4090-24GB --load-in-4bit --lora-r 16 --dtype bf16"; do
  IFS='|' read -r cmd preset flags <<<"$job"
  best_page=""; best_native=""
  for i in 1 2 3; do
    chromium --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/prof$i" --enable-logging=stderr --v=0 \
      --virtual-time-budget=600000 --dump-dom \
      "http://127.0.0.1:$port/index.html#command=$cmd&preset=$preset&flags=$(enc "$flags")" > "$tmp/dom" 2> "$tmp/log" || true
    grep -q 'data-exit-code="0"' "$tmp/dom" || { echo "the page did not answer $cmd: $(grep -o 'id="error"[^<]*' "$tmp/dom")" >&2; exit 1; }
    s="$(page_s "$tmp/log")"
    [ -n "$s" ] || { echo "no run timing in chromium's log for $cmd" >&2; exit 1; }
    device=(); [ "$cmd" = profile ] && device=(--device meta --out-dir "$tmp/out")
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    "$bin" "$cmd" --preset "$preset" "${device[@]}" $flags > /dev/null 2>&1
    native=$(python3 -c "print(($(date +%s%N) - $t0) / 1e9)")
    best_page=$(python3 -c "print(min($s, ${best_page:-1e18}))")
    best_native=$(python3 -c "print(min($native, ${best_native:-1e18}))")
  done
  printf "%-8s %-60s %10.3f %10.3f %7.2f\n" "$cmd" "--preset $preset $flags" "$best_page" "$best_native" "$(python3 -c "print($best_page/$best_native)")"
done
echo "(best of 3; page: the WebAssembly run in headless Chromium, one thread; native: the whole process)"
