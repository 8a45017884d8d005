//! `profile`'s text: one run's printout and the tables over ranks and context lengths.
use crate::export::{gib, mib};
use crate::session::profile::{ProfileOptions, ProfileType, Run};

/// What `profile` prints for one run: the header, the OOM, the peaks, what is live at the
/// peak, the largest allocations, fragmentation, the files and the FLOPs.
pub fn run(p: &ProfileOptions, r: &Run, depth: usize) -> String {
    let mut s = String::new();
    let g = |b: usize| gib(b as u64);
    out!(s,
        "\n== {} ({}) {} {}, context {}, batch {} on {} | {}",
        p.model_name,
        p.model.flavour,
        r.kind.name(),
        p.precision,
        r.context,
        p.batch,
        p.device,
        limit_label(p)
    );
    out!(s, "{}", params_line(&p.model.param_counts()));
    if let Some(line) = super::memory_line(&p.model) {
        out!(s, "{line}");
    }
    if let Some(line) = crate::session::hf::describe(&p.model, p.precision, r.context) {
        // generate() passes logits_to_keep=1 to every forward whatever the flag says.
        let line = if r.kind == ProfileType::Generate { format!("{line}; generate() passes logits_to_keep=1") } else { line };
        out!(s, "{line}");
    }
    if let Some(c) = &p.parallel {
        let counts = p.model.param_counts();
        // LoRA / QLoRA: the layout synchronises the adapters' gradients alone.
        let frozen = (counts.trainable != counts.total).then(|| {
            let how = if c.shards_params() { "reduce-scattered" } else { "in DDP's buckets" };
            format!("; only the {} trainable parameters' gradients are {how} (frozen weights have none)", counts.trainable)
        });
        out!(s, "{}{}", super::parallel_line(c), frozen.unwrap_or_default());
    }
    if let Some(u) = r.unified_peak {
        out!(s, "paged optimizer state: {:.3} GiB ({u} B) in CUDA unified memory (bitsandbytes' cudaMallocManaged buffers): outside PyTorch's allocator, so not in the peaks below; nvidia-smi counts it while it is resident on the GPU", g(u));
    }
    if let Some(h) = r.host_peak {
        out!(s, "host memory (CPU offload: shards, sharded gradients, optimizer state): peak {:.3} GiB ({h} B), not counted on the device", g(h));
    }
    if let Some((name, bytes)) = r.units.iter().max_by_key(|u| u.1) {
        let all: u64 = r.units.iter().map(|u| u.1).sum();
        out!(s, "FSDP units: {} (root + blocks); the largest unsharded is {name}, {:.2} MiB allocated while gathered (all units: {:.2} MiB)", r.units.len(), mib(*bytes), mib(all));
    }
    if r.kind == ProfileType::Training {
        out!(s, "optimizer: {}", p.optim.summary());
    }
    if let Some(o) = &r.oom {
        out!(s, "OUT OF MEMORY in {}: {o}", r.oom_stage.as_deref().unwrap_or("the run"));
    }
    let rep = &r.report;
    if let Some(f) = &rep.failed {
        let q = &f.request;
        out!(s,
            "failed allocation: {:.2} MiB requested ({:.2} MiB block) by {} in {}, phase {}, category {}, at {}",
            mib(q.requested_bytes as u64),
            mib(q.block_bytes as u64),
            q.op,
            q.scope,
            q.phase,
            q.category,
            q.made_at()
        );
        let cats: Vec<String> = f.live_by_category.iter().map(|(c, b)| format!("{c} {:.3}", g(*b))).collect();
        out!(s, "live when it failed: {:.3} GiB allocated; by category (GiB): {}", g(f.live_bytes), cats.join(" | "));
        out!(s, "live when it failed, top modules (MiB allocated):");
        for (m, b) in f.live_by_module.iter().take(8) {
            out!(s, "  {:>10.2} MiB  {m}", mib(*b as u64));
        }
    }
    // After an OOM the figures below cover the history up to the failure.
    let so_far = if r.oom.is_some() { " so far" } else { "" };
    out!(s, "(GiB/MiB are 1024-based; allocated = allocator block bytes = torch.cuda.max_memory_allocated(); requested = the tensors' own bytes, what memory_viz and `analyze` draw; reserved = max_memory_reserved())");
    out!(s,
        "peak allocated{so_far} {:.3} GiB ({} B) at {} [{}], phase {} | peak requested {:.3} GiB | peak reserved {:.3} GiB",
        g(r.stats.allocated_bytes.peak),
        r.stats.allocated_bytes.peak,
        rep.peak_scope,
        rep.peak_op,
        rep.peak_phase.map_or("-".into(), |p| p.to_string()),
        g(r.stats.requested_bytes.peak),
        g(r.stats.reserved_bytes.peak)
    );
    let phases: Vec<String> = rep.phase_peaks.iter().map(|(ph, b)| format!("{ph} {:.3}", g(*b))).collect();
    out!(s, "peak allocated by phase (GiB): {}", phases.join(" | "));
    if let Some(gr) = &r.generate {
        out!(s,
            "generate ({}, max_new_tokens {}): the peak is in {} ({}); KV cache at the end {:.2} MiB ({} B)",
            gr.config.describe(),
            gr.max_new_tokens,
            gr.peak_step.as_deref().unwrap_or("-"),
            gr.peak_op,
            mib(gr.kv_cache_bytes as u64),
            gr.kv_cache_bytes
        );
        let step = |(n, b): &(String, usize)| format!("{n} {:.2}", mib(*b as u64));
        let shown: Vec<String> = if gr.steps.len() <= 8 {
            gr.steps.iter().map(step).collect()
        } else {
            let n = gr.steps.len();
            gr.steps[..3].iter().map(step).chain(["…".to_string()]).chain(gr.steps[n - 2..].iter().map(step)).collect()
        };
        out!(s, "peak allocated by step (MiB): {}", shown.join(" | "));
    }
    let cats: Vec<String> = rep.by_category.iter().map(|(c, b)| format!("{c} {:.3}", g(*b))).collect();
    out!(s, "live at the peak by category (GiB allocated): {}", cats.join(" | "));
    out!(s, "live at the peak, top modules (MiB allocated):");
    for (m, b) in rep.by_module.iter().take(8) {
        out!(s, "  {:>10.2} MiB  {m}", mib(*b as u64));
    }
    out!(s, "largest allocations (MiB allocated, i.e. the allocator block; requested tensor bytes in brackets when they differ):");
    for l in rep.largest.iter().take(8) {
        let requested = if l.requested_bytes == l.block_bytes { String::new() } else { format!(" [{:.2} requested]", mib(l.requested_bytes as u64)) };
        out!(s,
            "  {:>10.2} MiB{requested}  {} in {} ({}, {}) at {}",
            mib(l.block_bytes as u64),
            l.op,
            l.scope,
            l.phase,
            l.category,
            l.made_at()
        );
    }
    out!(s,
        "fragmentation: reserved − allocated at the end {:.2} MiB; inactive split peak {:.2} MiB; alloc retries {}; OOMs {}",
        mib((r.stats.reserved_bytes.current - r.stats.allocated_bytes.current) as u64),
        mib(r.stats.inactive_split_bytes.peak as u64),
        r.stats.num_alloc_retries,
        r.stats.num_ooms
    );
    if let (Some(snap), Some(html)) = (&r.snapshot, &r.report_html) {
        let kept = if r.trace_dropped > 0 {
            format!(", the last of {}: --max-entries dropped the oldest {}", r.events + r.trace_dropped, r.trace_dropped)
        } else {
            String::new()
        };
        let upto = if r.oom.is_some() { "history up to the failing allocation, ending in its `oom` entry; " } else { "" };
        out!(s, "snapshot: {} ({upto}{} trace entries{kept}; open it at pytorch.org/memory_viz)", snap.display(), r.events);
        out!(s, "report: {} (offline HTML: timeline, breakdown at the peak, largest allocations)", html.display());
    }
    if let Some(c) = &r.compute {
        s += &crate::export::text::compute::flops(&c.report, depth, c.achieved.as_ref(), c.roofline.as_ref());
    }
    s
}

