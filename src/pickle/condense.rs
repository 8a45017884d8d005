//! The reader's streaming mode for memory snapshots: each trace-entry dict becomes a
//! fixed-size [`TraceRecord`] as the APPENDS that puts it into its list arrives, its frame
//! list interned on the way, and the dict is let go. Memo slots hold only what the pickle
//! fetches again (a first pass over the opcodes finds those keys), so the entries' own
//! dicts and lists, which CPython memoizes but never fetches, cost nothing once read. A
//! 10 M-entry snapshot then costs its records (48 B each), not its tree (~400 B each).
//!
//! The mode only takes what it can condense without changing a result: a dict appended to
//! a list of records, or the first batch of an empty list whose first dict has a string
//! `action`, held by nothing else (neither fetched from the memo nor DUP'ed), whose values
//! are scalars, `frames` aside (a list of frame dicts of scalars). Anything else stays a
//! tree. Where the condensed form cannot stand for the tree (a container changed after it
//! was condensed, records anywhere but `device_traces[d]`, a list of records given an item
//! that is no entry, a trace list of entries left as dicts), the read stops with [`BAIL`]
//! and the caller reads the file again as a tree: the result is always the tree reader's.
use super::input::Input;
use super::{convert, Item, Limits, Node, PickleError, Reader, Res, Seq, Value};
use crate::analyse::frames::{FrameTable, NO_FRAMES};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

mod entry;
pub(super) use entry::Pending;

/// The error message that sends the caller back to the tree reader.
pub const BAIL: &str = "snapshot shape the condensing reader does not take (read again as a tree)";

/// Records per chunk of a list: chunks are let go one by one as the replay consumes them.
pub const CHUNK: usize = 1 << 16;

/// One trace entry: its fields as the dict held them, checked later by the replay (which
/// names the field of a bad value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub addr: i64,
    pub size: i64,
    pub time_us: i64,
    pub device_free: i64,
    /// Frame list id in [`Condensed::frames`].
    pub frames: u32,
    /// Action name id in [`Condensed::actions`], or [`NO_ACTION`].
    pub action: u32,
    /// Category id in [`Condensed::categories`], [`NO_CATEGORY_KEY`] or [`CATEGORY_NOT_STR`].
    pub category: u32,
    /// Which of addr, size, time_us, device_free (bits 0–3) were ints.
    pub ints: u8,
}

pub const NO_ACTION: u32 = u32::MAX;
pub const NO_CATEGORY_KEY: u32 = u32::MAX;
pub const CATEGORY_NOT_STR: u32 = u32::MAX - 1;
pub const ADDR: u8 = 1;
pub const SIZE: u8 = 2;
pub const TIME: u8 = 4;
pub const DEVICE_FREE: u8 = 8;

impl TraceRecord {
    pub fn int(&self, bit: u8, v: i64) -> Option<i64> {
        (self.ints & bit != 0).then_some(v)
    }
}

/// A snapshot read in streaming mode.
pub struct Condensed {
    /// The snapshot with the lists of `device_traces` emptied.
    pub rest: Value,
    /// The records of `device_traces[d]` (None: that item was no list of records).
    pub traces: Vec<Option<Vec<Vec<TraceRecord>>>>,
    pub frames: FrameTable,
    pub actions: Vec<Rc<str>>,
    pub categories: Vec<Rc<str>>,
    /// Trace entries the fast path read ([`entry`]); the others went through the general loop.
    pub fast_entries: usize,
    /// Whether the first pass ran on two threads ([`read_file_condensed_split`]).
    pub split_first_pass: bool,
}

/// Strings interned by text.
#[derive(Default)]
struct Names {
    names: Vec<Rc<str>>,
    ids: HashMap<Rc<str>, u32>,
    last: Option<(Rc<str>, u32)>,
}

/// Names looked for one by one before the map (a trace has a handful of actions, each
/// one string object fetched from the memo).
const FEW_NAMES: usize = 16;

impl Names {
    fn id(&mut self, s: &Rc<str>) -> u32 {
        if let Some((l, i)) = &self.last {
            if Rc::ptr_eq(l, s) || **l == **s {
                return *i;
            }
        }
        if let Some(i) = self.names.iter().take(FEW_NAMES).position(|n| Rc::ptr_eq(n, s)) {
            self.last = Some((s.clone(), i as u32));
            return i as u32;
        }
        let i = match self.ids.get(s) {
            Some(&i) => i,
            None => {
                self.names.push(s.clone());
                self.ids.insert(s.clone(), self.names.len() as u32 - 1);
                self.names.len() as u32 - 1
            }
        };
        self.last = Some((s.clone(), i));
        i
    }
}

/// A set of memo keys: a bitmap for the dense low keys, a set beyond.
#[derive(Default)]
struct Keys {
    bits: Vec<u64>,
    far: HashSet<u64>,
}

