//! The bytes a [`super::Reader`] parses: a slice held in memory, or a regular file read
//! through a window, so that reading a snapshot of any size costs the window, not the file.
use std::borrow::Cow;
use std::io::Read;

/// Bytes read from a file at a time (and the least the window grows by).
const CHUNK: usize = 1 << 20;

pub(super) struct Input<'a> {
    /// The bytes from offset `base` on that are in memory.
    buf: Cow<'a, [u8]>,
    base: usize,
    /// Where the rest comes from (None: `buf` is everything).
    file: Option<std::fs::File>,
    /// The total length (a regular file's size when it was opened).
    pub len: usize,
    /// A read error met on the way; the caller reports it as an I/O error.
    pub io_error: Option<std::io::Error>,
}

impl<'a> Input<'a> {
    pub fn slice(data: &'a [u8]) -> Input<'a> {
        Input { buf: Cow::Borrowed(data), base: 0, file: None, len: data.len(), io_error: None }
    }

    /// A regular file of `len` bytes, of which `head` (its first bytes) are already read.
    pub fn file(file: std::fs::File, head: Vec<u8>, len: usize) -> Input<'static> {
        Input { buf: Cow::Owned(head), base: 0, file: Some(file), len, io_error: None }
    }

    /// The bytes `start..len` of a regular file (the reader sees nothing past `len`).
    pub fn file_range(mut file: std::fs::File, start: usize, len: usize) -> std::io::Result<Input<'static>> {
        use std::io::{Seek, SeekFrom};
        file.seek(SeekFrom::Start(start as u64))?;
        Ok(Input { buf: Cow::Owned(Vec::new()), base: start, file: Some(file), len, io_error: None })
    }

    /// Whether `n` bytes from `pos` are (now) in memory. Bytes before `pos` are let go.
    pub fn ensure(&mut self, pos: usize, n: usize) -> bool {
        let Some(end) = pos.checked_add(n) else { return false };
        while end > self.base + self.buf.len() {
            if self.file.is_none() || end > self.len || !self.fill(pos, end) {
                return false;
            }
        }
        true
    }

    /// Read more, towards offset `end` (at least one byte, up to what the file holds),
    /// letting go of the bytes before `keep` (skipped over by a seek when none of them was
    /// read yet).
    fn fill(&mut self, keep: usize, end: usize) -> bool {
        use std::io::{Seek, SeekFrom};
        let Some(f) = self.file.as_mut() else { return false };
        let buf = self.buf.to_mut();
        let have = self.base + buf.len();
        if keep > have {
            if let Err(e) = i64::try_from(keep - have).map_err(std::io::Error::other).and_then(|d| f.seek(SeekFrom::Current(d))) {
                self.io_error = Some(e);
                self.file = None;
                return false;
            }
            buf.clear();
            self.base = keep;
        } else {
            let drop = keep.saturating_sub(self.base);
            buf.drain(..drop);
            self.base = keep;
        }
        let old = buf.len();
        let want = end.saturating_sub(self.base + old).max(1);
        // Never past `len` ([`Input::ensure`] asks for nothing beyond it).
        let room = want.max(CHUNK).min(self.len.saturating_sub(self.base + old).max(want));
        buf.resize(old + room, 0);
        let mut got = 0;
        while got < want {
            match f.read(&mut buf[old + got..]) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.io_error = Some(e);
                    break;
                }
            }
        }
        buf.truncate(old + got);
        if buf.capacity() > 4 * CHUNK && buf.capacity() > 4 * buf.len() {
            buf.shrink_to(2 * buf.len().max(CHUNK));
        }
        if got == 0 {
            self.file = None;
        }
        got > 0
    }

    /// Everything is in memory already.
    pub fn close(&mut self) {
        self.file = None;
    }

    /// `n` bytes from `pos`, which [`Input::ensure`] made available.
    pub fn at(&self, pos: usize, n: usize) -> &[u8] {
        &self.buf[pos - self.base..pos - self.base + n]
    }

    /// The bytes from `pos` to the end of what is in memory now (empty when `pos` is not).
    pub fn rest(&self, pos: usize) -> &[u8] {
        pos.checked_sub(self.base).and_then(|i| self.buf.get(i..)).unwrap_or(&[])
    }

    pub fn byte(&mut self, pos: usize) -> Option<u8> {
        self.ensure(pos, 1).then(|| self.buf[pos - self.base])
    }

    /// The bytes from `pos` up to the next newline (not included), and its offset.
    pub fn line(&mut self, pos: usize) -> Option<(usize, Vec<u8>)> {
        let mut from = pos;
        loop {
            if !self.ensure_from(pos, from) {
                return None;
            }
            let rest = &self.buf[from - self.base..];
            if let Some(i) = rest.iter().position(|&b| b == b'\n') {
                let nl = from + i;
                return Some((nl, self.at(pos, nl - pos).to_vec()));
            }
            from = self.base + self.buf.len();
        }
    }

    /// Make sure bytes from `keep` to at least `from + 1` are in memory.
    fn ensure_from(&mut self, keep: usize, from: usize) -> bool {
        while from >= self.base + self.buf.len() {
            if self.file.is_none() || from >= self.len || !self.fill(keep, from + 1) {
                return false;
            }
        }
        true
    }

    /// The offset of the first byte from `pos` on that is not NUL.
    pub fn first_nonzero(&mut self, pos: usize) -> Option<usize> {
        let mut from = pos;
        while self.ensure(from, 1) {
            let rest = &self.buf[from - self.base..];
            if let Some(i) = rest.iter().position(|&b| b != 0) {
                return Some(from + i);
            }
            from = self.base + self.buf.len();
        }
        None
    }
}
