// The loader of vramscope's WebAssembly build (src/web/abi.rs): plain exports over byte
// buffers, no wasm-bindgen. The module is wasm64 (memory64: the allocator model counts bytes in
// a 64-bit usize), so its pointers and lengths are BigInts here.
//
// A request is JSON {words, files: [[name, text]]}; an answer is 8 bytes of little-endian
// length, then the outcome's JSON (its own 8-byte length first) and the files' bytes in the
// order the JSON lists them. A trap (a bug: bad input is an error, never a trap) answers exit
// code 1 with "internal error: …", and the next call runs in a fresh instance.

const enc = new TextEncoder();
const dec = new TextDecoder();

export class Vramscope {
  constructor(module) {
    this.module = module;
    this.instance = null;
  }

  // A new instance of the compiled module, with the imports src/clock.rs and abi.rs name.
  async start() {
    const self = this;
    const imports = {
      vramscope: {
        performance_now: () => performance.now(),
        date_now: () => Date.now(),
        random_fill: (ptr, len) => {
          // crypto.getRandomValues takes at most 65536 bytes a call.
          const buf = new Uint8Array(self.memory().buffer, Number(ptr), Number(len));
          for (let i = 0; i < buf.length; i += 65536) crypto.getRandomValues(buf.subarray(i, i + 65536));
        },
      },
    };
    this.instance = await WebAssembly.instantiate(this.module, imports);
  }

  memory() {
    return this.instance.exports.memory;
  }

  // Calls export `name` with `bytes` as its request; the answer's bytes (a copy).
  async call(name, bytes) {
    if (!this.instance) await this.start();
    const x = this.instance.exports;
    const inp = x.vs_alloc(BigInt(bytes.length));
    new Uint8Array(this.memory().buffer, Number(inp), bytes.length).set(bytes);
    let ans;
    try {
      ans = x[name](inp, BigInt(bytes.length));
    } catch (e) {
      // The instance's state is lost after a trap: the next call starts a new one.
      this.instance = null;
      throw e;
    }
    x.vs_free(inp, BigInt(bytes.length));
    // Views are made after the call: memory.grow detaches the old buffer.
    const len = new DataView(this.memory().buffer, Number(ans), 8).getBigUint64(0, true);
    const out = new Uint8Array(this.memory().buffer, Number(ans) + 8, Number(len)).slice();
    x.vs_free(ans, len + 8n);
    return out;
  }

  // Runs the command line's `words` (without `vramscope`) with `files` ({name: text}, the
  // pasted files by the name the flags give them). Returns {out, file(name)}: `out` is the
  // outcome (exit_code, text, error, notes, answer, files: [{name, bytes}]).
  async run(words, files = {}) {
    const req = enc.encode(JSON.stringify({ words, files: Object.entries(files) }));
    let b;
    try {
      b = await this.call('vs_run', req);
    } catch (e) {
      const out = { exit_code: 1, text: '', error: `internal error: ${e}`, notes: [], answer: null, files: [] };
      return { out, file: () => null };
    }
    const dv = new DataView(b.buffer);
    const head = Number(dv.getBigUint64(0, true));
    const out = JSON.parse(dec.decode(b.subarray(8, 8 + head)));
    const at = {};
    let o = 8 + head;
    for (const f of out.files) {
      at[f.name] = b.subarray(o, o + f.bytes);
      o += f.bytes;
    }
    return { out, file: (name) => at[name] ?? null };
  }

  // The `--help` text of a subcommand ('' for vramscope's).
  async help(subcommand) {
    try {
      return dec.decode(await this.call('vs_help', enc.encode(subcommand)));
    } catch (e) {
      return `internal error: ${e}`;
    }
  }
}

// Fetches and compiles the module (by default vramscope.wasm beside this file).
export async function load(url = new URL('vramscope.wasm', import.meta.url)) {
  const r = await fetch(url);
  const module = await (WebAssembly.compileStreaming && (r.headers.get('content-type') ?? '').startsWith('application/wasm')
    ? WebAssembly.compileStreaming(r)
    : r.arrayBuffer().then((b) => WebAssembly.compile(b)));
  const v = new Vramscope(module);
  await v.start();
  return v;
}