/// The table of a profile's ranks: peak allocated and reserved per rank, context and type.
pub fn ranks_table(runs: &[Run]) -> String {
    let mut s = String::new();
    out!(s, "\n| rank | context | profile type | peak allocated (GiB) | peak reserved (GiB) |\n|---:|---:|---|---:|---:|");
    for r in runs {
        out!(s, "| {} | {} | {} | {} |", r.rank.unwrap_or(0), r.context, r.kind.name(), peak_cells(r));
    }
    s
}

/// Seed 001 part (b): peak memory per context length, a column pair per profile type.
pub fn contexts_table(contexts: &[usize], kinds: &[ProfileType], runs: &[Run]) -> String {
    let mut s = String::new();
    let kinds: Vec<String> = kinds.iter().map(|k| format!("{k:?}").to_lowercase()).collect();
    let head: Vec<String> = kinds.iter().map(|k| format!("{k} peak allocated (GiB) | {k} peak reserved (GiB)")).collect();
    out!(s, "\n| context length | {} |\n|---:|{}", head.join(" | "), "---:|---:|".repeat(kinds.len()));
    // (an out-of-memory run shows "OOM in <phase> (≥ what it reached)")
    for &ctx in contexts {
        let cells: Vec<String> = runs
            .iter()
            .filter(|r| r.context == ctx)
            .map(peak_cells)
            .collect();
        out!(s, "| {ctx} | {} |", cells.join(" | "));
    }
    s
}

