//! The chrome trace `torch.profiler` writes (formats.md §5–6): `ProfilerStep#N` spans, one
//! `cpu_op` span per kernel (with its FLOPs, bytes, module and phase in `args`), module
//! spans, and `[memory]` instant events with the six args TensorBoard's memory view reads.
//! Perfetto, chrome://tracing and `torch_tb_profiler` load it.
use crate::record::compute::ComputeLog;
use crate::record::gpu::Gpu;
use serde_json::{json, Value};

/// Where a trace's events are drawn: one process and thread, as a single-threaded run.
pub struct TraceMeta<'a> {
    pub worker: &'a str,
    pub pid: u64,
    /// The modelled device, for `deviceProperties` and the memory curve's name.
    pub gpu: Option<&'a Gpu>,
}

/// Timestamps are microseconds relative to `baseTimeNanoseconds`, written with three
/// decimals as newer Kineto does. Ops, modules, steps and memory events share one clock and
/// rounding is monotone, so an allocation stays inside its op and siblings never overlap
/// (TensorBoard rejects intersecting spans on a thread).
pub fn build(log: &ComputeLog, meta: &TraceMeta) -> Value {
    let (pid, tid) = (meta.pid, 1u64);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let mut ev: Vec<Value> = vec![
        json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": format!("vramscope {}", meta.worker)}}),
        json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": "main thread"}}),
    ];
    for s in &log.steps {
        ev.push(json!({
            "ph": "X", "cat": "user_annotation", "name": format!("ProfilerStep#{}", s.step),
            "pid": pid, "tid": tid, "ts": r3(s.start_us), "dur": r3(s.end_us) - r3(s.start_us), "args": {}
        }));
    }
    for (i, m) in log.modules.iter().enumerate() {
        ev.push(json!({
            "ph": "X", "cat": "python_function", "name": format!("nn.Module: {}", m.path),
            "pid": pid, "tid": tid, "ts": r3(m.start_us), "dur": r3(m.end_us) - r3(m.start_us),
            "args": {"Python module id": i, "Module": &*m.path, "Phase": m.phase.name()}
        }));
    }
    for (i, o) in log.ops.iter().enumerate() {
        ev.push(json!({
            "ph": "X", "cat": "cpu_op", "name": format!("aten::{}", o.name),
            "pid": pid, "tid": tid, "ts": r3(o.start_us), "dur": r3(o.start_us + o.dur_us) - r3(o.start_us),
            "args": {
                "External id": i + 1, "Module": &*o.scope, "Phase": o.phase.name(), "Kind": o.kind.name(),
                "FLOPs": o.flops, "Bytes read": o.bytes_read, "Bytes written": o.bytes_written
            }
        }));
    }
    // Memory goes through the CUDA caching-allocator model: it is device 0's memory.
    let (device_type, device_id) = (1, 0);
    for m in log.memory.iter().flatten() {
        ev.push(json!({
            "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
            "pid": pid, "tid": tid, "ts": r3(m.t_us),
            "args": {
                "Device Type": device_type, "Device Id": device_id, "Addr": m.addr, "Bytes": m.bytes,
                "Total Allocated": m.total_allocated, "Total Reserved": m.total_reserved
            }
        }));
    }
    let end = log.steps.iter().map(|s| s.end_us).chain(log.ops.iter().map(|o| o.start_us + o.dur_us)).fold(0.0f64, f64::max);
    ev.push(json!({"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": r3(end + 1.0)}));
    let devices: Vec<Value> = meta
        .gpu
        .iter()
        .map(|g| json!({"id": 0, "name": g.name, "totalGlobalMem": g.memory_bytes, "computeMajor": 0, "computeMinor": 0}))
        .collect();
    json!({
        "schemaVersion": 1,
        "deviceProperties": devices,
        "profile_memory": i32::from(log.memory.is_some()),
        "with_modules": 1,
        "with_flops": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": log.base_unix_us * 1000,
        "traceEvents": ev,
        "traceName": meta.worker,
    })
}

/// `tensorboard_trace_handler`'s file name: `<worker>.<time_ns>.pt.trace.json`.
pub fn file_name(worker: &str, base_unix_us: u64) -> String {
    format!("{worker}.{}.pt.trace.json", base_unix_us * 1000)
}
