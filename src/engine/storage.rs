//! Storages: the only things that own device memory. Created and dropped only through the
//! runtime's memory log, so every byte is accounted for; lifetimes follow Rust ownership
//! the way PyTorch's follow refcounts.
use super::dtype::DType;
use super::runtime;
use half::{bf16, f16};
use std::cell::{Ref, RefCell, RefMut};
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
}

impl Storage {
    /// Allocate `numel` elements (recorded now); cpu data is filled in by `set`.
    #[track_caller]
    pub fn alloc(device: Device, dtype: DType, numel: usize, op: &'static str) -> Rc<Storage> {
        let nbytes = numel.checked_mul(dtype.size()).unwrap_or_else(|| panic!("{numel} {dtype:?} elements are more bytes than a usize can count"));
        let id = runtime::alloc_storage(nbytes, op);
        Rc::new(Storage { id, nbytes, numel, dtype, device, data: RefCell::new(None) })
    }
    /// Not device memory: host scratch or a shape-only placeholder.
    pub(crate) fn untracked(device: Device, dtype: DType, data: Option<Buffer>) -> Rc<Storage> {
        let numel = data.as_ref().map_or(0, |b| b.len());
        Rc::new(Storage { id: u64::MAX, nbytes: 0, numel, dtype, device, data: RefCell::new(data) })
    }
    pub fn set(&self, buf: Buffer) {
        debug_assert_eq!(buf.dtype(), self.dtype);
        debug_assert_eq!(buf.len(), self.numel);
        if self.device == Device::Cpu {
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
        if self.id != u64::MAX {
            runtime::free_storage(self.id);
        }
    }
}