/// Keys below this are kept in the bitmap when the bitmap can grow to them in one step.
const BITMAP_STEP: u64 = 1 << 20;

impl Keys {
    /// A key inserted beyond the bitmap stays in `far` even when the bitmap grows over it
    /// later, so both are asked.
    #[inline]
    fn contains(&self, k: u64) -> bool {
        let in_bits = match self.bits.get((k / 64) as usize) {
            Some(w) if k / 64 < self.bits.len() as u64 => w >> (k % 64) & 1 == 1,
            _ => false,
        };
        in_bits || (!self.far.is_empty() && self.far.contains(&k))
    }

    /// How many keys (a key in both the bitmap and `far` counts once).
    fn count(&self) -> usize {
        let bits: usize = self.bits.iter().map(|w| w.count_ones() as usize).sum();
        let far_only = self.far.iter().filter(|&&k| !((k / 64) < self.bits.len() as u64 && self.bits[(k / 64) as usize] >> (k % 64) & 1 == 1)).count();
        bits + far_only
    }

    /// Add every key of `other`.
    fn union(&mut self, other: Keys) {
        for (w, &word) in other.bits.iter().enumerate() {
            if word == 0 {
                continue;
            }
            match self.bits.get_mut(w) {
                Some(mine) => *mine |= word,
                None => {
                    for b in 0..64 {
                        if word >> b & 1 == 1 {
                            self.insert(w as u64 * 64 + b);
                        }
                    }
                }
            }
        }
        for k in other.far {
            self.insert(k);
        }
    }

    /// Insert; true when new. Keys that extend the bitmap by a bounded step go there.
    #[inline]
    fn insert(&mut self, k: u64) -> bool {
        // Within the bitmap (every fetch of a CPython pickle's memo, once it has grown).
        if let Some(word) = usize::try_from(k / 64).ok().and_then(|w| self.bits.get_mut(w)) {
            let bit = 1u64 << (k % 64);
            let new = *word & bit == 0;
            *word |= bit;
            return new;
        }
        self.insert_beyond(k)
    }

    fn insert_beyond(&mut self, k: u64) -> bool {
        let w = k / 64;
        if w >= self.bits.len() as u64 && w < self.bits.len() as u64 + BITMAP_STEP / 64 && !self.far.contains(&k) {
            self.bits.resize(w as usize + 1, 0);
        }
        match self.bits.get_mut(w as usize) {
            Some(word) if w < u64::MAX => {
                let new = *word >> (k % 64) & 1 == 0;
                *word |= 1 << (k % 64);
                new
            }
            _ => self.far.insert(k),
        }
    }
}

/// The first pass: the memo keys the pickle fetches (GET, BINGET, LONG_BINGET), at most
/// `max_memo` of them. It parses arguments only; whatever it cannot parse the second pass
/// reports (a fetch of a key that pass never reached cannot run before that error).
fn fetched_keys(input: Input<'_>, max_memo: usize) -> Res<Keys> {
    scan_keys(input, 0, max_memo).map(|s| s.keys)
}

/// What [`scan_keys`] found: the keys, and whether it ran to the end of its input (no STOP
/// and nothing it could not parse before; no read error).
struct Scan {
    keys: Keys,
    ran_out: bool,
}

