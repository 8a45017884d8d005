//! A synthetic memory snapshot shaped as PyTorch writes one, streamed to disk at any size:
//! what `bench analyze` reads. `torch.cuda.memory._dump_snapshot` is `pickle.dump` (protocol
//! 4) of `_snapshot()`, so the bytes follow CPython's pickler: 64 KiB FRAMEs, a MEMOIZE after
//! every str, list and dict, a shared object written once and then fetched by (LONG_)BINGET,
//! items in MARK…APPENDS / MARK…SETITEMS batches of 1000, ints in their smallest form.
//!
//! The content follows the allocator's `TraceEntry` (torch/cuda/memory.py): `action`, `addr`,
//! `size`, `stream`, `time_us`, `frames`, `compile_context`, `user_metadata`. As
//! `memory_snapshot.cpp` symbolizes them, frame dicts are shared by every traceback that
//! holds them, but each entry's `frames` is a list of its own. The trace is a training loop's:
//! activations allocated in the forward and freed in reverse in the backward, temporaries
//! freed at once, `free_requested` followed by its `free_completed`, freed blocks reused by
//! size, a `segment_alloc` for each new block; the final `segments` hold the blocks live at
//! the end. It is deterministic: one seed, no clock.
use std::io::{self, Write};

/// CPython's `_FRAME_SIZE_TARGET`.
const FRAME_TARGET: usize = 64 * 1024;
const BATCH: usize = 1000;
const BASE_ADDR: u64 = 0x7f3a_0000_0000;
const START_US: u64 = 1_764_000_000_000_000;

/// What was written: trace entries, live blocks at the end, distinct frames and stacks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Written {
    pub events: u64,
    pub live_at_end: u64,
    pub bytes: u64,
    /// The peak of active (requested) bytes over the trace, as memory_viz counts it.
    pub peak_active: u64,
}

/// A protocol-4 pickle stream as CPython writes it.
struct Pickler<W: Write> {
    out: W,
    frame: Vec<u8>,
    memo: u32,
    bytes: u64,
}

impl<W: Write> Pickler<W> {
    fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&[0x80, 4])?;
        Ok(Pickler { out, frame: Vec::with_capacity(FRAME_TARGET + 4096), memo: 0, bytes: 2 })
    }

    /// Close the current frame when it reached the target, as CPython's `commit_frame`.
    fn commit(&mut self, force: bool) -> io::Result<()> {
        if self.frame.is_empty() || (!force && self.frame.len() < FRAME_TARGET) {
            return Ok(());
        }
        self.out.write_all(&[0x95])?;
        self.out.write_all(&(self.frame.len() as u64).to_le_bytes())?;
        self.out.write_all(&self.frame)?;
        self.bytes += 9 + self.frame.len() as u64;
        self.frame.clear();
        Ok(())
    }

    fn op(&mut self, b: &[u8]) {
        self.frame.extend_from_slice(b);
    }

    fn memoize(&mut self) -> u32 {
        self.op(&[0x94]);
        self.memo += 1;
        self.memo - 1
    }

    fn get(&mut self, i: u32) {
        match u8::try_from(i) {
            Ok(b) => self.op(&[b'h', b]),
            Err(_) => {
                self.op(b"j");
                self.op(&i.to_le_bytes());
            }
        }
    }

    /// A new str object (memoized, as CPython does from protocol 4 on).
    fn str(&mut self, s: &str) -> u32 {
        let b = s.as_bytes();
        if b.len() < 256 {
            self.op(&[0x8c, b.len() as u8]);
        } else {
            self.op(b"X");
            self.op(&(b.len() as u32).to_le_bytes());
        }
        self.op(b);
        self.memoize()
    }

    fn int(&mut self, i: i64) {
        if let Ok(b) = u8::try_from(i) {
            self.op(&[b'K', b]);
        } else if let Ok(h) = u16::try_from(i) {
            self.op(b"M");
            self.op(&h.to_le_bytes());
        } else if let Ok(w) = i32::try_from(i) {
            self.op(b"J");
            self.op(&w.to_le_bytes());
        } else {
            let b = i.to_le_bytes();
            let mut n = 8;
            while n > 1 && ((b[n - 1] == 0 && b[n - 2] < 0x80) || (b[n - 1] == 0xff && b[n - 2] >= 0x80)) {
                n -= 1;
            }
            self.op(&[0x8a, n as u8]);
            self.op(&b[..n]);
        }
    }

    fn finish(mut self) -> io::Result<u64> {
        self.op(b".");
        self.commit(true)?;
        self.out.flush()?;
        Ok(self.bytes)
    }
}

