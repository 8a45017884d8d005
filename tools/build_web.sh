#!/usr/bin/env bash
# Builds the static page: the library as WebAssembly (meta device) plus web/'s HTML and JS,
# into web/dist/ (any static host serves it; it works offline once loaded).
#
# The target is wasm64-unknown-unknown (memory64): the allocator model counts bytes in usize,
# and a 7B step's tens of GiB overflow wasm32's 32-bit usize. It is a tier-3 target, so std is
# built here (-Zbuild-std, on nightly with rust-src), which also gives panic=unwind on wasm
# (WebAssembly exception handling): the allocator model's out-of-memory is a panic the runs
# catch. Chromium runs both (memory64 since 133). Also needs wasm-bindgen-cli of the
# wasm-bindgen crate's version (Cargo.toml pins it).
#   rustup toolchain install nightly --profile minimal --component rust-src
#   cargo install wasm-bindgen-cli --version 0.2.130
# WASM_BINDGEN names the wasm-bindgen binary (default: the one on PATH).
#
# Status: does not build yet. wasm-bindgen 0.2.130 (the latest) fails to compile for wasm64
# with panic=unwind (its convert/closures.rs gates the unwind path on wasm32 only), and web-time
# (indicatif's and our clock) pulls it in. Hence not in .ci/run; tests/web_page.rs skips.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
bindgen=${WASM_BINDGEN:-wasm-bindgen}
RUSTFLAGS='-C panic=unwind -C target-feature=+exception-handling --cfg getrandom_backend="custom"' \
CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo +nightly rustc -Zbuild-std=std,panic_unwind --release --lib --crate-type cdylib \
  --target wasm64-unknown-unknown --no-default-features --features wasm
rm -rf web/dist
mkdir -p web/dist
"$bindgen" --target web --no-typescript --out-dir web/dist "$target_dir/wasm64-unknown-unknown/release/vramscope.wasm"
cp web/index.html web/page.js web/style.css web/dist/
echo "built web/dist/ ($(du -sb web/dist | cut -f1) bytes): serve it from any static host, e.g. python3 -m http.server -d web/dist"
