//! Python pickles of plain data: the format of PyTorch memory snapshots (formats.md §1–2).
//!
//! Why our own: `serde-pickle` cannot represent shared references, and snapshots depend on
//! them — identical tracebacks are one list object referenced by many trace entries, which
//! Python's pickler writes once and then refers to through the memo. [`Value`] keeps
//! containers behind [`Rc`], so sharing survives both directions.
//!
//! [`write`] emits protocol 4 restricted to the opcodes every version of pytorch.org/memory_viz's
//! hand-written reader (MemoryViz.js) understands (formats.md §2.2): no FRAME, no MEMOIZE
//! (explicit BINPUT/LONG_BINPUT slots instead), integers in their smallest form with LONG1 of
//! at most 8 bytes, list and dict items in MARK…APPENDS / MARK…SETITEMS batches of ≤ 1000.
//! Containers shared by `Rc` and strings equal by content are written once and then fetched
//! with BINGET/LONG_BINGET.
//!
//! [`read`] accepts what CPython's `pickle` writes for plain data with protocols 0–5 and
//! never executes anything: opcodes that would import or call (GLOBAL, REDUCE, BUILD, …) are
//! errors. It runs as an explicit stack machine over an arena of containers, bounded by
//! [`Limits`], and returns an error with a byte offset — never a panic — on any input.
use std::collections::{HashMap, HashSet};
use input::Input;

mod input;
pub mod condense;
use std::fmt;
use std::rc::Rc;

/// Plain Python data: what a memory snapshot contains.
///
/// Equality is structural; floats compare by bit pattern (so `NaN == NaN`, `0.0 != -0.0`),
/// which is what a round trip must preserve.
#[derive(Clone, Debug)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    /// `bytes` (or `bytearray`, read only).
    Bytes(Vec<u8>),
    /// A `list` (sets and frozensets are read as lists too).
    List(Rc<Vec<Value>>),
    Tuple(Rc<Vec<Value>>),
    /// A `dict`, in insertion order.
    Dict(Rc<Vec<(Value, Value)>>),
}

impl Value {
    pub fn str(s: &str) -> Value {
        Value::Str(Rc::from(s))
    }

    /// A dict with string keys, in the given order.
    pub fn dict(items: Vec<(&str, Value)>) -> Value {
        Value::Dict(Rc::new(items.into_iter().map(|(k, v)| (Value::str(k), v)).collect()))
    }

    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Rc::new(items))
    }

    pub fn tuple(items: Vec<Value>) -> Value {
        Value::Tuple(Rc::new(items))
    }

    /// The value under string key `key` of a dict (the last one, as Python's dict would keep).
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Dict(items) => items.iter().rev().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// A float, or an int converted to one.
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The items of a list or a tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }
}

impl PartialEq for Value {
    /// Pairs of containers already found equal are remembered, so comparing structures
    /// that share sub-objects costs their stored size, not their unfolded size.
    fn eq(&self, other: &Value) -> bool {
        fn eq(a: &Value, b: &Value, known: &mut HashSet<(usize, usize)>) -> bool {
            fn seq<T>(
                a: &Rc<Vec<T>>,
                b: &Rc<Vec<T>>,
                known: &mut HashSet<(usize, usize)>,
                f: impl Fn(&T, &T, &mut HashSet<(usize, usize)>) -> bool,
            ) -> bool {
                let key = (Rc::as_ptr(a) as usize, Rc::as_ptr(b) as usize);
                if Rc::ptr_eq(a, b) || known.contains(&key) {
                    return true;
                }
                let same = a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| f(x, y, known));
                if same {
                    known.insert(key);
                }
                same
            }
            use Value::*;
            match (a, b) {
                (None, None) => true,
                (Bool(a), Bool(b)) => a == b,
                (Int(a), Int(b)) => a == b,
                (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
                (Str(a), Str(b)) => a == b,
                (Bytes(a), Bytes(b)) => a == b,
                (List(a), List(b)) | (Tuple(a), Tuple(b)) => seq(a, b, known, eq),
                (Dict(a), Dict(b)) => seq(a, b, known, |(k, v), (l, w), known| eq(k, l, known) && eq(v, w, known)),
                _ => false,
            }
        }
        eq(self, other, &mut HashSet::new())
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Value {
        Value::Float(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::str(v)
    }
}

// ---------------------------------------------------------------------------------------
// Opcodes (names as in CPython's pickletools).

const MARK: u8 = b'(';
const STOP: u8 = b'.';
const POP: u8 = b'0';
const POP_MARK: u8 = b'1';
const DUP: u8 = b'2';
const FLOAT: u8 = b'F';
const INT: u8 = b'I';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const LONG: u8 = b'L';
const BININT2: u8 = b'M';
const NONE: u8 = b'N';
const STRING: u8 = b'S';
const BINSTRING: u8 = b'T';
const SHORT_BINSTRING: u8 = b'U';
const UNICODE: u8 = b'V';
const BINUNICODE: u8 = b'X';
const APPEND: u8 = b'a';
const DICT: u8 = b'd';
const EMPTY_DICT: u8 = b'}';
const APPENDS: u8 = b'e';
const GET: u8 = b'g';
const BINGET: u8 = b'h';
const LONG_BINGET: u8 = b'j';
const LIST: u8 = b'l';
const EMPTY_LIST: u8 = b']';
const PUT: u8 = b'p';
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const SETITEM: u8 = b's';
const TUPLE: u8 = b't';
const EMPTY_TUPLE: u8 = b')';
const SETITEMS: u8 = b'u';
const BINFLOAT: u8 = b'G';
const PROTO: u8 = 0x80;
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const LONG1: u8 = 0x8a;
const LONG4: u8 = 0x8b;
const BINBYTES: u8 = b'B';
const SHORT_BINBYTES: u8 = b'C';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE8: u8 = 0x8d;
const BINBYTES8: u8 = 0x8e;
const EMPTY_SET: u8 = 0x8f;
const ADDITEMS: u8 = 0x90;
const FROZENSET: u8 = 0x91;
const MEMOIZE: u8 = 0x94;
const FRAME: u8 = 0x95;
const BYTEARRAY8: u8 = 0x96;
const NEXT_BUFFER: u8 = 0x97;
const READONLY_BUFFER: u8 = 0x98;

/// Opcodes that import, call or hand objects to user code.
fn executing_opcode(op: u8) -> Option<&'static str> {
    Some(match op {
        b'c' => "GLOBAL",
        0x93 => "STACK_GLOBAL",
        b'R' => "REDUCE",
        b'b' => "BUILD",
        0x81 => "NEWOBJ",
        0x92 => "NEWOBJ_EX",
        b'i' => "INST",
        b'o' => "OBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        _ => return None,
    })
}

/// Items per MARK…APPENDS / MARK…SETITEMS batch (CPython's own batch size).
const BATCH: usize = 1000;

// ---------------------------------------------------------------------------------------
// Writer

/// Serialise `v` as a protocol-4 pickle that CPython and every MemoryViz.js version read.
///
/// Recurses to the nesting depth of `v` (as dropping it does).
pub fn write(v: &Value) -> Vec<u8> {
    let mut w = Writer { out: vec![PROTO, 4], next: 0, containers: HashMap::new(), strings: HashMap::new() };
    w.value(v);
    w.out.push(STOP);
    w.out
}

struct Writer<'a> {
    out: Vec<u8>,
    next: u32,
    /// Memo slot of each shared container written so far, by `Rc` address.
    containers: HashMap<usize, u32>,
    strings: HashMap<&'a str, u32>,
}