/// A str written once, then fetched from the memo.
#[derive(Clone, Copy)]
struct Shared(Option<u32>);

impl Shared {
    fn put<W: Write>(&mut self, p: &mut Pickler<W>, s: &str) {
        match self.0 {
            Some(i) => p.get(i),
            None => self.0 = Some(p.str(s)),
        }
    }
}

/// A tiny deterministic generator (64-bit LCG, high bits out).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The allocation sizes of the loop (bytes requested), from 512 B norms to 64 MiB logits.
const SIZES: [u64; 10] = [512, 8192, 131_072, 2_097_152, 5_242_880, 10_485_760, 16_777_216, 20_971_520, 41_943_040, 67_108_864];

/// The caching allocator's block size for a request (512 B granules; 2 MiB above 1 MiB, as
/// kRoundLarge), enough to make blocks reused by size.
fn rounded(size: u64) -> u64 {
    if size <= 1 << 20 {
        size.div_ceil(512) * 512
    } else {
        size.div_ceil(2 << 20) * (2 << 20)
    }
}

/// One trace entry of the simulated loop.
#[derive(Clone, Copy)]
enum Ev {
    SegmentAlloc { addr: u64, size: u64 },
    Alloc { addr: u64, size: u64 },
    FreeRequested { addr: u64, size: u64 },
    FreeCompleted { addr: u64, size: u64 },
}

/// The training loop, as a stream of entries, `events` of them. `stack` of each entry: an
/// index into the traceback set.
struct Loop {
    rng: Rng,
    /// Free blocks by rounded size (address), reused last-in first-out.
    free: std::collections::HashMap<u64, Vec<u64>>,
    next_addr: u64,
    /// Forward activations live now: (addr, size, stack).
    saved: Vec<(u64, u64, usize)>,
    queue: std::collections::VecDeque<(Ev, usize)>,
    /// Blocks live as queued: addr → block size.
    queued_live: std::collections::HashMap<u64, u64>,
    /// Blocks live after the entries handed out: addr → (requested size, block size).
    live: std::collections::BTreeMap<u64, (u64, u64)>,
    /// Every block whose `segment_alloc` was handed out (addr, block size), for the final
    /// segments.
    blocks: Vec<(u64, u64)>,
    phase: usize,
    active: u64,
    peak: u64,
}

impl Loop {
    fn new() -> Loop {
        Loop {
            rng: Rng(0x5eed),
            free: Default::default(),
            next_addr: BASE_ADDR,
            saved: Vec::new(),
            queue: Default::default(),
            queued_live: Default::default(),
            live: Default::default(),
            blocks: Vec::new(),
            phase: 0,
            active: 0,
            peak: 0,
        }
    }

    fn alloc(&mut self, size: u64, stack: usize) -> u64 {
        let block = rounded(size);
        let addr = match self.free.get_mut(&block).and_then(Vec::pop) {
            Some(a) => a,
            None => {
                let a = self.next_addr;
                self.next_addr += block;
                self.queue.push_back((Ev::SegmentAlloc { addr: a, size: block }, stack));
                a
            }
        };
        self.queued_live.insert(addr, block);
        self.queue.push_back((Ev::Alloc { addr, size }, stack));
        addr
    }

    fn free(&mut self, addr: u64, size: u64, stack: usize) {
        let block = self.queued_live.remove(&addr).unwrap_or(rounded(size));
        self.free.entry(block).or_default().push(addr);
        self.queue.push_back((Ev::FreeRequested { addr, size }, stack));
        self.queue.push_back((Ev::FreeCompleted { addr, size }, stack));
    }

