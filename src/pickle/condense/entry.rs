//! The streaming mode's fast path: a trace-entry dict in a batch that goes to a list of
//! records is read straight from the bytes into its [`TraceRecord`], without the dict, its
//! frames list, their stack items and their memo traffic going through the general
//! opcode loop. It takes only the shape CPython writes for a snapshot entry (keys and
//! scalar values, memo fetches of strings, a `frames` list built in place of frame dicts
//! already interned), touches nothing until the whole dict is read, and gives up on
//! anything else, which the general loop then reads from the same byte: every budget check
//! and error is the general loop's. The dict it stands for is kept as a [`Node::Entry`],
//! counted as the dict and its frames list would be, until the APPENDS condenses it; used
//! any other way it sends the read back to the tree reader.
use super::super::{
    Item, Node, Reader, APPEND, APPENDS, BINFLOAT, BINGET, BININT, BININT1, BININT2, BINPUT, BINUNICODE, EMPTY_LIST, FRAME, LONG1, LONG_BINGET, LONG_BINPUT, MARK,
    MEMOIZE, NEWFALSE, NEWTRUE, NONE, SETITEMS, SHORT_BINUNICODE,
};
use super::{flag, id_at, State, TraceRecord, ADDR, CATEGORY_NOT_STR, DEVICE_FREE, NO_ACTION, NO_CATEGORY_KEY, NO_FRAMES, SIZE, TIME};
use std::rc::Rc;

/// Bytes looked at for one entry (a PyTorch entry with a deep traceback takes ~300).
const WINDOW: usize = 4096;
/// Memo stores one entry may make (its dict, its list, new strings).
const MEMO_OPS: usize = 8;

/// A trace entry read by the fast path, waiting for its APPENDS: its record, and what the
/// dict and its frames list would still count (items, containers) until then.
pub struct Pending {
    pub rec: TraceRecord,
    pub items: usize,
    pub lists: usize,
}

/// A scalar value, or a string (held by the memo, or new).
enum Val<'c> {
    Int(i64),
    Str(&'c Rc<str>),
    New(Rc<str>),
    Other,
}

impl Val<'_> {
    /// The key this value spells (None: not a string).
    #[inline(always)]
    fn key(&self, c: &State) -> Option<Key> {
        match self {
            Val::Str(s) => Some(c.key_tags.key(s)),
            Val::New(s) => Some(Key::of(s)),
            _ => None,
        }
    }

    fn into_rc(self) -> Option<Rc<str>> {
        match self {
            Val::Str(s) => Some(s.clone()),
            Val::New(s) => Some(s),
            _ => None,
        }
    }
}

/// A trace entry's key, as both the fast path and [`super::Reader`]'s `record` read it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Key {
    Action,
    Addr,
    Size,
    TimeUs,
    DeviceFree,
    Category,
    Frames,
    Other,
}

impl Key {
    pub(super) fn of(s: &str) -> Key {
        match s {
            "action" => Key::Action,
            "addr" => Key::Addr,
            "size" => Key::Size,
            "time_us" => Key::TimeUs,
            "device_free" => Key::DeviceFree,
            "category" => Key::Category,
            "frames" => Key::Frames,
            _ => Key::Other,
        }
    }
}

/// How many key strings [`KeyTags`] remembers (an entry has eight keys).
const TAGGED: usize = 16;

/// The [`Key`] of the string objects the memo gave as keys, found by pointer: a pickle
/// fetches each key's one string object from the memo, entry after entry. Each string is
/// held, so that its address names it alone.
#[derive(Default)]
pub(super) struct KeyTags(std::cell::RefCell<Vec<(Rc<str>, Key)>>);

impl KeyTags {
    #[inline(always)]
    fn key(&self, s: &Rc<str>) -> Key {
        let mut v = self.0.borrow_mut();
        if let Some(&(_, k)) = v.iter().find(|(t, _)| Rc::ptr_eq(t, s)) {
            return k;
        }
        let k = Key::of(s);
        if v.len() < TAGGED {
            v.push((s.clone(), k));
        }
        k
    }
}

/// Reads one entry from `b` (the bytes after its EMPTY_DICT); None: not the shape taken.
struct Cursor<'a> {
    b: &'a [u8],
    p: usize,
    /// Bytes of the input from `b`'s start on (a FRAME must fit in them).
    left: usize,
    /// Memo keys stored, in order, and the memo length they lead to.
    memo: [u64; MEMO_OPS],
    stores: usize,
    len: u64,
    /// New strings made (each counts an item).
    fresh: usize,
}

