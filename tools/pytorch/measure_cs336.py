#!/usr/bin/env python3
"""measure_cs336.py -- what eager PyTorch allocates for the CS336 staff model (cs336_model.py),
per phase, mode-free: the counterpart of measure_step_memory.py for the cs336 flavour.

Method (the one measure_step_memory.py established): the whole run -- model construction,
warm-up steps, the measured step -- runs inside ONE torch.profiler(profile_memory=True)
session with no TorchDispatchMode (a mode would make autograd accumulate out of place and
gather's backward use out-of-place scatter_add). Allocations and frees are read from the
profiler's own event tree, so each one's innermost enclosing op and autograd node are exact.
Blocks are linked by address, so levels are absolute: every byte this script allocated that
is still alive (parameters, the RoPE buffer, optimizer state, the batch, ...).

What counts (the convention of tests/models.rs): requested bytes (the CPU allocator does not
round), blocks >= 512 B only. Smaller blocks are the 0-d scalars and step counters that live
in host memory on a GPU run (wrapped Python scalars, optimizer `step` tensors) and a few tiny
tensors; the Rust grid test (tests/pytorch_grid.rs) applies the same filter to vramscope's
events. CPU RNG-state stashes of torch.utils.checkpoint (host memory on a GPU) are left out, and
so is CPU-only kernel scratch (cpu_kernel_scratch: copy_'s 60x60 transpose bounce buffer, the fp32
working copy of bf16/fp16 self in scatter ops), which each phase reports as cpu_scratch.

Profile types (vramscope's --profile-type, plus forward-loss):
  inference     x, y = get_batch(); with torch.no_grad(): model(x)      (result unbound)
  forward       x, y = get_batch(); model(x)                             (autograd on, no loss)
  forward-loss  x, y = get_batch(); logits = model(x); loss = cross_entropy(logits, y);
                del logits, loss                                         (no backward)
  training      x, y = get_batch(); optimizer.zero_grad(set_to_none=True); logits = model(x);
                loss = cross_entropy(logits, y); loss.backward(); optimizer.step()
Three iterations run (two warm-up: AdamW state exists); the third is measured. Phases:
data, zero_grad, forward, loss, backward, optimizer (those the type has).

Run:  python3 measure_cs336.py --d-model 256 --num-layers 2 --num-heads 8 --d-ff 1024 \
          --vocab-size 1000 --context-length 512 --batch-size 2 --profile-type inference \
          [--fused-qkv] [--fused-gate-up] [--attention flash] [--checkpoint every-N] \
          [--pure-bf16] [--events events.csv] [--json result.json]
prints the per-phase peaks (bytes, blocks >= 512 B), the op at each peak, and writes the
measured iteration's event log with --events.
"""
import argparse
import contextlib
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import cs336_model as C

NSTEPS = 3
MIN_BLOCK = 512
PROFILE_TYPES = ("inference", "forward", "forward-loss", "training")
PHASES = ("data", "zero_grad", "forward", "loss", "backward", "optimizer")
# torch.utils.checkpoint stashes torch.get_rng_state() (a CPU uint8 tensor): host memory on a GPU.
RNG_BYTES = torch.get_rng_state().nbytes
STEP_MARK, PHASE_MARK = "grid::step", "grid::phase::"


def phase(name):
    return record_function(PHASE_MARK + name)


def step_loop(model, opt, loss_fn, get_batch, kind, autocast=contextlib.nullcontext):
    """The script's loop: names bound here live as they would at a script's top level.
    loss_fn None: the model computes the loss itself (`_, loss = model(tokens, labels)`, the
    tinyllama walkthrough), marking the loss phase inside its forward. `autocast`: CS336's
    `with torch.autocast(...)` around forward and loss (measure_gpu.py's course_loop on a card;
    measure_dist.py --cs336-autocast on CPU with CUDA's policies)."""
    logits = loss = None
    for step in range(NSTEPS):
        with record_function(f"{STEP_MARK}{step}"):
            with phase("data"):
                x, y = get_batch()
            if kind in ("training", "forward-loss"):
                if kind == "training":
                    with phase("zero_grad"):
                        opt.zero_grad(set_to_none=True)
                with autocast():
                    if loss_fn is None:
                        with phase("forward"):
                            logits, loss = model(x, y)
                    else:
                        with phase("forward"):
                            logits = model(x)
                        with phase("loss"):
                            loss = loss_fn(logits, y)
                if kind == "training":
                    with phase("backward"):
                        loss.backward()
                    with phase("optimizer"):
                        opt.step()
                else:
                    with phase("release"):
                        del logits, loss
            else:
                with torch.no_grad() if kind == "inference" else contextlib.nullcontext():
                    with autocast(), phase("forward"):
                        model(x)


