//! Frames of a snapshot, interned once and referenced by id.
//!
//! Snapshots share frame lists: identical tracebacks are one list object that many trace
//! entries refer to through the pickle memo (and one frame dict or one filename string can
//! sit in many lists). Interning keys each shared object by its `Rc` address first, so the
//! work is proportional to the pickle's stored size, never to its unfolded size: a 42 KB
//! file whose 20k entries share one 20k-frame list costs 20k frames here, not 400M. Text
//! is formatted only for what is printed.
//!
//! Lists are also interned by their frames, since PyTorch's own snapshots give every trace
//! entry a list of its own (memory_snapshot.cpp shares only the frame dicts).
//!
//! Addresses are compared only while the snapshot they come from is alive (one table is
//! filled from one borrowed snapshot), so an address cannot be reused meanwhile.
use crate::pickle::Value;
use std::collections::HashMap;
use std::rc::Rc;

/// One frame: ids into the table's strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub name: u32,
    pub file: u32,
    pub line: i64,
}

pub struct FrameTable {
    strs: Vec<Rc<str>>,
    str_by_ptr: HashMap<usize, u32>,
    str_by_text: HashMap<Rc<str>, u32>,
    frames: Vec<Frame>,
    frame_by_ptr: HashMap<usize, u32>,
    /// Frame lists as frame ids; list 0 is the empty list (no frames, or not a list).
    lists: Vec<Vec<u32>>,
    /// Lists seen, by address; each entry holds its list so the address cannot be reused by
    /// another list while the table lives (a later list at a freed address is another list).
    list_by_ptr: HashMap<usize, (u32, Rc<Vec<Value>>)>,
    /// Lists by their frames: PyTorch writes a list of its own for every trace entry (only
    /// the frame dicts are shared), so equal tracebacks meet here.
    list_by_content: super::fast_hash::HashMap<Vec<u32>, u32>,
    /// Distinct frames plus lengths of distinct lists so far, and the most allowed.
    used: usize,
    budget: usize,
}

/// The id of the empty frame list.
pub const NO_FRAMES: u32 = 0;

impl FrameTable {
    /// A table that accepts at most `budget` distinct frames plus frame-list entries.
    pub fn new(budget: usize) -> FrameTable {
        FrameTable {
            strs: Vec::new(),
            str_by_ptr: HashMap::new(),
            str_by_text: HashMap::new(),
            frames: Vec::new(),
            frame_by_ptr: HashMap::new(),
            lists: vec![Vec::new()],
            list_by_ptr: HashMap::new(),
            list_by_content: super::fast_hash::map(),
            used: 0,
            budget,
        }
    }

    fn spend(&mut self, n: usize) -> Result<(), String> {
        self.used = self.used.saturating_add(n);
        if self.used > self.budget {
            return Err(format!("more than {} distinct frames and frame-list entries (budget --max-frames)", self.budget));
        }
        Ok(())
    }

    /// The id of a string, keyed by its address, then by its text.
    pub fn str_id(&mut self, s: &Rc<str>) -> u32 {
        let ptr = Rc::as_ptr(s) as *const u8 as usize;
        if let Some(&i) = self.str_by_ptr.get(&ptr) {
            return i;
        }
        let i = match self.str_by_text.get(s) {
            Some(&i) => i,
            None => {
                let i = self.strs.len() as u32;
                self.strs.push(s.clone());
                self.str_by_text.insert(s.clone(), i);
                i
            }
        };
        self.str_by_ptr.insert(ptr, i);
        i
    }

    fn text_id(&mut self, s: &str) -> u32 {
        match self.str_by_text.get(s) {
            Some(&i) => i,
            None => self.str_id(&Rc::from(s)),
        }
    }

