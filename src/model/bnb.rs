//! Models loaded by bitsandbytes, as transformers 5.23 loads them with
//! `BitsAndBytesConfig(load_in_4bit=True, ...)` or `BitsAndBytesConfig(load_in_8bit=True, ...)`
//! and peft 0.21.2 prepares them (`prepare_model_for_kbit_training`): every decoder linear
//! becomes a `Linear4bit` or a `Linear8bitLt` (lm_head, the embedding and the norms stay
//! unquantized: transformers' `get_keys_to_not_convert` keeps the output embedding). A
//! `Linear4bit`'s forward is `bnb.matmul_4bit(x.to(compute_dtype), W).to(x.dtype)`, a
//! `Linear8bitLt`'s `bnb.matmul(x, W, bias, state)` (LLM.int8(), in x's type).
use crate::engine::ops::int8::{Int8Kernel, Int8Weight};
use crate::engine::ops::quant::{Gemm4bitKernel, Packed4bit, NESTED_BLOCKSIZE};
use crate::engine::{runtime, DType, Tensor};
use crate::model::init::{self, Init};
use crate::model::py::lib_frames as py;
use serde::{Deserialize, Serialize};

/// The GPU `gemm_4bit`'s choice is made for when none is named: an H100 (sm90, 132 SMs).
pub const DEFAULT_KERNEL: Gemm4bitKernel = Gemm4bitKernel::Cuda { sms: 132, major: 9, minor: 0 };

/// `gemm_4bit`'s device for a GPU preset (its SM count and compute capability; AMD parts
/// take bitsandbytes' ROCm rule), or the default.
pub fn kernel_for(gpu: Option<&crate::record::gpu::Gpu>) -> Gemm4bitKernel {
    gpu.and_then(|g| g.arch).map_or(DEFAULT_KERNEL, |a| match a {
        crate::record::gpu::Arch::Cuda { sms, major, minor } => Gemm4bitKernel::Cuda { sms, major, minor },
        crate::record::gpu::Arch::RocmCdna => Gemm4bitKernel::RocmCdna,
    })
}

/// `BitsAndBytesConfig`: the quantization, and how the model was loaded and prepared.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bnb {
    /// Flattened, so that summary.json keeps the 4-bit fields (`quant_type`, …) beside
    /// `quantization: "4bit"` where they were before 8-bit existed.
    #[serde(flatten)]
    pub quant: Quant,
    /// The type `from_pretrained` loaded the weights in (4-bit: `quant_state.dtype`, the type a
    /// backward dequantizes to; both: the type flash attention casts fp32 queries to).
    pub load_dtype: DType,
    /// `prepare_model_for_kbit_training`: the unquantized parameters cast to fp32.
    pub prepare: bool,
}

/// `load_in_4bit` or `load_in_8bit`, with their fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "quantization")]
pub enum Quant {
    #[serde(rename = "4bit")]
    FourBit(Bnb4bit),
    #[serde(rename = "8bit")]
    Int8(Int8),
}

/// `BitsAndBytesConfig`'s 4-bit fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Bnb4bit {
    /// `bnb_4bit_quant_type`: nf4 or fp4 (the same bytes; recorded).
    pub quant_type: String,
    /// `bnb_4bit_use_double_quant`: 8-bit block scales with one fp32 scale per 256 blocks.
    pub double_quant: bool,
    /// `bnb_4bit_compute_dtype` (bitsandbytes' default float32).
    pub compute_dtype: DType,
    /// Where `gemm_4bit` runs.
    pub kernel: Gemm4bitKernel,
    /// `bnb_4bit_quant_storage`: the type the packed bytes are viewed as (uint8 by default; a
    /// float type, the compute dtype, for FSDP-QLoRA). Same bytes, numel = bytes / itemsize.
    #[serde(default = "uint8")]
    pub quant_storage: DType,
}

fn uint8() -> DType {
    DType::U8
}

/// `BitsAndBytesConfig`'s 8-bit fields (`has_fp16_weights` is False: the weights are frozen
/// int8, as transformers loads them).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Int8 {
    /// `llm_int8_threshold` (6.0 by default): inputs columns with |a| ≥ threshold would run in
    /// 16 bits; vramscope assumes none has (see `engine::ops::int8`).
    pub threshold: f64,
    /// Where the int8 kernels run.
    pub kernel: Int8Kernel,
}

impl Bnb {
    pub fn four_bit(&self) -> Option<&Bnb4bit> {
        match &self.quant {
            Quant::FourBit(q) => Some(q),
            Quant::Int8(_) => None,
        }
    }
    pub fn int8(&self) -> Option<&Int8> {
        match &self.quant {
            Quant::Int8(q) => Some(q),
            Quant::FourBit(_) => None,
        }
    }
    /// The flag that turned it on (what refusals name).
    pub fn flag(&self) -> &'static str {
        match self.quant {
            Quant::FourBit(_) => "--load-in-4bit",
            Quant::Int8(_) => "--load-in-8bit",
        }
    }
    /// "4-bit" or "8-bit".
    pub fn bits(&self) -> &'static str {
        match self.quant {
            Quant::FourBit(_) => "4-bit",
            Quant::Int8(_) => "8-bit",
        }
    }
    /// The type of the parameters that stay unquantized (embedding, norms, lm_head, biases).
    pub fn unquantized_dtype(&self) -> DType {
        if self.prepare {
            DType::F32
        } else {
            self.load_dtype
        }
    }
}