impl Cursor<'_> {
    fn byte(&self, at: usize) -> Option<u8> {
        self.b.get(at).copied()
    }

    fn arg<const N: usize>(&mut self) -> Option<[u8; N]> {
        let a = self.b.get(self.p..self.p + N)?.try_into().ok()?;
        self.p += N;
        Some(a)
    }

    /// FRAME opcodes (they only group opcodes) and memo stores after a value, as the
    /// general loop takes them. A store to a key the pickle fetches is left to it.
    #[inline]
    fn skip_stores(&mut self, c: &State) -> Option<()> {
        if !matches!(self.byte(self.p)?, FRAME | MEMOIZE | BINPUT | LONG_BINPUT) {
            return Some(());
        }
        self.stores_from_here(c)
    }

    #[inline(always)]
    fn stores_from_here(&mut self, c: &State) -> Option<()> {
        loop {
            let key = match self.byte(self.p)? {
                FRAME => {
                    self.p += 1;
                    let n = u64::from_le_bytes(self.arg()?);
                    if n > (self.left - self.p) as u64 {
                        return None;
                    }
                    continue;
                }
                MEMOIZE => self.len,
                BINPUT => u64::from(self.byte(self.p + 1)?),
                LONG_BINPUT => u64::from(u32::from_le_bytes(self.b.get(self.p + 1..self.p + 5)?.try_into().ok()?)),
                _ => return Some(()),
            };
            self.p += match self.b[self.p] {
                MEMOIZE => 1,
                BINPUT => 2,
                _ => 5,
            };
            if c.fetched.contains(key) || self.stores == MEMO_OPS {
                return None;
            }
            if !c.stored.contains(key) && !self.memo[..self.stores].contains(&key) {
                self.len += 1;
            }
            self.memo[self.stores] = key;
            self.stores += 1;
        }
    }

    /// A memo fetch's argument, if the opcode at `p` is one.
    #[inline(always)]
    fn get_key(&mut self) -> Option<Option<u64>> {
        Some(match self.byte(self.p)? {
            BINGET => {
                self.p += 1;
                Some(u64::from(self.arg::<1>()?[0]))
            }
            LONG_BINGET => {
                self.p += 1;
                Some(u64::from(u32::from_le_bytes(self.arg()?)))
            }
            _ => None,
        })
    }

    /// A key or a scalar value (one pushed item), as the general loop would push it.
    #[inline(always)]
    fn value<'c>(&mut self, c: &'c State) -> Option<Val<'c>> {
        if let Some(k) = self.get_key()? {
            return match c.get(k)? {
                Item::Int(x) => Some(Val::Int(*x)),
                Item::Str(s) => Some(Val::Str(s)),
                Item::None | Item::Bool(_) | Item::Float(_) => Some(Val::Other),
                Item::Node(_) => None,
            };
        }
        let op = self.byte(self.p)?;
        self.p += 1;
        Some(match op {
            BININT1 => Val::Int(self.arg::<1>()?[0].into()),
            BININT2 => Val::Int(u16::from_le_bytes(self.arg()?).into()),
            BININT => Val::Int(i32::from_le_bytes(self.arg()?).into()),
            LONG1 => {
                let n = usize::from(self.arg::<1>()?[0]);
                let b = self.b.get(self.p..self.p + n).filter(|_| n <= 8)?;
                self.p += n;
                let fill = if b.last().is_some_and(|&x| x >= 0x80) { 0xff } else { 0 };
                let mut le = [fill; 8];
                le[..n].copy_from_slice(b);
                Val::Int(i64::from_le_bytes(le))
            }
            NONE | NEWTRUE | NEWFALSE => Val::Other,
            BINFLOAT => {
                self.arg::<8>()?;
                Val::Other
            }
            SHORT_BINUNICODE | BINUNICODE => {
                let n = if op == SHORT_BINUNICODE { usize::from(self.arg::<1>()?[0]) } else { u32::from_le_bytes(self.arg()?) as usize };
                let s = std::str::from_utf8(self.b.get(self.p..self.p.checked_add(n)?)?).ok()?;
                self.p += n;
                self.fresh += 1;
                Val::New(Rc::from(s))
            }
            _ => return None,
        })
    }
}