/// A run's peak allocated and reserved cells (GiB); an OOM run says so in both, with the
/// phase and what it had reached when the allocation was refused.
fn peak_cells(r: &Run) -> String {
    let (a, v) = (gib(r.stats.allocated_bytes.peak as u64), gib(r.stats.reserved_bytes.peak as u64));
    match (&r.oom, r.oom_phase) {
        (None, _) => format!("{a:.3} | {v:.3}"),
        (Some(_), Some(ph)) => format!("OOM in {ph} (≥ {a:.3}) | OOM (≥ {v:.3})"),
        (Some(_), None) => format!("OOM (≥ {a:.3}) | OOM (≥ {v:.3})"),
    }
}

/// The device memory the allocator was bounded by, as the header prints it.
fn limit_label(p: &ProfileOptions) -> String {
    if p.capacity >= usize::MAX / 4 {
        return "no GPU memory limit (give --gpu or --memory-limit)".into();
    }
    let size = |b: usize| if b >= 1 << 30 { format!("{:.2} GiB", gib(b as u64)) } else { format!("{:.2} MiB", mib(b as u64)) };
    let mut s = match (&p.gpu_name, p.capacity != p.gpu.map_or(0, |g| g.memory_bytes)) {
        (Some(n), false) => format!("{n}, {}", size(p.capacity)),
        (Some(n), true) => format!("memory limit {} ({n}'s --memory-limit)", size(p.capacity)),
        (None, _) => format!("memory limit {}", size(p.capacity)),
    };
    if let Some(f) = p.fraction {
        s += &format!(", memory fraction {f} → {} usable", size((f * p.capacity as f64) as usize));
    }
    s
}

/// The parameter counts in one line, with peft's `print_trainable_parameters()` words when
/// not all parameters train.
pub fn params_line(c: &crate::model::config::ParamCounts) -> String {
    use super::train::grouped as g;
    let mut s = format!("parameters: {} (embedding {}, non-embedding {})", g(c.total), g(c.embedding), g(c.non_embedding));
    if c.trainable != c.total {
        s += &format!("; trainable params: {} || all params: {} || trainable%: {:.4}", g(c.trainable), g(c.total), 100.0 * c.trainable as f64 / c.total.max(1) as f64);
    }
    s
}
