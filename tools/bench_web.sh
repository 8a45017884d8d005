#!/usr/bin/env bash
# The page's speed beside the native binary's: a Llama-3.1-8B training-step profile and a fit
# search, answered in headless Chromium (the page's own timer around the WebAssembly call, the
# page loaded and compiled before) and by the command line (wall clock of the whole process),
# plus the page's load size. Needs web/dist/ (tools/build_web.sh) and chromium; VRAMSCOPE names
# the native binary (default: target/release/vramscope, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
dist=web/dist
[ -f "$dist/vramscope.wasm" ] || { echo "web/dist/ is not built: run tools/build_web.sh" >&2; exit 1; }
bin=${VRAMSCOPE:-${CARGO_TARGET_DIR:-target}/release/vramscope}
[ -x "$bin" ] || cargo build --release
tmp="$(mktemp -d)"
trap 'kill $server 2>/dev/null; rm -rf "$tmp"' EXIT
port=$((20000 + RANDOM % 20000))
python3 -m http.server --bind 127.0.0.1 --directory "$dist" "$port" >/dev/null 2>&1 &
server=$!
sleep 1
cpu="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
echo "CPU: $cpu ($(nproc) cores); $(chromium --version 2>/dev/null | head -1)"
wasm=$(stat -c %s "$dist/vramscope.wasm"); js=$(cat "$dist"/*.js | wc -c); rest=$(cat "$dist"/*.html "$dist"/*.css | wc -c)
gz=$(cat "$dist"/* | gzip -9 | wc -c)
echo "load size: wasm $wasm bytes, js $js bytes, html+css $rest bytes; all gzipped $gz bytes"
enc() { python3 -c 'import sys,urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"; }
printf "%-12s %12s %12s %8s\n" job page_ms native_ms ratio
for job in "profile|Llama-3.1-8B|--profile-type training" "fit|Llama-3.1-8B|--gpu RTX4090-24GB --load-in-4bit --lora-r 16 --dtype bf16"; do
  IFS='|' read -r cmd preset flags <<<"$job"
  best_page=""; best_native=""
  for i in 1 2 3; do
    dom="$(chromium --headless --no-sandbox --disable-gpu --user-data-dir="$tmp/prof$i" --virtual-time-budget=600000 --dump-dom \
      "http://127.0.0.1:$port/index.html#command=$cmd&preset=$preset&flags=$(enc "$flags")" 2>/dev/null)"
    ms="$(grep -o 'data-ms="[0-9.]*"' <<<"$dom" | head -1 | grep -o '[0-9.]*')"
    [ -n "$ms" ] || { echo "the page did not answer $cmd" >&2; exit 1; }
    device=(); [ "$cmd" = profile ] && device=(--device meta --out-dir "$tmp/out")
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    "$bin" $cmd --preset "$preset" "${device[@]}" $flags >/dev/null 2>&1 || [ $? = 3 ]
    native=$(( ($(date +%s%N) - t0) / 1000000 ))
    best_page=$(python3 -c "print(min(float('$ms'), float('${best_page:-1e18}')))")
    best_native=$(( native < ${best_native:-999999999} ? native : ${best_native:-999999999} ))
  done
  printf "%-12s %12.0f %12d %8.2f\n" "$cmd" "$best_page" "$best_native" "$(python3 -c "print($best_page/$best_native)")"
done
echo "(best of 3; page: the run() call in the page; native: the whole process, files written)"
