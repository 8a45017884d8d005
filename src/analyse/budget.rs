//! How much a snapshot read from disk may cost: every stage that reads one (the pickle
//! reader, the replay, the frame interner, the report writers) stops with an error naming
//! the budget's flag instead of growing without bound. Snapshots are untrusted input
//! (people attach them to bug reports), and a few kilobytes of shared references can
//! unfold into gigabytes.
//!
//! The defaults are sized from real snapshots. `vramscope profile --device meta --model
//! 2.7B` (26,372 trace entries, 2.99 MB) holds per trace entry 113 B of pickle, 3.2
//! containers, 0.31 memo entries, ~1.4 distinct frames and 31 B of HTML; the snapshot
//! `bench analyze` and tests/html.rs measure (40 meta 2.7B steps at context 128:
//! 1,051,564 entries, 87.7 MB) per entry 83 B, ~18.5 items as counted here (10.2 Python
//! container elements), 1.05 containers, 0.01 memo entries and 13 B of HTML, and `analyze`
//! of it peaks at 0.69 GB RSS through the tree reader. `analyze` reads with the streaming
//! reader (`pickle::condense`): trace entries become 48 B records as they are read and the
//! items, containers and memo budgets count only what it still holds, so the defaults admit
//! 10 M entries (`bench analyze`'s target) there; the tree reader (`view`, and the shapes the
//! streaming reader hands back) stops at ~1.2 M such entries, at its items budget. PyTorch's
//! own default is unbounded (`sys.maxsize`). A hostile file that fills any one tree budget
//! stays under 1 GB RSS: a counted item costs at most ~32 B once built (24 B while read), a
//! container ~120 B, a memo entry ~24 B (~80 B when keys come out of order), a stack value
//! 24 B; a trace entry costs ~0.15–0.25 KB through the replay and the page, bounded by
//! --max-trace-entries alone (~2 GB at its default, the 10 M-entry target's own cost); the
//! input is read through a window (a pipe or device whole, at most 256 MiB); tests/hostile.rs
//! measures each. Larger snapshots need the flags raised, and the memory that then costs.
use crate::pickle::Limits;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Bytes read from the snapshot file (`--max-input-bytes`).
    pub input_bytes: u64,
    /// Values stored: container elements (a dict entry counts 2) plus strings and bytes
    /// objects made (`--max-items`).
    pub items: usize,
    /// Lists, tuples, dicts, sets and bytes objects made (`--max-containers`).
    pub containers: usize,
    /// Memo entries (`--max-memo`).
    pub memo: usize,
    /// Unpickler stack: values pushed and not yet in a container (`--max-stack`).
    pub stack: usize,
    /// Nesting of containers, and open MARKs (`--max-depth`).
    pub depth: usize,
    /// Payload bytes of bytes objects in the result (`--max-bytes-objects`).
    pub bytes_objects: usize,
    /// Distinct frames plus the lengths of distinct frame lists, interned (`--max-frames`).
    pub frames: usize,
    /// Trace entries of the device shown plus blocks of its segments, as referenced
    /// (`--max-trace-entries`).
    pub trace_entries: usize,
    /// Bytes of the HTML page or JSON report written (`--max-output-bytes`).
    pub output_bytes: u64,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            // A 10 M-entry PyTorch snapshot is 1.39 GB. `analyze` reads a regular file through
            // a 1 MiB window, so the size costs time, not memory; a pipe or device is read
            // whole, at most WHOLE_READ (pickle.rs) of it.
            input_bytes: 2 << 30,
            // ~1.3 M entries of 18.5; a file of nothing but items: ≤ ~0.8 GB.
            items: 24_000_000,
            // ~2.8 M entries of 1.05 (0.9 M of 3.2); nothing but containers: ≤ ~0.4 GB.
            containers: 3_000_000,
            // Out-of-order keys: ≤ ~0.16 GB.
            memo: 2_000_000,
            // CPython writes list and dict items in batches of 1000; only a tuple or a
            // protocol-0 LIST/DICT of everything at once needs more. ≤ 24 MB.
            stack: 1_000_000,
            depth: 256,
            bytes_objects: 32 << 20,
            // ~1.4 M entries of 1.4 distinct frames (plus list entries); ≤ ~0.1 GB.
            frames: 2_000_000,
            // 10 M entries (issue 29's target) plus the blocks of their segments. The
            // streaming reader holds 48 B per entry, the replay ~0.15 KB (`analyze`) to
            // ~0.25 KB (`view`), whether the pickle stores each entry or refers to one entry
            // dict many times: ≤ ~2 GB for `analyze`, as the 10 M-entry target allows.
            trace_entries: 10_500_000,
            // 1 M entries of 13–31 B; the rest is room for frame strings.
            output_bytes: 128 << 20,
        }
    }
}

impl Budget {
    /// No bounds: for a snapshot vramscope itself built in memory (`profile`'s own report),
    /// which is not untrusted input.
    pub fn unlimited() -> Budget {
        Budget {
            input_bytes: u64::MAX,
            items: usize::MAX,
            containers: usize::MAX,
            memo: usize::MAX,
            stack: usize::MAX,
            depth: usize::MAX,
            bytes_objects: usize::MAX,
            frames: usize::MAX,
            trace_entries: usize::MAX,
            output_bytes: u64::MAX,
        }
    }

    /// The reader's share.
    pub fn pickle_limits(&self) -> Limits {
        Limits {
            max_depth: self.depth,
            max_items: self.items,
            max_bytes: self.bytes_objects,
            max_containers: self.containers,
            max_memo: self.memo,
            max_stack: self.stack,
            max_input_bytes: self.input_bytes,
        }
    }
}