impl<'a> Writer<'a> {
    /// Store the top of the stack in the next memo slot.
    fn put(&mut self) -> Option<u32> {
        let i = self.next;
        self.next = self.next.checked_add(1)?;
        match u8::try_from(i) {
            Ok(b) => self.out.extend([BINPUT, b]),
            Err(_) => {
                self.out.push(LONG_BINPUT);
                self.out.extend(i.to_le_bytes());
            }
        }
        Some(i)
    }

    fn get(&mut self, i: u32) {
        match u8::try_from(i) {
            Ok(b) => self.out.extend([BINGET, b]),
            Err(_) => {
                self.out.push(LONG_BINGET);
                self.out.extend(i.to_le_bytes());
            }
        }
    }

    /// If the container behind `rc` was already written, fetch it from the memo. Returns
    /// the key to memoise it under otherwise (`None` when it is not shared at all).
    fn seen<T>(&mut self, rc: &Rc<T>) -> Result<Option<usize>, ()> {
        let key = Rc::as_ptr(rc) as *const () as usize;
        if let Some(&i) = self.containers.get(&key) {
            self.get(i);
            return Err(());
        }
        Ok((Rc::strong_count(rc) > 1).then_some(key))
    }

    fn memoise(&mut self, key: Option<usize>) {
        if let Some(key) = key {
            if let Some(i) = self.put() {
                self.containers.insert(key, i);
            }
        }
    }

    fn sized(&mut self, short: u8, long: u8, huge: u8, bytes: &[u8]) {
        let n = bytes.len();
        if let Ok(b) = u8::try_from(n) {
            self.out.extend([short, b]);
        } else if let Ok(l) = u32::try_from(n) {
            self.out.push(long);
            self.out.extend(l.to_le_bytes());
        } else {
            self.out.push(huge);
            self.out.extend((n as u64).to_le_bytes());
        }
        self.out.extend_from_slice(bytes);
    }

    fn value(&mut self, v: &'a Value) {
        match v {
            Value::None => self.out.push(NONE),
            Value::Bool(b) => self.out.push(if *b { NEWTRUE } else { NEWFALSE }),
            Value::Int(i) => self.int(*i),
            Value::Float(f) => {
                self.out.push(BINFLOAT);
                self.out.extend(f.to_be_bytes());
            }
            Value::Str(s) => {
                let s: &'a str = s;
                if let Some(&i) = self.strings.get(s) {
                    return self.get(i);
                }
                self.sized(SHORT_BINUNICODE, BINUNICODE, BINUNICODE8, s.as_bytes());
                if let Some(i) = self.put() {
                    self.strings.insert(s, i);
                }
            }
            Value::Bytes(b) => self.sized(SHORT_BINBYTES, BINBYTES, BINBYTES8, b),
            Value::List(items) => {
                let Ok(key) = self.seen(items) else { return };
                self.out.push(EMPTY_LIST);
                self.memoise(key);
                for batch in items.chunks(BATCH) {
                    self.out.push(MARK);
                    batch.iter().for_each(|x| self.value(x));
                    self.out.push(APPENDS);
                }
            }
            Value::Dict(items) => {
                let Ok(key) = self.seen(items) else { return };
                self.out.push(EMPTY_DICT);
                self.memoise(key);
                for batch in items.chunks(BATCH) {
                    self.out.push(MARK);
                    for (k, x) in batch {
                        self.value(k);
                        self.value(x);
                    }
                    self.out.push(SETITEMS);
                }
            }
            Value::Tuple(items) => {
                let Ok(key) = self.seen(items) else { return };
                if items.is_empty() {
                    self.out.push(EMPTY_TUPLE);
                } else {
                    if items.len() > 3 {
                        self.out.push(MARK);
                    }
                    items.iter().for_each(|x| self.value(x));
                    self.out.push(match items.len() {
                        1 => TUPLE1,
                        2 => TUPLE2,
                        3 => TUPLE3,
                        _ => TUPLE,
                    });
                }
                self.memoise(key);
            }
        }
    }