/// [`fetched_keys`] from offset `start` (an opcode boundary) to the end of `input`.
fn scan_keys(mut input: Input<'_>, start: usize, max_memo: usize) -> Res<Scan> {
    let mut keys = Keys::default();
    let mut n = 0usize;
    let mut pos = start;
    let skip = |input: &mut Input<'_>, pos: &mut usize, k: usize| -> Option<()> {
        *pos = pos.checked_add(k)?;
        (*pos <= input.len).then_some(())
    };
    let arg = |input: &mut Input<'_>, pos: &mut usize, k: usize| -> Option<u64> {
        if !input.ensure(*pos, k) {
            return None;
        }
        let mut b = [0u8; 8];
        b[..k].copy_from_slice(input.at(*pos, k));
        *pos += k;
        Some(u64::from_le_bytes(b))
    };
    loop {
        // The common opcodes straight from the bytes in memory; the rest, and any opcode
        // whose argument may lie past them, one by one below.
        let (p, stop) = match scan_window(input.rest(pos), &mut keys, &mut n, max_memo) {
            Ok(done) => done,
            Err(p) => return Err(PickleError { offset: pos + p, message: format!("more than {max_memo} memo entries fetched (budget --max-memo)") }),
        };
        pos += p;
        if stop {
            return Ok(Scan { keys, ran_out: false });
        }
        let at = pos;
        let Some(op) = input.byte(pos) else {
            let ran_out = pos == input.len && input.io_error.is_none();
            return Ok(Scan { keys, ran_out });
        };
        pos += 1;
        let key = match op {
            super::STOP => return Ok(Scan { keys, ran_out: false }),
            super::PROTO | super::BININT1 | super::BINPUT => skip(&mut input, &mut pos, 1),
            super::BININT2 => skip(&mut input, &mut pos, 2),
            super::BININT | super::LONG_BINPUT => skip(&mut input, &mut pos, 4),
            super::FRAME | super::BINFLOAT => skip(&mut input, &mut pos, 8),
            super::LONG1 | super::SHORT_BINUNICODE | super::SHORT_BINSTRING | super::SHORT_BINBYTES => {
                arg(&mut input, &mut pos, 1).and_then(|k| skip(&mut input, &mut pos, k as usize))
            }
            super::LONG4 | super::BINSTRING => arg(&mut input, &mut pos, 4)
                .and_then(|k| usize::try_from(k as u32 as i32).ok())
                .and_then(|k| skip(&mut input, &mut pos, k)),
            super::BINUNICODE | super::BINBYTES => arg(&mut input, &mut pos, 4).and_then(|k| skip(&mut input, &mut pos, k as usize)),
            super::BINUNICODE8 | super::BINBYTES8 | super::BYTEARRAY8 => {
                arg(&mut input, &mut pos, 8).and_then(|k| usize::try_from(k).ok()).and_then(|k| skip(&mut input, &mut pos, k))
            }
            super::INT | super::LONG | super::FLOAT | super::STRING | super::UNICODE | super::PUT => {
                input.line(pos).map(|(nl, _)| pos = nl + 1)
            }
            super::GET => match input.line(pos) {
                Some((nl, text)) => {
                    pos = nl + 1;
                    match std::str::from_utf8(&text).ok().and_then(|t| t.trim().parse::<u64>().ok()) {
                        Some(k) => {
                            if keys.insert(k) {
                                n += 1;
                            }
                            Some(())
                        }
                        None => None,
                    }
                }
                None => None,
            },
            super::BINGET | super::LONG_BINGET => {
                let w = if op == super::BINGET { 1 } else { 4 };
                arg(&mut input, &mut pos, w).map(|k| {
                    if keys.insert(k) {
                        n += 1;
                    }
                })
            }
            op if super::is_opcode(op) && super::executing_opcode(op).is_none() && !matches!(op, super::NEXT_BUFFER | super::READONLY_BUFFER) => {
                Some(())
            }
            _ => None,
        };
        if n > max_memo {
            return Err(PickleError { offset: at, message: format!("more than {max_memo} memo entries fetched (budget --max-memo)") });
        }
        if key.is_none() {
            // The second pass stops here, with its own message.
            return Ok(Scan { keys, ran_out: false });
        }
    }
}

/// [`fetched_keys`] over `b`, for the binary opcodes whose whole argument lies in `b`: how
/// far it got and whether it met STOP, or (Err) the offset of the fetch that counted more
/// than `max_memo` keys in `n`. The slow loop takes over where this stops.
fn scan_window(b: &[u8], keys: &mut Keys, n: &mut usize, max_memo: usize) -> Result<(usize, bool), usize> {
    use super::{
        ADDITEMS, APPEND, APPENDS, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPUT, DICT, DUP, EMPTY_DICT, EMPTY_LIST, EMPTY_SET, EMPTY_TUPLE, FRAME, FROZENSET, LIST,
        LONG1, LONG_BINGET, LONG_BINPUT, MARK, MEMOIZE, NEWFALSE, NEWTRUE, NONE as NONE_OP, POP, POP_MARK, PROTO, SETITEM, SETITEMS, SHORT_BINBYTES, SHORT_BINSTRING,
        SHORT_BINUNICODE, STOP, TUPLE, TUPLE1, TUPLE2, TUPLE3,
    };
    let mut p = 0;
    while p + 9 <= b.len() {
        let op = b[p];
        p += match op {
            STOP => return Ok((p, true)),
            MARK | POP | POP_MARK | DUP | NONE_OP | NEWTRUE | NEWFALSE | APPEND | APPENDS | DICT | EMPTY_DICT | LIST | EMPTY_LIST | SETITEM | SETITEMS
            | TUPLE | EMPTY_TUPLE | TUPLE1 | TUPLE2 | TUPLE3 | EMPTY_SET | ADDITEMS | FROZENSET | MEMOIZE => 1,
            PROTO | BININT1 | BINPUT => 2,
            BININT2 => 3,
            BININT | LONG_BINPUT => 5,
            FRAME | BINFLOAT => 9,
            BINGET | LONG_BINGET => {
                let (k, w) = if op == BINGET { (u64::from(b[p + 1]), 2) } else { (u64::from(u32::from_le_bytes([b[p + 1], b[p + 2], b[p + 3], b[p + 4]])), 5) };
                if keys.insert(k) {
                    *n += 1;
                    if *n > max_memo {
                        return Err(p);
                    }
                }
                w
            }
            SHORT_BINUNICODE | SHORT_BINSTRING | SHORT_BINBYTES | LONG1 if p + 2 + usize::from(b[p + 1]) <= b.len() => 2 + usize::from(b[p + 1]),
            _ => return Ok((p, false)),
        };
    }
    Ok((p, false))
}

