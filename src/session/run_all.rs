//! CS336's `run_all.sh` (the memory-profiling assignment): its runs in order, then the text
//! answers of parts (b) to (e) from their figures and snapshots.
use super::profile::{profile_one, ProfileOptions, ProfileType, Run};
use crate::analyse::estimate;
use crate::analyse::snapshot::{Alloc, SnapshotReport};
use crate::export::{gib, mib};
use crate::record::Category;
use crate::train::Precision;
use anyhow::Result;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One run of the script.
pub struct Job {
    pub ctx: usize,
    pub kind: ProfileType,
    pub precision: Precision,
    /// Part (c)'s precision comparison (its own snapshot names), not parts (a)/(b).
    pub part_c: bool,
    /// Where its snapshot goes (the seed's names).
    pub snapshot: PathBuf,
    pub options: ProfileOptions,
}

/// The script's runs and what the answers need to know of them.
pub struct Plan {
    pub model: String,
    pub batch: usize,
    pub contexts: Vec<usize>,
    /// Part (c)'s mixed-precision type.
    pub low: Precision,
    pub warmup_steps: usize,
    pub measure_steps: usize,
    pub jobs: Vec<Job>,
}

/// One profiled run of the script.
pub struct Done {
    pub ctx: usize,
    pub kind: ProfileType,
    pub precision: Precision,
    pub part_c: bool,
    pub run: Run,
    pub snapshot: PathBuf,
}

/// The runs made, for the answers.
pub struct RunAll {
    pub plan: Plan,
    pub done: Vec<Done>,
}

/// Run every job in order; `each` sees each run as it is made (to write its snapshot).
pub fn run_all(plan: Plan, mut each: impl FnMut(&Job, &mut Run) -> Result<()>) -> Result<RunAll> {
    let mut done = Vec::new();
    for j in &plan.jobs {
        let mut run = profile_one(&j.options, j.ctx, j.kind)?;
        each(j, &mut run)?;
        done.push(Done { ctx: j.ctx, kind: j.kind, precision: j.precision, part_c: j.part_c, run, snapshot: j.snapshot.clone() });
    }
    Ok(RunAll { plan, done })
}

/// The report of the snapshot at `file` (every allocation at `detail` percent), within
/// `budget`, its errors naming it as `shown` (where it will be once written).
pub fn read_back(file: &Path, shown: &Path, detail: f64, budget: &crate::analyse::budget::Budget) -> Result<SnapshotReport> {
    let snap = super::snapshot::load(file, budget)?;
    crate::analyse::snapshot::analyse_within(&snap, None, detail, usize::MAX, budget).map_err(|e| anyhow::anyhow!("{}: {e}", shown.display()))
}

/// A run's peak cell: GiB allocated, or OOM.
pub fn peak_cell(r: &Run) -> String {
    match &r.oom {
        Some(_) => "OOM".into(),
        None => format!("{:.2}", gib(r.stats.allocated_bytes.peak as u64)),
    }
}

impl RunAll {
    fn find(&self, ctx: usize, kind: ProfileType, prec: Precision, part_c: bool) -> &Done {
        self.done.iter().find(|d| d.ctx == ctx && d.kind == kind && d.precision == prec && d.part_c == part_c).expect("run done")
    }

    fn longest(&self) -> usize {
        *self.plan.contexts.iter().max().unwrap()
    }

    fn head(&self) -> String {
        let p = &self.plan;
        let cfg = &p.jobs[0].options.model;
        format!(
            "{} ({} flavour), batch {}, {} device; peaks are torch.cuda.max_memory_allocated() of the CUDA caching-allocator model\n\
             (GiB = 1024³ bytes; warm-up {} step(s), {} measured); training step's optimizer: {}\n",
            p.model,
            cfg.flavour,
            p.batch,
            p.jobs[0].options.device,
            p.warmup_steps,
            p.measure_steps,
            p.jobs.iter().find(|j| j.kind == ProfileType::Training).map_or(String::new(), |j| j.options.optim.summary())
        )
    }

