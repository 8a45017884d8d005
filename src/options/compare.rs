//! `profile --compare`'s variants as flags: the baseline (fp32, naive attention, no
//! checkpointing, unfused, no accumulation) and each memory option the user gave alone, then
//! all of them together — or, when none is given, every option; with `--world-size N`, one
//! device and each layout at N ranks. Each is resolved by profile's own planner.
use super::memory::MemoryFlags;
use super::precision::PrecisionFlags;
use super::profile::{self, ProfileArgs};
use super::usage;
use crate::engine::Device;
use crate::model::Attention;
use crate::session::compare::Variant;
use crate::session::ProfileType;
use crate::train::Precision;
use anyhow::Result;

/// One column of the comparison as flags: a name and the arguments that run it.
struct Flagged {
    name: String,
    args: ProfileArgs,
}

/// The arguments with every optimisation switched off.
fn baseline(a: &ProfileArgs) -> ProfileArgs {
    let mut b = a.clone();
    b.compare = false;
    b.precision = PrecisionFlags::default();
    b.memory = MemoryFlags::default();
    // Every preset's attention is naive (the hf flavour refuses --attention).
    b.model.attention = None;
    b.model.hf.gradient_checkpointing = None;
    b.grad_accum_steps = 1;
    b.output = None;
    b
}

/// `--compare` of an hf fine-tune given as LoRA, QLoRA or 8-bit: full fine-tuning, LoRA on the
/// loaded weights (DoRA, labelled so, with --use-dora) and QLoRA (the given 4-bit flags, else
/// nf4 with double quantization and bf16 compute, as the recipes run it), and, given
/// --load-in-8bit, LoRA over the 8-bit model (its flags as given), each without and with
/// gradient checkpointing (the given mode, else non-reentrant; prepare_model_for_kbit_training's
/// default is reentrant). Every other flag as given.
fn fine_tune_variants(a: &ProfileArgs) -> Vec<Flagged> {
    let mut base = a.clone();
    base.compare = false;
    base.output = None;
    base.memory.checkpoint = None;
    let h = &a.model.hf;
    let full = {
        let mut f = base.clone();
        let hf = &mut f.model.hf;
        (hf.lora_r, hf.lora_alpha, hf.lora_dropout, hf.target_modules, hf.use_dora, hf.modules_to_save) = (None, None, None, None, false, None);
        hf.target_parameters = None;
        (hf.load_in_4bit, hf.load_in_8bit, hf.llm_int8_threshold) = (false, false, None);
        (hf.bnb_4bit_quant_type, hf.bnb_4bit_use_double_quant, hf.bnb_4bit_compute_dtype, hf.bnb_4bit_quant_storage, hf.prepare_model_for_kbit_training) = (None, false, None, None, None);
        f
    };
    let lora = {
        let mut l = base.clone();
        l.model.hf.lora_r = Some(h.lora_r.unwrap_or(16));
        (l.model.hf.load_in_4bit, l.model.hf.load_in_8bit, l.model.hf.llm_int8_threshold) = (false, false, None);
        (l.model.hf.bnb_4bit_quant_type, l.model.hf.bnb_4bit_use_double_quant, l.model.hf.bnb_4bit_compute_dtype, l.model.hf.bnb_4bit_quant_storage, l.model.hf.prepare_model_for_kbit_training) = (None, false, None, None, None);
        l
    };
    let qlora = {
        let mut q = lora.clone();
        q.model.hf.load_in_4bit = true;
        if h.load_in_4bit {
            q.model.hf = h.clone();
        } else {
            q.model.hf.bnb_4bit_quant_type = Some("nf4".into());
            q.model.hf.bnb_4bit_use_double_quant = true;
            q.model.hf.bnb_4bit_compute_dtype = Some("bfloat16".into());
        }
        q.model.hf.lora_r = Some(h.lora_r.unwrap_or(16));
        q
    };
    // LoRA over LLM.int8() weights, when the run asked for it (as given).
    let int8 = h.load_in_8bit.then(|| {
        let mut e = lora.clone();
        e.model.hf = h.clone();
        e.model.hf.lora_r = Some(h.lora_r.unwrap_or(16));
        e
    });
    let on = h.gradient_checkpointing.clone().filter(|m| !m.eq_ignore_ascii_case("none")).unwrap_or_else(|| "non-reentrant".into());
    let mut out = Vec::new();
    // With --use-dora the adapters of both are DoRA's (peft's Linear and Linear4bit alike).
    let (l, q) = if h.use_dora { ("DoRA", "4-bit DoRA") } else { ("LoRA", "QLoRA") };
    let variants = [("full fine-tune", Some(full)), (l, Some(lora)), (q, Some(qlora)), ("8-bit LoRA", int8)];
    for (name, v) in variants.into_iter().filter_map(|(n, v)| v.map(|v| (n, v))) {
        let mut off = v.clone();
        off.model.hf.gradient_checkpointing = Some("none".into());
        out.push(Flagged { name: format!("{name}, no checkpointing"), args: off });
        let mut ck = v;
        let mode = if (name == q || name == "8-bit LoRA") && h.gradient_checkpointing.is_none() { "reentrant".to_string() } else { on.clone() };
        ck.model.hf.gradient_checkpointing = Some(mode.clone());
        out.push(Flagged { name: format!("{name}, {mode} checkpointing"), args: ck });
    }
    out
}