    /// Smallest encoding, as CPython chooses it.
    fn int(&mut self, i: i64) {
        if let Ok(b) = u8::try_from(i) {
            self.out.extend([BININT1, b]);
        } else if let Ok(h) = u16::try_from(i) {
            self.out.push(BININT2);
            self.out.extend(h.to_le_bytes());
        } else if let Ok(w) = i32::try_from(i) {
            self.out.push(BININT);
            self.out.extend(w.to_le_bytes());
        } else {
            // Minimal two's complement, little endian: drop top bytes that only repeat the sign.
            let b = i.to_le_bytes();
            let mut n = 8;
            while n > 1 && ((b[n - 1] == 0 && b[n - 2] < 0x80) || (b[n - 1] == 0xff && b[n - 2] >= 0x80)) {
                n -= 1;
            }
            self.out.extend([LONG1, n as u8]);
            self.out.extend_from_slice(&b[..n]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reader

/// Bounds on what [`read`] accepts. Each names the `analyze`/`view` flag that raises it
/// (`crate::analyse::budget::Budget` holds the defaults and their reasoning).
#[derive(Clone, Debug)]
pub struct Limits {
    /// Deepest nesting of containers (a top-level `[]` is depth 1); also the most open MARKs.
    pub max_depth: usize,
    /// Most values stored in all: container elements (a dict entry counts 2: key and value)
    /// plus every string and bytes object made. Each costs at most ~32 B once built.
    pub max_items: usize,
    /// Most bytes of `bytes`/`bytearray` payload in the result. Unlike strings these are not
    /// shared, so each memo reference to one counts again.
    pub max_bytes: usize,
    /// Most containers (lists, tuples, dicts, sets) made, ~120 B each.
    pub max_containers: usize,
    /// Most memo entries (distinct keys stored by PUT/MEMOIZE).
    pub max_memo: usize,
    /// Deepest unpickler stack (values pushed and not yet put into a container).
    pub max_stack: usize,
    /// Largest input [`read_file`] accepts, in bytes.
    pub max_input_bytes: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        crate::analyse::budget::Budget::default().pickle_limits()
    }
}

/// Why a pickle was rejected, and where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {message}")]
pub struct PickleError {
    pub offset: usize,
    pub message: String,
}

/// Read and parse the pickle in file `path`, refusing a file larger than
/// `limits.max_input_bytes` as soon as that many bytes have been read (a pipe or a device
/// such as /dev/zero has no size to check up front). A first byte that is no opcode is
/// refused at offset 0 before anything more is read.
pub fn read_file(path: &std::path::Path, limits: &Limits) -> Result<Value, FileError> {
    let (input, io) = open_input(path, limits)?;
    let mut r = Reader::new(input, limits);
    let res = r.read_all();
    r.io_checked(res, &io)
}

/// Most bytes of a pipe or device read (whole, before parsing): unlike a regular file, such an
/// input cannot be read twice nor through a window.
const WHOLE_READ: u64 = 256 << 20;

/// The input of `path` within `limits.max_input_bytes`: a regular file is read through a
/// window as it is parsed; anything else (a pipe, a device) is read whole first, refused as
/// soon as it passes the budget. A first byte that is no opcode is refused at offset 0
/// before anything more is read. Also gives the message prefix for I/O errors.
fn open_input(path: &std::path::Path, limits: &Limits) -> Result<(Input<'static>, String), FileError> {
    use std::io::Read;
    let what = format!("cannot read {}", path.display());
    let io = |e: std::io::Error| FileError::Io(format!("{what}: {e}"));
    let mut f = std::fs::File::open(path).map_err(io)?;
    let regular = f.metadata().map_err(io)?.file_type().is_file();
    let mut data = Vec::new();
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match f.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        if data.is_empty() && !is_opcode(chunk[0]) {
            return Err(FileError::Pickle(PickleError { offset: 0, message: format!("unknown opcode {} (not a pickle)", opname(chunk[0])) }));
        }
        let size = if regular { f.metadata().map_err(io)?.len().max((data.len() + n) as u64) } else { (data.len() + n) as u64 };
        if size > limits.max_input_bytes {
            return Err(FileError::Pickle(PickleError {
                offset: limits.max_input_bytes as usize,
                message: format!("input larger than {} bytes (budget --max-input-bytes)", limits.max_input_bytes),
            }));
        }
        if !regular && size > WHOLE_READ {
            return Err(FileError::Pickle(PickleError {
                offset: WHOLE_READ as usize,
                message: format!("input from a pipe or device larger than {WHOLE_READ} bytes, which are read whole (copy it to a regular file, which is read through a window within --max-input-bytes)"),
            }));
        }
        data.extend_from_slice(&chunk[..n]);
        if regular {
            let len = usize::try_from(size).map_err(|_| FileError::Io(format!("{what}: larger than memory can address")))?;
            return Ok((Input::file(f, data, len), what));
        }
    }
    let len = data.len();
    let mut input = Input::file(f, data, len);
    input.close();
    Ok((input, what))
}

/// Why [`read_file`] failed: the file could not be read, or its content is no plain-data pickle.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Pickle(PickleError),
}

/// Whether `op` is an opcode of some pickle protocol (executing ones included: those are
/// refused with their name later).
fn is_opcode(op: u8) -> bool {
    matches!(op, b'('..=b'2' | b'B'..=b'C' | b'F'..=b'G' | b'I'..=b'N' | b'P'..=b'V' | b'X' | b']' | b'a'..=b'e' | b'g'..=b'j' | b'l' | b'o'..=b'u' | b'}' | 0x80..=0x98)
}

/// Parse a pickle of plain data (protocols 0–5). Containers that the pickle shares through
/// its memo come back as the same `Rc`. Trailing NUL padding after STOP is allowed.
pub fn read(data: &[u8], limits: &Limits) -> Result<Value, PickleError> {
    Reader::new(Input::slice(data), limits).read_all()
}

/// A value on the unpickler's stack: a scalar, or a container in the arena.
/// 24 B: a container's items cost that until [`build`] turns them into values.
#[derive(Clone)]
enum Item {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Rc<str>),
    Node(usize),
}

#[derive(Clone, Copy, PartialEq)]
enum Seq {
    List,
    Tuple,
    Set,
    FrozenSet,
}

