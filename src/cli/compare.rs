//! `vramscope profile --compare`: what each memory optimisation buys. Runs the baseline
//! (fp32, naive attention, no checkpointing, unfused, no accumulation) and each option the
//! user gave alone, then all of them together — or, when none is given, every option —
//! and prints one table per (context, profile type): peak allocated and reserved, what is
//! live at the peak by category, and the cpu step time, each relative to the baseline.
use super::memory_flags::MemoryFlags;
use super::precision_flags::PrecisionFlags;
use super::profile::{self, ProfileArgs, ProfileType, Run};
use super::{set_threads, usage};
use crate::export::compare::{compare_table, VariantRow};
use crate::export::{write_atomic, write_json};
use crate::model::Attention;
use crate::record::Category;
use crate::train::Precision;
use anyhow::Result;
use serde_json::json;

/// One column of the comparison: a name and the arguments that run it.
struct Variant {
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

/// `--compare --world-size N`: one device, then each layout (--parallel's comma list, or
/// ddp, zero1, zero2 and fsdp) at N ranks, every other flag as given.
fn layout_variants(a: &ProfileArgs, world: usize) -> Result<Vec<Variant>> {
    let mut one = a.clone();
    one.compare = false;
    one.output = None;
    one.parallel = Default::default();
    let names: Vec<String> = match &a.parallel.parallel {
        Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
        None => ["ddp", "zero1", "zero2", "fsdp"].map(String::from).to_vec(),
    };
    let mut out = vec![Variant { name: "one device".into(), args: one }];
    for n in names {
        let mut v = a.clone();
        v.compare = false;
        v.output = None;
        v.parallel.parallel = Some(n.clone());
        v.parallel.world_size = Some(world);
        out.push(Variant { name: format!("{n} ×{world}"), args: v });
    }
    Ok(out)
}

fn variants(a: &ProfileArgs) -> Result<Vec<Variant>> {
    if let Some(w) = a.parallel.world_size {
        return layout_variants(a, w);
    }
    if a.parallel.given() {
        return Err(usage("--parallel", "with --compare, give --world-size N to put layouts side by side"));
    }
    let base = baseline(a);
    let precision = a.precision.resolve()?;
    let flash = a.model.attention.as_deref().is_some_and(|s| Attention::parse(s) == Some(Attention::Flash));
    let ckpt = a.memory.checkpoint.as_deref().filter(|s| !s.eq_ignore_ascii_case("none")).map(str::to_string);
    let fusion = a.memory.fusion.as_deref().is_some_and(|s| s.eq_ignore_ascii_case("all")) || a.memory.fused_qkv || a.memory.fused_gate_up;
    let training = a.profile_type.iter().all(|&k| k == ProfileType::Training);
    let batch = a.batch_size;
    // The hf flavour has transformers' attention and projections: no flash or fusion variant.
    let hf = a.model.resolve("walkthrough", super::model_flags::Names::Cs336)?.config.flavour == crate::model::Flavour::Hf;
    let hf_ckpt = a.model.hf.gradient_checkpointing.clone().filter(|s| !s.eq_ignore_ascii_case("none"));
    let chosen = precision != Precision::Fp32 || flash || ckpt.is_some() || hf_ckpt.is_some() || fusion || a.grad_accum_steps > 1;
    let mut out = vec![Variant { name: "baseline".into(), args: base.clone() }];
    let mut all = base.clone();
    let mut add = |name: String, f: &dyn Fn(&mut ProfileArgs)| {
        let mut v = base.clone();
        f(&mut v);
        f(&mut all);
        out.push(Variant { name, args: v });
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
            if let Some(n) = [4, 2].into_iter().find(|n| batch.is_none_or(|b| b % n == 0 && b >= *n)) {
                add(format!("grad accum {n}"), &move |v| v.grad_accum_steps = n);
            }
        }
    }
    if out.len() > 2 {
        out.push(Variant { name: "all of the above".into(), args: all });
    }
    Ok(out)
}

fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect::<String>()
}

const CATS: [Category; 6] = [Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Activation, Category::AutocastCache, Category::Temporary];
/// Comparing layouts adds their collective buffers.
const LAYOUT_CATS: [Category; 7] =
    [Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Activation, Category::AutocastCache, Category::Temporary, Category::Communication];