/// `--compare --world-size N`: one device, then each layout (--parallel's comma list, or
/// ddp, zero1, zero2 and fsdp, less those a LoRA or 4-bit model is refused under) at N ranks,
/// every other flag as given.
fn layout_variants(a: &ProfileArgs, world: usize) -> Result<Vec<Flagged>> {
    let mut one = a.clone();
    one.compare = false;
    one.output = None;
    one.parallel = Default::default();
    let names: Vec<String> = match &a.parallel.parallel {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        // A LoRA or 4-bit model: the layouts it runs under.
        None => super::parallel::default_layouts(super::parallel::Adapted::of_flags(&a.model.hf))?.iter().map(|l| l.name().to_string()).collect(),
    };
    let mut out = vec![Flagged { name: "one device".into(), args: one }];
    for n in names {
        let mut v = a.clone();
        v.compare = false;
        v.output = None;
        v.parallel.parallel = Some(n.clone());
        v.parallel.world_size = Some(world);
        out.push(Flagged { name: format!("{n} ×{world}"), args: v });
    }
    Ok(out)
}

fn variants(a: &ProfileArgs) -> Result<Vec<Flagged>> {
    if let Some(w) = a.parallel.world_size {
        return layout_variants(a, w);
    }
    if a.parallel.given() {
        return Err(usage("--parallel", "with --compare, give --world-size N to put layouts side by side"));
    }
    let resolved = a.model.resolve("walkthrough", super::model::Names::Cs336)?;
    super::moe::refuse(&resolved.config, &a.model, "compare")?;
    let hf = resolved.config.flavour == crate::model::Flavour::Hf;
    if hf && (a.model.hf.lora_r.is_some() || a.model.hf.load_in_4bit || a.model.hf.load_in_8bit) {
        return Ok(fine_tune_variants(a));
    }
    let base = baseline(a);
    let precision = a.precision.resolve()?;
    let flash = a.model.attention.as_deref().is_some_and(|s| Attention::parse(s) == Some(Attention::Flash));
    let ckpt = a.memory.checkpoint.as_deref().filter(|s| !s.eq_ignore_ascii_case("none")).map(str::to_string);
    let fusion = a.memory.fusion.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("all")) || a.memory.fused_qkv || a.memory.fused_gate_up;
    let training = a.profile_type.iter().all(|&k| k == ProfileType::Training);
    // The preset's batch when none is given (the hf presets' is 1: no accumulation variant).
    let batch = a.batch_size.unwrap_or(resolved.preset.batch_size);
    // The hf flavour has transformers' attention and projections: no flash or fusion variant.
    let hf_ckpt = a.model.hf.gradient_checkpointing.clone().filter(|s| !s.eq_ignore_ascii_case("none"));
    let chosen = precision != Precision::Fp32 || flash || ckpt.is_some() || hf_ckpt.is_some() || fusion || a.grad_accum_steps > 1;
    let mut out = vec![Flagged { name: "baseline".into(), args: base.clone() }];
    let mut all = base.clone();
    let mut add = |name: String, f: &dyn Fn(&mut ProfileArgs)| {
        let mut v = base.clone();
        f(&mut v);
        f(&mut all);
        out.push(Flagged { name, args: v });
    };
    if chosen {
        if precision != Precision::Fp32 {
            let p = a.precision.clone();
            add(format!("{precision} precision"), &move |v| v.precision = p.clone());
        }
        if flash {
            add("flash attention".into(), &|v| v.model.attention = Some("flash".into()));
        }
        if let Some(c) = ckpt {
            add(format!("checkpoint {c}"), &move |v| v.memory.checkpoint = Some(c.clone()));
        }
        if let Some(c) = hf_ckpt {
            add(format!("gradient checkpointing {c}"), &move |v| v.model.hf.gradient_checkpointing = Some(c.clone()));
        }
        if fusion {
            let m = a.memory.clone();
            add("fused projections".into(), &move |v| {
                v.memory.fusion = m.fusion.clone();
                v.memory.fused_qkv = m.fused_qkv;
                v.memory.fused_gate_up = m.fused_gate_up;
            });
        }
        if a.grad_accum_steps > 1 {
            let n = a.grad_accum_steps;
            add(format!("grad accum {n}"), &move |v| v.grad_accum_steps = n);
        }
    } else {
        add("bf16 autocast".into(), &|v| v.precision.precision = Some("bf16".into()));
        if !hf {
            add("flash attention".into(), &|v| v.model.attention = Some("flash".into()));
        }
        add("checkpoint blocks".into(), &|v| v.memory.checkpoint = Some("blocks".into()));
        if !hf {
            add("fused projections".into(), &|v| v.memory.fusion = Some("all".into()));
        }
        // Accumulation needs a training step and a batch it can split.
        if training {
            if let Some(n) = [4, 2].into_iter().find(|n| batch % n == 0 && batch >= *n) {
                add(format!("grad accum {n}"), &move |v| v.grad_accum_steps = n);
            }
        }
    }
    if out.len() > 2 {
        out.push(Flagged { name: "all of the above".into(), args: all });
    }
    Ok(out)
}