enum Node {
    Seq(Seq, Vec<Item>),
    Dict(Vec<(Item, Item)>),
    Bytes(Vec<u8>),
    /// A list of trace entries condensed as they arrived ([`condense`]), in chunks.
    Records(Vec<Vec<condense::TraceRecord>>),
    /// A trace-entry dict read straight into its record, until a list of records takes it.
    Entry(Box<condense::Pending>),
    /// A slot given back after its container was condensed (reused by the next one).
    Free,
}

/// The unpickler's memo. Picklers number their slots 0, 1, 2, …, so those live in a vector;
/// out-of-order keys (legal, rare) go to a map. A vector entry is always newer than a map
/// entry with the same key, because the vector only grows by a PUT of exactly that key.
#[derive(Default)]
struct Memo {
    dense: Vec<Item>,
    sparse: HashMap<u64, Item>,
    /// Distinct keys stored (MEMOIZE's next key, as in CPython: `len(memo)`).
    len: u64,
}

impl Memo {
    fn get(&self, key: u64) -> Option<&Item> {
        usize::try_from(key).ok().and_then(|k| self.dense.get(k)).or_else(|| self.sparse.get(&key))
    }

    fn put(&mut self, key: u64, it: Item) {
        if self.get(key).is_none() {
            self.len += 1;
        }
        match usize::try_from(key) {
            Ok(k) if k < self.dense.len() => self.dense[k] = it,
            Ok(k) if k == self.dense.len() => self.dense.push(it),
            _ => {
                self.sparse.insert(key, it);
            }
        }
    }
}

struct Reader<'a> {
    input: Input<'a>,
    pos: usize,
    /// The opcode being executed.
    op: u8,
    /// Offset of the opcode being executed (errors point at it).
    op_at: usize,
    limits: &'a Limits,
    stack: Vec<Item>,
    /// Stack heights at each open MARK.
    marks: Vec<usize>,
    memo: Memo,
    /// Containers, with the offset of the opcode that made each.
    nodes: Vec<(usize, Node)>,
    items: usize,
    /// Set when trace entries are condensed into records as they arrive ([`condense`]).
    cond: Option<Box<condense::State>>,
}

type Res<T> = Result<T, PickleError>;

fn opname(op: u8) -> String {
    if op.is_ascii_graphic() {
        format!("'{}' (0x{op:02x})", op as char)
    } else {
        format!("0x{op:02x}")
    }
}