    /// Part (b): the peak table (peak_memory_summary.txt).
    pub fn part_b(&self) -> String {
        let p = &self.plan;
        let head = self.head();
        let mut t = format!("Part (b): peak memory by context length\n{head}\n");
        t += "| Context length | Forward pass (GiB) | Full training step (GiB) | Forward reserved (GiB) | Training reserved (GiB) |\n|---:|---:|---:|---:|---:|\n";
        for &ctx in &p.contexts {
            let (f, tr) = (self.find(ctx, ProfileType::Forward, Precision::Fp32, false), self.find(ctx, ProfileType::Training, Precision::Fp32, false));
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
        t
    }

    /// Part (c): fp32 vs the low type at the longest context (mixed_precision_memory_summary.txt).
    pub fn part_c(&self) -> String {
        let p = &self.plan;
        let head = self.head();
        let (low, longest) = (p.low, self.longest());
        let mut c = format!("Part (c): mixed precision ({} autocast) vs fp32 at context {longest}\n{head}\n", low.name());
        c += "| Run | Peak allocated (GiB) | vs fp32 | Parameters | Gradients | Optimizer state | Activations | Autocast cache | Temporaries |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        let mut rows = Vec::new();
        for kind in [ProfileType::Forward, ProfileType::Training] {
            let base = self.find(longest, kind, Precision::Fp32, true);
            for prec in [Precision::Fp32, low] {
                let d = self.find(longest, kind, prec, true);
                let r = &d.run;
                let g = |cat| format!("{:.2}", gib(r.report.category_bytes(cat) as u64));
                let ratio = r.stats.allocated_bytes.peak as f64 / base.run.stats.allocated_bytes.peak as f64;
                let _ = writeln!(
                    c,
                    "| {} {} | {} | {:+.1}% | {} | {} | {} | {} | {} | {} |",
                    kind.name(),
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
        let state = self.find(longest, ProfileType::Training, Precision::Fp32, true);
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
        c
    }

    /// Part (d): one residual-stream tensor (activation_size_analysis.txt); `count` says how
    /// many allocations of exactly a size a snapshot holds.
    pub fn part_d(&self, mut count: impl FnMut(&Path, u64) -> Result<usize>) -> Result<String> {
        let p = &self.plan;
        let cfg = &p.jobs[0].options.model;
        let longest = self.longest();
        let mut d = String::from("Part (d): size of one residual-stream activation tensor (B, S, d_model) in fp32\n\n");
        let _ = writeln!(d, "B = {} (batch), d_model = {}, 4 bytes per fp32 element; MB here = MiB = 1024² bytes.\n", p.batch, cfg.d_model);
        for &ctx in &p.contexts {
            let e = estimate::estimate(cfg, Precision::Fp32, p.batch, ctx);
            let forward = self.find(ctx, ProfileType::Forward, Precision::Fp32, false);
            let seen = count(&forward.snapshot, e.residual_bytes)?;
            let _ = writeln!(
                d,
                "S = {ctx}: {} × {ctx} × {} × 4 B = {} B = {:.2} MiB  (the simulated forward allocates {seen} tensors of exactly this size)",
                p.batch,
                cfg.d_model,
                e.residual_bytes,
                mib(e.residual_bytes)
            );
        }
        let e = estimate::estimate(cfg, Precision::Fp32, p.batch, longest);
        let _ = writeln!(
            d,
            "\nAnswer (S = {longest}): {:.2} MiB. Derivation: the residual stream holds one d_model-vector per token, B·S tokens, \
             each element an fp32 (4 bytes): B·S·d·4 bytes, divided by 1024².",
            mib(e.residual_bytes)
        );
        Ok(d)
    }

    /// The snapshot part (e) reads: the longest fp32 forward pass's (the assignment opens a
    /// forward snapshot and asks where its largest allocations come from).
    pub fn part_e_snapshot(&self) -> &Path {
        &self.find(self.longest(), ProfileType::Forward, Precision::Fp32, false).snapshot
    }

    /// Part (e): the largest allocations of the longest forward pass, memory_viz's Detail
    /// at 10% (`rep`, of [`RunAll::part_e_snapshot`]) (largest_allocations.txt).
    pub fn part_e(&self, rep: &SnapshotReport) -> String {
        let p = &self.plan;
        let cfg = &p.jobs[0].options.model;
        let head = self.head();
        let longest = self.longest();
        let tr = self.find(longest, ProfileType::Forward, Precision::Fp32, false);
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
            let frames = format!("{} allocation site{}: {}", ops.len(), if ops.len() == 1 { "" } else { "s" }, ops.join(", "));
            let s = longest as u64;
            let sxs = p.batch as u64 * cfg.num_heads as u64 * s * s * 4;
            let _ = writeln!(
                l,
                "\nThe largest allocations are {:.2} MiB{}; they come from {}.",
                mib(*size),
                if *size == sxs { format!(" = B·h·S·S·4 bytes ({}·{}·{s}·{s}·4): the (B, h, S, S) attention score/probability tensors", p.batch, cfg.num_heads) } else { String::new() },
                frames
            );
        }
        l
    }
}

/// Allocations grouped by (size, category, where): layer indices folded so the 32 blocks'
/// copies of one tensor form one row.
fn group(allocs: &[Alloc]) -> Vec<(u64, usize, String, String)> {
    let fold = |f: &str| crate::analyse::frames::fold_layer_index(f).into_owned();
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
