#!/usr/bin/env bash
# Builds the static page: the library as WebAssembly (meta device) plus web/'s HTML and JS,
# into web/dist/ (any static host serves it; it works offline once loaded).
#
# The target is wasm64-unknown-unknown (memory64), not wasm32: the allocator model counts bytes
# in usize, and a 7B step's tens of GiB overflow wasm32's 32-bit usize. It is a tier-3 target,
# so std is built here (-Zbuild-std, nightly with rust-src), which also gives panic=unwind on
# wasm (WebAssembly exception handling): the allocator model's out-of-memory is a panic that
# fit's search and the profile runs catch. Chromium runs both (memory64 since 133). No
# wasm-bindgen (it does not compile for wasm64 with panic=unwind): src/web/abi.rs exports plain
# functions and web/vramscope.js loads them. The stack is 16 MiB, as deep as a native thread's
# needs (wasm-ld's default of 1 MiB overflows, as a memory access out of bounds, on a 2.7B
# training step). Needs:
#   rustup toolchain install nightly --profile minimal --component rust-src
# RUST_NIGHTLY names the toolchain (default: nightly).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
nightly=${RUST_NIGHTLY:-nightly}
if ! rustc +"$nightly" --print sysroot >/dev/null 2>&1 || [ ! -d "$(rustc +"$nightly" --print sysroot)/lib/rustlib/src/rust/library" ]; then
  echo "tools/build_web.sh needs the $nightly toolchain with rust-src: rustup toolchain install $nightly --profile minimal --component rust-src" >&2
  exit 1
fi
RUSTFLAGS='-C panic=unwind -C target-feature=+exception-handling --cfg getrandom_backend="custom"' \
CARGO_PROFILE_RELEASE_DEBUG=0 \
  cargo +"$nightly" rustc -Zbuild-std=std,panic_unwind --release --lib --crate-type cdylib \
  --target wasm64-unknown-unknown --no-default-features --features wasm \
  -- -C link-arg=-zstack-size=16777216
rm -rf web/dist
mkdir -p web/dist
cp "$target_dir/wasm64-unknown-unknown/release/vramscope.wasm" web/dist/
cp web/index.html web/page.js web/vramscope.js web/style.css web/dist/
echo "built web/dist/ ($(du -sb web/dist | cut -f1) bytes): serve it from any static host, e.g. python3 -m http.server -d web/dist"