impl<'a> Reader<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Res<T> {
        Err(PickleError { offset: self.op_at, message: message.into() })
    }

    fn new(input: Input<'a>, limits: &'a Limits) -> Reader<'a> {
        Reader { input, pos: 0, op: 0, op_at: 0, limits, stack: Vec::new(), marks: Vec::new(), memo: Memo::default(), nodes: Vec::new(), items: 0, cond: None }
    }

    /// Run to STOP, check that only NUL padding follows, and build the value.
    fn read_all(&mut self) -> Res<Value> {
        let root = self.run()?;
        if let Some(i) = self.input.first_nonzero(self.pos) {
            return Err(PickleError { offset: i, message: "data after STOP (only NUL padding may follow)".into() });
        }
        let nodes = std::mem::take(&mut self.nodes);
        convert(nodes, root, self.limits)
    }

    /// A result, unless reading the input failed on the way (then an I/O error).
    fn io_checked<T>(&mut self, res: Res<T>, what: &str) -> Result<T, FileError> {
        match self.input.io_error.take() {
            Some(e) => Err(FileError::Io(format!("{what}: {e}"))),
            None => res.map_err(FileError::Pickle),
        }
    }

    fn take(&mut self, n: usize) -> Res<&[u8]> {
        if self.input.ensure(self.pos, n) {
            let at = self.pos;
            self.pos += n;
            Ok(self.input.at(at, n))
        } else {
            self.err(format!(
                "truncated: argument of opcode {} needs {n} bytes, {} left",
                opname(self.op),
                self.input.len.saturating_sub(self.pos)
            ))
        }
    }

    fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Res<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Res<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn i32(&mut self) -> Res<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Res<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length argument, checked against what is left before anything is allocated.
    fn len(&mut self, n: impl TryInto<usize>) -> Res<&[u8]> {
        match n.try_into() {
            Ok(n) => self.take(n),
            Err(_) => self.err("declared length does not fit in memory"),
        }
    }

    /// A newline-terminated argument of protocol 0 (without the newline).
    fn line_bytes(&mut self) -> Res<Vec<u8>> {
        let Some((nl, bytes)) = self.input.line(self.pos) else {
            return self.err("truncated: text argument has no terminating newline");
        };
        self.pos = nl + 1;
        Ok(bytes)
    }

    fn line(&mut self) -> Res<String> {
        match String::from_utf8(self.line_bytes()?) {
            Ok(s) => Ok(s),
            Err(_) => self.err("text argument is not ASCII"),
        }
    }

    /// A protocol-0 INT or LONG argument (LONG's ends in `L`).
    fn text_int(&self, s: &str) -> Res<i64> {
        let s = s.trim();
        let s = s.strip_suffix('L').unwrap_or(s);
        match s.parse() {
            Ok(i) => Ok(i),
            Err(_) => self.err(format!("integer {s:?} is not a 64-bit signed integer")),
        }
    }

    fn text_key(&mut self) -> Res<u64> {
        let s = self.line()?;
        let s = s.trim();
        match s.parse() {
            Ok(i) => Ok(i),
            Err(_) => self.err(format!("bad memo key {s:?}")),
        }
    }

    /// A length-prefixed UTF-8 string argument.
    fn string(&mut self, n: impl TryInto<usize>) -> Res<Item> {
        let s = std::str::from_utf8(self.len(n)?).map(Rc::<str>::from).map_err(|e| e.valid_up_to());
        self.count(1)?;
        match s {
            Ok(s) => Ok(Item::Str(s)),
            Err(at) => self.err(format!("string is not valid UTF-8 (at its byte {at})")),
        }
    }

    /// A length-prefixed `bytes`/`bytearray` argument (kept in the arena: not shared by value).
    fn bytes(&mut self, n: impl TryInto<usize>) -> Res<Item> {
        let b = self.len(n)?.to_vec();
        self.count(1)?;
        self.node(Node::Bytes(b))
    }

    fn utf8(&mut self, b: &[u8]) -> Res<Item> {
        self.count(1)?;
        match std::str::from_utf8(b) {
            Ok(s) => Ok(Item::Str(Rc::from(s))),
            Err(e) => self.err(format!("string is not valid UTF-8 (at its byte {})", e.valid_up_to())),
        }
    }

    /// A length-prefixed integer, two's complement little endian, that must fit in an i64.
    fn long(&mut self, n: impl TryInto<usize>) -> Res<Item> {
        let b = self.len(n)?;
        let neg = b.last().is_some_and(|&x| x >= 0x80);
        let fill = if neg { 0xff } else { 0 };
        let (low, high) = b.split_at(b.len().min(8));
        let mut le = [fill; 8];
        le[..low.len()].copy_from_slice(low);
        let v = i64::from_le_bytes(le);
        let (bad, n) = (high.iter().any(|&x| x != fill) || (!high.is_empty() && (v < 0) != neg), b.len());
        if bad {
            return self.err(format!("integer of {n} bytes does not fit in 64 bits (signed)"));
        }
        Ok(Item::Int(v))
    }

    fn node(&mut self, n: Node) -> Res<Item> {
        let (free, held) = self.cond.as_ref().map_or((0, 0), |c| (c.free.len(), c.phantom()));
        if self.nodes.len() - free + held >= self.limits.max_containers {
            return self.err(format!("more than {} containers (budget --max-containers)", self.limits.max_containers));
        }
        if let Some(i) = self.cond.as_mut().and_then(|c| c.reuse()) {
            self.nodes[i] = (self.op_at, n);
            return Ok(Item::Node(i));
        }
        self.nodes.push((self.op_at, n));
        Ok(Item::Node(self.nodes.len() - 1))
    }

    fn count(&mut self, n: usize) -> Res<()> {
        self.items = self.items.saturating_add(n);
        if self.items > self.limits.max_items {
            return self.err(format!("more than {} items (budget --max-items, Limits::max_items)", self.limits.max_items));
        }
        Ok(())
    }

    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Res<Item> {
        if self.stack.len() <= self.base() {
            return self.err("stack underflow");
        }
        Ok(self.stack.pop().unwrap_or(Item::None))
    }

    fn top(&self) -> Res<Item> {
        match self.stack.last() {
            Some(it) if self.stack.len() > self.base() => Ok(it.clone()),
            _ => self.err("stack underflow"),
        }
    }

    fn push(&mut self, it: Item) -> Res<()> {
        if self.stack.len() >= self.limits.max_stack {
            return self.err(format!("unpickler stack deeper than {} values (budget --max-stack)", self.limits.max_stack));
        }
        self.stack.push(it);
        Ok(())
    }

    fn pop_mark(&mut self) -> Res<Vec<Item>> {
        match self.marks.pop() {
            Some(m) => {
                let items = self.stack.split_off(m);
                // Give back what a long run of pushes took, so stack and containers do not
                // both hold it.
                if self.stack.capacity() > 1 << 16 && self.stack.capacity() > 4 * self.stack.len() {
                    self.stack.shrink_to(2 * self.stack.len());
                }
                Ok(items)
            }
            None => self.err("no MARK to pop to"),
        }
    }

    /// The container on top of the stack, which must be of the wanted kind.
    fn target(&mut self, want: &str, ok: impl Fn(&Node) -> bool) -> Res<usize> {
        let top = self.top()?;
        if let (Item::Node(i), Some(c)) = (&top, &self.cond) {
            if c.is_frozen(*i) || matches!(self.nodes[*i].1, Node::Entry(_)) {
                // Changed after it was condensed: only the tree reader can follow that.
                return self.err(condense::BAIL);
            }
        }
        match top {
            Item::Node(i) if ok(&self.nodes[i].1) => Ok(i),
            _ => self.err(format!("target is not a {want}")),
        }
    }

    fn extend_seq(&mut self, kind: Seq, name: &str, items: Vec<Item>) -> Res<()> {
        self.count(items.len())?;
        let i = self.target(name, |n| matches!(n, Node::Seq(k, _) if *k == kind))?;
        if let Node::Seq(_, v) = &mut self.nodes[i].1 {
            if v.is_empty() {
                *v = items;
            } else {
                v.extend(items);
            }
        }
        Ok(())
    }

    fn set_items(&mut self, items: Vec<Item>) -> Res<()> {
        if !items.len().is_multiple_of(2) {
            return self.err("odd number of stack items for dict keys and values");
        }
        self.count(items.len())?;
        let i = self.target("dict", |n| matches!(n, Node::Dict(_)))?;
        if let Node::Dict(d) = &mut self.nodes[i].1 {
            d.reserve(items.len() / 2);
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                d.push((k, v));
            }
        }
        Ok(())
    }

    fn new_seq(&mut self, kind: Seq, items: Vec<Item>) -> Res<Item> {
        self.count(items.len())?;
        self.node(Node::Seq(kind, items))
    }

    /// Execute opcodes up to STOP; returns the single value left. Arms that make a value
    /// yield it (it is pushed); the others `continue`.
    fn run(&mut self) -> Res<Item> {
        loop {
            self.op_at = self.pos;
            let Some(op) = self.input.byte(self.pos) else {
                return self.err("unexpected end of data: truncated pickle or missing STOP");
            };
            self.op = op;
            self.pos += 1;
            let item = match op {
                STOP if !self.marks.is_empty() => return self.err(format!("STOP with {} unclosed MARKs", self.marks.len())),
                STOP if self.stack.len() != 1 => {
                    return self.err(format!("STOP with {} values on the stack (expected 1)", self.stack.len()))
                }
                STOP => return self.pop(),
                PROTO => match self.u8()? {
                    0..=5 => continue,
                    v => return self.err(format!("unsupported pickle protocol {v}")),
                },
                FRAME => {
                    // Frames only group opcodes; the frame must lie within the data.
                    let n = self.u64()?;
                    let left = self.input.len - self.pos;
                    if n > left as u64 {
                        return self.err(format!("truncated: frame of {n} bytes, {left} left"));
                    }
                    continue;
                }
                MARK if self.marks.len() >= self.limits.max_depth => {
                    return self.err(format!("more than {} nested MARKs (budget --max-depth, Limits::max_depth)", self.limits.max_depth))
                }
                MARK => {
                    self.marks.push(self.stack.len());
                    continue;
                }
                // POP on an empty mark pops the mark (as CPython does).
                POP if self.stack.len() > self.base() => {
                    self.stack.pop();
                    continue;
                }
                POP | POP_MARK => {
                    self.pop_mark()?;
                    continue;
                }
                DUP => {
                    let it = self.top()?;
                    if let (Item::Node(i), Some(c)) = (&it, self.cond.as_mut()) {
                        c.share(*i);
                    }
                    it
                }

                NONE => Item::None,
                NEWTRUE => Item::Bool(true),
                NEWFALSE => Item::Bool(false),
                BININT1 => Item::Int(self.u8()?.into()),
                BININT2 => Item::Int(u16::from_le_bytes(self.array()?).into()),
                BININT => Item::Int(self.i32()?.into()),
                // Protocol 0 writes booleans as INT 00 / 01.
                INT => match self.line()?.as_str() {
                    "00" => Item::Bool(false),
                    "01" => Item::Bool(true),
                    s => Item::Int(self.text_int(s)?),
                },
                LONG => {
                    let s = self.line()?;
                    Item::Int(self.text_int(&s)?)
                }
                LONG1 => {
                    let n = self.u8()?;
                    self.long(n)?
                }
                LONG4 => {
                    let n = self.i32()?;
                    self.long(n)?
                }
                BINFLOAT => Item::Float(f64::from_be_bytes(self.array()?)),
                FLOAT => {
                    let s = self.line()?;
                    let s = s.trim();
                    match s.parse() {
                        Ok(v) => Item::Float(v),
                        Err(_) => return self.err(format!("bad float {s:?}")),
                    }
                }

                SHORT_BINUNICODE | SHORT_BINSTRING => {
                    let n = self.u8()?;
                    self.string(n)?
                }
                BINUNICODE => {
                    let n = self.u32()?;
                    self.string(n)?
                }
                BINUNICODE8 => {
                    let n = self.u64()?;
                    self.string(n)?
                }
                BINSTRING => {
                    let n = self.i32()?;
                    self.string(n)?
                }
                STRING => {
                    let line = self.line_bytes()?;
                    let inner = match line.as_slice() {
                        [q @ (b'\'' | b'"'), inner @ .., e] if q == e => inner,
                        _ => return self.err("STRING argument is not quoted"),
                    };
                    match escape_decode(inner) {
                        Some(b) => self.utf8(&b)?,
                        None => return self.err("bad escape in STRING argument"),
                    }
                }
                UNICODE => match raw_unicode_unescape(&self.line_bytes()?) {
                    Some(s) => {
                        self.count(1)?;
                        Item::Str(Rc::from(s))
                    }
                    None => return self.err("bad escape in UNICODE argument"),
                },
                SHORT_BINBYTES => {
                    let n = self.u8()?;
                    self.bytes(n)?
                }
                BINBYTES => {
                    let n = self.u32()?;
                    self.bytes(n)?
                }
                BINBYTES8 | BYTEARRAY8 => {
                    let n = self.u64()?;
                    self.bytes(n)?
                }
                NEXT_BUFFER | READONLY_BUFFER => {
                    let name = if op == NEXT_BUFFER { "NEXT_BUFFER" } else { "READONLY_BUFFER" };
                    return self.err(format!("unsupported opcode {name} (out-of-band buffers of pickle protocol 5 are not plain data)"));
                }

                EMPTY_LIST => self.new_seq(Seq::List, Vec::new())?,
                EMPTY_TUPLE => self.new_seq(Seq::Tuple, Vec::new())?,
                EMPTY_SET => self.new_seq(Seq::Set, Vec::new())?,
                EMPTY_DICT if self.cond.is_some() && self.fast_entry()? => continue,
                EMPTY_DICT => self.node(Node::Dict(Vec::new()))?,
                LIST | TUPLE | FROZENSET => {
                    let items = self.pop_mark()?;
                    let kind = match op {
                        LIST => Seq::List,
                        TUPLE => Seq::Tuple,
                        _ => Seq::FrozenSet,
                    };
                    self.new_seq(kind, items)?
                }
                TUPLE1 | TUPLE2 | TUPLE3 => {
                    let n = usize::from(op - TUPLE1 + 1);
                    if self.stack.len() < self.base() + n {
                        return self.err("stack underflow");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.new_seq(Seq::Tuple, items)?
                }
                DICT => {
                    let items = self.pop_mark()?;
                    let d = self.node(Node::Dict(Vec::new()))?;
                    self.push(d)?;
                    self.set_items(items)?;
                    continue;
                }
                APPEND | APPENDS | ADDITEMS => {
                    let items = if op == APPEND { vec![self.pop()?] } else { self.pop_mark()? };
                    let items = match op != ADDITEMS && self.cond.is_some() {
                        true => match self.condense(items)? {
                            Some(items) => items,
                            None => continue,
                        },
                        false => items,
                    };
                    let (kind, name) = if op == ADDITEMS { (Seq::Set, "set") } else { (Seq::List, "list") };
                    self.extend_seq(kind, name, items)?;
                    continue;
                }
                SETITEM | SETITEMS => {
                    let items = if op == SETITEM {
                        let v = self.pop()?;
                        vec![self.pop()?, v]
                    } else {
                        self.pop_mark()?
                    };
                    self.set_items(items)?;
                    continue;
                }

                PUT | BINPUT | LONG_BINPUT | MEMOIZE => {
                    let key = match op {
                        PUT => self.text_key()?,
                        BINPUT => self.u8()?.into(),
                        LONG_BINPUT => self.u32()?.into(),
                        _ => self.cond.as_ref().map_or(self.memo.len, |c| c.memo_len()),
                    };
                    let it = self.top()?;
                    if let Some(c) = self.cond.as_mut() {
                        if let Err(m) = c.put(key, it, self.limits.max_memo) {
                            return self.err(m);
                        }
                        continue;
                    }
                    if self.memo.get(key).is_none() && self.memo.len >= self.limits.max_memo as u64 {
                        return self.err(format!("more than {} memo entries (budget --max-memo)", self.limits.max_memo));
                    }
                    self.memo.put(key, it);
                    continue;
                }
                GET | BINGET | LONG_BINGET => {
                    let key = match op {
                        GET => self.text_key()?,
                        BINGET => self.u8()?.into(),
                        _ => self.u32()?.into(),
                    };
                    let got = match &self.cond {
                        Some(c) => c.get(key),
                        None => self.memo.get(key),
                    };
                    match got {
                        Some(it) => it.clone(),
                        None => return self.err(format!("memo key {key} was never stored")),
                    }
                }

                _ => {
                    return self.err(match executing_opcode(op) {
                        Some(name) => {
                            format!("unsupported opcode {name} {} (pickle would execute code; vramscope reads plain data only)", opname(op))
                        }
                        None => format!("unknown opcode {}", opname(op)),
                    })
                }
            };
            self.push(item)?;
        }
    }

}