/// The streaming mode's state, kept by the [`Reader`].
pub(super) struct State {
    fetched: Keys,
    /// Every key stored (MEMOIZE numbers slots by `len(memo)`).
    stored: Keys,
    len: u64,
    /// What fetched keys hold: keys below [`DENSE_KEYS`] through `dense` (slot + 1, 0: none)
    /// into `slots`, the rest in `far_values`. A lookup per memo fetch is on the hot path.
    dense: Vec<u32>,
    slots: Vec<Item>,
    far_values: HashMap<u64, Item>,
    /// Nodes held from more than one place (fetched from the memo, or DUP'ed).
    shared: Vec<bool>,
    /// Nodes condensed while something else still holds them: they must not change.
    frozen: Vec<bool>,
    pub(super) free: Vec<usize>,
    /// Frame id of a shared frame dict, and list id of a shared frame list, by node (NONE: none).
    frame_of: Vec<u32>,
    list_of: Vec<u32>,
    frames: FrameTable,
    actions: Names,
    categories: Names,
    records: usize,
    max_records: usize,
    /// Frames lists the fast path read as part of a [`Node::Entry`] not yet condensed: the
    /// general loop would hold each as a container until then.
    phantom: usize,
    /// Whether entries may take the fast path (off only to test it against the general loop).
    fast: bool,
    fast_entries: usize,
    /// Frame id + 1 (0: not known) of the frame dict a memo key holds, for keys below
    /// [`FRAME_KEYS`]: what the fast path found for the key, kept until the key is stored again.
    frame_at_key: Vec<std::cell::Cell<u32>>,
    /// The entry keys the fast path met, by string object.
    key_tags: entry::KeyTags,
}

/// Memo keys whose frame the fast path remembers (4 MiB of ids at most).
const FRAME_KEYS: u64 = 1 << 20;

/// Memo keys below this (64 MiB of slot numbers at most) are looked up by index.
const DENSE_KEYS: u64 = 1 << 24;
const NONE: u32 = u32::MAX;

fn id_at(v: &[u32], i: usize) -> Option<u32> {
    v.get(i).copied().filter(|&x| x != NONE)
}

fn set_id(v: &mut Vec<u32>, i: usize, id: u32) {
    if v.len() <= i {
        v.resize(i + 1, NONE);
    }
    v[i] = id;
}

fn flag(v: &[bool], i: usize) -> bool {
    v.get(i).copied().unwrap_or(false)
}

fn set(v: &mut Vec<bool>, i: usize, on: bool) {
    if v.len() <= i {
        if !on {
            return;
        }
        v.resize(i + 1, false);
    }
    v[i] = on;
}

fn scalar(it: &Item) -> bool {
    !matches!(it, Item::Node(_))
}

impl State {
    pub(super) fn memo_len(&self) -> u64 {
        self.len
    }

    pub(super) fn get(&self, key: u64) -> Option<&Item> {
        if key < DENSE_KEYS {
            return match self.dense.get(key as usize) {
                Some(&s) if s > 0 => self.slots.get(s as usize - 1),
                _ => None,
            };
        }
        self.far_values.get(&key)
    }

    fn values(&self) -> usize {
        self.slots.len() + self.far_values.len()
    }

    fn store(&mut self, key: u64, it: Item) {
        if key < FRAME_KEYS {
            // The key holds something else now: forget the frame it stood for.
            let k = key as usize;
            if self.frame_at_key.len() <= k {
                self.frame_at_key.resize_with(k + 1, Default::default);
            }
            self.frame_at_key[k].set(0);
        }
        if key < DENSE_KEYS {
            let k = key as usize;
            if self.dense.len() <= k {
                self.dense.resize(k + 1, 0);
            }
            match self.dense[k] {
                0 => {
                    self.slots.push(it);
                    self.dense[k] = self.slots.len() as u32;
                }
                s => self.slots[s as usize - 1] = it,
            }
        } else {
            self.far_values.insert(key, it);
        }
    }

