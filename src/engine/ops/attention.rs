//! Memory-efficient attention: PyTorch's `_scaled_dot_product_flash_attention` (the flash
//! backend of `F.scaled_dot_product_attention`), FlashAttention-2 on cpu.
//!
//! Device memory follows the CUDA kernel (flash-attn v2's `mha_fwd` / `mha_bwd` as PyTorch
//! vendors it): the forward allocates the output (`empty_like(q)`, so it takes q's dim order)
//! and the per-row logsumexp (B, h, S) in fp32; autograd saves q, k, v, output and
//! logsumexp. The backward copies dO and O to (B, S, h, d) order when they are not already,
//! then allocates grad_q, grad_k, grad_v (each `empty_like` its input),
//! the per-row D = rowsum(dO∘O) (B, h, S rounded up to 128) and the fp32 dQ accumulator
//! (B, S₁₂₈, h, d₃₂) its key-parallel blocks add into, both freed when it returns. No
//! (B, h, S, S) tensor ever exists; the cpu kernel keeps its tiles in host scratch.
#[allow(unused_imports)]
use num_traits::{Float as _, One as _, Zero as _};
#[allow(unused_imports)]
use crate::engine::dtype::Real as _;
use crate::engine::autograd::{attach, needs_grad, save};
use crate::engine::cost;
use crate::engine::cpu::{self, CReal};
use crate::engine::dtype::DType;
use crate::engine::layout::{preserve_strides, Layout};
use crate::engine::runtime;
use crate::engine::sgemm;
use crate::engine::storage::{Buffer, Device, Storage};
use crate::engine::tensor::{write_strided, Tensor};
use crate::record::compute::OpKind;
use crate::record::Category;
use crate::with_real;
use rayon::prelude::*;
use std::rc::Rc;

pub(crate) const FORWARD: &str = "_scaled_dot_product_flash_attention";
pub(crate) const BACKWARD: &str = "_scaled_dot_product_flash_attention_backward";
pub(crate) const CPU_FORWARD: &str = "_scaled_dot_product_flash_attention_for_cpu";
pub(crate) const CPU_BACKWARD: &str = "_scaled_dot_product_flash_attention_for_cpu_backward";
pub(crate) const EFFICIENT_FORWARD: &str = "_scaled_dot_product_efficient_attention";
pub(crate) const EFFICIENT_BACKWARD: &str = "_scaled_dot_product_efficient_attention_backward";
pub(crate) const CUDNN_FORWARD: &str = "_scaled_dot_product_cudnn_attention";
pub(crate) const CUDNN_BACKWARD: &str = "_scaled_dot_product_cudnn_attention_backward";

/// Query rows and keys per tile. A 128×256 score tile (128 KiB in f32) and the K/V rows it
/// reads stay in L2 while giving gemm blocks large enough to run near its peak: on the 2-core
/// test machine 64×64 tiles made forward + backward 1.9× slower at S = 1024.
const BQ: usize = 128;
const BK: usize = 256;

/// A fresh device tensor of `shape` laid out like `like` (its storage allocated now).
#[track_caller]
fn alloc_like(like: &Tensor, dtype: DType, op: &'static str) -> (Rc<Storage>, Layout) {
    let l = Layout { shape: like.shape().to_vec(), strides: preserve_strides(like.layout()), offset: 0 };
    (Storage::alloc(like.device(), dtype, l.numel(), op), l)
}

/// Store row-major values into a storage of layout `l`.
fn store<R: CReal>(st: &Storage, l: &Layout, vals: Vec<R>) {
    if l.is_contiguous() {
        st.set(cpu::to_buffer(vals, st.dtype));
    } else {
        let mut buf = Buffer::zeros(st.dtype, st.numel);
        write_strided(&mut buf, l, &vals);
        st.set(buf);
    }
}