/// Turn the arena into `Value`s, each container once (so sharing becomes `Rc` sharing),
/// depth-first with an explicit stack. Rejects cycles and nesting beyond `max_depth`.
fn convert(mut nodes: Vec<(usize, Node)>, root: Item, limits: &Limits) -> Res<Value> {
    const NEW: u8 = 0;
    const OPEN: u8 = 1;
    let n = nodes.len();
    let mut state = vec![NEW; n];
    let mut done: Vec<Option<Value>> = vec![None; n];
    let mut bytes = 0usize;
    let max_depth = limits.max_depth;
    let fail = |offset: usize, message: String| Err(PickleError { offset, message });

    let children = |node: &Node, k: usize| -> Option<Option<usize>> {
        let it = match node {
            Node::Seq(_, v) => v.get(k)?,
            Node::Dict(d) => {
                let (a, b) = d.get(k / 2)?;
                if k.is_multiple_of(2) {
                    a
                } else {
                    b
                }
            }
            Node::Bytes(_) | Node::Records(_) | Node::Entry(_) | Node::Free => return None,
        };
        Some(match it {
            Item::Node(j) => Some(*j),
            _ => None,
        })
    };

    let mut path: Vec<(usize, usize)> = Vec::new();
    if let Item::Node(r) = root {
        if !matches!(nodes[r].1, Node::Bytes(_)) {
            if max_depth == 0 {
                return fail(nodes[r].0, format!("nesting deeper than {max_depth} (budget --max-depth, Limits::max_depth)"));
            }
            state[r] = OPEN;
            path.push((r, 0));
        }
    }
    'outer: while let Some(&(i, k0)) = path.last() {
        let mut k = k0;
        while let Some(child) = children(&nodes[i].1, k) {
            k += 1;
            let Some(j) = child else { continue };
            let (at, node) = &nodes[j];
            if matches!(node, Node::Bytes(_)) || done[j].is_some() {
                continue;
            }
            if state[j] == OPEN {
                return fail(*at, RECURSIVE.into());
            }
            if path.len() >= max_depth {
                return fail(*at, format!("nesting deeper than {max_depth} (budget --max-depth, Limits::max_depth)"));
            }
            if let Some(top) = path.last_mut() {
                top.1 = k;
            }
            state[j] = OPEN;
            path.push((j, 0));
            continue 'outer;
        }
        // Every child is converted: build this one.
        path.pop();
        let (at, node) = std::mem::replace(&mut nodes[i], (0, Node::Seq(Seq::List, Vec::new())));
        let mut value = |it| finish(it, at, &done, &nodes, &mut bytes, limits.max_bytes);
        let v = match node {
            Node::Seq(Seq::Tuple, items) => Value::Tuple(Rc::new(build(items, &mut value)?)),
            Node::Seq(_, items) => Value::List(Rc::new(build(items, &mut value)?)),
            Node::Dict(d) => Value::Dict(Rc::new(build(d, |(a, b)| Ok((value(a)?, value(b)?)))?)),
            Node::Bytes(b) => Value::Bytes(b), // never on the path
            // Records only stand where the condensing reader takes them out.
            Node::Records(_) | Node::Entry(_) | Node::Free => return fail(at, condense::BAIL.into()),
        };
        done[i] = Some(v);
    }
    let at = match root {
        Item::Node(r) => nodes[r].0,
        _ => 0,
    };
    finish(root, at, &done, &nodes, &mut bytes, limits.max_bytes)
}

