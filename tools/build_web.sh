#!/usr/bin/env bash
# Builds the static page: the library as WebAssembly (meta device) plus web/'s HTML and JS,
# into web/dist/ (any static host serves it; it works offline once loaded).
#
# Needs: rustup's nightly toolchain with rust-src and the wasm32-unknown-unknown target (the
# allocator model's out-of-memory unwinds as a panic that the runs catch, and only a std built
# with -Zbuild-std has panic=unwind on wasm: WebAssembly exception handling, which Chromium and
# Firefox run), and wasm-bindgen-cli of the wasm-bindgen crate's version (Cargo.toml pins it).
#   rustup toolchain install nightly --profile minimal --component rust-src --target wasm32-unknown-unknown
#   cargo install wasm-bindgen-cli --version 0.2.130
# WASM_BINDGEN names the wasm-bindgen binary (default: the one on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
bindgen=${WASM_BINDGEN:-wasm-bindgen}
RUSTFLAGS='-C panic=unwind -C target-feature=+exception-handling --cfg getrandom_backend="wasm_js"' \
CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo +nightly rustc -Zbuild-std=std,panic_unwind --release --lib --crate-type cdylib \
  --target wasm32-unknown-unknown --no-default-features --features wasm
rm -rf web/dist
mkdir -p web/dist
"$bindgen" --target web --no-typescript --out-dir web/dist "$target_dir/wasm32-unknown-unknown/release/vramscope.wasm"
cp web/index.html web/page.js web/style.css web/dist/
echo "built web/dist/ ($(du -sb web/dist | cut -f1) bytes): serve it from any static host, e.g. python3 -m http.server -d web/dist"