/// The variants `a` asks to compare, every one planned (validated) before the first runs,
/// and the notes: when they move to meta (one too large for host memory moves them all, and a
/// layout runs on meta: the table compares like with like), and each default layout left out.
pub fn variants_of(a: &ProfileArgs) -> Result<(Vec<Variant>, Vec<String>)> {
    if a.output.is_some() {
        return Err(usage("--output", "names one snapshot; --compare writes one per variant under --out-dir"));
    }
    if a.flops {
        return Err(usage("--compare", "does not combine with --flops (profile one variant with --flops instead)"));
    }
    if a.profile_type.contains(&ProfileType::Generate) {
        return Err(usage("--compare", "compares training memory options (precision under autocast, checkpointing, fusion, accumulation, layouts), which generate() does not take: sweep generate's batch, prompt or length instead (`vramscope sweep --profile-type generate --max-new-tokens 8,64 --context-length 512,2048`)"));
    }
    let flagged = variants(a)?;
    // The default layouts (no --parallel list) are those a LoRA or 4-bit model runs under; one
    // this model or these options are refused under is left out, and the note says why.
    let default_layouts = a.parallel.world_size.is_some() && a.parallel.parallel.is_none();
    let (mut vs, mut left_out, mut first_refusal) = (Vec::new(), Vec::new(), None);
    for (i, f) in flagged.into_iter().enumerate() {
        match profile::options(&f.args) {
            Ok(options) => vs.push(Variant { name: f.name, options }),
            Err(e) if default_layouts && i > 0 => {
                left_out.push(format!("{} left out ({e:#})", f.name));
                first_refusal.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    if let Some(e) = first_refusal.filter(|_| vs.len() < 2) {
        return Err(e);
    }
    let notes = vs.iter().map(|v| v.options.host_fallback(&a.profile_type)).collect::<Result<Vec<_>>>()?;
    let note = notes.into_iter().flatten().next();
    if note.is_some() || vs.iter().any(|v| v.options.device == Device::Meta) {
        for v in &mut vs {
            v.options.device = Device::Meta;
        }
    }
    let notes = note.map(|n| format!("{n} (all --compare variants)")).into_iter().chain(left_out).collect();
    Ok((vs, notes))
}