/// `src` converted element by element, the source given back in chunks as the result grows,
/// so a container's items and its values never both hold all of it (a 50M-item list would
/// otherwise need both at once).
fn build<T, U>(mut src: Vec<T>, mut f: impl FnMut(T) -> Res<U>) -> Res<Vec<U>> {
    const CHUNK: usize = 1 << 16;
    if src.len() <= CHUNK {
        return src.into_iter().map(f).collect();
    }
    // Convert from the back, so the source can shrink in place; the result is built
    // reversed and turned around at the end.
    let mut out = Vec::with_capacity(src.len());
    while !src.is_empty() {
        let tail = src.split_off(src.len().saturating_sub(CHUNK));
        src.shrink_to_fit();
        for x in tail.into_iter().rev() {
            out.push(f(x)?);
        }
    }
    out.reverse();
    Ok(out)
}

/// The value of a stack item once every container it refers to is built (in `done`).
/// `at` is the offset of the container it goes into, for errors.
fn finish(it: Item, at: usize, done: &[Option<Value>], nodes: &[(usize, Node)], bytes: &mut usize, max_bytes: usize) -> Res<Value> {
    Ok(match it {
        Item::None => Value::None,
        Item::Bool(b) => Value::Bool(b),
        Item::Int(v) => Value::Int(v),
        Item::Float(v) => Value::Float(v),
        Item::Str(s) => Value::Str(s),
        Item::Node(j) => match (done.get(j), nodes.get(j)) {
            (Some(Some(v)), _) => v.clone(),
            (_, Some((_, Node::Bytes(b)))) => {
                *bytes = bytes.saturating_add(b.len());
                if *bytes > max_bytes {
                    let message = format!("more than {max_bytes} bytes of bytes objects (budget --max-bytes-objects, Limits::max_bytes)");
                    return Err(PickleError { offset: at, message });
                }
                Value::Bytes(b.clone())
            }
            // Only a container that contains itself can still be unbuilt here.
            _ => return Err(PickleError { offset: at, message: RECURSIVE.into() }),
        },
    })
}