pub fn run(a: &ProfileArgs) -> Result<()> {
    if a.output.is_some() {
        return Err(usage("--output", "names one snapshot; --compare writes one per variant under --out-dir"));
    }
    if a.flops {
        return Err(usage("--compare", "does not combine with --flops (profile one variant with --flops instead)"));
    }
    let vs = variants(a)?;
    let cat_list: &[Category] = if a.parallel.world_size.is_some() { &LAYOUT_CATS } else { &CATS };
    // Every variant is planned (validated) before the first run.
    let mut plans = vs.iter().map(|v| profile::plan(&v.args)).collect::<Result<Vec<_>>>()?;
    // One variant too large for host memory moves them all to meta, so the table compares
    // like with like.
    let notes = plans.iter().map(|p| profile::meta_if_host_too_small(p, &a.profile_type)).collect::<Result<Vec<_>>>()?;
    if let Some(n) = notes.into_iter().flatten().next() {
        println!("{n} (all --compare variants)");
        for p in &mut plans {
            p.device = crate::engine::Device::Meta;
        }
    }
    // A layout runs on meta: then every variant does, to compare like with like.
    if plans.iter().any(|p| p.device == crate::engine::Device::Meta) {
        for p in &mut plans {
            p.device = crate::engine::Device::Meta;
        }
    }
    set_threads(a.threads)?;
    // The variants' snapshots and the tables appear together at the end, or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    super::quiet_oom_panics();
    let p0 = &plans[0];
    let cpu = p0.device == crate::engine::Device::Cpu;
    let mut md = String::new();
    let mut json_rows = Vec::new();
    for &ctx in &p0.contexts {
        for &kind in &a.profile_type {
            let mut runs: Vec<Run> = Vec::new();
            for (v, p) in vs.iter().zip(&plans) {
                let mut args = v.args.clone();
                let k = kind.name().to_string();
                args.output = Some(a.out_dir.join(format!("{}_ctx{ctx}_{k}_{}_snapshot.pickle", p.model_name, slug(&v.name))));
                runs.push(profile::profile_one(p, &args, ctx, kind)?);
            }
            let base = &runs[0];
            let rows: Vec<VariantRow> = vs
                .iter()
                .zip(&runs)
                .map(|(v, r)| VariantRow {
                    name: v.name.clone(),
                    oom: r.oom.is_some(),
                    peak_allocated: r.stats.allocated_bytes.peak,
                    peak_reserved: r.stats.reserved_bytes.peak,
                    at_peak: cat_list.iter().map(|&c| r.report.category_bytes(c)).collect(),
                    step_seconds: r.step_seconds,
                })
                .collect();
            let title = format!("{} ({}), {}, context {ctx}, batch {} on {}", p0.model_name, p0.model.flavour, kind.name(), p0.batch, p0.device);
            let optimizer = (kind == ProfileType::Training).then(|| p0.optim.summary());
            md += &compare_table(&title, optimizer.as_deref(), cat_list, &rows, cpu);
            for (v, r) in vs.iter().zip(&runs) {
                let (pa, pr) = (r.stats.allocated_bytes.peak, r.stats.reserved_bytes.peak);
                json_rows.push(json!({
                    "variant": v.name,
                    "context_length": ctx,
                    "profile_type": kind,
                    "oom": r.oom,
                    "peak_allocated_bytes": pa,
                    "peak_reserved_bytes": pr,
                    "peak_allocated_vs_baseline": pa as f64 / base.stats.allocated_bytes.peak.max(1) as f64,
                    "live_at_peak_bytes": cat_list.iter().map(|&c| (c.name(), r.report.category_bytes(c))).collect::<std::collections::BTreeMap<_, _>>(),
                    "step_seconds": if cpu { r.step_seconds } else { None },
                    "snapshot": r.snapshot,
                }));
            }
        }
    }
    md.push_str("\nCategory columns: memory live at the peak of allocated memory, in the table's unit.");
    md.push_str(if cpu { "\n" } else { " Meta: memory only; step times are measured with `--device cpu`.\n" });
    print!("{md}");
    write_atomic(&a.out_dir.join("compare.md"), md.trim_start().as_bytes())?;
    let optimizer = a.profile_type.contains(&ProfileType::Training).then_some(&p0.optim);
    write_json(&a.out_dir.join("compare.json"), &json!({ "run_id": set.run_id(), "units": "bytes; GiB = 1024³ bytes", "optimizer": optimizer, "runs": json_rows }))?;
    set.commit()?;
    println!("\nwrote compare.md, compare.json and one snapshot (+ HTML report) per variant to {}", a.out_dir.display());
    Ok(())
}