impl Reader<'_> {
    /// EMPTY_DICT in streaming mode (its opcode read): when it opens an item of a batch
    /// for a list of records and the dict has the shape taken, read it whole and push its
    /// [`Node::Entry`] (true); otherwise leave everything as it was (false).
    pub(in crate::pickle) fn fast_entry(&mut self) -> super::super::Res<bool> {
        let Some(c) = self.cond.as_deref().filter(|c| c.fast) else { return Ok(false) };
        let Some(&base) = self.marks.last() else { return Ok(false) };
        match base.checked_sub(1).and_then(|b| self.stack.get(b)) {
            Some(Item::Node(t)) if matches!(self.nodes[*t].1, Node::Records(_)) && !c.is_frozen(*t) => {}
            _ => return Ok(false),
        }
        // The dict and its list are made, and two MARKs opened, within the budgets.
        let live = self.nodes.len() - c.free.len() + c.phantom;
        if live + 2 > self.limits.max_containers || self.marks.len() + 2 > self.limits.max_depth {
            return Ok(false);
        }
        let start = self.pos;
        let want = self.input.len.saturating_sub(start).min(WINDOW);
        if !self.input.ensure(start, want) {
            return Ok(false);
        }
        let b = self.input.at(start, want);
        let mut k = Cursor { b, p: 0, left: self.input.len - start, memo: [0; MEMO_OPS], stores: 0, len: c.len, fresh: 0 };
        let Some(e) = read_entry(&mut k, c, &self.nodes, self.stack.len()) else { return Ok(false) };
        // Everything the general loop would check on the way, checked at its end (each
        // count only grows within the dict).
        let items = k.fresh + e.frames_len + 2 * e.pairs;
        if e.peak_stack > self.limits.max_stack
            || self.items.saturating_add(items) > self.limits.max_items
            || (k.len > c.len && c.stored.far.len() + (k.len - c.len) as usize > self.limits.max_memo)
        {
            return Ok(false);
        }
        let (end, memo, stores) = (start + k.p, k.memo, k.stores);
        let c = self.cond.as_deref_mut().expect("streaming mode");
        for &key in &memo[..stores] {
            if let Err(m) = c.put(key, Item::None, self.limits.max_memo) {
                return self.err(m);
            }
        }
        let mut rec = e.rec;
        rec.action = e.action.map_or(NO_ACTION, |a| a.map_or(NO_ACTION, |a| c.actions.id(&a)));
        rec.category = e.category.map_or(NO_CATEGORY_KEY, |a| a.map_or(CATEGORY_NOT_STR, |a| c.categories.id(&a)));
        self.items += items;
        self.pos = end;
        let it = self.node(Node::Entry(Box::new(Pending { rec, items: 2 * e.pairs + e.frames_len, lists: e.lists })))?;
        let c = self.cond.as_deref_mut().expect("streaming mode");
        c.phantom += e.lists;
        c.fast_entries += 1;
        self.push(it)?;
        Ok(true)
    }
}

/// An entry as read, before its strings are interned.
struct Read {
    rec: TraceRecord,
    /// The last `action` (Some(None): not a string), the last `category` likewise.
    action: Option<Option<Rc<str>>>,
    category: Option<Option<Rc<str>>>,
    pairs: usize,
    frames_len: usize,
    lists: usize,
    peak_stack: usize,
}