    /// PUT/MEMOIZE: only a fetched key keeps its value (and counts against `--max-memo`).
    pub(super) fn put(&mut self, key: u64, it: Item, max_memo: usize) -> Result<(), String> {
        let new = !self.stored.contains(key);
        if self.fetched.contains(key) {
            if self.get(key).is_none() && self.values() >= max_memo {
                return Err(format!("more than {max_memo} memo entries (budget --max-memo)"));
            }
            if let Item::Node(i) = it {
                self.share(i);
            }
            self.store(key, it);
        } else if new && self.stored.far.len() >= max_memo {
            return Err(format!("more than {max_memo} memo entries (budget --max-memo)"));
        }
        if new {
            self.stored.insert(key);
            self.len += 1;
        }
        Ok(())
    }

    pub(super) fn share(&mut self, i: usize) {
        set(&mut self.shared, i, true);
    }

    pub(super) fn phantom(&self) -> usize {
        self.phantom
    }

    pub(super) fn is_frozen(&self, i: usize) -> bool {
        flag(&self.frozen, i)
    }

    pub(super) fn reuse(&mut self) -> Option<usize> {
        let i = self.free.pop()?;
        set(&mut self.shared, i, false);
        set(&mut self.frozen, i, false);
        Some(i)
    }
}

impl Reader<'_> {
    /// Whether `it` is a trace-entry dict this mode can condense (`first`: it must have a
    /// string `action`, as the first of a new list of records).
    fn entry_ok(&self, it: &Item, first: bool) -> bool {
        let Some(c) = &self.cond else { return false };
        let Item::Node(i) = it else { return false };
        if flag(&c.shared, *i) || flag(&c.frozen, *i) {
            return false;
        }
        let pairs = match self.nodes.get(*i) {
            Some((_, Node::Dict(pairs))) => pairs,
            Some((_, Node::Entry(e))) => return !first || e.rec.action != NO_ACTION,
            _ => return false,
        };
        let mut action = false;
        for (k, v) in pairs {
            match (k, v) {
                (Item::Node(_), _) => return false,
                (Item::Str(k), Item::Node(j)) if &**k == "frames" && !self.frames_ok(*j) => return false,
                (Item::Str(k), Item::Node(_)) if &**k == "frames" => {}
                (_, Item::Node(_)) => return false,
                (Item::Str(k), v) if &**k == "action" => action = matches!(v, Item::Str(_)),
                _ => {}
            }
        }
        action || !first
    }

    /// A list of frame dicts (or scalars) whose keys and values are scalars.
    fn frames_ok(&self, j: usize) -> bool {
        let Some((_, Node::Seq(Seq::List, items))) = self.nodes.get(j) else { return false };
        items.iter().all(|f| match f {
            Item::Node(d) => matches!(self.nodes.get(*d), Some((_, Node::Dict(p))) if p.iter().all(|(k, v)| scalar(k) && scalar(v))),
            _ => true,
        })
    }

    /// APPEND/APPENDS in streaming mode: condense `items` into the list on top of the stack
    /// when they are trace entries (None: done), or give them back for a plain append.
    pub(super) fn condense(&mut self, items: Vec<Item>) -> Res<Option<Vec<Item>>> {
        let Ok(Item::Node(t)) = self.top() else { return Ok(Some(items)) };
        if self.cond.as_ref().is_some_and(|c| c.is_frozen(t)) {
            return self.err(BAIL);
        }
        let records = match &self.nodes[t].1 {
            Node::Records(_) => true,
            Node::Seq(Seq::List, v) => v.is_empty() && items.first().is_some_and(|f| self.entry_ok(f, true)),
            _ => false,
        };
        if !records {
            return Ok(Some(items));
        }
        if !items.iter().all(|it| self.entry_ok(it, false)) {
            // A list of records given something else: only the tree reader can keep both.
            return match &self.nodes[t].1 {
                Node::Records(_) => self.err(BAIL),
                _ => Ok(Some(items)),
            };
        }
        let Some(c) = self.cond.as_mut() else { return Ok(Some(items)) };
        c.records = c.records.saturating_add(items.len());
        if c.records > c.max_records {
            let m = format!("more than {} trace entries (budget --max-trace-entries)", c.max_records);
            return self.err(m);
        }
        let mut made = Vec::with_capacity(items.len());
        for it in &items {
            match self.record(it) {
                Ok(r) => made.push(r),
                Err(m) => return self.err(m),
            }
        }
        if let Node::Seq(..) = self.nodes[t].1 {
            self.nodes[t].1 = Node::Records(Vec::new());
        }
        if let Node::Records(chunks) = &mut self.nodes[t].1 {
            for r in made {
                match chunks.last_mut() {
                    Some(last) if last.len() < CHUNK => last.push(r),
                    _ => {
                        let mut v = Vec::with_capacity(CHUNK);
                        v.push(r);
                        chunks.push(v);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The record of an entry [`Reader::entry_ok`] accepted; its dict (and its frame list and
    /// frame dicts, when nothing else holds them) are let go.
    fn record(&mut self, it: &Item) -> Result<TraceRecord, String> {
        let Item::Node(i) = *it else { unreachable!("entry_ok takes dicts only") };
        let (_, node) = std::mem::replace(&mut self.nodes[i], (0, Node::Free));
        let pairs = match node {
            Node::Dict(pairs) => pairs,
            Node::Entry(e) => {
                // What the dict and its frames list counted goes, as below.
                self.items = self.items.saturating_sub(e.items);
                let c = self.cond.as_mut().expect("streaming mode");
                c.phantom -= e.lists;
                c.free.push(i);
                return Ok(e.rec);
            }
            _ => unreachable!("entry_ok takes dicts and entries only"),
        };
        let mut r = TraceRecord { addr: 0, size: 0, time_us: 0, device_free: 0, frames: NO_FRAMES, action: NO_ACTION, category: NO_CATEGORY_KEY, ints: 0 };
        let mut frames: Option<&Item> = None;
        let c = self.cond.as_mut().expect("streaming mode");
        for (k, v) in &pairs {
            let Item::Str(k) = k else { continue };
            let int = match v {
                Item::Int(x) => Some(*x),
                _ => None,
            };
            let put = |bit: u8, slot: &mut i64, ints: &mut u8| match int {
                Some(x) => {
                    *slot = x;
                    *ints |= bit;
                }
                None => *ints &= !bit,
            };
            match entry::Key::of(k) {
                entry::Key::Action => r.action = if let Item::Str(a) = v { c.actions.id(a) } else { NO_ACTION },
                entry::Key::Addr => put(ADDR, &mut r.addr, &mut r.ints),
                entry::Key::Size => put(SIZE, &mut r.size, &mut r.ints),
                entry::Key::TimeUs => put(TIME, &mut r.time_us, &mut r.ints),
                entry::Key::DeviceFree => put(DEVICE_FREE, &mut r.device_free, &mut r.ints),
                entry::Key::Category => r.category = if let Item::Str(s) = v { c.categories.id(s) } else { CATEGORY_NOT_STR },
                entry::Key::Frames => frames = Some(v),
                entry::Key::Other => {}
            }
        }
        if let Some(Item::Node(j)) = frames {
            r.frames = self.frame_list(*j)?;
        }
        self.items = self.items.saturating_sub(2 * pairs.len());
        self.cond.as_mut().expect("streaming mode").free.push(i);
        Ok(r)
    }

    /// The id of frame list node `j` (interned by content; by node while others hold it).
    fn frame_list(&mut self, j: usize) -> Result<u32, String> {
        let c = self.cond.as_mut().expect("streaming mode");
        let shared = flag(&c.shared, j);
        if shared {
            if let Some(id) = id_at(&c.list_of, j) {
                return Ok(id);
            }
        }
        let items = match &mut self.nodes[j].1 {
            Node::Seq(Seq::List, items) if shared => items.clone(),
            Node::Seq(Seq::List, items) => std::mem::take(items),
            _ => unreachable!("frames_ok takes lists only"),
        };
        if items.is_empty() {
            // As `list_id`: an empty list is no frames, and is not remembered.
            if !shared {
                self.nodes[j] = (0, Node::Free);
                c.free.push(j);
            }
            return Ok(NO_FRAMES);
        }
        let mut ids = Vec::with_capacity(items.len());
        for f in &items {
            ids.push(self.frame(f, !shared)?);
        }
        let c = self.cond.as_mut().expect("streaming mode");
        let id = c.frames.list_of(ids)?;
        if shared {
            set_id(&mut c.list_of, j, id);
            set(&mut c.frozen, j, true);
        } else {
            self.items = self.items.saturating_sub(items.len());
            self.nodes[j] = (0, Node::Free);
            c.free.push(j);
        }
        Ok(id)
    }

    /// The id of frame `f`; a frame dict nothing else holds is let go when its list (`own`)
    /// is let go too.
    fn frame(&mut self, f: &Item, own: bool) -> Result<u32, String> {
        let c = self.cond.as_mut().expect("streaming mode");
        let Item::Node(d) = *f else { return c.frames.frame_of(None, None, 0) };
        let shared = flag(&c.shared, d);
        if shared {
            if let Some(id) = id_at(&c.frame_of, d) {
                return Ok(id);
            }
        }
        let (mut name, mut file, mut line) = (None, None, 0);
        if let (_, Node::Dict(pairs)) = &self.nodes[d] {
            for (k, v) in pairs {
                match (k, v) {
                    (Item::Str(k), v) if &**k == "name" => name = Some(v),
                    (Item::Str(k), v) if &**k == "filename" => file = Some(v),
                    (Item::Str(k), v) if &**k == "line" => line = if let Item::Int(l) = v { *l } else { 0 },
                    _ => {}
                }
            }
        }
        let text = |v: Option<&Item>| match v {
            Some(Item::Str(s)) => Some(s.clone()),
            _ => None,
        };
        let (name, file) = (text(name), text(file));
        let id = c.frames.frame_of(name.as_deref(), file.as_deref(), line)?;
        if shared {
            set_id(&mut c.frame_of, d, id);
            set(&mut c.frozen, d, true);
        } else if own {
            if let (_, Node::Dict(p)) = &self.nodes[d] {
                self.items = self.items.saturating_sub(2 * p.len());
            }
            self.nodes[d] = (0, Node::Free);
            c.free.push(d);
        }
        Ok(id)
    }

    /// After STOP: the records of `device_traces[d]` taken out, the rest built as a tree.
    fn condensed(&mut self, root: Item) -> Res<Condensed> {
        let bail = |offset| Err(PickleError { offset, message: BAIL.into() });
        let mut traces = Vec::new();
        if let Item::Node(r) = &root {
            if let (_, Node::Dict(pairs)) = &self.nodes[*r] {
                let list = pairs.iter().rev().find(|(k, _)| matches!(k, Item::Str(s) if &**s == "device_traces")).map(|(_, v)| v.clone());
                if let Some(Item::Node(l)) = list {
                    let items = match &self.nodes[l].1 {
                        Node::Seq(Seq::List | Seq::Tuple, items) => items.clone(),
                        _ => Vec::new(),
                    };
                    let mut taken: HashMap<usize, usize> = HashMap::new();
                    for it in &items {
                        let trace = match it {
                            Item::Node(k) => match (&self.nodes[*k].1, taken.get(k)) {
                                (_, Some(&d)) => traces.get(d).cloned().flatten(),
                                (Node::Records(_), None) => {
                                    let (at, node) = std::mem::replace(&mut self.nodes[*k], (0, Node::Seq(Seq::List, Vec::new())));
                                    self.nodes[*k].0 = at;
                                    taken.insert(*k, traces.len());
                                    match node {
                                        Node::Records(chunks) => Some(chunks),
                                        _ => None,
                                    }
                                }
                                // Entries left as dicts: only the tree reader reads them.
                                (Node::Seq(Seq::List | Seq::Tuple, v), None) if !v.is_empty() => return bail(self.nodes[*k].0),
                                _ => None,
                            },
                            _ => None,
                        };
                        traces.push(trace);
                    }
                }
            }
        }
        let nodes = std::mem::take(&mut self.nodes);
        let rest = convert(nodes, root, self.limits)?;
        let c = self.cond.take().expect("streaming mode");
        Ok(Condensed { rest, traces, frames: c.frames, actions: c.actions.names, categories: c.categories.names, fast_entries: c.fast_entries, split_first_pass: false })
    }
}

/// Why [`read_file_condensed`] gave no result.
#[derive(Debug)]
pub enum Refused {
    /// Not a shape this mode takes: read the file as a tree instead.
    Bail,
    File(super::FileError),
}

/// Read the snapshot pickle in `path` in streaming mode, within `limits`, at most
/// `max_records` trace entries and `max_frames` frames.
pub fn read_file_condensed(path: &std::path::Path, limits: &Limits, max_records: usize, max_frames: usize) -> Result<Condensed, Refused> {
    read_file_condensed_split(path, limits, max_records, max_frames, SPLIT_FROM)
}

/// [`read_file_condensed`] whose first pass splits files from `split_from` bytes on (what the
/// tests hold to the one-thread scan on small files).
#[doc(hidden)]
pub fn read_file_condensed_split(path: &std::path::Path, limits: &Limits, max_records: usize, max_frames: usize, split_from: usize) -> Result<Condensed, Refused> {
    // Two passes need a file that can be opened twice.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Err(Refused::Bail);
    }
    let (first, what) = super::open_input(path, limits).map_err(Refused::File)?;
    let split = split_scan(path, first.len, limits.max_memo, split_from);
    let split_first_pass = split.is_some();
    let fetched = match split {
        Some(keys) => keys,
        None => fetched_keys(first, limits.max_memo).map_err(|e| Refused::File(super::FileError::Pickle(e)))?,
    };
    let (input, _) = super::open_input(path, limits).map_err(Refused::File)?;
    condense_input(input, fetched, limits, max_records, max_frames, &what, true).map(|c| Condensed { split_first_pass, ..c })
}

/// Files from this size on have their first pass split in two halves scanned at once.
const SPLIT_FROM: usize = 64 << 20;

/// The first pass of a large protocol-4/5 file on two threads: the file is cut at the start
/// of a FRAME near its middle (frames begin at opcode boundaries: the pickler ends a frame
/// only between opcodes) and each half is scanned alone; the key sets are joined. None where
/// that cannot stand for the one-thread scan, which then runs instead: no frames to cut at,
/// the first half not running cleanly up to the cut (a STOP, an opcode across it, anything
/// it cannot parse), a read error, or a budget overrun (whose offset only the one-thread
/// scan reports).
#[cfg(not(target_family = "wasm"))]
fn split_scan(path: &std::path::Path, len: usize, max_memo: usize, split_from: usize) -> Option<Keys> {
    if len < split_from || len < 64 {
        return None;
    }
    let cut = frame_near_middle(path, len)?;
    let open = |start: usize, end: usize| std::fs::File::open(path).and_then(|f| Input::file_range(f, start, end)).ok();
    let (head, tail) = (open(0, cut)?, open(cut, len)?);
    let (first, second) = std::thread::scope(|s| {
        let other = std::thread::Builder::new().name("pickle-scan".into()).spawn_scoped(s, move || scan_keys(tail, cut, max_memo)).ok()?;
        let first = scan_keys(head, 0, max_memo);
        Some((first, other.join().ok()?))
    })?;
    let (Ok(first), Ok(second)) = (first, second) else { return None };
    if !first.ran_out {
        return None;
    }
    let mut keys = first.keys;
    keys.union(second.keys);
    (keys.count() <= max_memo).then_some(keys)
}

#[cfg(target_family = "wasm")]
fn split_scan(_path: &std::path::Path, _len: usize, _max_memo: usize, _split_from: usize) -> Option<Keys> {
    None
}

/// The offset of the first FRAME opcode at or after the middle of a protocol 4/5 pickle of
/// `len` bytes, found by hopping from frame header to frame header (one 9-byte read per
/// frame); None unless every hop lands on a FRAME.
#[cfg(not(target_family = "wasm"))]
fn frame_near_middle(path: &std::path::Path, len: usize) -> Option<usize> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    let mut head = [0u8; 9];
    f.read_exact_at(&mut head[..2], 0).ok()?;
    if head[0] != super::PROTO || !matches!(head[1], 4 | 5) {
        return None;
    }
    let mut at = 2usize;
    loop {
        f.read_exact_at(&mut head, at as u64).ok()?;
        if head[0] != super::FRAME {
            return None;
        }
        if at >= len / 2 {
            return Some(at);
        }
        let size = usize::try_from(u64::from_le_bytes(head[1..9].try_into().ok()?)).ok()?;
        at = at.checked_add(9)?.checked_add(size)?;
        if at.checked_add(9)? > len {
            return None;
        }
    }
}

/// [`read_file_condensed`] of a pickle in memory (what the fuzz targets drive).
pub fn read_condensed(data: &[u8], limits: &Limits, max_records: usize, max_frames: usize) -> Result<Condensed, Refused> {
    let fetched = fetched_keys(Input::slice(data), limits.max_memo).map_err(|e| Refused::File(super::FileError::Pickle(e)))?;
    condense_input(Input::slice(data), fetched, limits, max_records, max_frames, "cannot read the pickle", true)
}

/// [`read_condensed`] with every entry read by the general opcode loop: what the tests hold
/// the fast path to.
#[doc(hidden)]
pub fn read_condensed_general(data: &[u8], limits: &Limits, max_records: usize, max_frames: usize) -> Result<Condensed, Refused> {
    let fetched = fetched_keys(Input::slice(data), limits.max_memo).map_err(|e| Refused::File(super::FileError::Pickle(e)))?;
    condense_input(Input::slice(data), fetched, limits, max_records, max_frames, "cannot read the pickle", false)
}

fn condense_input(input: Input<'_>, fetched: Keys, limits: &Limits, max_records: usize, max_frames: usize, what: &str, fast: bool) -> Result<Condensed, Refused> {
    let mut r = Reader::new(input, limits);
    r.cond = Some(Box::new(State {
        fetched,
        stored: Keys::default(),
        len: 0,
        dense: Vec::new(),
        slots: Vec::new(),
        far_values: HashMap::new(),
        shared: Vec::new(),
        frozen: Vec::new(),
        free: Vec::new(),
        frame_of: Vec::new(),
        list_of: Vec::new(),
        frames: FrameTable::new(max_frames),
        actions: Names::default(),
        categories: Names::default(),
        records: 0,
        max_records,
        phantom: 0,
        fast,
        fast_entries: 0,
        frame_at_key: Vec::new(),
        key_tags: entry::KeyTags::default(),
    }));
    let res = r.run().and_then(|root| {
        if let Some(i) = r.input.first_nonzero(r.pos) {
            return Err(PickleError { offset: i, message: "data after STOP (only NUL padding may follow)".into() });
        }
        r.condensed(root)
    });
    match r.io_checked(res, what) {
        Ok(c) => Ok(c),
        Err(super::FileError::Pickle(e)) if e.message == BAIL => Err(Refused::Bail),
        Err(e) => Err(Refused::File(e)),
    }
}
