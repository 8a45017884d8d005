//! `vramscope run-all`: seed 001's `run_all.sh` — the 2.7B model at context 128/256/512,
//! forward and training, fp32 and bf16 — writing `results/memory_profiling/` with the
//! snapshots named as the seed lists them and the four text answers: the peak table (part
//! b), the mixed-precision comparison (part c), the residual-stream activation size (part
//! d) and the largest allocations with where they come from (part e).
use super::profile::{self, ProfileArgs, ProfileType, Run};
use super::{set_threads, usage, UsageError};
use crate::analyse::estimate;
use crate::analyse::snapshot::{analyse_within, Alloc};
use crate::export::{gib, mib, staged_path, write_atomic};
use crate::record::Category;
use crate::train::Precision;
use anyhow::Result;
use clap::Args;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Args, Debug, Clone)]
pub struct RunAllArgs {
    /// Model preset (as `profile --model`: a bare small/medium/large is CS336's)
    #[arg(long, visible_alias = "model-size", default_value = "2.7B")]
    pub model: String,
    /// Reference implementation: cs336 or tinyllama (picks the family of a bare preset name)
    #[arg(long)]
    pub flavour: Option<String>,
    /// Batch size B of every run
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Context lengths of parts (a) and (b); part (c) uses the longest
    #[arg(long, default_value = "128,256,512")]
    pub context_length: String,
    /// The mixed-precision type of part (c): bf16 or fp16
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// meta (shapes only; default, any model size) or cpu (real numerics)
    #[arg(long, default_value = "meta")]
    pub device: String,
    /// GPU whose memory bounds the allocator (an OOM is reported in the tables)
    #[arg(long)]
    pub gpu: Option<String>,
    /// Unrecorded steps run first, so optimizer state exists as in a steady-state step
    #[arg(long, default_value_t = 1)]
    pub warmup_steps: usize,
    /// Recorded steps after the warm-up
    #[arg(long, default_value_t = 1)]
    pub measure_steps: usize,
    /// Folder the outputs are written to (created if missing)
    #[arg(long, default_value = "results/memory_profiling")]
    pub out_dir: PathBuf,
    /// CPU threads for the cpu device (default: all cores)
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub optim: super::optim_flags::OptimFlags,
    /// Budgets for reading back the snapshots this command writes (parts (a) and (e))
    #[command(flatten)]
    pub budget: super::budget_flags::BudgetArgs,
}

/// One profiled run of the script, with the snapshot it wrote.
struct Done {
    ctx: usize,
    kind: ProfileType,
    precision: Precision,
    /// Part (c)'s precision comparison (its own snapshot names), not parts (a)/(b).
    part_c: bool,
    run: Run,
    snapshot: PathBuf,
}

fn kind_name(k: ProfileType) -> &'static str {
    k.name()
}


/// Profile arguments for one run, parsed and validated by `profile`'s own code.
fn args_for(a: &RunAllArgs, ctx: usize, kind: ProfileType, precision: Precision, output: &Path) -> Result<ProfileArgs> {
    let mut argv: Vec<String> = Vec::new();
    let mut push = |f: &str, v: String| {
        argv.push(f.into());
        argv.push(v);
    };
    push("--model", a.model.clone());
    if let Some(f) = &a.flavour {
        push("--flavour", f.clone());
    }
    push("--batch-size", a.batch_size.to_string());
    push("--context-length", ctx.to_string());
    push("--profile-type", kind_name(kind).into());
    push("--device", a.device.clone());
    push("--warmup-steps", a.warmup_steps.to_string());
    push("--measure-steps", a.measure_steps.to_string());
    push("--precision", precision.name().into());
    push("--output", output.display().to_string());
    push("--out-dir", a.out_dir.display().to_string());
    if let Some(g) = &a.gpu {
        push("--gpu", g.clone());
    }
    // The optimizer flags concern the training runs only (profile refuses them elsewhere).
    if kind == ProfileType::Training {
        argv.extend(a.optim.words());
    }
    ProfileArgs::parse_words(&argv).map_err(|e| UsageError(e).into())
}

fn peak_cell(r: &Run) -> String {
    match &r.oom {
        Some(_) => "OOM".into(),
        None => format!("{:.2}", gib(r.stats.allocated_bytes.peak as u64)),
    }
}

