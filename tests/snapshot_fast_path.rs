//! The streaming reader's fast path for trace entries (`pickle::condense::entry`) against its
//! general opcode loop, on PyTorch-format snapshots as `bench analyze` writes them: the same
//! report, or the same error at the same byte, at every budget edge and under thousands of
//! byte mutations. The fast path may hand a file back to the tree reader (which is always
//! right), never give another answer.
use vramscope::analyse::budget::Budget;
use vramscope::analyse::snapshot::{analyse_replay, replay_condensed};
use vramscope::pickle::condense::{read_condensed, read_condensed_general, Refused};

/// What a read gives, as text: the report, "bail", or the error.
fn outcome(bytes: &[u8], b: &Budget, fast: bool) -> String {
    let read = if fast { read_condensed } else { read_condensed_general };
    match read(bytes, &b.pickle_limits(), b.trace_entries, b.frames) {
        Ok(c) => match replay_condensed(c, None, b).and_then(|rp| analyse_replay(&rp, 100.0, 50)) {
            Ok(r) => serde_json::to_string(&r).unwrap(),
            Err(e) => format!("replay error: {e}"),
        },
        Err(Refused::Bail) => "bail".into(),
        Err(Refused::File(e)) => format!("error: {e}"),
    }
}

fn snapshot(events: u64) -> Vec<u8> {
    let mut v = Vec::new();
    vramscope::bench::torch_snapshot::write(&mut v, events).unwrap();
    v
}

/// Fast and general agree; the fast path may only bail. Returns whether it did.
fn agree(bytes: &[u8], b: &Budget, what: &str) -> bool {
    let fast = outcome(bytes, b, true);
    if fast == "bail" {
        return true;
    }
    let general = outcome(bytes, b, false);
    assert_eq!(fast, general, "{what}");
    false
}

#[test]
fn snapshots_read_the_same_both_ways() {
    for events in [1u64, 1000, 1001, 2500, 20_000] {
        let bytes = snapshot(events);
        let b = Budget::default();
        assert!(!agree(&bytes, &b, &format!("{events} events")), "{events} events: handed back to the tree reader");
        // Past the first batch (which makes the list of records, and interns the frames
        // and tracebacks) nearly every entry takes the fast path.
        let Ok(c) = read_condensed(&bytes, &b.pickle_limits(), b.trace_entries, b.frames) else { panic!("{events} events: not read") };
        let general = read_condensed_general(&bytes, &b.pickle_limits(), b.trace_entries, b.frames).ok().unwrap();
        assert_eq!(general.fast_entries, 0);
        let past_first = events.saturating_sub(1000) as usize;
        assert!(c.fast_entries <= past_first && c.fast_entries * 10 >= past_first * 9, "{events} events: {} read by the fast path", c.fast_entries);
    }
}

