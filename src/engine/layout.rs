//! Shapes, strides and views: everything a view op changes without touching storage.

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub shape: Vec<usize>,
    /// In elements. A broadcast (expanded) dimension has stride 0.
    pub strides: Vec<usize>,
    /// In elements, from the start of the storage.
    pub offset: usize,
}

pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i].max(1);
    }
    strides
}

/// Element count of `shape`. Runs check their shapes up front (`ModelConfig::check_sizes`), so
/// an overflow here is a bug, reported as such rather than wrapped.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).unwrap_or_else(|| panic!("shape {shape:?} has more elements than a usize can count"))
}

/// Resolves a possibly negative dimension index.
pub fn dim_index(dim: isize, rank: usize) -> usize {
    let d = if dim < 0 { dim + rank as isize } else { dim };
    assert!(d >= 0 && (d as usize) < rank.max(1), "dimension {dim} out of range for rank {rank}");
    d as usize
}

/// numpy/PyTorch broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n { a[i + a.len() - n] } else { 1 };
        let db = if i + b.len() >= n { b[i + b.len() - n] } else { 1 };
        out[i] = if da == db {
            da
        } else if da == 1 {
            db
        } else if db == 1 {
            da
        } else {
            panic!("shapes {a:?} and {b:?} do not broadcast")
        };
    }
    out
}

impl Layout {
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.shape[i];
        }
        true
    }
    /// c10's `is_non_overlapping_and_dense`: the elements fill a block of the storage with
    /// no gaps or overlaps in some dim order (a permuted contiguous tensor, at any offset).
    pub fn is_non_overlapping_and_dense(&self) -> bool {
        // Dims of size < 2 are ignored (sorted last); the rest, by stride, must step densely.
        let mut dims: Vec<usize> = (0..self.shape.len()).filter(|&i| self.shape[i] >= 2).collect();
        dims.sort_by_key(|&i| self.strides[i]);
        let mut want = 1;
        for i in dims {
            if self.strides[i] != want {
                return false;
            }
            want *= self.shape[i];
        }
        true
    }
    pub fn transpose(&self, a: usize, b: usize) -> Layout {
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        l
    }
    pub fn permute(&self, dims: &[usize]) -> Layout {
        assert_eq!(dims.len(), self.rank(), "permute needs every dimension");
        Layout {
            shape: dims.iter().map(|&d| self.shape[d]).collect(),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        }
    }
    /// Narrow `dim` to `start..end` taking every `step`th element (a view).
    pub fn slice(&self, dim: usize, start: usize, end: usize, step: usize) -> Layout {
        assert!(start <= end && end <= self.shape[dim] && step >= 1, "bad slice {start}..{end}:{step} of {:?}", self.shape);
        let mut l = self.clone();
        l.offset += start * self.strides[dim];
        l.shape[dim] = (end - start).div_ceil(step);
        l.strides[dim] *= step;
        l
    }
    /// Index `dim` at `i`, dropping the dimension (a view).
    pub fn select(&self, dim: usize, i: usize) -> Layout {
        assert!(i < self.shape[dim], "index {i} out of range for dim {dim} of {:?}", self.shape);
        let mut l = self.clone();
        l.offset += i * self.strides[dim];
        l.shape.remove(dim);
        l.strides.remove(dim);
        l
    }
    pub fn unsqueeze(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        let stride = if dim < self.rank() { self.strides[dim] * self.shape[dim] } else { 1 };
        l.shape.insert(dim, 1);
        l.strides.insert(dim, stride);
        l
    }
    /// Broadcast to `shape` (a view with stride 0 on expanded dims).
    pub fn expand(&self, shape: &[usize]) -> Layout {
        assert!(shape.len() >= self.rank(), "cannot expand {:?} to {:?}", self.shape, shape);
        let lead = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for i in 0..shape.len() {
            if i < lead {
                strides[i] = 0;
            } else {
                let (s, st) = (self.shape[i - lead], self.strides[i - lead]);
                strides[i] = if s == shape[i] {
                    st
                } else if s == 1 {
                    0
                } else {
                    panic!("cannot expand {:?} to {:?}", self.shape, shape)
                };
            }
        }
        Layout { shape: shape.to_vec(), strides, offset: self.offset }
    }
    /// The view PyTorch's `view`/`reshape` can return without a copy, if one exists.
    /// (The stride-compatibility rule of ATen's `computeStride`.)
    pub fn view(&self, shape: &[usize]) -> Option<Layout> {
        assert_eq!(numel(shape), self.numel(), "cannot reshape {:?} into {:?}", self.shape, shape);
        if self.is_contiguous() {
            return Some(Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: self.offset });
        }
        if self.numel() == 0 {
            return Some(Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: self.offset });
        }
        let old_shape = &self.shape;
        let old_strides = &self.strides;
        let mut new_strides = vec![0usize; shape.len()];
        let mut view_d = shape.len() as isize - 1;
        let mut chunk_base_stride = *old_strides.last().unwrap_or(&1);
        let mut tensor_numel = 1usize;
        let mut view_numel = 1usize;
        for tensor_d in (0..old_shape.len()).rev() {
            tensor_numel *= old_shape[tensor_d];
            if tensor_d == 0
                || (old_shape[tensor_d - 1] != 1 && old_strides[tensor_d - 1] != tensor_numel * chunk_base_stride)
            {
                while view_d >= 0 && (view_numel < tensor_numel || shape[view_d as usize] == 1) {
                    new_strides[view_d as usize] = view_numel * chunk_base_stride;
                    view_numel *= shape[view_d as usize];
                    view_d -= 1;
                }
                if view_numel != tensor_numel {
                    return None;
                }
                if tensor_d > 0 {
                    chunk_base_stride = old_strides[tensor_d - 1];
                    tensor_numel = 1;
                    view_numel = 1;
                }
            }
        }
        if view_d != -1 {
            return None;
        }
        Some(Layout { shape: shape.to_vec(), strides: new_strides, offset: self.offset })
    }

    /// Storage offsets of every element in row-major order.
    pub fn offsets(&self) -> OffsetIter<'_> {
        OffsetIter::new(self)
    }
}