def batcher(vocab, batch, seq, seed):
    gen = torch.Generator().manual_seed(seed)

    def get_batch():
        seq_ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
        return seq_ids[:, :-1].contiguous(), seq_ids[:, 1:].contiguous()

    return get_batch


def profiled(setup, kind, autocast=contextlib.nullcontext):
    """setup() -> (model, opt, loss_fn, get_batch), called inside the profiler session."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as prof:
        with record_function("grid::setup"):
            model, opt, loss_fn, get_batch = setup()
        step_loop(model, opt, loss_fn, get_batch, kind, autocast)
    return prof


def alloc_rows(prof):
    """Every CPU allocation/free of the session in order, with its enclosing markers and ops."""
    rows = []

    def walk(n, anc):
        if str(n.tag) == "_EventType.Allocation":
            ef = n.extra_fields
            if ef.device.type != "cpu":
                return
            names = [a.name for a in anc]
            step = next((int(x[len(STEP_MARK):]) for x in names if x.startswith(STEP_MARK)), None)
            ph = next((x[len(PHASE_MARK):] for x in reversed(names) if x.startswith(PHASE_MARK)), None)
            ops = [x for x in names if not x.startswith("grid::")]
            node = next((x.replace("autograd::engine::evaluate_function: ", "") for x in reversed(ops)
                         if x.startswith("autograd::engine::evaluate_function")), "")
            rows.append(dict(t=(n.start_time_ns, getattr(ef, "id", 0)), bytes=ef.alloc_size, ptr=ef.ptr,
                             step=step, phase=ph, op=ops[-1] if ops else "-", node=node,
                             scratch=cpu_kernel_scratch(anc, ef.alloc_size) if ef.alloc_size > 0 else None))
            return
        anc.append(n)
        for c in n.children:
            walk(c, anc)
        anc.pop()

    for r in prof.profiler.kineto_results.experimental_event_tree():
        walk(r, [])
    rows.sort(key=lambda r: r["t"])
    # Marks identified by size and lifetime: drop those whose block outlives its op (an output).
    live = {}
    for r in rows:
        if r["bytes"] > 0:
            live[r["ptr"]] = r
        elif r["ptr"] in live:
            live.pop(r["ptr"])["freed_ns"] = r["t"][0]
    for r in rows:
        s = r["scratch"]
        if s is not None and s[2:] == ("freed inside",) and r.get("freed_ns", float("inf")) > s[1]:
            r["scratch"] = None
    return rows


# CPU-only kernel scratch: blocks PyTorch's CPU kernels allocate and free inside one op that the
# CUDA kernels of the same op do not allocate at all (vramscope predicts CUDA). Each rule names the
# op that must directly enclose the `aten::empty`, the inputs that select the CPU path and the exact
# size; the block must also be freed before that op returns (checked in analyse). Sources
# (PyTorch 2.x, aten/src/ATen/native/): see tools/pytorch/README.md.
COPY_TRANSPOSE_BLOCK = 60  # Copy.cpp: copy_same_type_transpose_'s BLOCK_SZ (MIN_SZ = 60 * 60)
REDUCED_FLOAT = (torch.bfloat16, torch.float16)
SCATTER_OPS = ("aten::scatter_add_", "aten::scatter_add", "aten::scatter_", "aten::scatter")  # src and value forms
BNB_OPTIMIZER_OPS = ("bitsandbytes::optimizer_update_8bit_blockwise", "bitsandbytes::optimizer_update_32bit")
# TensorIterator binary ops whose CPU path casts a mixed-dtype input to the common dtype first.
# bitsandbytes' LLM.int8() kernels whose CPU (default) implementations compute through working
# tensors that die inside the op (rule 8 of tools/pytorch/README.md).
BNB_INT8_OPS = ("bitsandbytes::int8_vectorwise_quant", "bitsandbytes::int8_linear_matmul", "bitsandbytes::int8_mm_dequant")
TI_BINARY_OPS = ("aten::add", "aten::sub", "aten::mul", "aten::div", "aten::add_", "aten::sub_", "aten::mul_", "aten::div_")
CPU_FLASH_OPS = ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward")


def _meta(i):
    return (list(i.sizes), list(i.strides), i.dtype) if getattr(i, "sizes", None) is not None else None


def _numel(sizes):
    n = 1
    for d in sizes:
        n *= d
    return n


def _contiguous(sizes, strides):
    want = 1
    for d, st in zip(reversed(sizes), reversed(strides)):
        if d != 1 and st != want:
            return False
        want *= d
    return True


def cpu_kernel_scratch(anc, size):
    """(why, end_ns of the enclosing op) when this allocation is a CPU-only kernel scratch block, else None."""
    names = [a.name for a in anc[-4:]]
    if names == ["aten::softmax", "aten::to", "aten::_to_copy", "aten::empty_strided"]:
        # SoftMax.cpp softmax(input, dim, dtype): CUDA runs _softmax(input, dim, half_to_float=True)
        # on a Half (float16 only) input asked for float; everything else, bfloat16 on CUDA
        # included, converts the input first (input.to(dtype)), a copy that dies when softmax
        # returns. Only the fp16-on-CPU copy is CPU-only.
        sm = anc[-4]
        ins = [_meta(i) for i in getattr(sm.extra_fields, "inputs", [])]
        if ins and ins[0] and ins[0][2] == torch.float16 and size == _numel(ins[0][0]) * 4:
            return ("cpu softmax(dtype=float32) of a float16 input: the fp32 input copy CUDA's half_to_float skips", sm.end_time_ns)
    red = next((a for a in reversed(anc[-5:]) if a.name == "aten::sum"), None)
    if red is not None:
        # ReduceOps.cpp on CPU: sum(dtype=float32) of a bf16/fp16 input (CUDA autocast's
        # fp32_set_opt_dtype policy, make_moe_autocast_grid.py) converts the whole input to fp32
        # first, a copy that dies inside the op; CUDA's reduce kernel casts while loading.
        ins = [_meta(i) for i in getattr(red.extra_fields, "inputs", [])]
        if ins and ins[0] and ins[0][2] in REDUCED_FLOAT and size == _numel(ins[0][0]) * 4:
            return ("cpu sum(dtype=float32) of a reduced-float input: the fp32 input copy CUDA's reduce kernel skips",
                    red.end_time_ns, "freed inside")
    if len(names) == 4 and names[0] in TI_BINARY_OPS and names[1:] == ["aten::to", "aten::_to_copy", "aten::empty_strided"]:
        # TensorIteratorBase::compute_types: `if (common_device == kCPU)` an input whose dtype is
        # not the common one is replaced by `op.tensor().to(common_dtype_)`, a temporary that dies
        # with the iterator; CUDA's kernels cast while loading (dynamic casting), no temporary.
        # In the grids: peft's `result + lora_B(...) * scaling`, a bf16 base output plus fp32.
        bop = anc[-4]
        ins = [m for m in (_meta(i) for i in getattr(bop.extra_fields, "inputs", [])) if m]
        dts = {m[2] for m in ins if m[2].is_floating_point}
        if len(dts) > 1:
            common = torch.promote_types(*dts) if len(dts) == 2 else torch.float32
            el = torch.empty((), dtype=common).element_size()
            if any(m[2] != common and size == _numel(m[0]) * el for m in ins):
                return (f"cpu {bop.name[6:]} of mixed dtypes: TensorIterator's input cast to {str(common).replace('torch.', '')}",
                        bop.end_time_ns, "freed inside")
    if (len(anc) >= 3 and anc[-3].name in TI_BINARY_OPS and anc[-3].name.endswith("_")
            and [a.name for a in anc[-2:]] == ["aten::empty_like", "aten::empty"]):
        # The same compute_types, for an in-place op whose output (self) is not of the common
        # dtype: on CPU `cast_common_dtype_to_outputs` swaps self for an `empty_like` temporary
        # of the common dtype, copied back into self when the op ends; CUDA's kernels cast
        # while storing. In the grids: bitsandbytes' backward `CB.to(bf16).mul_(fp32 scales)`.
        bop = anc[-3]
        ins = [m for m in (_meta(i) for i in getattr(bop.extra_fields, "inputs", [])) if m]
        dts = {m[2] for m in ins if m[2].is_floating_point}
        if ins and len(dts) > 1:
            common = torch.promote_types(*dts) if len(dts) == 2 else torch.float32
            el = torch.empty((), dtype=common).element_size()
            if ins[0][2] != common and size == _numel(ins[0][0]) * el:
                return (f"cpu {bop.name[6:]} of mixed dtypes: TensorIterator's output in {str(common).replace('torch.', '')}",
                        bop.end_time_ns, "freed inside")
    upd = next((a for a in reversed(anc) if a.name in BNB_OPTIMIZER_OPS), None)
    if upd is not None:
        # bitsandbytes' optimizer update on CPU (backends/cpu/ops.py) dequantizes the state to fp32
        # tensors, updates them with torch ops and requantizes into the state; CUDA's
        # kOptimizer*_blockwise kernels update everything in place in registers. Every block the
        # CPU path allocates inside the op dies there.
        return (f"cpu {upd.name}: fp32 working copies of the state, parameter and gradient", upd.end_time_ns, "freed inside")
    i8 = next((a for a in reversed(anc) if a.name in BNB_INT8_OPS), None)
    if i8 is not None:
        # bitsandbytes' default int8 kernels (backends/default/ops.py) on CPU: int8_vectorwise_quant
        # takes |A| twice and quantizes through fp32 products, int8_linear_matmul multiplies fp32
        # copies of both operands, int8_mm_dequant scales the int32 product in fp32. CUDA's
        # kernels (backends/cuda/ops.py) write their outputs directly; what they allocate inside
        # (the threshold's |A| and mask, the fp16 dequant buffer) vramscope models, unmeasured.
        # Only blocks that die inside the op match (the outputs are counted).
        return (f"cpu {i8.name}: the default implementation's working tensors", i8.end_time_ns, "freed inside")
    ccm = next((i for i, a in enumerate(anc) if a.name == "fsdp::chunk_cat_mixed_dtype"), None)
    if ccm is not None:
        # FSDP2's reduce-scatter copy-in of bf16 (and fp32) gradients into an fp32 reduce-scatter
        # input (torch 2.15, torch/csrc/distributed/fsdp/ChunkCat.cpp / ChunkCat.cu). On CPU the
        # composite casts every input of a mixed-dtype group to fp32 first (`tensor.to(out)`,
        # held until `_chunk_cat_out` returns), and CPU `cat` copies a bf16 chunk of a uniform
        # group before writing it into the fp32 output's slice; CUDA's kernels read bf16 and
        # write fp32 as they copy (`chunk_cat_mixed_dtype_cuda`'s fused kernel for bf16 + fp32
        # groups, `_chunk_cat_out_cuda`'s bf16-in fp32-out kernel for uniform bf16 ones).
        ins = getattr(anc[ccm].extra_fields, "inputs", [])
        grads = ins[0] if ins and isinstance(ins[0], list) else []
        metas = [_meta(g) for g in grads]
        out = _meta(ins[3]) if len(ins) > 3 else None
        fused = (out is not None and out[2] == torch.float32 and metas and all(
            m and m[2] in (torch.bfloat16, torch.float32) and _contiguous(m[0], m[1]) for m in metas))
        below = [a.name for a in anc[ccm + 1:]]
        bf16 = [_numel(m[0]) for m in metas if m and m[2] == torch.bfloat16]
        if fused and below == ["aten::to", "aten::_to_copy", "aten::empty_strided"] and size in [n * 4 for n in bf16]:
            return ("cpu fsdp::chunk_cat_mixed_dtype of bf16 and fp32 gradients: fp32 copies of the bf16 ones",
                    anc[ccm].end_time_ns, "freed inside")
        cat = anc[ccm + 2] if below[:2] == ["aten::_chunk_cat", "aten::cat"] else None
        cat_ins = getattr(cat.extra_fields, "inputs", []) if cat is not None else []
        chunks = [_meta(c) for c in (cat_ins[0] if cat_ins and isinstance(cat_ins[0], list) else [])]
        chunk_bytes = [_numel(m[0]) * 2 for m in chunks if m and m[2] == torch.bfloat16]
        if fused and below[2:] == ["aten::empty_like", "aten::empty"] and size in chunk_bytes:
            return ("cpu fsdp::chunk_cat_mixed_dtype of bf16 gradients: cat's bf16 copy of each before the fp32 output",
                    anc[ccm].end_time_ns, "freed inside")
    cc = next((i for i, a in enumerate(anc) if a.name == "aten::_chunk_cat"), None)
    if cc is not None and cc + 1 < len(anc) and anc[cc + 1].name == "aten::new_zeros":
        # FSDP2's reduce-scatter copy-in, `torch._chunk_cat(grads, 0, world, out=...)`: the CPU
        # composite (`_chunk_cat_out` -> `_pad_chunk`) copies each gradient whose dim 0 does not
        # divide by the world into a zero-padded tensor before `cat`; CUDA's `_chunk_cat_out_cuda`
        # copies contiguous gradients into the padded output directly (chunk_cat_cuda_kernel).
        return ("cpu _chunk_cat of unevenly sharded gradients: _pad_chunk's zero-padded copies", anc[cc].end_time_ns, "freed inside")
    if len(anc) >= 5 and [a.name for a in anc[-5:]] == ["aten::bmm", "aten::contiguous", "aten::clone", "aten::empty_like", "aten::empty"]:
        # mkldnn_matmul (aten/src/ATen/native/mkldnn/Matmul.cpp), which CPU bmm takes for
        # bf16/fp16 operands, copies an operand whose strides oneDNN does not take
        # (`is_mkldnn_optimized_format`, e.g. a transposed 2-D weight unsqueezed to batch 1,
        # CS336's einsum Linear) to a contiguous tensor that dies inside the op. CUDA's bmm
        # (`prepare_batch_matrix_for_cublas`) passes such an operand to cuBLAS transposed, no copy.
        mm = anc[-5]
        ins = [m for m in (_meta(i) for i in getattr(mm.extra_fields, "inputs", [])) if m]
        if any(m[2] in REDUCED_FLOAT for m in ins) and any(size == _numel(m[0]) * torch.empty((), dtype=m[2]).element_size() for m in ins):
            return ("cpu bmm of reduced floats: oneDNN's contiguous copy of an operand", mm.end_time_ns, "freed inside")
    if anc and anc[-1].name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"):
        # A block allocated by the matmul op itself, beside its output, for bf16/fp16 operands:
        # the CPU BLAS backend's packing scratch (oneDNN's AMX/AVX512-BF16 path, present on some
        # CPUs only); cuBLAS keeps its workspace in the handle's pool. Freed before the op returns.
        # (baddbmm: peft's ParamWrapper fold; its contiguous copy of an operand, allocated under
        # aten::contiguous, stays counted: cuBLAS copies that operand too.)
        mm = anc[-1]
        ins = [m for m in (_meta(i) for i in getattr(mm.extra_fields, "inputs", [])) if m]
        if any(m[2] in REDUCED_FLOAT for m in ins):
            return (f"cpu {mm.name[6:]} of reduced floats: the BLAS backend's packing scratch", mm.end_time_ns, "freed inside")
    if len(anc) < 2 or anc[-1].name != "aten::empty":
        return None
    op = anc[-2]
    ins = [_meta(i) for i in getattr(op.extra_fields, "inputs", [])]
    if op.name == "aten::copy_" and len(ins) >= 2 and ins[0] and ins[1]:
        # copy_transpose_valid(self, src): contiguous self, 2-D src with strides (1, size(0)), same
        # dtype and sizes, >= 60*60 elements -> a BLOCK_SZ x BLOCK_SZ buffer of self's dtype.
        (ss, sst, sdt), (rs, rst, rdt) = ins[0], ins[1]
        if (len(rs) == 2 and rst == [1, rs[0]] and rs == ss and sdt == rdt and _contiguous(ss, sst)
                and _numel(ss) >= COPY_TRANSPOSE_BLOCK ** 2
                and size == COPY_TRANSPOSE_BLOCK ** 2 * torch.empty((), dtype=sdt).element_size()):
            return ("cpu copy_ of a transposed 2-D src: copy_same_type_transpose_ 60x60 bounce buffer", op.end_time_ns)
    if op.name in SCATTER_OPS and ins and ins[0]:
        # cpu_scatter_gather_base_kernel, reduced floating self: an fp32 working copy of self (numel * 4 B),
        # copied in and back (GatherBackward0's scatter_add_, MaxBackward0's scatter_).
        ss, _, sdt = ins[0]
        if sdt in REDUCED_FLOAT and size == _numel(ss) * 4:
            return (f"cpu {op.name[6:]} of {str(sdt).replace('torch.', '')}: fp32 working buffer the size of self",
                    op.end_time_ns)
    if op.name in CPU_FLASH_OPS and ins and ins[0] and len(ins) > 1 and ins[1]:
        # cpu/FlashAttentionKernel.cpp: per-thread tiles in the accumulation type (fp32) and, for
        # reduced types, a tile in the input type; CUDA's flash kernel keeps these in registers /
        # shared memory (its own workspace is modelled separately by vramscope).
        (qs, _, qdt), (ks, _, _) = ins[0], ins[1]
        if len(qs) == 4 and len(ks) == 4:
            S, D, kv = qs[2], qs[3], ks[2]
            nt = torch.get_num_threads()
            red = qdt in REDUCED_FLOAT
            kvs = min(512, kv)
            backward = op.name.endswith("_backward")
            sizes = set()
            for qsplit in (32, 64, 256):  # the dispatcher's q_split_size by sequence length
                q = min(qsplit, S)
                if backward:
                    sizes.add(nt * q * kvs * 2 * 4)  # attn, grad_attn
                    if red:
                        sizes.add(nt * q * kvs * 2 * 2)  # their reduced-type copies
                else:
                    sizes.add(nt * (q * kvs + 2 * q + q * D) * 4)  # qk, qk_max, qk_sum, dst
                    if red:
                        sizes.add(nt * q * kvs * 2)  # qk_reduced
            if size in sizes:
                # A size alone can equal an output's (the logsumexp, with 2 threads' reduced
                # tiles): alloc_rows keeps the mark only if the block dies inside the op.
                return (f"cpu flash attention ({op.name[6:]}): per-thread tile buffers", op.end_time_ns, "freed inside")
    return None


def counted(size, op):
    return size >= MIN_BLOCK and not (size == RNG_BYTES and not op.startswith("aten::"))


def analyse(rows, phases, other_threads=False):
    """Per-phase peaks of the last step: absolute live bytes of blocks >= 512 B (and of all
    blocks), the op at each peak and how many counted tensors were live there.
    other_threads: a collective backend (gloo) frees some blocks on its own threads, which
    the profiler does not see; a new block at a live address then retires the old one first
    (counted in the result's `missed_frees`)."""
    live = {}  # ptr -> (bytes, counted, scratch)
    missed = []
    level = level_all = n_live = level_scratch = 0  # level_scratch: counted + CPU scratch >= 512 B
    last = NSTEPS - 1
    per = {p: None for p in phases}
    log = []
    cur = None
    for r in rows:
        b, ptr = r["bytes"], r["ptr"]
        if b > 0 and ptr in live and other_threads:
            ob, oc, _ = live.pop(ptr)
            level -= ob if oc else 0
            n_live -= 1 if oc else 0
            level_all -= ob
            missed.append(ob)
        if b > 0:
            assert ptr not in live, "allocation at a live address"
            scratch = r["scratch"]
            c = counted(b, r["op"]) and scratch is None
        elif ptr in live:
            assert live[ptr][0] == -b, "free size differs from its allocation"
            c, scratch = live[ptr][1], live[ptr][2]
            assert scratch is None or r["t"][0] <= scratch[1], f"CPU scratch block outlived its op: {scratch[0]}"
        else:
            continue  # a block allocated before the session
        in_step = r["step"] == last
        ph = r["phase"] if r["phase"] in per else "other"
        if in_step and ph != cur and ph in per and per[ph] is not None:
            ph = cur  # a phase re-entered (tinyllama's forward after its inner loss) stays in the later one
        if in_step and ph != cur:
            if ph in per and per[ph] is None:
                per[ph] = dict(start=level, peak=level, peak_all=level_all, peak_op="phase start",
                               peak_node="", live_at_peak=n_live, cpu_scratch={},
                               peak_with_cpu_scratch=level + level_scratch)
            cur = ph
        if b > 0:
            live[ptr] = (b, c, scratch)
        else:
            del live[ptr]
        level += b if c else 0
        n_live += (1 if b > 0 else -1) if c else 0
        level_all += b
        level_scratch += b if scratch is not None and abs(b) >= MIN_BLOCK else 0
        if not in_step:
            continue
        if ph in per:
            s = per[ph]
            if b > 0 and scratch is not None and b >= MIN_BLOCK:
                # left out: which rule, how many blocks, bytes in all and the largest one
                w = s["cpu_scratch"].setdefault(scratch[0], dict(blocks=0, bytes=0, max_block=0, node=r["node"]))
                w.update(blocks=w["blocks"] + 1, bytes=w["bytes"] + b, max_block=max(w["max_block"], b))
            if level > s["peak"]:
                s.update(peak=level, peak_op=r["op"], peak_node=r["node"], live_at_peak=n_live)
            s["peak_all"] = max(s["peak_all"], level_all)
            s["peak_with_cpu_scratch"] = max(s["peak_with_cpu_scratch"], level + level_scratch)
            s["end"] = level
        log.append(dict(phase=ph, op=r["op"], node=r["node"], bytes=b, counted=int(c), cpu_scratch=int(scratch is not None),
                        level=level, level_all=level_all, ptr=hex(ptr)))
    missing = [p for p, v in per.items() if v is None]
    assert not missing, f"no events in phases {missing}"
    if other_threads:
        for s in per.values():
            s["missed_frees"] = missed
    return per, log


def cs336_setup(cfg, batch, seq, seed=42):
    def setup():
        torch.manual_seed(seed)
        model = C.BasicsTransformerLM(cfg["vocab_size"], cfg.get("max_seq_len", seq), cfg["d_model"], cfg["num_layers"],
                                      cfg["num_heads"], cfg["d_ff"], cfg.get("rope_theta", 10000.0),
                                      fused_qkv=cfg.get("fused_qkv", False), fused_gate_up=cfg.get("fused_gate_up", False),
                                      flash=cfg.get("attention", "naive") == "flash",
                                      checkpoint_every=cfg.get("checkpoint_every"))
        if cfg.get("pure_bf16"):
            model.to(torch.bfloat16)
        model.train()
        opt = C.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
        return model, opt, C.cross_entropy, batcher(cfg["vocab_size"], batch, seq, seed)
    return setup


def phases_of(kind):
    return {"inference": ("data", "forward"), "forward": ("data", "forward"),
            "forward-loss": ("data", "forward", "loss"), "training": PHASES}[kind]


def measure(setup, kind, other_threads=False, autocast=contextlib.nullcontext):
    rows = alloc_rows(profiled(setup, kind, autocast))
    return analyse(rows, phases_of(kind), other_threads)


def write_events(path, log):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(log[0].keys()))
        w.writeheader()
        w.writerows(log)