    fn frame(&mut self, f: &Value) -> Result<u32, String> {
        let Value::Dict(d) = f else {
            let q = self.text_id("?");
            return self.add_frame(Frame { name: q, file: q, line: 0 });
        };
        let ptr = Rc::as_ptr(d) as usize;
        if let Some(&i) = self.frame_by_ptr.get(&ptr) {
            return Ok(i);
        }
        // One pass; the last of repeated keys wins, as in a Python dict.
        let (mut name, mut file, mut line) = (None, None, 0);
        for (k, v) in d.iter() {
            match k.as_str() {
                Some("name") => name = Some(v),
                Some("filename") => file = Some(v),
                Some("line") => line = v.as_int().unwrap_or(0),
                _ => {}
            }
        }
        let mut text = |v: Option<&Value>| match v {
            Some(Value::Str(s)) => self.str_id(s),
            _ => self.text_id("?"),
        };
        let frame = Frame { name: text(name), file: text(file), line };
        let i = self.add_frame(frame)?;
        self.frame_by_ptr.insert(ptr, i);
        Ok(i)
    }

    fn add_frame(&mut self, f: Frame) -> Result<u32, String> {
        self.spend(1)?;
        self.frames.push(f);
        Ok(self.frames.len() as u32 - 1)
    }

    /// The id of a `frames` value (a list of frame dicts; anything else has no frames).
    pub fn list_id(&mut self, v: Option<&Value>) -> Result<u32, String> {
        let Some(Value::List(l)) = v else { return Ok(NO_FRAMES) };
        if l.is_empty() {
            return Ok(NO_FRAMES);
        }
        let ptr = Rc::as_ptr(l) as usize;
        if let Some(&(i, _)) = self.list_by_ptr.get(&ptr) {
            return Ok(i);
        }
        let ids = l.iter().map(|f| self.frame(f)).collect::<Result<Vec<u32>, String>>()?;
        let i = match self.list_by_content.get(&ids) {
            Some(&i) => i,
            None => {
                self.spend(l.len())?;
                self.lists.push(ids.clone());
                self.list_by_content.insert(ids, self.lists.len() as u32 - 1);
                self.lists.len() as u32 - 1
            }
        };
        // Kept even for a list only one dict holds: that dict may be shared by many entries.
        self.list_by_ptr.insert(ptr, (i, l.clone()));
        Ok(i)
    }

    /// A frame from its text (`None`: not a string, printed "?"), for a reader that has no
    /// `Value`s: a new frame each call, as [`FrameTable::list_id`] makes one per frame dict.
    pub fn frame_of(&mut self, name: Option<&str>, file: Option<&str>, line: i64) -> Result<u32, String> {
        let name = self.text_id(name.unwrap_or("?"));
        let file = self.text_id(file.unwrap_or("?"));
        self.add_frame(Frame { name, file, line })
    }

    /// The id of the list of frames `ids`, interned by content as [`FrameTable::list_id`]
    /// interns a list it has not met.
    pub fn list_of(&mut self, ids: Vec<u32>) -> Result<u32, String> {
        if ids.is_empty() {
            return Ok(NO_FRAMES);
        }
        if let Some(&i) = self.list_by_content.get(&ids) {
            return Ok(i);
        }
        self.spend(ids.len())?;
        self.lists.push(ids.clone());
        self.list_by_content.insert(ids, self.lists.len() as u32 - 1);
        Ok(self.lists.len() as u32 - 1)
    }

    /// The id of an interned list of frames `ids`, if it is one already ([`FrameTable::list_of`]
    /// without adding one: nothing is spent).
    pub fn find_list(&self, ids: &[u32]) -> Option<u32> {
        if ids.is_empty() {
            return Some(NO_FRAMES);
        }
        self.list_by_content.get(ids).copied()
    }

    pub fn list(&self, id: u32) -> &[u32] {
        self.lists.get(id as usize).map_or(&[], Vec::as_slice)
    }

    pub fn frame_at(&self, id: u32) -> Frame {
        self.frames[id as usize]
    }

    pub fn text(&self, id: u32) -> &str {
        &self.strs[id as usize]
    }

    /// "name file:line", as reports print a frame.
    pub fn format(&self, frame: u32) -> String {
        let f = self.frames[frame as usize];
        format!("{} {}:{}", self.text(f.name), self.text(f.file), f.line)
    }

    /// The first `n` frames of list `id`, formatted.
    pub fn formatted(&self, id: u32, n: usize) -> Vec<String> {
        self.list(id).iter().take(n).map(|&f| self.format(f)).collect()
    }
}