/// Row-major walk over a strided layout.
pub struct OffsetIter<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: Option<usize>,
}

impl<'a> OffsetIter<'a> {
    fn new(layout: &'a Layout) -> Self {
        let next = if layout.numel() == 0 { None } else { Some(layout.offset) };
        OffsetIter { layout, index: vec![0; layout.rank()], next }
    }
}

impl Iterator for OffsetIter<'_> {
    type Item = usize;
    #[inline]
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        let l = self.layout;
        let mut off = cur;
        let mut d = l.rank();
        loop {
            if d == 0 {
                self.next = None;
                break;
            }
            d -= 1;
            self.index[d] += 1;
            off += l.strides[d];
            if self.index[d] < l.shape[d] {
                self.next = Some(off);
                break;
            }
            off -= l.strides[d] * l.shape[d];
            self.index[d] = 0;
        }
        Some(cur)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// InputBuffer's in-place test: permuted and offset blocks count, gaps, overlaps and
    /// broadcasts do not.
    #[test]
    fn non_overlapping_and_dense_as_c10_defines_it() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert!(l.is_non_overlapping_and_dense());
        assert!(l.transpose(0, 2).is_non_overlapping_and_dense());
        assert!(Layout { offset: 24, ..l.clone() }.is_non_overlapping_and_dense());
        assert!(!Layout { shape: vec![2, 3, 2], ..l.clone() }.is_non_overlapping_and_dense());
        assert!(!Layout { shape: vec![2, 3], strides: vec![0, 1], offset: 0 }.is_non_overlapping_and_dense());
        assert!(Layout { shape: vec![1, 3], strides: vec![7, 1], offset: 0 }.is_non_overlapping_and_dense());
    }
    #[test]
    fn view_of_transposed_needs_copy_but_split_does_not() {
        let l = Layout::contiguous(&[2, 3, 4]);
        let t = l.transpose(1, 2);
        assert!(t.view(&[2, 12]).is_none());
        assert!(t.view(&[2, 4, 3]).is_some());
        let s = Layout::contiguous(&[6, 4]).view(&[2, 3, 2, 2]).unwrap();
        assert_eq!(s.strides, vec![12, 4, 2, 1]);
        // (B,S,h,d) transposed to (B,h,S,d): merging B and h is impossible, S and d fine.
        let p = Layout::contiguous(&[2, 5, 3, 4]).transpose(1, 2);
        assert!(p.view(&[6, 5, 4]).is_none());
        assert!(p.view(&[2, 3, 20]).is_none());
        let offs: Vec<usize> = Layout::contiguous(&[2, 3]).transpose(0, 1).offsets().collect();
        assert_eq!(offs, vec![0, 3, 1, 4, 2, 5]);
    }
}