def grid_main(doc, script, one, grid, out, header):
    """A fixture driver's command line: `--point JSON` measures one point and prints it as a
    `PHASES` line; otherwise the grid (`--only TEXT`: the points whose name holds it, into
    OUT.partial) goes through run_grid. `header()` gives the fixture's fields (it may import torch)."""
    import argparse
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--point", help="measure one point (JSON) and print its phases as JSON")
    ap.add_argument("--only", help="grid points whose name contains this")
    a = ap.parse_args()
    if a.point:
        print("PHASES " + json.dumps(one(json.loads(a.point))))
        return
    pts = [p for p in grid() if not a.only or a.only in p["name"]]
    run_grid(script, pts, out if not a.only else out + ".partial", header())


def run_grid(script, pts, out, header):
    """Measure each grid point in its own process (`script --point JSON`, which prints a
    `PHASES {...}` line) into the fixture `out`: resumable, the file is rewritten after every
    point (header's fields, then `points`) and points already in it are kept."""
    import subprocess
    done = json.load(open(out))["points"] if os.path.exists(out) else []
    have = {p["name"] for p in done}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    for i, p in enumerate(pts):
        if p["name"] in have:
            continue
        r = subprocess.run([sys.executable, script, "--point", json.dumps(p)], capture_output=True, text=True)
        line = [l for l in r.stdout.splitlines() if l.startswith("PHASES ")]
        if r.returncode != 0 or not line:
            print(f"FAILED {p['name']}:\n{r.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(line[0][len("PHASES "):])
        # A point that also reports info (measure_dist.py --families / --moe) gives both.
        p = dict(p, **r) if set(r) >= {"phases", "info"} else dict(p, phases=r)
        print(f"[{i + 1}/{len(pts)}] {p['name']}: " + ", ".join(f"{k} {v['peak']}" for k, v in p["phases"].items()), flush=True)
        done.append(p)
        with open(out + ".tmp", "w") as f:
            json.dump(dict(header, points=done), f)
            f.write("\n")
        os.replace(out + ".tmp", out)
    print(f"{out}: {len(done)} points")


def print_phases(per):
    print(f"{'phase':10} {'peak (requested B, blocks >= 512 B)':>36} {'all blocks':>14} {'live':>6}  op at the peak")
    for p, s in per.items():
        node = f" [{s['peak_node']}]" if s["peak_node"] else ""
        print(f"{p:10} {s['peak']:>36,} {s['peak_all']:>14,} {s['live_at_peak']:>6}  {s['peak_op']}{node}")


def parse_checkpoint(s):
    if s in (None, "none"):
        return None
    if s == "blocks":
        return 1
    if s.startswith("every-") and s[6:].isdigit() and int(s[6:]) > 0:
        return int(s[6:])
    raise argparse.ArgumentTypeError(f"--checkpoint: {s!r} (none, blocks or every-N)")


def main(argv=None):
    p = argparse.ArgumentParser(description="Per-phase peak memory of the CS336 staff model, mode-free (CPU profiler).")
    p.add_argument("--vocab-size", type=int, default=10000)
    p.add_argument("--d-model", type=int, default=768)
    p.add_argument("--num-layers", type=int, default=12)
    p.add_argument("--num-heads", type=int, default=12)
    p.add_argument("--d-ff", type=int, default=3072)
    p.add_argument("--max-seq-len", type=int, help="RoPE buffer length (default: --context-length)")
    p.add_argument("--context-length", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--profile-type", choices=PROFILE_TYPES, default="training")
    p.add_argument("--attention", choices=("naive", "flash"), default="naive")
    p.add_argument("--fused-qkv", action="store_true")
    p.add_argument("--fused-gate-up", action="store_true")
    p.add_argument("--checkpoint", type=parse_checkpoint, default=None, help="none, blocks or every-N")
    p.add_argument("--pure-bf16", action="store_true", help="model.to(torch.bfloat16)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--events", help="write the measured iteration's allocation/free log (CSV) here")
    p.add_argument("--json", help="write the per-phase result (JSON) here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    cfg = dict(vocab_size=a.vocab_size, d_model=a.d_model, num_layers=a.num_layers, num_heads=a.num_heads,
               d_ff=a.d_ff, max_seq_len=a.max_seq_len or a.context_length, attention=a.attention,
               fused_qkv=a.fused_qkv, fused_gate_up=a.fused_gate_up, checkpoint_every=a.checkpoint,
               pure_bf16=a.pure_bf16)
    per, log = measure(cs336_setup(cfg, a.batch_size, a.context_length), a.profile_type)
    print(f"cs336 {a.profile_type}: {cfg}, B {a.batch_size}, S {a.context_length} (torch {torch.__version__}, CPU)")
    print_phases(per)
    if a.events:
        write_events(a.events, log)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(config=cfg, batch=a.batch_size, seq=a.context_length, profile_type=a.profile_type,
                           torch=torch.__version__, phases=per), f, indent=1)


if __name__ == "__main__":
    main()