/// The dict from its EMPTY_DICT's memo store to its SETITEMS, `depth` values on the stack
/// before it.
fn read_entry(k: &mut Cursor<'_>, c: &State, nodes: &[(usize, Node)], depth: usize) -> Option<Read> {
    let mut r = Read {
        rec: TraceRecord { addr: 0, size: 0, time_us: 0, device_free: 0, frames: NO_FRAMES, action: NO_ACTION, category: NO_CATEGORY_KEY, ints: 0 },
        action: None,
        category: None,
        pairs: 0,
        frames_len: 0,
        lists: 0,
        peak_stack: depth + 1,
    };
    k.skip_stores(c)?;
    if k.byte(k.p)? != MARK {
        return None;
    }
    k.p += 1;
    // The dict, then its keys and values.
    let mut d = depth + 1;
    let mut frames_seen = false;
    loop {
        k.skip_stores(c)?;
        if k.byte(k.p)? == SETITEMS {
            k.p += 1;
            return Some(r);
        }
        let key = k.value(c)?.key(c)?;
        k.skip_stores(c)?;
        d += 1;
        r.peak_stack = r.peak_stack.max(d);
        r.pairs += 1;
        if key == Key::Frames && k.byte(k.p)? == EMPTY_LIST {
            if frames_seen {
                return None;
            }
            frames_seen = true;
            k.p += 1;
            r.lists += 1;
            d += 1;
            r.peak_stack = r.peak_stack.max(d);
            r.rec.frames = frames(k, c, nodes, d, &mut r)?;
            continue;
        }
        let v = k.value(c)?;
        k.skip_stores(c)?;
        d += 1;
        r.peak_stack = r.peak_stack.max(d);
        let int = match v {
            Val::Int(x) => Some(x),
            _ => None,
        };
        let put = |bit: u8, slot: &mut i64, ints: &mut u8| match int {
            Some(x) => {
                *slot = x;
                *ints |= bit;
            }
            None => *ints &= !bit,
        };
        let rec = &mut r.rec;
        match key {
            Key::Action => r.action = Some(v.into_rc()),
            Key::Addr => put(ADDR, &mut rec.addr, &mut rec.ints),
            Key::Size => put(SIZE, &mut rec.size, &mut rec.ints),
            Key::TimeUs => put(TIME, &mut rec.time_us, &mut rec.ints),
            Key::DeviceFree => put(DEVICE_FREE, &mut rec.device_free, &mut rec.ints),
            Key::Category => r.category = Some(v.into_rc()),
            // A scalar `frames` is no frames; a second one after a list is left alone.
            Key::Frames if frames_seen => return None,
            Key::Frames => {
                frames_seen = true;
                rec.frames = NO_FRAMES;
            }
            Key::Other => {}
        }
    }
}

/// A `frames` list made in place (its EMPTY_LIST read, `d` values on the stack with it):
/// memo fetches of frame dicts already interned, by APPEND or MARK…APPENDS. Its list id,
/// when that list of frames is interned already.
fn frames(k: &mut Cursor<'_>, c: &State, nodes: &[(usize, Node)], d: usize, r: &mut Read) -> Option<u32> {
    let mut ids = [0u32; 64];
    let mut n = 0;
    let frame = |k: &mut Cursor<'_>| frame_id(k, c, nodes);
    k.skip_stores(c)?;
    loop {
        while k.byte(k.p)? == FRAME {
            k.skip_stores(c)?;
        }
        match k.byte(k.p)? {
            MARK => {
                k.p += 1;
                let mut m = 0;
                loop {
                    while k.byte(k.p)? == FRAME {
                        k.skip_stores(c)?;
                    }
                    if k.byte(k.p)? == APPENDS {
                        k.p += 1;
                        break;
                    }
                    *ids.get_mut(n)? = frame(k)?;
                    n += 1;
                    m += 1;
                    r.peak_stack = r.peak_stack.max(d + m);
                }
                r.frames_len += m;
            }
            // One frame and APPEND; anything else is the next key, past the list.
            BINGET | LONG_BINGET => {
                let (at, stores, len) = (k.p, k.stores, k.len);
                let one = frame(k).and_then(|id| {
                    while k.byte(k.p)? == FRAME {
                        k.skip_stores(c)?;
                    }
                    (k.byte(k.p)? == APPEND).then_some(id)
                });
                let Some(id) = one else {
                    (k.p, k.stores, k.len) = (at, stores, len);
                    return c.frames.find_list(&ids[..n]);
                };
                k.p += 1;
                *ids.get_mut(n)? = id;
                n += 1;
                r.peak_stack = r.peak_stack.max(d + 1);
                r.frames_len += 1;
            }
            _ => return c.frames.find_list(&ids[..n]),
        }
    }
}

/// One frame of a `frames` list: a memo fetch of a frame dict already interned; its id.
#[inline(always)]
fn frame_id(k: &mut Cursor<'_>, c: &State, nodes: &[(usize, Node)]) -> Option<u32> {
    let key = k.get_key()??;
    let known = usize::try_from(key).ok().and_then(|i| c.frame_at_key.get(i));
    if let Some(id) = known.and_then(|id| id.get().checked_sub(1)) {
        return Some(id);
    }
    let Item::Node(f) = c.get(key)? else { return None };
    // A shared frame dict given an id is frozen: its content is what was checked. It
    // is never let go, so the key holds it until the key is stored again.
    if !flag(&c.shared, *f) || !matches!(nodes.get(*f), Some((_, Node::Dict(_)))) {
        return None;
    }
    let id = id_at(&c.frame_of, *f)?;
    if let Some(cell) = known {
        cell.set(id.checked_add(1)?);
    }
    Some(id)
}