/// The strides TensorIterator gives a fresh output of `shape` computed elementwise from
/// `inputs` (ATen `TensorIteratorBase::reorder_dimensions` + `allocate_or_resize_outputs`):
/// contiguous when every input is contiguous and of the output's shape; otherwise the dims
/// are ordered fastest-first by the inputs' strides, the first input that tells two dims
/// apart deciding (broadcast dims are skipped; equal strides put the smaller dim first), and
/// the output is dense in that order. So `q.transpose(1, 2) * cos` keeps q's physical order.
pub fn iterator_strides(inputs: &[&Layout], shape: &[usize]) -> Vec<usize> {
    let n = shape.len();
    if inputs.iter().all(|l| l.shape == shape && l.is_contiguous()) {
        return contiguous_strides(shape);
    }
    // Each input's strides over the output's dims (right-aligned), 0 where it broadcasts.
    let st: Vec<Vec<usize>> = inputs
        .iter()
        .map(|l| {
            let off = n - l.rank();
            (0..n)
                .map(|i| {
                    if i < off {
                        return 0;
                    }
                    let d = i - off;
                    if l.shape[d] == 1 && shape[i] != 1 { 0 } else { l.strides[d] }
                })
                .collect()
        })
        .collect();
    let should_swap = |d0: usize, d1: usize| -> i32 {
        for s in &st {
            let (s0, s1) = (s[d0], s[d1]);
            if s0 == 0 || s1 == 0 {
                continue;
            }
            if s0 < s1 {
                return -1;
            }
            if s0 > s1 {
                return 1;
            }
            if shape[d0] > shape[d1] {
                return 1;
            }
        }
        0
    };
    // perm[0] is the fastest dim; insertion sort with ambiguous comparisons, as ATen.
    let mut perm: Vec<usize> = (0..n).rev().collect();
    for i in 1..n {
        let mut d1 = i;
        for d0 in (0..i).rev() {
            match should_swap(perm[d0], perm[d1]) {
                c if c > 0 => {
                    perm.swap(d0, d1);
                    d1 = d0;
                }
                c if c < 0 => break,
                _ => {}
            }
        }
    }
    let mut strides = vec![0; n];
    let mut acc = 1;
    for &d in &perm {
        strides[d] = acc;
        acc *= shape[d];
    }
    strides
}

/// `empty_like(t)` with `memory_format=torch.preserve_format`: `t`'s own strides when it is
/// non-overlapping and dense (any dim order), else contiguous.
pub fn preserve_strides(l: &Layout) -> Vec<usize> {
    let mut dims: Vec<usize> = (0..l.rank()).filter(|&d| l.shape[d] != 1).collect();
    dims.sort_by_key(|&d| l.strides[d]);
    let mut acc = 1;
    for &d in &dims {
        if l.strides[d] != acc {
            return contiguous_strides(&l.shape);
        }
        acc *= l.shape[d];
    }
    l.strides.clone()
}