    /// The next entry and its traceback, refilling the queue a layer at a time: forward
    /// layers save activations and free their temporaries, backward layers free them in
    /// reverse around their gradients' temporaries.
    fn next(&mut self, stacks: usize) -> (Ev, usize) {
        while self.queue.is_empty() {
            let layer_stack = |s: &mut Loop| s.rng.below(stacks as u64) as usize;
            if self.phase < 24 {
                for _ in 0..8 {
                    let (size, st) = (SIZES[self.rng.below(SIZES.len() as u64) as usize], layer_stack(self));
                    let a = self.alloc(size, st);
                    self.saved.push((a, size, st));
                }
                let (size, st) = (SIZES[self.rng.below(6) as usize], layer_stack(self));
                let t = self.alloc(size, st);
                self.free(t, size, st);
            } else {
                let (size, st) = (SIZES[self.rng.below(8) as usize], layer_stack(self));
                let g = self.alloc(size, st);
                for _ in 0..8 {
                    if let Some((a, s, st)) = self.saved.pop() {
                        self.free(a, s, st);
                    }
                }
                self.free(g, size, st);
            }
            self.phase = (self.phase + 1) % 48;
        }
        let e = self.queue.pop_front().unwrap_or((Ev::Alloc { addr: 0, size: 0 }, 0));
        match e.0 {
            Ev::SegmentAlloc { addr, size } => self.blocks.push((addr, size)),
            Ev::Alloc { addr, size } => {
                self.live.insert(addr, (size, rounded(size)));
                self.active += size;
                self.peak = self.peak.max(self.active);
            }
            Ev::FreeCompleted { addr, size } => {
                self.live.remove(&addr);
                self.active -= size;
            }
            Ev::FreeRequested { .. } => {}
        }
        e
    }
}

/// A frame: (index of its filename, line, name).
type FrameSpec = (usize, u32, String);

/// Frames, their filenames, and the tracebacks made of them (frame indices, innermost first).
fn tracebacks() -> (Vec<FrameSpec>, Vec<&'static str>, Vec<Vec<usize>>) {
    let files = vec![
        "/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py",
        "/usr/lib/python3.12/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3.12/site-packages/torch/nn/functional.py",
        "/usr/lib/python3.12/site-packages/transformers/models/llama/modeling_llama.py",
        "/usr/lib/python3.12/site-packages/torch/autograd/graph.py",
        "/usr/lib/python3.12/site-packages/torch/_tensor.py",
        "/usr/lib/python3.12/site-packages/torch/optim/adamw.py",
        "train.py",
    ];
    let mut rng = Rng(0xf4a3e5);
    let frames: Vec<FrameSpec> =
        (0..400).map(|i| (i % files.len(), 20 + rng.below(1500) as u32, format!("fn_{}", rng.below(120)))).collect();
    let stacks = (0..96)
        .map(|_| {
            let depth = 8 + rng.below(9) as usize;
            (0..depth).map(|_| rng.below(frames.len() as u64) as usize).collect()
        })
        .collect();
    (frames, files, stacks)
}