/// `dst` (m×n, row-major) = A·B with A(i, p) = `a[i·ars + p·acs]`, B(p, j) = `b[p·brs + j·bcs]`.
#[allow(clippy::too_many_arguments)]
fn mm<R: CReal>(m: usize, n: usize, k: usize, a: &[R], ars: usize, acs: usize, b: &[R], brs: usize, bcs: usize, dst: &mut [R]) {
    if m == 0 || n == 0 {
        return;
    }
    let dst = &mut dst[..m * n];
    if R::DTYPE == DType::F32 && sgemm::available() {
        // R is f32 here: the same memory viewed as f32.
        unsafe {
            let am = sgemm::MatRef { ptr: a.as_ptr() as *const f32, rs: ars as isize, cs: acs as isize };
            let bm = sgemm::MatRef { ptr: b.as_ptr() as *const f32, rs: brs as isize, cs: bcs as isize };
            let c = std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut f32, m * n);
            sgemm::sgemm(m, n, k, am, bm, c, false);
        }
        return;
    }
    if k == 0 {
        dst.fill(R::zero());
        return;
    }
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            acs as isize,
            ars as isize,
            b.as_ptr(),
            bcs as isize,
            brs as isize,
            R::zero(),
            R::one(),
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// `dst += src` elementwise.
#[inline]
fn add_into<R: CReal>(dst: &mut [R], src: &[R]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

/// Keys of tile `j0` that query row `i` may see: all, or under the causal mask those ≤ i.
#[inline]
fn visible(causal: bool, i: usize, j0: usize, bk: usize) -> usize {
    if causal { (i + 1).saturating_sub(j0).min(bk) } else { bk }
}

/// One head's forward: `o` (sq×d) and `lse` (sq) from q (sq×d), k and v (sk×d), with the
/// online softmax over key tiles.
#[allow(clippy::too_many_arguments)]
fn forward_head<R: CReal>(q: &[R], k: &[R], v: &[R], sq: usize, sk: usize, d: usize, causal: bool, scale: R, o: &mut [R], lse: &mut [R]) {
    let mut s = vec![R::zero(); BQ * BK];
    let mut pv = vec![R::zero(); BQ * d];
    let (mut m, mut l, mut alpha) = ([R::neg_infinity(); BQ], [R::zero(); BQ], [R::one(); BQ]);
    o.fill(R::zero());
    for i0 in (0..sq).step_by(BQ) {
        let bq = BQ.min(sq - i0);
        m.fill(R::neg_infinity());
        l.fill(R::zero());
        let kend = if causal { sk.min(i0 + bq) } else { sk };
        for j0 in (0..kend).step_by(BK) {
            let bk = BK.min(kend - j0);
            mm(bq, bk, d, &q[i0 * d..], d, 1, &k[j0 * d..], 1, d, &mut s);
            for r in 0..bq {
                let row = &mut s[r * bk..(r + 1) * bk];
                let lim = visible(causal, i0 + r, j0, bk);
                row[..lim].iter_mut().for_each(|x| *x = *x * scale);
                let mx = cpu::lmax(&row[..lim]);
                let m_new = if mx > m[r] { mx } else { m[r] };
                if m_new == R::neg_infinity() {
                    // Nothing visible yet: this tile adds nothing.
                    row.fill(R::zero());
                    alpha[r] = R::one();
                    continue;
                }
                alpha[r] = (m[r] - m_new).fexp();
                row[..lim].iter_mut().for_each(|x| *x = (*x - m_new).fexp());
                row[lim..].fill(R::zero());
                l[r] = l[r] * alpha[r] + cpu::lsum(row);
                m[r] = m_new;
            }
            mm(bq, d, bk, &s, bk, 1, &v[j0 * d..], d, 1, &mut pv);
            for r in 0..bq {
                let a = alpha[r];
                for (x, &p) in o[(i0 + r) * d..(i0 + r + 1) * d].iter_mut().zip(&pv[r * d..(r + 1) * d]) {
                    *x = *x * a + p;
                }
            }
        }
        for r in 0..bq {
            let inv = R::one() / l[r];
            o[(i0 + r) * d..(i0 + r + 1) * d].iter_mut().for_each(|x| *x = *x * inv);
            lse[i0 + r] = m[r] + l[r].ln();
        }
    }
}

/// One head's backward (FlashAttention-2): per tile, P = exp(S − lse) from recomputed
/// scores, dV += Pᵀ·dO, dP = dO·Vᵀ, dS = P∘(dP − D), dQ += dS·K·scale, dK += dSᵀ·Q·scale.
#[allow(clippy::too_many_arguments)]
fn backward_head<R: CReal>(
    (q, k, v, o, g, lse): (&[R], &[R], &[R], &[R], &[R], &[R]),
    (sq, sk, d): (usize, usize, usize),
    causal: bool,
    scale: R,
    dq: &mut [R],
    dk: &mut [R],
    dv: &mut [R],
) {
    let dd: Vec<R> = (0..sq).map(|i| cpu::ldot(&g[i * d..(i + 1) * d], &o[i * d..(i + 1) * d])).collect();
    let mut p = vec![R::zero(); BQ * BK];
    let mut ds = vec![R::zero(); BQ * BK];
    let mut tmp = vec![R::zero(); BQ.max(BK) * d];
    dq.fill(R::zero());
    dk.fill(R::zero());
    dv.fill(R::zero());
    for i0 in (0..sq).step_by(BQ) {
        let bq = BQ.min(sq - i0);
        let kend = if causal { sk.min(i0 + bq) } else { sk };
        for j0 in (0..kend).step_by(BK) {
            let bk = BK.min(kend - j0);
            mm(bq, bk, d, &q[i0 * d..], d, 1, &k[j0 * d..], 1, d, &mut p);
            for r in 0..bq {
                let row = &mut p[r * bk..(r + 1) * bk];
                let lim = visible(causal, i0 + r, j0, bk);
                let l = lse[i0 + r];
                row[..lim].iter_mut().for_each(|x| *x = (*x * scale - l).fexp());
                row[lim..].fill(R::zero());
            }
            // dV_j += Pᵀ·dO_i
            mm(bk, d, bq, &p, 1, bk, &g[i0 * d..], d, 1, &mut tmp);
            add_into(&mut dv[j0 * d..(j0 + bk) * d], &tmp[..bk * d]);
            // dP = dO_i·V_jᵀ, then dS = P∘(dP − D)·scale in place
            mm(bq, bk, d, &g[i0 * d..], d, 1, &v[j0 * d..], 1, d, &mut ds);
            for r in 0..bq {
                let di = dd[i0 + r];
                for (x, &pr) in ds[r * bk..(r + 1) * bk].iter_mut().zip(&p[r * bk..(r + 1) * bk]) {
                    *x = pr * (*x - di) * scale;
                }
            }
            // dQ_i += dS·K_j
            mm(bq, d, bk, &ds, bk, 1, &k[j0 * d..], d, 1, &mut tmp);
            add_into(&mut dq[i0 * d..(i0 + bq) * d], &tmp[..bq * d]);
            // dK_j += dSᵀ·Q_i
            mm(bk, d, bq, &ds, 1, bk, &q[i0 * d..], d, 1, &mut tmp);
            add_into(&mut dk[j0 * d..(j0 + bk) * d], &tmp[..bk * d]);
        }
    }
}

fn round_up(n: usize, m: usize) -> usize {
    n.div_ceil(m) * m
}

/// The kernels need unit stride in the head dim, as flash-attn does; otherwise a copy.
#[track_caller]
fn last_dim_unit(t: &Tensor) -> Tensor {
    if t.layout().strides[3] == 1 || t.shape()[3] == 1 { t.clone() } else { t.contiguous() }
}

thread_local! {
    static CPU_KERNEL_CHOICE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static CUDNN_PREFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with [`Tensor::sdpa_causal`] choosing as PyTorch does on a GPU whose SDPA prefers
/// cuDNN attention (`check_prefer_cudnn_attention`: sm90/sm100 with cuDNN > 9.15.0, as torch
/// 2.11's cu130 wheel ships 9.19; [`crate::record::gpu::Gpu::sdpa_prefers_cudnn`]).
pub fn with_cudnn_preferred<R>(preferred: bool, f: impl FnOnce() -> R) -> R {
    let prev = CUDNN_PREFERRED.replace(preferred);
    let r = f();
    CUDNN_PREFERRED.set(prev);
    r
}

/// Runs `f` with [`Tensor::sdpa_causal`] choosing as PyTorch's CPU dispatch does: one flash
/// kernel whatever the dtype, its output in q's layout. For the grids measured on CPU
/// (tests/pytorch_grid.rs), where fp32 would otherwise take CUDA's memory-efficient kernel,
/// whose (B, S, h, d) output spares the CPU run's heads-merge copy.
pub fn with_cpu_kernel_choice<R>(f: impl FnOnce() -> R) -> R {
    let prev = CPU_KERNEL_CHOICE.replace(true);
    let r = f();
    CPU_KERNEL_CHOICE.set(prev);
    r
}

/// Which fused CUDA kernel an attention call stands for: its workspace differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedKernel {
    /// FlashAttention-2 (`_scaled_dot_product_flash_attention`, flash-attn's `flash_attn_func`).
    Flash,
    /// Memory-efficient attention (`_scaled_dot_product_efficient_attention`).
    Efficient,
    /// The CPU kernel (`_scaled_dot_product_flash_attention_for_cpu`): output always
    /// (B, S, h, d), GQA native, no device workspace in backward (its per-thread tiles are
    /// host scratch).
    CpuFlash,
    /// cuDNN attention (`_scaled_dot_product_cudnn_attention`, cudnn/MHA.cpp), what torch 2.11
    /// runs for half types on sm90: the forward keeps two 8 B philox tensors (seed, offset,
    /// `at::zeros({1}, kLong)`), the output (`empty_like(q)`) and, only when a gradient is
    /// needed, the fp32 logsumexp (B, h, S); its graph's workspace (256 B) is freed at once.
    /// The backward allocates dq, dk, dv (`empty_like`), copies dO laid out like O only when
    /// dO's last stride is not 1 (`permute_to_matching_layout`, cuDNN ≥ 9.5.1), then one
    /// workspace: cudnn-frontend's fp32 dQ accumulator (B, h, Sq, d) and softmax sum (B, h, Sq),
    /// with GQA the per-query-head dK and dV (B, h, Sk, d) in q's type, and 256 B of the
    /// engine's own. Measured on an H200 (tests/fixtures/gpu/micro2.json, tests/gpu_micro.rs).
    Cudnn,
}

/// cuDNN's graph workspace beside cudnn-frontend's tensors: 256 B in every measured forward
/// and backward (tests/fixtures/gpu/micro2.json).
const CUDNN_ENGINE_WORKSPACE: usize = 256;

impl Tensor {
    /// `F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)` through the
    /// flash backend, for q (B, h, Sq, d) and k, v (B, h, Sk, d), or (B, h_kv, Sk, d) with
    /// h_kv dividing h (`enable_gqa=True`). The causal mask is top-left aligned (key j
    /// visible to query i when j ≤ i).
    #[track_caller]
    pub fn flash_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Tensor {
        Tensor::fused_attention(FusedKernel::Flash, q, k, v, None, causal, scale)
    }

    /// `F.scaled_dot_product_attention(q, k, v, is_causal=True)` with no mask, through the
    /// kernel PyTorch picks on CUDA: flash for half types (also under autocast, which casts
    /// the inputs), memory-efficient for fp32 (flash has no fp32 kernel). Measured on an H200
    /// (tests/gpu_grid.rs: the profiler names `_efficient_attention_forward` for fp32). On a
    /// GPU whose SDPA prefers cuDNN ([`with_cudnn_preferred`]: H100/H200) half types take
    /// cuDNN attention (the profiler names `_cudnn_attention_forward` there).
    #[track_caller]
    pub fn sdpa_causal(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Tensor {
        let half = matches!(q.dtype(), DType::BF16 | DType::F16) || crate::engine::autocast::active().is_some();
        if half && CUDNN_PREFERRED.get() && !CPU_KERNEL_CHOICE.get() && k.dim(2) != 1 {
            Tensor::cudnn_attention(q, k, v, None, true, scale)
        } else if half || k.dim(1) != q.dim(1) || CPU_KERNEL_CHOICE.get() {
            Tensor::flash_attention(q, k, v, true, scale)
        } else {
            Tensor::efficient_attention(q, k, v, true, scale)
        }
    }

    /// As [`Tensor::flash_attention`] through the memory-efficient kernel (no GQA; the
    /// logsumexp rows are padded to 32; the backward keeps the per-row D and, for half
    /// types, an fp32 dQ accumulator).
    #[track_caller]
    pub fn efficient_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Tensor {
        Tensor::fused_attention(FusedKernel::Efficient, q, k, v, None, causal, scale)
    }

    /// As [`Tensor::flash_attention`] through cuDNN attention ([`FusedKernel::Cudnn`]), with
    /// the additive float mask SDPA made of a boolean one (`convert_boolean_attn_mask`), if
    /// any, which the node saves for backward (its values are not applied on cpu).
    #[track_caller]
    pub fn cudnn_attention(q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>, causal: bool, scale: f64) -> Tensor {
        Tensor::fused_attention(FusedKernel::Cudnn, q, k, v, bias, causal, scale)
    }

    /// As [`Tensor::flash_attention`] through the CPU kernel ([`FusedKernel::CpuFlash`]).
    #[track_caller]
    pub fn cpu_flash_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool, scale: f64) -> Tensor {
        Tensor::fused_attention(FusedKernel::CpuFlash, q, k, v, None, causal, scale)
    }

    /// The CPU kernel or the memory-efficient one with an additive float mask (`attn_mask`
    /// after `convert_boolean_attn_mask`, and on CUDA `preprocess_mask`), which the kernel's
    /// autograd node saves for backward. The mask's memory is modelled; its values are not
    /// applied (a CPU run computes unmasked values).
    #[track_caller]
    pub fn masked_fused_attention(cpu: bool, q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor, scale: f64) -> Tensor {
        let kernel = if cpu { FusedKernel::CpuFlash } else { FusedKernel::Efficient };
        Tensor::fused_attention(kernel, q, k, v, Some(bias), false, scale)
    }

    #[track_caller]
    fn fused_attention(kernel: FusedKernel, q: &Tensor, k: &Tensor, v: &Tensor, bias: Option<&Tensor>, causal: bool, scale: f64) -> Tensor {
        let (fwd_op, bwd_op, node) = match kernel {
            FusedKernel::Flash => (FORWARD, BACKWARD, "ScaledDotProductFlashAttentionBackward0"),
            FusedKernel::CpuFlash => (CPU_FORWARD, CPU_BACKWARD, "ScaledDotProductFlashAttentionForCpuBackward0"),
            FusedKernel::Efficient => (EFFICIENT_FORWARD, EFFICIENT_BACKWARD, "ScaledDotProductEfficientAttentionBackward0"),
            FusedKernel::Cudnn => (CUDNN_FORWARD, CUDNN_BACKWARD, "ScaledDotProductCudnnAttentionBackward0"),
        };
        // scaled_dot_product_attention is on autocast's lower-precision list.
        if crate::engine::autocast::active().is_some() {
            // Right to left, value first (autocast::lower_pair).
            let lv = crate::engine::autocast::lower(v);
            let lk = crate::engine::autocast::lower(k);
            let lq = crate::engine::autocast::lower(q);
            if lq.dtype() != q.dtype() || lk.dtype() != k.dtype() || lv.dtype() != v.dtype() {
                return Tensor::fused_attention(kernel, &lq, &lk, &lv, bias, causal, scale);
            }
        }
        assert!(q.rank() == 4 && k.rank() == 4 && v.rank() == 4, "flash_attention expects (B, h, S, d) tensors");
        let (b, h, sq, d) = (q.dim(0), q.dim(1), q.dim(2), q.dim(3));
        let (hk, sk) = (k.dim(1), k.dim(2));
        assert!(hk > 0 && h % hk == 0, "flash_attention: {hk} key/value heads do not divide {h} query heads");
        assert!(kernel != FusedKernel::Efficient || hk == h, "the memory-efficient kernel has no grouped-query attention");
        let rep = h / hk;
        assert_eq!(k.shape(), &[b, hk, sk, d], "flash_attention: key shape {:?} vs query {:?}", k.shape(), q.shape());
        assert_eq!(v.shape(), k.shape(), "flash_attention: value shape {:?} vs key {:?}", v.shape(), k.shape());
        assert!(sk > 0, "flash_attention needs at least one key");
        let dtype = q.dtype();
        assert!(dtype.is_float() && k.dtype() == dtype && v.dtype() == dtype, "flash_attention: dtypes {} {} {}", dtype, k.dtype(), v.dtype());
        let (q, k, v) = (last_dim_unit(q), last_dim_unit(k), last_dim_unit(v));
        let device = q.device();
        // The logsumexp is kept in the accumulation type (fp32; f64 for f64 inputs).
        let lse_dtype = if dtype == DType::F64 { DType::F64 } else { DType::F32 };
        let lse_rows = if kernel == FusedKernel::Efficient { round_up(sq, 32) } else { sq };
        let span = cost::begin();
        let grad = needs_grad(&[&q, &k, &v]);
        // cuDNN's philox seed and offset come first, whatever the dropout.
        let philox = (kernel == FusedKernel::Cudnn)
            .then(|| (Storage::alloc(device, DType::I64, 1, fwd_op), Storage::alloc(device, DType::I64, 1, fwd_op)));
        // `empty_like` of q as the kernel sees it (q's own dim order), on CUDA and on CPU
        // (torch 2.15's CPU kernel too: a q contiguous in (B, h, S, d), as Phi-3's rotary cat
        // makes it, gives an output that `transpose(1, 2).contiguous()` must copy).
        // The memory-efficient kernel writes its output as (B, S, h, d) (`at::empty({B, M,
        // num_heads, Kv})` in `_efficient_attention_forward`) whatever q's layout, and returns
        // it transposed: a later `transpose(1, 2)` is contiguous, with no copy (measured on an
        // H200: tests/gpu_grid.rs, cs336's flash points in fp32).
        let (out_st, out_l) = if kernel == FusedKernel::Efficient {
            (Storage::alloc(device, dtype, b * sq * h * d, fwd_op), Layout::contiguous(&[b, sq, h, d]).transpose(1, 2))
        } else {
            alloc_like(&q, dtype, fwd_op)
        };
        // cuDNN computes the logsumexp only when a gradient needs it (compute_log_sumexp).
        let lse_st = (kernel != FusedKernel::Cudnn || grad).then(|| Storage::alloc(device, lse_dtype, b * h * lse_rows, fwd_op));
        if kernel == FusedKernel::Cudnn {
            let _w = runtime::category(Category::Workspace);
            drop(Storage::alloc(device, DType::U8, CUDNN_ENGINE_WORKSPACE, fwd_op));
        }
        if device == Device::Cpu {
            with_real!(dtype, R, {
                let (o, l) = cpu::with_slice::<R, _>(&q, |qs| {
                    cpu::with_slice::<R, _>(&k, |ks| {
                        cpu::with_slice::<R, _>(&v, |vs| {
                            let mut o = vec![R::zero(); b * h * sq * d];
                            let mut l = vec![R::zero(); b * h * lse_rows];
                            let sc = R::lit(scale);
                            o.par_chunks_mut(sq * d).zip(l.par_chunks_mut(lse_rows)).enumerate().for_each(|(i, (o, l))| {
                                let j = kv_head(i, h, rep);
                                let (qh, kh) = (&qs[i * sq * d..(i + 1) * sq * d], &ks[j * sk * d..(j + 1) * sk * d]);
                                forward_head(qh, kh, &vs[j * sk * d..(j + 1) * sk * d], sq, sk, d, causal, sc, o, &mut l[..sq]);
                            });
                            (o, l)
                        })
                    })
                });
                store(&out_st, &out_l, o);
                if let Some(st) = &lse_st {
                    st.set(cpu::to_buffer(l, lse_dtype));
                }
            });
        }
        let esz = dtype.size() as u64;
        cost::end(span, device, fwd_op, || {
            let flops = 4 * (b * h * sq * sk * d) as u64;
            let read = ((b * (h * sq + 2 * hk * sk) * d) as u64) * esz;
            let written = (b * h * sq * d) as u64 * esz + (b * h * lse_rows * lse_dtype.size()) as u64;
            (OpKind::Matmul, flops, read, written, esz as u8)
        });
        let out = Tensor::from_parts(out_st, out_l);
        let lse = lse_st.map(|st| Tensor::from_parts(st, Layout::contiguous(&[b, h, lse_rows])));
        let (Some(lse), true) = (lse, grad) else {
            return out;
        };
        let saved = (save(&q), save(&k), save(&v), save(&out), save(&lse));
        // The node's saved `attn_bias`/`attn_mask`, released with the others when it has run.
        let saved_bias = bias.map(save);
        // cuDNN's node keeps its philox seed and offset (released after the logsumexp).
        let philox = philox.map(|(seed, offset)| {
            let t = |st| save(&Tensor::from_parts(st, Layout::contiguous(&[1])));
            (t(seed), t(offset))
        });
        drop(lse);
        attach(out, node, &[&q, &k, &v], Box::new(move |g| {
            let bias = saved_bias.map(|b| b.into_tensor());
            let philox = philox.map(|(seed, offset)| (seed.into_tensor(), offset.into_tensor()));
            let (q, k, v, o, lse) = saved;
            let (q, k, v, o, lse) = (q.into_tensor(), k.into_tensor(), v.into_tensor(), o.into_tensor(), lse.into_tensor());
            // `_flash_attention_backward` makes dO and O contiguous as (B, S, h, d) ("CUDA
            // code assumes that dout is contiguous"): copies unless they are laid out so.
            let bshd = |t: Tensor| {
                let tt = t.transpose(1, 2);
                if tt.is_contiguous() { t } else { tt.contiguous().transpose(1, 2) }
            };
            let (g, o) = match kernel {
                FusedKernel::Flash => (bshd(g), bshd(o)),
                FusedKernel::Efficient => (bshd(g), o),
                FusedKernel::CpuFlash | FusedKernel::Cudnn => (g, o),
            };
            let span = cost::begin();
            let (dq_st, dq_l) = alloc_like(&q, dtype, bwd_op);
            let (dk_st, dk_l) = alloc_like(&k, dtype, bwd_op);
            let (dv_st, dv_l) = alloc_like(&v, dtype, bwd_op);
            // run_cudnn_SDP_bprop: a dO whose last stride is not 1 (an expanded scalar's
            // gradient, say) is copied laid out like O (permute_to_matching_layout).
            let g = if kernel == FusedKernel::Cudnn && g.layout().strides[3] != 1 && g.shape()[3] != 1 { like_layout(&g, &o) } else { g };
            let work = {
                let _w = runtime::category(Category::Workspace);
                match kernel {
                    FusedKernel::Flash => {
                        let sr = round_up(sq, 128);
                        let dr = if d <= 192 { round_up(d, 32) } else { 256 };
                        let softmax_d = Storage::alloc(device, DType::F32, b * h * sr, bwd_op);
                        let dq_accum = Storage::alloc(device, DType::F32, b * sr * h * dr, bwd_op);
                        // mha_bwd with fewer key/value heads: dK and dV per query head, then
                        // summed over each group into dk, dv.
                        let expanded = (rep > 1).then(|| {
                            (Storage::alloc(device, dtype, b * sk * h * d, bwd_op), Storage::alloc(device, dtype, b * sk * h * d, bwd_op))
                        });
                        (Some(softmax_d), Some(dq_accum), expanded)
                    }
                    FusedKernel::Efficient => {
                        let delta = Storage::alloc(device, DType::F32, b * h * sq, bwd_op);
                        let accum = (dtype != DType::F32 && dtype != DType::F64).then(|| Storage::alloc(device, DType::F32, b * sq * h * d, bwd_op));
                        (Some(delta), accum, None)
                    }
                    FusedKernel::CpuFlash => (None, None, None),
                    FusedKernel::Cudnn => {
                        // cudnn-frontend's dQ accumulator and softmax sum, with GQA dK and dV per
                        // query head (q's type), then the engine's own 256 B: one allocation.
                        let expanded = if rep > 1 { b * h * sk * 2 * d * dtype.size() } else { 0 };
                        let bytes = b * h * sq * d * 4 + b * h * sq * 4 + expanded + CUDNN_ENGINE_WORKSPACE;
                        (Some(Storage::alloc(device, DType::U8, bytes, bwd_op)), None, None)
                    }
                }
            };
            if device == Device::Cpu {
                with_real!(dtype, R, {
                    let read = |t: &Tensor| cpu::read::<R>(t);
                    let (qs, ks, vs, os, gs) = (read(&q), read(&k), read(&v), read(&o), read(&g));
                    let ls = cpu::read::<R>(&lse);
                    let mut dqv = vec![R::zero(); b * h * sq * d];
                    // Per query head (summed into the key/value heads below).
                    let mut dkv = vec![R::zero(); b * h * sk * d];
                    let mut dvv = vec![R::zero(); b * h * sk * d];
                    let sc = R::lit(scale);
                    let (nq, nk) = (sq * d, sk * d);
                    dqv.par_chunks_mut(nq).zip(dkv.par_chunks_mut(nk)).zip(dvv.par_chunks_mut(nk)).enumerate().for_each(
                        |(i, ((dq, dk), dv))| {
                            let j = kv_head(i, h, rep);
                            let ins = (
                                &qs[i * nq..(i + 1) * nq],
                                &ks[j * nk..(j + 1) * nk],
                                &vs[j * nk..(j + 1) * nk],
                                &os[i * nq..(i + 1) * nq],
                                &gs[i * nq..(i + 1) * nq],
                                &ls[i * lse_rows..i * lse_rows + sq],
                            );
                            backward_head(ins, (sq, sk, d), causal, sc, dq, dk, dv);
                        },
                    );
                    let group = |x: Vec<R>| -> Vec<R> {
                        if rep == 1 {
                            return x;
                        }
                        let mut y = vec![R::zero(); b * hk * nk];
                        for (i, chunk) in x.chunks(nk).enumerate() {
                            let j = kv_head(i, h, rep);
                            add_into(&mut y[j * nk..(j + 1) * nk], chunk);
                        }
                        y
                    };
                    store(&dq_st, &dq_l, dqv);
                    store(&dk_st, &dk_l, group(dkv));
                    store(&dv_st, &dv_l, group(dvv));
                });
            }
            drop(work);
            cost::end(span, device, bwd_op, || {
                // FlopCounterMode's sdpa_backward_flop_count: five products of the forward's
                // size (scores recomputed, dV, dP, dQ, dK), causal or not.
                let flops = 10 * (b * h * sq * sk * d) as u64;
                let read = ((b * (3 * h * sq + 2 * hk * sk) * d) as u64) * esz + (b * h * lse_rows * lse_dtype.size()) as u64;
                let written = ((b * (h * sq + 2 * hk * sk) * d) as u64) * esz;
                (OpKind::Matmul, flops, read, written, esz as u8)
            });
            if kernel == FusedKernel::Cudnn {
                // dO's copy goes when the kernel returns; the node then releases its attn_bias,
                // logsumexp and philox tensors in that order.
                drop(g);
                drop((bias, lse, philox));
                drop((q, k, v, o));
            } else {
                drop((q, k, v, o, lse, g));
                drop((bias, philox));
            }
            vec![
                Some(Tensor::from_parts(dq_st, dq_l)),
                Some(Tensor::from_parts(dk_st, dk_l)),
                Some(Tensor::from_parts(dv_st, dv_l)),
            ]
        }))
    }
}

/// `permute_to_matching_layout(o, t)`: a copy of `t` with `o`'s dim order
/// (`t.permute(outer_to_inner).contiguous().permute(inverse)`).
#[track_caller]
fn like_layout(t: &Tensor, o: &Tensor) -> Tensor {
    let mut outer: Vec<usize> = (0..o.rank()).collect();
    outer.sort_by(|&a, &b| o.layout().strides[b].cmp(&o.layout().strides[a]));
    let mut inverse = vec![0; outer.len()];
    for (i, &d) in outer.iter().enumerate() {
        inverse[d] = i;
    }
    t.permute(&outer).contiguous().permute(&inverse)
}

/// The key/value head (flattened over the batch) that query head `i` (flattened) reads.
fn kv_head(i: usize, h: usize, rep: usize) -> usize {
    let (bi, hi) = (i / h, i % h);
    bi * (h / rep) + hi / rep
}