/// The least budget below 2^24 for which `ok` holds (`ok` monotone), by bisection.
fn least_ok(ok: impl Fn(usize) -> bool, name: &str) -> usize {
    let (mut lo, mut hi) = (0usize, 1usize << 24);
    assert!(ok(hi), "{name}: not read at {hi}");
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// Each budget the fast path checks ahead, at the least value the general loop reads the
/// file with, one below, and one above: the same answer (one below, the same error at the
/// same byte).
#[test]
fn budget_edges_are_the_general_loops() {
    let bytes = snapshot(2500);
    type Set = fn(&mut Budget, usize);
    let dims: [(&str, Set); 5] = [
        ("items", |b, v| b.items = v),
        ("containers", |b, v| b.containers = v),
        ("memo", |b, v| b.memo = v),
        ("stack", |b, v| b.stack = v),
        ("depth", |b, v| b.depth = v),
    ];
    for (name, set) in dims {
        let with = |v: usize| {
            let mut b = Budget::default();
            set(&mut b, v);
            b
        };
        let ok = |v: usize| !outcome(&bytes, &with(v), false).starts_with("error");
        // The least budget the general loop reads the file with.
        let hi = least_ok(ok, name);
        for v in [hi.saturating_sub(2), hi - 1, hi, hi + 1] {
            assert!(!agree(&bytes, &with(v), &format!("{name} = {v}")), "{name} = {v}: handed back to the tree reader");
        }
    }
}

/// A small deterministic generator.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Bytes changed, and opcodes put in, inside the trace (where the fast path reads): the fast
/// path answers as the general loop does, or hands the file back.
#[test]
fn mutated_snapshots_read_the_same_both_ways() {
    let bytes = snapshot(1500);
    // The trace's second batch on (the first goes through the general loop).
    let from = bytes.len() / 3;
    // Opcodes that use a finished dict some other way, and others of the entries' own.
    let ops = [b'2', b'0', b'1', b'(', b'u', b's', b'a', b'e', b't', 0x85, 0x94, b'q', b'h', b'j', b'}', b']', b'N', 0x8c, b'K', b'M', b'J', 0x8a, 0x95];
    let mut rng = Rng(29);
    let (mut cases, mut bailed) = (0, 0);
    for i in 0..1200 {
        let mut m = bytes.clone();
        let at = from + rng.below(m.len() - from - 16);
        match i % 3 {
            0 => m[at] = rng.below(256) as u8,
            1 => m[at] = ops[rng.below(ops.len())],
            _ => m.insert(at, ops[rng.below(ops.len())]),
        }
        let b = if i % 2 == 0 { Budget::default() } else { Budget { items: 1 << 16, containers: 1 << 12, memo: 1 << 12, ..Budget::default() } };
        cases += 1;
        if agree(&m, &b, &format!("mutation {i} at byte {at}")) {
            bailed += 1;
        }
    }
    // Most mutations leave the fast path a file to read (else this proves little).
    assert!(bailed * 2 < cases, "{bailed} of {cases} handed back");
}

/// A large file's first pass runs on two threads, cut at a FRAME near the middle
/// (`read_file_condensed_split`; from 64 MiB on in use, here from any size): the same report
/// or the same error at the same byte as the one-thread read of the same bytes, on whole
/// snapshots, at the memo budget's edge, and under mutations on both sides of the cut
/// (frame headers included).
#[test]
fn split_first_pass_reads_as_one_thread() {
    use vramscope::pickle::condense::read_file_condensed_split;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pickle");
    let file_outcome = |bytes: &[u8], b: &Budget| -> String {
        std::fs::write(&path, bytes).unwrap();
        match read_file_condensed_split(&path, &b.pickle_limits(), b.trace_entries, b.frames, 0) {
            Ok(c) => match replay_condensed(c, None, b).and_then(|rp| analyse_replay(&rp, 100.0, 50)) {
                Ok(r) => serde_json::to_string(&r).unwrap(),
                Err(e) => format!("replay error: {e}"),
            },
            Err(Refused::Bail) => "bail".into(),
            Err(Refused::File(e)) => format!("error: {e}"),
        }
    };
    for events in [1u64, 1000, 5000, 20_000] {
        let bytes = snapshot(events);
        let b = Budget::default();
        assert_eq!(file_outcome(&bytes, &b), outcome(&bytes, &b, true), "{events} events");
        let c = read_file_condensed_split(&path, &b.pickle_limits(), b.trace_entries, b.frames, 0).ok().unwrap();
        // One event fits one frame: no frame to cut at.
        assert_eq!(c.split_first_pass, events > 1, "{events} events: split first pass");
    }
    let bytes = snapshot(5000);
    // The memo budget around the least the file reads with.
    let hi = least_ok(|m| !outcome(&bytes, &Budget { memo: m, ..Budget::default() }, true).starts_with("error"), "memo");
    for m in [hi - 1, hi, hi + 1] {
        let b = Budget { memo: m, ..Budget::default() };
        assert_eq!(file_outcome(&bytes, &b), outcome(&bytes, &b, true), "memo = {m}");
    }
    // Frame headers, for mutations aimed at them.
    let mut frames = Vec::new();
    let mut at = 2usize;
    while at + 9 <= bytes.len() && bytes[at] == 0x95 {
        frames.push(at);
        at += 9 + u64::from_le_bytes(bytes[at + 1..at + 9].try_into().unwrap()) as usize;
    }
    assert!(frames.len() > 4, "{} frames", frames.len());
    let ops = [b'.', b'(', b'h', b'j', b'q', 0x94, 0x95, b'}', b']', b'K', b'M'];
    let mut rng = Rng(31);
    for i in 0..300 {
        let mut m = bytes.clone();
        let at = match i % 3 {
            0 => frames[rng.below(frames.len())] + rng.below(10),
            _ => 2 + rng.below(m.len() - 18),
        };
        match i % 2 {
            0 => m[at] = rng.below(256) as u8,
            _ => m[at] = ops[rng.below(ops.len())],
        }
        let b = Budget::default();
        assert_eq!(file_outcome(&m, &b), outcome(&m, &b, true), "mutation {i} at byte {at}");
    }
}