const RECURSIVE: &str = "recursive structure: a container contains itself (not plain data)";

/// Python's `codecs.escape_decode`, for protocol-0 STRING arguments.
fn escape_decode(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while let Some(&c) = s.get(i) {
        i += 1;
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = *s.get(i)?;
        i += 1;
        match e {
            b'\n' => {}
            b'\\' | b'\'' | b'"' => out.push(e),
            b'a' => out.push(7),
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'x' => {
                let h = std::str::from_utf8(s.get(i..i + 2)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 2;
            }
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match s.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            _ => out.extend([b'\\', e]),
        }
    }
    Some(out)
}

/// Python's `raw-unicode-escape` decoding, for protocol-0 UNICODE arguments: bytes are
/// Latin-1 characters except `\uXXXX` and `\UXXXXXXXX`.
fn raw_unicode_unescape(b: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        let digits = match (c, b.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                out.push(char::from(c));
                i += 1;
                continue;
            }
        };
        let h = std::str::from_utf8(b.get(i + 2..i + 2 + digits)?).ok()?;
        out.push(char::from_u32(u32::from_str_radix(h, 16).ok()?)?);
        i += 2 + digits;
    }
    Some(out)
}

impl fmt::Display for Value {
    /// Python-like `repr`, for messages and debugging.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(f: &mut fmt::Formatter<'_>, open: &str, items: &[Value], close: &str) -> fmt::Result {
            f.write_str(open)?;
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{x}")?;
            }
            if open == "(" && items.len() == 1 {
                f.write_str(",")?;
            }
            f.write_str(close)
        }
        match self {
            Value::None => f.write_str("None"),
            Value::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write!(f, "{x:?}"),
            Value::Str(s) => write!(f, "{s:?}"),
            Value::Bytes(b) => write!(f, "b{:?}", String::from_utf8_lossy(b)),
            Value::List(v) => seq(f, "[", v, "]"),
            Value::Tuple(v) => seq(f, "(", v, ")"),
            Value::Dict(d) => {
                f.write_str("{")?;
                for (i, (k, x)) in d.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {x}")?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(v: &Value) -> Value {
        read(&write(v), &Limits::default()).unwrap()
    }

    #[test]
    fn integers_use_the_smallest_encoding() {
        let enc = |i: i64| write(&Value::Int(i))[2..].to_vec();
        assert_eq!(enc(0), [BININT1, 0, STOP]);
        assert_eq!(enc(255), [BININT1, 255, STOP]);
        assert_eq!(enc(256), [BININT2, 0, 1, STOP]);
        assert_eq!(enc(-1), [BININT, 0xff, 0xff, 0xff, 0xff, STOP]);
        assert_eq!(enc(1 << 31), [LONG1, 5, 0, 0, 0, 0x80, 0, STOP]);
        assert_eq!(enc(-(1 << 31) - 1), [LONG1, 5, 0xff, 0xff, 0xff, 0x7f, 0xff, STOP]);
        assert_eq!(enc(-(1 << 40)), [LONG1, 6, 0, 0, 0, 0, 0, 0xff, STOP]);
        assert_eq!(enc(1 << 47), [LONG1, 7, 0, 0, 0, 0, 0, 0x80, 0, STOP]);
        assert_eq!(enc(-(1 << 47)), [LONG1, 6, 0, 0, 0, 0, 0, 0x80, STOP]);
        assert_eq!(enc(i64::MAX)[..2], [LONG1, 8]);
        assert_eq!(enc(i64::MIN)[..2], [LONG1, 8]);
        for i in [0, 1, -1, 255, 256, 65535, 65536, i32::MAX as i64 + 1, i32::MIN as i64 - 1, 1 << 47, -(1 << 47), i64::MAX, i64::MIN] {
            assert_eq!(rt(&Value::Int(i)), Value::Int(i));
        }
    }

    #[test]
    fn shared_containers_and_repeated_strings_are_written_once() {
        let frames = Value::list(vec![Value::dict(vec![("name", Value::str("f")), ("line", Value::Int(1))])]);
        let v = Value::list((0..5).map(|_| Value::dict(vec![("frames", frames.clone())])).collect());
        let out = write(&v);
        assert_eq!(out.windows(8).filter(|w| *w == b"\x8c\x06frames").count(), 1);
        let back = read(&out, &Limits::default()).unwrap();
        assert_eq!(back, v);
        let l = back.as_list().unwrap();
        let (Some(Value::List(a)), Some(Value::List(b))) = (l[0].get("frames"), l[4].get("frames")) else { panic!() };
        assert!(Rc::ptr_eq(a, b));
    }

    #[test]
    fn helpers() {
        let v = Value::dict(vec![("a", Value::Int(1)), ("b", Value::str("x")), ("c", Value::tuple(vec![Value::Bool(true)]))]);
        assert_eq!(v.get("a").and_then(Value::as_int), Some(1));
        assert_eq!(v.get("b").and_then(Value::as_str), Some("x"));
        assert_eq!(v.get("c").and_then(Value::as_list).map(|l| l.len()), Some(1));
        assert_eq!(v.get("z"), None);
        assert_eq!(v.to_string(), "{\"a\": 1, \"b\": \"x\", \"c\": (True,)}");
    }
}