/// The storage of one `Linear4bit` of `rows` × `cols` (`Params4bit` and its `quant_state`),
/// registered as the module's weight (frozen, of `quant_storage`) plus the state's tensors: the
/// block scales, the 16-entry code and, nested, the second-level scales and the offset. The
/// weight's shape is bitsandbytes' `quantize_4bit` output, ((n + 1) // (itemsize · 2), 1)
/// (`_ops.py`): the packed bytes viewed as the storage type. The state is an attribute of the
/// Linear4bit, not a parameter: FSDP2 shards the weight alone and every rank keeps the state
/// whole (`fix_4bit_weight_quant_state_from_module` puts it back on the gathered weight).
pub(crate) fn packed(b: &mut crate::model::Builder, name: String, rows: usize, cols: usize, q: &Bnb4bit, load_dtype: DType) -> Packed4bit {
    let numel = (rows * cols + 1) / (q.quant_storage.size() * 2);
    let weight = b.param_as(name.clone(), &[numel, 1], Init::Normal { std: 0.0 }, q.quant_storage, b.frozen);
    let blocks = Packed4bit::blocks(rows, cols);
    let state = |shape: &[usize], dtype: DType, rng: &mut init::Rng| {
        let _s = runtime::scope(name.trim_end_matches(".weight"));
        let _a = runtime::allocate_now();
        init::make(shape, dtype, b.device, Init::Ones, rng)
    };
    let absmax = state(&[blocks], if q.double_quant { DType::U8 } else { DType::F32 }, b.rng);
    // The quant map of nf4/fp4: 16 fp32 values per quant_state.
    let code = state(&[16], DType::F32, b.rng);
    // Nested: state2's fp32 scales and its own copy of the 256-entry dynamic map (1 KiB),
    // and the fp32 offset.
    let nested = q.double_quant.then(|| {
        let scales = state(&[blocks.div_ceil(NESTED_BLOCKSIZE)], DType::F32, b.rng);
        let map = state(&[256], DType::F32, b.rng);
        let offset = state(&[], DType::F32, b.rng);
        crate::engine::ops::quant::Nested { scales, code: map, offset }
    });
    Packed4bit { weight, absmax, nested, code, shape: (rows, cols), dtype: load_dtype }
}

/// The storage of one `Linear8bitLt` of `rows` × `cols` as a load leaves it: the module's
/// weight (`Int8Params`, frozen int8 `CB`) and its `SCB` (fp32 per row, an attribute of the
/// parameter, later of `state`; saved in the state dict, not a parameter).
pub(crate) fn int8(b: &mut crate::model::Builder, name: String, rows: usize, cols: usize) -> Int8Weight {
    let weight = b.param_as(name.clone(), &[rows, cols], Init::Normal { std: 0.0 }, DType::I8, b.frozen);
    let scb = {
        let _s = runtime::scope(name.trim_end_matches(".weight"));
        init::make(&[rows], DType::F32, b.device, Init::Ones, b.rng)
    };
    Int8Weight { weight, scb }
}

/// One quantized linear's storage.
#[derive(Clone)]
pub enum Quantized {
    FourBit(Packed4bit),
    Int8(Int8Weight),
}

/// `bnb_4bit_quant_type` values: (name, what it is).
pub const QUANT_TYPES: [(&str, &str); 2] = [("fp4", "4-bit float (bitsandbytes' default)"), ("nf4", "4-bit NormalFloat (QLoRA's)")];

/// `bnb_4bit_quant_storage` values modelled: (name, type, what it is for).
pub const QUANT_STORAGES: [(&str, DType, &str); 4] = [
    ("uint8", DType::U8, "the default"),
    ("bfloat16", DType::BF16, "FSDP-QLoRA: the packed bytes as bf16, one dtype with bf16 weights"),
    ("float16", DType::F16, "the packed bytes as fp16"),
    ("float32", DType::F32, "the packed bytes as fp32"),
];

/// A `bnb_4bit_quant_storage` name (`torch.`-prefixed or not; bf16, fp16, fp32 too).
pub fn quant_storage(s: &str) -> Option<DType> {
    let s = s.trim().trim_start_matches("torch.").to_ascii_lowercase();
    QUANT_STORAGES.iter().find(|(n, _, _)| *n == s).map(|(_, d, _)| *d).or(match s.as_str() {
        "u8" => Some(DType::U8),
        "bf16" => Some(DType::BF16),
        "fp16" | "half" => Some(DType::F16),
        "fp32" | "float" => Some(DType::F32),
        _ => None,
    })
}

/// bitsandbytes' `Linear4bit.forward`: the input cast to the compute dtype, `matmul_4bit`
/// (with the bias, in the compute dtype), and the output cast back to the input's type.
pub fn linear4bit(q: &Bnb4bit, w: &Packed4bit, x: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let _f = runtime::py_frame(&py::BNB_LINEAR_4BIT);
    let inp = x.dtype();
    let xc = if inp == q.compute_dtype { x.clone() } else { x.to_dtype(q.compute_dtype) };
    // `x = x.to(compute_dtype)` rebinds the local: the cast input lives until forward returns,
    // past the output's cast back.
    let out = {
        let product = {
            let _f = runtime::py_frame(&py::BNB_MATMUL_4BIT);
            xc.matmul_4bit(w, bias, q.kernel)
        };
        if product.dtype() == inp { product } else { product.to_dtype(inp) }
    };
    drop(xc);
    out
}

/// bitsandbytes' `Linear8bitLt.forward`: `bnb.matmul(x, W, bias=bias, state=state)` in x's
/// type (the first forward casts `bias.data` to x's type: the unquantized type it already has).
pub fn linear8bit(q: &Int8, w: &Int8Weight, x: &Tensor, bias: Option<&Tensor>) -> Tensor {
    let _f = runtime::py_frame(&py::BNB_LINEAR_8BIT);
    let _m = runtime::py_frame(&py::BNB_MATMUL_8BIT);
    x.matmul_8bit(w, bias, q.threshold, q.kernel)
}
