//! summary.json of a profile: the options, then per run (context, profile type, rank) its
//! peaks, allocator statistics, breakdown at the peak and OOM. The command line writes it;
//! the Python package returns the same object.
use super::profile::{ProfileOptions, ProfileType, Run};
use crate::export::gib;
use serde_json::{json, Value};

/// The summary of `runs`, profiled from `p` for `profile_types` over `ranks`; `run_id` names
/// the output set the files belong to (None when nothing was written).
pub fn profile(p: &ProfileOptions, profile_types: &[ProfileType], ranks: &[usize], runs: &[Run], run_id: Option<String>) -> Value {
    json!({
        "run_id": run_id,
        "model": p.model,
        "preset": p.model_name,
        "parameters": p.model.param_counts(),
        "profile_types": profile_types,
        "batch_size": p.batch,
        "device": p.device,
        "gpu": p.gpu_name,
        "capacity_bytes": (p.capacity < usize::MAX / 4).then_some(p.capacity),
        "allocator_conf": p.conf.raw,
        "memory_fraction": p.fraction,
        "warmup_steps": p.warmup_steps,
        "measure_steps": p.measure_steps,
        "max_entries": p.max_entries,
        "grad_accum_steps": p.grad_accum_steps,
        "precision": p.precision,
        "transformers": super::hf::settings_json(&p.model, p.precision, &p.contexts),
        "optimizer": profile_types.contains(&ProfileType::Training).then_some(&p.optim),
        "parallel": p.parallel.as_ref().map(|c| json!({"layout": c.layout, "world_size": c.world_size, "ranks_profiled": ranks, "gpus_per_node": c.gpus_per_node, "reshard_after_forward": c.reshard_after_forward, "param_dtype": c.param_dtype.map(|d| d.to_string()), "reduce_dtype": c.reduce_dtype.map(|d| d.to_string()), "tp": c.tp, "tp_plan": c.tensor_parallel().map(|t| t.plan)})),
        "units": "bytes are integers; *_mib / *_gib are 1024-based",
        "runs": runs.iter().map(|r| json!({
            "context_length": r.context,
            "profile_type": r.kind,
            "rank": r.rank,
            "host_peak_bytes": r.host_peak,
            "paged_unified_bytes": r.unified_peak,
            "fsdp_units": r.units.iter().map(|(n, b)| json!({"unit": n, "unsharded_bytes": b})).collect::<Vec<_>>(),
            "snapshot": r.snapshot,
            "report": r.report_html,
            "oom": r.oom,
            "oom_stage": r.oom_stage,
            "oom_phase": r.oom_phase.map(|p| p.name()),
            "fits": r.oom.is_none(),
            "trace_entries": r.events,
            "trace_entries_dropped": r.trace_dropped,
            "peak_allocated_bytes": r.stats.allocated_bytes.peak,
            "peak_allocated_gib": gib(r.stats.allocated_bytes.peak as u64),
            "peak_reserved_bytes": r.stats.reserved_bytes.peak,
            "peak_reserved_gib": gib(r.stats.reserved_bytes.peak as u64),
            "allocator_stats": r.stats,
            "peak": r.report,
            "generate": r.generate,
            "flops": r.compute.as_ref().map(|c| crate::analyse::flops::to_json(&c.report, c.achieved.as_ref(), c.roofline.as_ref())),
        })).collect::<Vec<_>>(),
    })
}
