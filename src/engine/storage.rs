//! Storages: the only things that own device memory. Created and dropped only through the
//! runtime's memory log, so every byte is accounted for; lifetimes follow Rust ownership
//! the way PyTorch's follow refcounts.
use super::dtype::DType;
use super::runtime;
use half::{bf16, f16};
use std::cell::{Cell, Ref, RefCell, RefMut};
use std::fmt;
use std::rc::Rc;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// Real data and numerics on the host.
    Cpu,
    /// Shapes only: the same op code runs and allocates, but no data exists.
    Meta,
}

impl Device {
    pub fn parse(s: &str) -> Option<Device> {
        match s {
            "cpu" => Some(Device::Cpu),
            "meta" => Some(Device::Meta),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "cpu",
            Device::Meta => "meta",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Host data of a cpu storage.
#[derive(Clone, Debug)]
pub enum Buffer {
    F32(Vec<f32>),
    F64(Vec<f64>),
    BF16(Vec<bf16>),
    F16(Vec<f16>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    I32(Vec<i32>),
}

impl Buffer {
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::BF16(_) => DType::BF16,
            Buffer::F16(_) => DType::F16,
            Buffer::I64(_) => DType::I64,
            Buffer::Bool(_) => DType::Bool,
            Buffer::U8(_) => DType::U8,
            Buffer::I8(_) => DType::I8,
            Buffer::I32(_) => DType::I32,
        }
    }
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F64(v) => v.len(),
            Buffer::BF16(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::I64(v) => v.len(),
            Buffer::Bool(v) => v.len(),
            Buffer::U8(v) => v.len(),
            Buffer::I8(v) => v.len(),
            Buffer::I32(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn zeros(dtype: DType, n: usize) -> Buffer {
        match dtype {
            DType::F32 => Buffer::F32(vec![0.0; n]),
            DType::F64 => Buffer::F64(vec![0.0; n]),
            DType::BF16 => Buffer::BF16(vec![bf16::ZERO; n]),
            DType::F16 => Buffer::F16(vec![f16::ZERO; n]),
            DType::I64 => Buffer::I64(vec![0; n]),
            DType::Bool => Buffer::Bool(vec![false; n]),
            DType::U8 => Buffer::U8(vec![0; n]),
            DType::I8 => Buffer::I8(vec![0; n]),
            DType::I32 => Buffer::I32(vec![0; n]),
        }
    }
}

pub struct Storage {
    /// Unique within a run; also the allocation order.
    pub id: u64,
    pub nbytes: usize,
    pub numel: usize,
    pub dtype: DType,
    pub device: Device,
    data: RefCell<Option<Buffer>>,
    /// `storage.resize_(0)` happened: the bytes are given back while tensors keep the
    /// storage (FSDP frees unsharded parameters this way, autograd still saving them).
    released: Cell<bool>,
    /// Outside the caching allocator (host memory for CPU offload, CUDA unified memory for
    /// paged optimizer state): counted by the runtime's account of that kind.
    outside: Option<runtime::Outside>,
    /// A tensor-parallel parameter whose gradient DTensor redistributes on every use. See
    /// [`crate::engine::autograd::grad_as_placed`].
    grad_redistribute: Cell<Option<GradRedistribute>>,
}

/// How a tensor-parallel parameter's gradient is placed against the parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradRedistribute {
    /// The gradient is the whole tensor (Replicate) of which the parameter holds rows
    /// `first..first + rows` (Shard(0)): the vocabulary-parallel embedding's.
    Rows { first: usize, rows: usize },
    /// The gradient is Partial over a Replicate parameter (a SequenceParallel norm's, summed
    /// over this rank's positions only): each use all-reduces it into a new tensor.
    Partial,
}

impl Storage {
    /// Allocate `numel` elements (recorded now); cpu data is filled in by `set`.
    #[track_caller]
    pub fn alloc(device: Device, dtype: DType, numel: usize, op: &'static str) -> Rc<Storage> {
        let nbytes = numel.checked_mul(dtype.size()).unwrap_or_else(|| panic!("{numel} {dtype:?} elements are more bytes than a usize can count"));
        if let Some(kind) = runtime::allocating_outside() {
            runtime::outside_alloc(kind, nbytes);
            return Rc::new(Storage { id: u64::MAX, nbytes, numel, dtype, device, data: RefCell::new(None), released: Cell::new(false), outside: Some(kind), grad_redistribute: Cell::new(None) });
        }
        if runtime::deferring_allocation() {
            // `with torch.device("meta")` before `fully_shard` + `to_empty`: the storage exists
            // with its size but holds no bytes until something resizes it.
            let id = runtime::new_storage_id();
            return Rc::new(Storage { id, nbytes, numel, dtype, device, data: RefCell::new(None), released: Cell::new(true), outside: None, grad_redistribute: Cell::new(None) });
        }
        let id = runtime::alloc_storage(nbytes, op);
        Rc::new(Storage { id, nbytes, numel, dtype, device, data: RefCell::new(None), released: Cell::new(false), outside: None, grad_redistribute: Cell::new(None) })
    }
    /// Not device memory: host scratch or a shape-only placeholder.
    pub(crate) fn untracked(device: Device, dtype: DType, data: Option<Buffer>) -> Rc<Storage> {
        let numel = data.as_ref().map_or(0, |b| b.len());
        Rc::new(Storage { id: u64::MAX, nbytes: 0, numel, dtype, device, data: RefCell::new(data), released: Cell::new(false), outside: None, grad_redistribute: Cell::new(None) })
    }
    /// Mark the parameter on this storage as one whose gradient's placement differs from its own.
    pub fn set_grad_redistribute(&self, how: GradRedistribute) {
        self.grad_redistribute.set(Some(how));
    }
    pub fn grad_redistribute(&self) -> Option<GradRedistribute> {
        self.grad_redistribute.get()
    }
    /// Holds no bytes now (`resize_(0)`, or created under deferred allocation).
    pub fn is_released(&self) -> bool {
        self.released.get()
    }
    /// `untyped_storage().resize_(0)`: free the bytes now; tensors over it stay valid handles
    /// and their data is gone until [`Storage::resize_back`].
    pub fn resize_to_zero(&self) {
        if self.id != u64::MAX && !self.released.replace(true) {
            runtime::free_storage(self.id);
            *self.data.borrow_mut() = None;
        }
    }
    /// `untyped_storage().resize_(nbytes)`: allocate the bytes again (recorded as `op`, in the
    /// current category); the contents are whatever the caller copies in next.
    #[track_caller]
    pub fn resize_back(&self, op: &'static str) {
        self.resize_back_bytes(op, self.nbytes);
    }
    /// [`Storage::resize_back`] to `bytes` (at least the storage's own size: FSDP pads).
    #[track_caller]
    pub fn resize_back_bytes(&self, op: &'static str, bytes: usize) {
        debug_assert!(bytes >= self.nbytes);
        if self.id != u64::MAX && self.released.get() {
            runtime::realloc_storage(self.id, bytes, op);
            self.released.set(false);
        }
    }
    pub fn set(&self, buf: Buffer) {
        debug_assert_eq!(buf.dtype(), self.dtype);
        debug_assert_eq!(buf.len(), self.numel);
        if self.device == Device::Cpu && !self.released.get() {
            *self.data.borrow_mut() = Some(buf);
        }
    }
    pub fn has_data(&self) -> bool {
        self.data.borrow().is_some()
    }
    pub fn buffer(&self) -> Ref<'_, Buffer> {
        Ref::map(self.data.borrow(), |d| d.as_ref().expect("storage has no data (meta device)"))
    }
    pub fn buffer_mut(&self) -> RefMut<'_, Buffer> {
        RefMut::map(self.data.borrow_mut(), |d| d.as_mut().expect("storage has no data (meta device)"))
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Some(kind) = self.outside {
            runtime::outside_free(kind, self.nbytes);
        } else if self.id != u64::MAX && !self.released.get() {
            runtime::free_storage(self.id);
        }
    }
}