pub fn run(a: RunAllArgs) -> Result<()> {
    let contexts = profile::parse_context_list(&a.context_length)?;
    let low = match Precision::parse(&a.dtype) {
        Some(p @ (Precision::Bf16 | Precision::Fp16)) => p,
        _ => return Err(usage("--dtype", format!("'{}' (expected bf16 or fp16)", a.dtype))),
    };
    let longest = *contexts.iter().max().unwrap();
    let name = |ctx: usize, kind: ProfileType, suffix: &str| a.out_dir.join(format!("{}_ctx{ctx}_{}{suffix}_snapshot.pickle", a.model, kind_name(kind)));
    // Every run, validated before the first one starts.
    let mut jobs: Vec<(usize, ProfileType, Precision, bool, PathBuf, ProfileArgs)> = Vec::new();
    for &ctx in &contexts {
        for kind in [ProfileType::Forward, ProfileType::Training] {
            let out = name(ctx, kind, "");
            jobs.push((ctx, kind, Precision::Fp32, false, out.clone(), args_for(&a, ctx, kind, Precision::Fp32, &out)?));
        }
    }
    for kind in [ProfileType::Forward, ProfileType::Training] {
        for prec in [Precision::Fp32, low] {
            let out = name(longest, kind, &format!("_{}", prec.name()));
            jobs.push((longest, kind, prec, true, out.clone(), args_for(&a, longest, kind, prec, &out)?));
        }
    }
    let mut plans = jobs.iter().map(|j| profile::plan(&j.5)).collect::<Result<Vec<_>>>()?;
    let kinds: Vec<ProfileType> = jobs.iter().map(|j| j.1).collect();
    // fp32 training at the longest context is the largest run: if it cannot fit in host
    // memory, every run goes to meta (one device for the whole comparison).
    if plans[0].device == crate::engine::Device::Cpu {
        if let Some(n) = super::host_memory::meta_instead(&plans[0].model, Precision::Fp32, a.batch_size, &contexts, true)? {
            println!("{n}");
            plans.iter_mut().for_each(|p| p.device = crate::engine::Device::Meta);
        }
    }
    if let Some(n) = &plans[0].note {
        eprintln!("note: {n}");
    }
    set_threads(a.threads)?;
    // Snapshots, reports and tables appear together at the end, or not at all.
    let set = super::outputs::begin_set("--out-dir", &a.out_dir)?;
    let t0 = std::time::Instant::now();
    let mut done = Vec::new();
    for ((ctx, kind, precision, part_c, snapshot, pa), plan) in jobs.into_iter().zip(&plans) {
        let run = profile::profile_one(plan, &pa, ctx, kind)?;
        println!(
            "{:<48} peak allocated {:>8} GiB | reserved {:>8.2} GiB{}",
            snapshot.file_name().unwrap().to_string_lossy(),
            peak_cell(&run),
            gib(run.stats.reserved_bytes.peak as u64),
            run.oom.as_ref().map_or(String::new(), |o| format!(" | {o}"))
        );
        done.push(Done { ctx, kind, precision, part_c, run, snapshot });
    }
    let cfg = &plans[0].model;
    let find = |ctx: usize, kind: ProfileType, prec: Precision, part_c: bool| {
        done.iter().find(|d| d.ctx == ctx && d.kind == kind && d.precision == prec && d.part_c == part_c).expect("run done")
    };
    let head = format!(
        "{} ({} flavour), batch {}, {} device; peaks are torch.cuda.max_memory_allocated() of the CUDA caching-allocator model\n\
         (GiB = 1024³ bytes; warm-up {} step(s), {} measured); training step's optimizer: {}\n",
        a.model,
        cfg.flavour,
        a.batch_size,
        plans[0].device,
        a.warmup_steps,
        a.measure_steps,
        plans.iter().zip(&kinds).find(|(_, k)| **k == ProfileType::Training).map_or(String::new(), |(p, _)| p.optim.summary())
    );

    // Part (b): the peak table.
    let mut t = format!("Part (b): peak memory by context length\n{head}\n");
    t += "| Context length | Forward pass (GiB) | Full training step (GiB) | Forward reserved (GiB) | Training reserved (GiB) |\n|---:|---:|---:|---:|---:|\n";
    for &ctx in &contexts {
        let (f, tr) = (find(ctx, ProfileType::Forward, Precision::Fp32, false), find(ctx, ProfileType::Training, Precision::Fp32, false));
        let _ = writeln!(
            t,
            "| {ctx} | {} | {} | {:.2} | {:.2} |",
            peak_cell(&f.run),
            peak_cell(&tr.run),
            gib(f.run.stats.reserved_bytes.peak as u64),
            gib(tr.run.stats.reserved_bytes.peak as u64)
        );
    }
    t += "\n\"Forward pass\" keeps autograd on (saved activations stay until the output is dropped), as the course script measures it.\n";
    write_atomic(&a.out_dir.join("peak_memory_summary.txt"), t.as_bytes())?;

    // Part (c): fp32 vs the low type at the longest context.
    let mut c = format!("Part (c): mixed precision ({} autocast) vs fp32 at context {longest}\n{head}\n", low.name());
    c += "| Run | Peak allocated (GiB) | vs fp32 | Parameters | Gradients | Optimizer state | Activations | Autocast cache | Temporaries |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    let mut rows = Vec::new();
    for kind in [ProfileType::Forward, ProfileType::Training] {
        let base = find(longest, kind, Precision::Fp32, true);
        for prec in [Precision::Fp32, low] {
            let d = find(longest, kind, prec, true);
            let r = &d.run;
            let g = |cat| format!("{:.2}", gib(r.report.category_bytes(cat) as u64));
            let ratio = r.stats.allocated_bytes.peak as f64 / base.run.stats.allocated_bytes.peak as f64;
            let _ = writeln!(
                c,
                "| {} {} | {} | {:+.1}% | {} | {} | {} | {} | {} | {} |",
                kind_name(kind),
                prec.name(),
                peak_cell(r),
                (ratio - 1.0) * 100.0,
                g(Category::Parameter),
                g(Category::Gradient),
                g(Category::OptimizerState),
                g(Category::Activation),
                g(Category::AutocastCache),
                g(Category::Temporary)
            );
            rows.push((kind, prec, r.stats.allocated_bytes.peak, r.report.category_bytes(Category::Activation), r.report.category_bytes(Category::AutocastCache)));
        }
    }
    c += "(columns after the second: GiB live at the peak, by category)\n\n";
    let get = |kind, prec| rows.iter().find(|r| r.0 == kind && r.1 == prec).copied().unwrap();
    let (f32f, f16f) = (get(ProfileType::Forward, Precision::Fp32), get(ProfileType::Forward, low));
    let (f32t, f16t) = (get(ProfileType::Training, Precision::Fp32), get(ProfileType::Training, low));
    let state = find(longest, ProfileType::Training, Precision::Fp32, true);
    let fixed = state.run.report.category_bytes(Category::Parameter) + state.run.report.category_bytes(Category::Gradient) + state.run.report.category_bytes(Category::OptimizerState);
    let pct = |a: usize, b: usize| (b as f64 / a as f64 - 1.0) * 100.0;
    let _ = writeln!(
        c,
        "Discussion (from the numbers above): autocast runs the matmuls in {low} and halves their outputs, but the fp32 op list\n\
         (exp, softmax, log_softmax, sums) keeps the attention-probability and loss tensors in fp32, and it adds a {low} copy of\n\
         every weight ({:.2} GiB, cached for the forward and saved for backward). The forward peak changes by {:+.1}% (activations\n\
         at the peak {:.2} → {:.2} GiB plus the cache); the training peak by {:+.1}%. Training saves less because parameters,\n\
         gradients and AdamW's two moments stay fp32 ({:.2} GiB at the fp32 training peak), and they dominate the step.",
        gib(f16f.4 as u64),
        pct(f32f.2, f16f.2),
        gib(f32f.3 as u64),
        gib(f16f.3 as u64),
        pct(f32t.2, f16t.2),
        gib(fixed as u64),
        low = low.name()
    );
    write_atomic(&a.out_dir.join("mixed_precision_memory_summary.txt"), c.as_bytes())?;

    // Part (d): one residual-stream tensor.
    let mut d = String::from("Part (d): size of one residual-stream activation tensor (B, S, d_model) in fp32\n\n");
    let _ = writeln!(d, "B = {} (batch), d_model = {}, 4 bytes per fp32 element; MB here = MiB = 1024² bytes.\n", a.batch_size, cfg.d_model);
    for &ctx in &contexts {
        let e = estimate::estimate(cfg, Precision::Fp32, a.batch_size, ctx);
        let forward = find(ctx, ProfileType::Forward, Precision::Fp32, false);
        let seen = count_size(&forward.snapshot, e.residual_bytes, &a.budget.budget())?;
        let _ = writeln!(
            d,
            "S = {ctx}: {} × {ctx} × {} × 4 B = {} B = {:.2} MiB  (the simulated forward allocates {seen} tensors of exactly this size)",
            a.batch_size,
            cfg.d_model,
            e.residual_bytes,
            mib(e.residual_bytes)
        );
    }
    let e = estimate::estimate(cfg, Precision::Fp32, a.batch_size, longest);
    let _ = writeln!(
        d,
        "\nAnswer (S = {longest}): {:.2} MiB. Derivation: the residual stream holds one d_model-vector per token, B·S tokens, \
         each element an fp32 (4 bytes): B·S·d·4 bytes, divided by 1024².",
        mib(e.residual_bytes)
    );
    write_atomic(&a.out_dir.join("activation_size_analysis.txt"), d.as_bytes())?;

    // Part (e): the largest allocations of the longest training step, Detail = 10%.
    let tr = find(longest, ProfileType::Training, Precision::Fp32, false);
    let budget = a.budget.budget();
    let snap = super::budget_flags::load(&staged_path(&tr.snapshot), &budget)?;
    let rep = analyse_within(&snap, None, 10.0, usize::MAX, &budget).map_err(|e| anyhow::anyhow!("{}: {e}", tr.snapshot.display()))?;
    let mut l = format!(
        "Part (e): largest allocations, {} (memory_viz Detail slider at 10%: the largest {} of {} allocations)\n{head}\n",
        tr.snapshot.file_name().unwrap().to_string_lossy(),
        rep.largest.len(),
        rep.allocations
    );
    l += "| Size (MiB) | Count | Category | Allocated by (innermost frames) |\n|---:|---:|---|---|\n";
    for (size, n, cat, frames) in group(&rep.largest).into_iter().take(15) {
        let _ = writeln!(l, "| {:.2} | {n} | {cat} | {frames} |", mib(size));
    }
    let groups = group(&rep.largest);
    if let Some((size, _, _, _)) = groups.first() {
        // Every op (innermost frame) that made an allocation of the largest size.
        let mut ops: Vec<String> = Vec::new();
        for g in groups.iter().filter(|g| g.0 == *size) {
            let op = g.3.split(" ← ").next().unwrap_or("").trim_end_matches(":0").to_string();
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
        let frames = format!("{} allocation sites, forward and backward: {}", ops.len(), ops.join(", "));
        let s = longest as u64;
        let sxs = a.batch_size as u64 * cfg.num_heads as u64 * s * s * 4;
        let _ = writeln!(
            l,
            "\nThe largest allocations are {:.2} MiB{}; they come from {}.",
            mib(*size),
            if *size == sxs { format!(" = B·h·S·S·4 bytes ({}·{}·{s}·{s}·4): the (B, h, S, S) attention score/probability tensors", a.batch_size, cfg.num_heads) } else { String::new() },
            frames
        );
    }
    write_atomic(&a.out_dir.join("largest_allocations.txt"), l.as_bytes())?;
    set.commit()?;
    println!(
        "\nwrote {} snapshots (+ HTML reports), peak_memory_summary.txt, mixed_precision_memory_summary.txt, activation_size_analysis.txt, largest_allocations.txt to {} in {:.1} s",
        done.len(),
        a.out_dir.display(),
        t0.elapsed().as_secs_f64()
    );
    print!("\n{t}\n{c}");
    if done.iter().any(|d| d.run.oom.is_some()) {
        anyhow::bail!("some runs ran out of memory (marked OOM in the tables; their snapshots stop at the failing allocation)");
    }
    Ok(())
}

/// How many allocations in a snapshot have exactly `size` requested bytes.
fn count_size(path: &Path, size: u64, budget: &crate::analyse::budget::Budget) -> Result<usize> {
    let snap = super::budget_flags::load(&staged_path(path), budget)?;
    let rep = analyse_within(&snap, None, 100.0, usize::MAX, budget).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(rep.largest.iter().filter(|x| x.size == size && x.alloc_at.is_some()).count())
}

/// Allocations grouped by (size, category, where): layer indices folded so the 32 blocks'
/// copies of one tensor form one row.
fn group(allocs: &[Alloc]) -> Vec<(u64, usize, String, String)> {
    let fold = |f: &str| {
        let mut out = String::new();
        let mut digits = false;
        for ch in f.chars() {
            if ch.is_ascii_digit() && (digits || out.ends_with('.')) && !out.ends_with(':') {
                if !digits {
                    out.push('N');
                }
                digits = true;
            } else {
                digits = false;
                out.push(ch);
            }
        }
        out
    };
    let mut groups: Vec<(u64, usize, String, String)> = Vec::new();
    for a in allocs {
        let frames = a.frames.iter().take(2).map(|f| fold(&f)).collect::<Vec<_>>().join(" ← ");
        let cat = a.category.clone().unwrap_or_else(|| "-".into());
        match groups.iter_mut().find(|g| g.0 == a.size && g.2 == cat && g.3 == frames) {
            Some(g) => g.1 += 1,
            None => groups.push((a.size, 1, cat, frames)),
        }
    }
    groups.sort_by(|x, y| y.0.cmp(&x.0).then(y.1.cmp(&x.1)));
    groups
}
