//! `vramscope fit --find world-size`: the fewest ranks of a --gpu kind whose heaviest rank
//! fits, per layout (the per-rank batch and context held fixed), by exponential then binary
//! search over meta profile runs of that rank.
use super::fit::{args_for, budget, size, Budget, FitArgs};
use super::profile::{self, ProfileType};
use super::{set_threads, usage};
use crate::engine::runtime;
use crate::model::Model;
use crate::parallel::{heaviest_rank, Layout};
use anyhow::Result;
use serde::Serialize;
use serde_json::json;

#[derive(Clone, Debug, Serialize)]
struct Probe {
    world_size: usize,
    rank: usize,
    fits: bool,
    peak_allocated_bytes: usize,
    peak_reserved_bytes: usize,
    oom: Option<String>,
}

#[derive(Debug, Serialize)]
struct Answer {
    layout: Layout,
    /// None: no world size up to the limit fits.
    world_size: Option<usize>,
    probes: Vec<Probe>,
}

pub fn run(a: &FitArgs) -> Result<()> {
    super::json_out::check(a.json.as_deref())?;
    if a.gpu.is_none() && a.memory_limit.is_none() {
        return Err(usage("--gpu", "fit needs a device capacity: give --gpu NAME or --memory-limit SIZE"));
    }
    if a.parallel.world_size.is_some() || a.parallel.rank.is_some() {
        return Err(usage("--world-size", "is what --find world-size searches for: leave it (and --rank) out"));
    }
    if a.parallel.tp.is_some() || a.parallel.parallel.as_deref().is_some_and(|l| l.eq_ignore_ascii_case("tp")) {
        return Err(usage("--tp", "fit --find world-size searches data-parallel world sizes; profile or sweep a tensor-parallel layout (--parallel tp, or fsdp/zero2 with --tp) at the world sizes its heads divide"));
    }
    let cap = a.max.unwrap_or(1024);
    if cap == 0 {
        return Err(usage("--max", "must be at least 1"));
    }
    let r = a.model.resolve("walkthrough", super::model_flags::Names::Cs336)?;
    r.print_note();
    let batch = a.batch_size.unwrap_or(r.preset.batch_size);
    let ctx = a.context_length.unwrap_or(r.preset.seq_len.min(r.config.max_seq_len));
    let layouts: Vec<Layout> = match &a.parallel.parallel {
        Some(name) => vec![Layout::parse(name).ok_or_else(|| usage("--parallel", format!("'{name}' (expected ddp, zero1, zero2, fsdp or hsdp)")))?],
        None => vec![Layout::Ddp, Layout::Zero1, Layout::Zero2, Layout::Fsdp],
    };
    // Each layout's probe at `n` ranks: flags as `profile` takes them, checked once at 1 rank.
    let with_world = |layout: Layout, n: usize| {
        let mut f = a.parallel.clone();
        f.parallel = Some(layout.name().to_string());
        f.world_size = Some(n);
        if layout == Layout::Hsdp && f.gpus_per_node.is_none() {
            f.gpus_per_node = Some(8.min(n));
        }
        f
    };
    let base_args = profile::ProfileArgs { parallel: with_world(layouts[0], 1), ..args_for(a, batch, ctx) };
    let base = profile::plan(&base_args)?;
    let Budget { capacity, reserve_parts: _, reserve, limit, fraction } = budget(a, &base)?;
    let shapes: Vec<Vec<usize>> = {
        let _d = runtime::defer_allocation();
        let m = Model::new_in(&base.model, crate::engine::Device::Meta, 42, base.precision.param_dtype())?;
        m.parameters().iter().map(|q| q.tensor.shape().to_vec()).collect()
    };
    runtime::reset();
    set_threads(None)?;
    super::quiet_oom_panics();
    let mut answers = Vec::new();
    for &layout in &layouts {
        let mut probes: Vec<Probe> = Vec::new();
        let mut probe = |n: usize| -> Result<bool> {
            if let Some(p) = probes.iter().find(|p| p.world_size == n) {
                return Ok(p.fits);
            }
            let mut args = profile::ProfileArgs { parallel: with_world(layout, n), memory_limit: Some(limit.clone()), memory_fraction: fraction, ..args_for(a, batch, ctx) };
            if layout == Layout::Hsdp && !n.is_multiple_of(args.parallel.gpus_per_node.unwrap_or(1)) {
                // A node's worth of ranks at a time.
                return Ok(false);
            }
            let mut plan = profile::plan(&args)?;
            plan.keep_trace = false;
            let rank = plan.parallel.as_ref().map_or(0, |c| heaviest_rank(&shapes, c));
            if let Some(c) = plan.parallel.as_mut() {
                c.rank = rank;
            }
            args.parallel.rank = Some(rank);
            let run = profile::profile_one(&plan, &args, ctx, a.profile_type)?;
            let fits = run.oom.is_none();
            probes.push(Probe { world_size: n, rank, fits, peak_allocated_bytes: run.stats.allocated_bytes.peak, peak_reserved_bytes: run.stats.reserved_bytes.peak, oom: run.oom });
            Ok(fits)
        };
        // DDP replicates everything: what one rank holds does not fall as ranks are added.
        let cap = if layout == Layout::Ddp { 1 } else { cap };
        let hi = crate::analyse::search::smallest(cap, &mut probe)?;
        probes.sort_by_key(|p| p.world_size);
        answers.push(Answer { layout, world_size: hi, probes });
    }
    let device = base.gpu_name.clone().unwrap_or_else(|| "memory limit".into());
    if let Some(path) = &a.json {
        let out = json!({
            "find": "world-size",
            "model": base.model_name,
            "config": base.model,
            "profile_type": a.profile_type,
            "optimizer": (a.profile_type == ProfileType::Training).then_some(&base.optim),
            "batch_size_per_rank": batch,
            "context_length": ctx,
            "device": device,
            "capacity_bytes": capacity,
            "reserve_bytes": reserve,
            "search_limit": cap,
            "layouts": answers,
            "units": "bytes; GiB are 1024³ bytes; each probe profiles the rank holding the most",
        });
        if super::json_out::write(path, &out)? {
            return Ok(());
        }
    }
    println!(
        "vramscope fit --find world-size | {} ({}) {:?}, batch {batch} per rank, context {ctx}, on meta against {device} ({} less a {} reserve) | GiB are 1024-based",
        base.model_name,
        base.model.flavour,
        a.profile_type,
        size(capacity as i64),
        size(reserve as i64)
    );
    println!("\n| layout | fewest ranks | peak allocated per rank | peak reserved per rank | probes (✗ = out of memory) |\n|---|---:|---:|---:|---|");
    for ans in &answers {
        let at = ans.world_size.and_then(|n| ans.probes.iter().find(|p| p.world_size == n));
        let tried: Vec<String> = ans.probes.iter().map(|p| format!("{}{}", p.world_size, if p.fits { "" } else { "✗" })).collect();
        println!(
            "| {} | {} | {} | {} | {} |",
            ans.layout.name(),
            ans.world_size.map_or_else(
                || if ans.layout == Layout::Ddp { "none (replicated: the same on any number of ranks)".to_string() } else { format!("none up to {cap}") },
                |n| n.to_string()
            ),
            at.map_or("-".into(), |p| size(p.peak_allocated_bytes as i64)),
            at.map_or("-".into(), |p| size(p.peak_reserved_bytes as i64)),
            tried.join(" ")
        );
    }
    Ok(())
}