/// A frame's text with layer indices folded: `mul layers.17.ffn:0` → `mul layers.*.ffn:0`,
/// so a report groups one line of model code across its layers. A dotted component of
/// digits folds when the component before it ends in a letter or `_` (a module list such as
/// `layers`, `h`, `blocks`); version numbers in paths (`python3.11`) do not.
pub fn fold_layer_index(text: &str) -> std::borrow::Cow<'_, str> {
    let parts: Vec<&str> = text.split('.').collect();
    let folds = |i: usize| {
        i > 0
            && !parts[i].is_empty()
            && parts[i].bytes().all(|b| b.is_ascii_digit())
            && parts[i - 1].bytes().last().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            // A number followed by `:line` or the end is a module index only with a dot after.
            && i + 1 < parts.len()
    };
    if !(0..parts.len()).any(folds) {
        return text.into();
    }
    let out: Vec<&str> = (0..parts.len()).map(|i| if folds(i) { "*" } else { parts[i] }).collect();
    out.join(".").into()
}

/// A frame list of a report, formatted only when shown or serialised.
#[derive(Clone)]
pub struct Frames {
    pub table: Rc<FrameTable>,
    pub list: u32,
}

impl Frames {
    pub fn is_empty(&self) -> bool {
        self.table.list(self.list).is_empty()
    }

    pub fn len(&self) -> usize {
        self.table.list(self.list).len()
    }

    /// The frames, innermost first, each formatted as it is reached.
    pub fn iter(&self) -> impl Iterator<Item = String> + '_ {
        self.table.list(self.list).iter().map(|&f| self.table.format(f))
    }

    /// The first `n` joined with " ← ".
    pub fn head(&self, n: usize) -> String {
        self.iter().take(n).collect::<Vec<_>>().join(" ← ")
    }
}

impl std::fmt::Debug for Frames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter().take(3)).finish()
    }
}

impl serde::Serialize for Frames {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::fold_layer_index as fold;
    use super::FrameTable;
    use crate::pickle::Value;

    /// PyTorch gives every trace entry a frames list of its own over shared frame dicts:
    /// equal lists are one list here, so the budget counts distinct tracebacks, not entries
    /// (a 10-frame traceback on 200k entries used to exceed the 2 M default).
    #[test]
    fn lists_of_their_own_with_equal_frames_are_one_list() {
        let frame = |n: i64| Value::dict(vec![("filename", Value::str("m.py")), ("line", Value::Int(n)), ("name", Value::str("f"))]);
        let shared: Vec<Value> = (0..10).map(frame).collect();
        let mut t = FrameTable::new(30);
        let first = t.list_id(Some(&Value::list(shared.clone()))).unwrap();
        for _ in 0..1000 {
            assert_eq!(t.list_id(Some(&Value::list(shared.clone()))).unwrap(), first);
        }
        // Another order is another traceback, and it is counted.
        let mut rev = shared.clone();
        rev.reverse();
        let other = t.list_id(Some(&Value::list(rev.clone()))).unwrap();
        assert_ne!(other, first);
        assert_eq!(t.list(other).len(), 10);
        // 10 frames + 2 lists of 10 = 30: the next distinct list is over the budget.
        let err = t.list_id(Some(&Value::list(shared[..9].to_vec()))).unwrap_err();
        assert!(err.contains("--max-frames"), "{err}");
    }

    #[test]
    fn layer_indices_fold_and_other_numbers_stay() {
        assert_eq!(fold("mul layers.17.ffn:0"), "mul layers.*.ffn:0");
        assert_eq!(fold("free optimizer.layers.0.ffn.w1.weight:0"), "free optimizer.layers.*.ffn.w1.weight:0");
        assert_eq!(fold("bmm model.layers.3.self_attn.q_proj:0"), "bmm model.layers.*.self_attn.q_proj:0");
        assert_eq!(fold("forward /usr/lib/python3.11/site-packages/torch/nn/modules/module.py:1520"), "forward /usr/lib/python3.11/site-packages/torch/nn/modules/module.py:1520");
        assert_eq!(fold("Linear.forward cs336_basics/model.py:34"), "Linear.forward cs336_basics/model.py:34");
        assert_eq!(fold("all_gather layers.2:0"), "all_gather layers.2:0");
    }
}