/// Stream a snapshot of `events` trace entries on device 0 into `out`.
pub fn write(out: impl Write, events: u64) -> io::Result<Written> {
    let (frames, files, stacks) = tracebacks();
    // The live blocks at the end come first in the file (`segments` precedes
    // `device_traces`), so the loop runs once without writing.
    let mut dry = Loop::new();
    for _ in 0..events {
        dry.next(stacks.len());
    }
    let mut p = Pickler::new(out)?;
    let key = |p: &mut Pickler<_>, k: &mut Shared, s: &str| k.put(p, s);
    let [mut k_segments, mut k_traces, mut k_settings, mut k_device, mut k_address, mut k_total, mut k_stream, mut k_type, mut k_allocated, mut k_active, mut k_blocks, mut k_size, mut k_requested, mut k_state, mut k_action, mut k_addr, mut k_time, mut k_frames, mut k_cc, mut k_um, mut k_filename, mut k_line, mut k_name] =
        [Shared(None); 23];
    let [mut s_large, mut s_active, mut s_inactive, mut s_na, mut s_empty] = [Shared(None); 5];
    let mut acts = [Shared(None); 4];
    let mut file_ids = vec![Shared(None); files.len()];
    let mut name_ids: std::collections::HashMap<String, u32> = Default::default();
    let mut frame_ids: Vec<Option<u32>> = vec![None; frames.len()];

    p.op(b"}");
    p.memoize();
    p.op(b"(");
    key(&mut p, &mut k_segments, "segments");
    p.op(b"]");
    p.memoize();
    // One segment per block (what `segment_alloc` made), its one block live or inactive.
    for chunk in dry.blocks.chunks(BATCH) {
        p.op(b"(");
        for &(addr, block) in chunk {
            let live = dry.live.get(&addr).copied();
            p.op(b"}");
            p.memoize();
            p.op(b"(");
            key(&mut p, &mut k_device, "device");
            p.int(0);
            key(&mut p, &mut k_address, "address");
            p.int(addr as i64);
            key(&mut p, &mut k_total, "total_size");
            p.int(block as i64);
            key(&mut p, &mut k_stream, "stream");
            p.int(0);
            key(&mut p, &mut k_type, "segment_type");
            s_large.put(&mut p, "large");
            key(&mut p, &mut k_allocated, "allocated_size");
            p.int(live.map_or(0, |l| l.1) as i64);
            key(&mut p, &mut k_active, "active_size");
            p.int(live.map_or(0, |l| l.1) as i64);
            key(&mut p, &mut k_blocks, "blocks");
            p.op(b"]");
            p.memoize();
            p.op(b"}");
            p.memoize();
            p.op(b"(");
            key(&mut p, &mut k_address, "address");
            p.int(addr as i64);
            key(&mut p, &mut k_size, "size");
            p.int(block as i64);
            key(&mut p, &mut k_requested, "requested_size");
            p.int(live.map_or(0, |l| l.0) as i64);
            key(&mut p, &mut k_state, "state");
            match live {
                Some(_) => s_active.put(&mut p, "active_allocated"),
                None => s_inactive.put(&mut p, "inactive"),
            }
            key(&mut p, &mut k_frames, "frames");
            p.op(b"]");
            p.memoize();
            p.op(b"u");
            p.op(b"a");
            p.op(b"u");
            p.commit(false)?;
        }
        p.op(b"e");
    }
    key(&mut p, &mut k_traces, "device_traces");
    p.op(b"]");
    p.memoize();
    p.op(b"]");
    p.memoize();
    let mut sim = Loop::new();
    let mut written = 0u64;
    while written < events {
        p.op(b"(");
        let n = (events - written).min(BATCH as u64);
        for _ in 0..n {
            let (ev, stack) = sim.next(stacks.len());
            let (a, addr, size) = match ev {
                Ev::SegmentAlloc { addr, size } => (0, addr, size),
                Ev::Alloc { addr, size } => (1, addr, size),
                Ev::FreeRequested { addr, size } => (2, addr, size),
                Ev::FreeCompleted { addr, size } => (3, addr, size),
            };
            p.op(b"}");
            p.memoize();
            p.op(b"(");
            key(&mut p, &mut k_action, "action");
            acts[a].put(&mut p, ["segment_alloc", "alloc", "free_requested", "free_completed"][a]);
            key(&mut p, &mut k_addr, "addr");
            p.int(addr as i64);
            key(&mut p, &mut k_size, "size");
            p.int(size as i64);
            key(&mut p, &mut k_stream, "stream");
            p.int(0);
            key(&mut p, &mut k_time, "time_us");
            p.int((START_US + 3 * written) as i64);
            key(&mut p, &mut k_frames, "frames");
            p.op(b"]");
            p.memoize();
            p.op(b"(");
            for &f in &stacks[stack] {
                match frame_ids[f] {
                    Some(i) => p.get(i),
                    None => {
                        let (file, line, name) = &frames[f];
                        p.op(b"}");
                        frame_ids[f] = Some(p.memoize());
                        p.op(b"(");
                        key(&mut p, &mut k_filename, "filename");
                        file_ids[*file].put(&mut p, files[*file]);
                        key(&mut p, &mut k_line, "line");
                        p.int(i64::from(*line));
                        key(&mut p, &mut k_name, "name");
                        match name_ids.get(name) {
                            Some(&i) => p.get(i),
                            None => {
                                let i = p.str(name);
                                name_ids.insert(name.clone(), i);
                            }
                        }
                        p.op(b"u");
                    }
                }
            }
            p.op(b"e");
            key(&mut p, &mut k_cc, "compile_context");
            s_na.put(&mut p, "N/A");
            key(&mut p, &mut k_um, "user_metadata");
            s_empty.put(&mut p, "");
            p.op(b"u");
            p.commit(false)?;
            written += 1;
        }
        p.op(b"e");
    }
    p.op(b"a");
    key(&mut p, &mut k_settings, "allocator_settings");
    p.op(b"}");
    p.memoize();
    p.op(b"u");
    let bytes = p.finish()?;
    Ok(Written { events, live_at_end: dry.live.len() as u64, bytes, peak_active: sim.peak })
}
