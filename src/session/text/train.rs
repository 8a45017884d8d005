//! `train`'s text: the banner before the first step, each step's line, and the results.
use crate::export::mib;
use crate::record::Phase;
use crate::session::train::{precision_note, TrainOutcome, TrainPlan};
use crate::engine::Device;
use crate::train::{Precision, StepResult};

/// 2617600 → "2,617,600".
pub fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What `train` prints before the first step: the run, its configuration and options.
pub fn banner(p: &TrainPlan, threads: usize, deterministic: bool) -> String {
    let mut s = String::new();
    let m = &p.model;
    out!(s,
        "vramscope train | {} ({}) on {} | {threads} threads | optimizer {}",
        p.preset,
        m.flavour,
        p.device,
        p.optim.kind.name()
    );
    out!(s,
        "config: vocab {} hidden {} layers {} heads {} kv_heads {} ffn {} | batch {} seq {} steps {} (warm-up {})",
        m.vocab_size, m.d_model, m.num_layers, m.num_heads, m.num_kv_heads, m.d_ff, p.batch, p.seq, p.steps, p.warmup
    );
    out!(s, "optimizer: {}", p.optim.summary());
    if let Some(n) = &p.warmup_note {
        out!(s, "{n}");
    }
    if deterministic {
        out!(s,
            "deterministic: yes — data and initial weights come from --seed {}, and every cpu kernel reduces in a fixed order whatever --threads is, so a repeated run gives bit-identical losses",
            p.seed
        );
    }
    if p.precision != Precision::Fp32 {
        out!(s, "precision: {}", precision_note(p.precision));
    }
    if p.accum > 1 {
        out!(s, "gradient accumulation: {} micro-batches of {} per optimizer step", p.accum, p.batch / p.accum);
    }
    if let Some(line) = super::memory_line(m) {
        out!(s, "{line}");
    }
    if let Some(line) = crate::session::hf::describe(m, p.precision, p.seq) {
        out!(s, "{line}");
    }
    out!(s,
        "params: {} ({:.2} MiB fp32){}",
        m.param_count(),
        mib(m.param_count() * 4),
        if m.tied_embeddings { format!("; the LM head is the embedding's weight, counted once ({} counting it twice, as the workshop guide does)", grouped(m.param_count_head_twice())) } else { String::new() }
    );
    s
}

/// The step line `train` prints every `--log-interval` steps (and at the last step).
pub fn step_line(p: &TrainPlan, i: usize, r: &StepResult) -> Option<String> {
            if (i + 1) % p.log_interval == 0 || i + 1 == p.steps {
                let loss = r.loss.map_or("n/a (meta: no numerics)".to_string(), |l| format!("{l:.4}"));
                let timing = if p.device == Device::Cpu {
                    format!(
                        " | step {:8.2} ms (fwd {:7.2} bwd {:7.2} opt {:6.2}) | {:7.1} samples/s",
                        r.seconds * 1e3,
                        r.phase(Phase::Forward).seconds * 1e3,
                        r.phase(Phase::Backward).seconds * 1e3,
                        r.phase(Phase::Optimizer).seconds * 1e3,
                        p.batch as f64 / r.seconds
                    )
                } else {
                    String::new()
                };
                return Some(format!(
                    "step {:4}/{} | loss {loss}{timing} | peak {:9.2} MiB | live {:9.2} MiB{}",
                    i + 1,
                    p.steps,
                    mib(r.peak_allocated as u64),
                    mib(r.allocated_after as u64),
                    if r.skipped_step { " | optimizer step skipped (inf/NaN gradients; loss scale backed off)" } else { "" }
                ));
            }
    None
}

/// What `train` prints after the last step: timing, throughput, loss and memory.
pub fn results(p: &TrainPlan, out: &TrainOutcome) -> String {
    let mut s = String::new();
    let cpu = p.device == Device::Cpu;
    let measured = &out.steps[p.warmup..];
    let step_s = out.avg_step_s();
    let avg_peak = measured.iter().map(|s| s.peak_allocated as f64).sum::<f64>() / measured.len() as f64;
    out!(s, "{}", "=".repeat(78));
    out!(s, "parameters: {}", out.params);
    if cpu {
        out!(s,
            "average step (steps {}..{}): {:.2} ms | forward {:.2} ms | backward {:.2} ms | optimizer {:.2} ms",
            p.warmup + 1,
            p.steps,
            step_s * 1e3,
            out.avg_phase_s(Phase::Forward) * 1e3,
            out.avg_phase_s(Phase::Backward) * 1e3,
            out.avg_phase_s(Phase::Optimizer) * 1e3
        );
        out!(s,
            "throughput: {:.2} samples/s | {:.0} tokens/s",
            p.batch as f64 / step_s,
            (p.batch * p.seq) as f64 / step_s
        );
        out!(s,
            "loss: first {:.4} final {:.4}",
            out.steps[0].loss.unwrap_or(f64::NAN),
            out.steps.last().unwrap().loss.unwrap_or(f64::NAN)
        );
    } else {
        out!(s, "timing and loss: not measured on meta (no numerics run); memory below is exact for the modelled ops");
    }
    out!(s,
        "memory (allocated bytes of this run's allocator, MiB = 1024² B): peak {:.2} MiB | average per-step peak {:.2} MiB | live at end {:.2} MiB",
        mib(out.peak_allocated() as u64),
        avg_peak / (1024.0 * 1024.0),
        mib(out.steps.last().unwrap().allocated_after as u64)
    );

    s
}

/// The `VRAMSCOPE_OP_TIMES` table: the 25 costliest ops' kernel time over all steps (empty
/// when no op was timed).
pub fn op_times(times: &[(&str, u64, f64)]) -> String {
    let mut s = String::new();
    if !times.is_empty() {
        out!(s, "per-op kernel time over all steps (VRAMSCOPE_OP_TIMES):");
        for (op, n, t) in times.iter().take(25) {
            out!(s, "  {op:<28} {n:6} calls {:9.2} ms", t * 1e3);
        }
    }
    s
}
