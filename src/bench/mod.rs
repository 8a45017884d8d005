//! Speed benchmarks (`vramscope bench`), measured side by side in one run and written as
//! ratios: our matmuls (f32, and bf16 widened to f32 around gemm) against PyTorch's on the
//! same shapes, our fp32 training step against `shared/bench/pytorch_tinyllama.py`, the
//! elementwise kernels and naive vs flash attention (`ops`), the cost of recording (`record`)
//! and `analyze` of a PyTorch-format snapshot of 10 M trace entries, its time and peak RSS
//! against issue 29's targets (`analyze`). PyTorch is optional (`pip install
//! torch`); without it the PyTorch columns are left out and the output says why and how to
//! install it. A front end of its own: it plans through `options/` and runs `session/`.
pub mod analyze;
pub mod profile_rss;
pub mod timing;
pub mod torch_snapshot;

use crate::options::bench::{BenchArgs, Which};
use timing::{attention_time, median_time, our_matmul, step_time};
use crate::options::train::{plan, TrainArgs};
use crate::session::train::execute;
use std::io::Write;

/// A line to the benchmark's output (like `println!`, a failed write is not the run's error).
macro_rules! say {
    ($w:expr) => {{
        let _ = writeln!($w);
    }};
    ($w:expr, $($t:tt)*) => {{
        let _ = writeln!($w, $($t)*);
    }};
}
use crate::engine::{runtime, DType, Device, Tensor};
use crate::record::Phase;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// Can `python` import torch? Err says why not and how to get it.
fn torch_available(python: &str) -> Result<(), String> {
    let fix = "install it with `pip install torch` (CPU-only wheel: `pip install torch --index-url https://download.pytorch.org/whl/cpu`), or point --python at an interpreter that has it";
    match Command::new(python).args(["-c", "import torch"]).output() {
        Err(e) => Err(format!("cannot run the Python interpreter '{python}' ({e}): install Python 3 and PyTorch ({fix})")),
        Ok(o) if !o.status.success() => Err(format!("'{python}' cannot import torch: {fix}")),
        Ok(_) => Ok(()),
    }
}

/// Why the PyTorch side is skipped, if it is.
fn torch_skip(a: &BenchArgs) -> Option<String> {
    if a.no_torch {
        return Some("--no-torch".into());
    }
    torch_available(&a.python).err()
}

/// (M, K, N, layout): "nn" is a @ b; "nt" is a @ w.T (F.linear's forward); "tn" is g.T @ x
/// (a linear's weight gradient). The training-step shapes of the walkthrough config, and
/// one large square product.
const SHAPES: [(usize, usize, usize, &str); 8] = [
    (1024, 256, 768, "nn"),
    (1024, 512, 256, "nn"),
    (1024, 256, 1000, "nn"),
    (1024, 512, 1024, "nn"),
    (1024, 256, 512, "nt"),
    (1024, 256, 1000, "nt"),
    (512, 1024, 256, "tn"),
    (2048, 2048, 2048, "nn"),
];

fn torch_matmul(python: &str, threads: usize) -> Option<Vec<(f64, f64)>> {
    let shapes: Vec<String> = SHAPES.iter().map(|(m, k, n, l)| format!("({m},{k},{n},'{l}')")).collect();
    let script = format!(
        r#"
import json, time, torch
torch.set_num_threads({threads})
out = []
for (m, k, n, l) in [{}]:
    r = []
    for dt in (torch.float32, torch.bfloat16):
        a = torch.randn(k, m, dtype=dt).t() if l == 'tn' else torch.randn(m, k, dtype=dt)
        b = torch.randn(n, k, dtype=dt).t() if l == 'nt' else torch.randn(k, n, dtype=dt)
        a @ b
        ts = []
        t0 = time.perf_counter()
        while len(ts) < 5 or (time.perf_counter() - t0 < 0.4 and len(ts) < 200):
            t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
        ts.sort()
        r.append(2 * m * k * n / ts[len(ts) // 2] / 1e9)
    out.append(r)
print(json.dumps(out))
"#,
        shapes.join(",")
    );
    let o = Command::new(python).arg("-c").arg(script).output().ok()?;
    if !o.status.success() {
        return None;
    }
    let v: Vec<Vec<f64>> = serde_json::from_slice(&o.stdout).ok()?;
    Some(v.into_iter().map(|r| (r[0], r[1])).collect())
}

fn bench_matmul(a: &BenchArgs, w: &mut dyn Write) {
    say!(w, "matmul, {} threads, GFLOP/s (2·M·K·N per call, median):", a.threads);
    let skip = torch_skip(a);
    let torch = if skip.is_some() { None } else { torch_matmul(&a.python, a.threads) };
    if let Some(why) = &skip {
        say!(w, "  (PyTorch columns left out: {why})");
    } else if torch.is_none() {
        say!(w, "  (PyTorch columns left out: the PyTorch matmul run failed)");
    }
    let Some(torch) = torch else {
        say!(w, "  {:>16} | {:>9} | {:>9} {:>13}", "M,K,N layout", "ours f32", "ours bf16", "bf16/our f32");
        for &(m, k, n, l) in SHAPES.iter() {
            let (f, b) = (our_matmul(m, k, n, l, DType::F32), our_matmul(m, k, n, l, DType::BF16));
            say!(w, "  {:>16} | {:9.1} | {:9.1} {:12.2}x", format!("{m},{k},{n} {l}"), f, b, b / f);
        }
        return;
    };
    say!(w,
        "  {:>16} | {:>9} {:>9} {:>11} | {:>9} {:>9} {:>13}",
        "M,K,N layout", "ours f32", "torch f32", "ours/torch", "ours bf16", "torch bf16", "bf16/our f32"
    );
    for (i, &(m, k, n, l)) in SHAPES.iter().enumerate() {
        let f = our_matmul(m, k, n, l, DType::F32);
        let b = our_matmul(m, k, n, l, DType::BF16);
        let (tf, tb) = torch[i];
        say!(w,
            "  {:>16} | {:9.1} {:9.1} {:10.2}x | {:9.1} {:9.1} {:12.2}x",
            format!("{m},{k},{n} {l}"),
            f,
            tf,
            f / tf,
            b,
            tb,
            b / f
        );
    }
}

fn find_script(a: &BenchArgs) -> Option<PathBuf> {
    if let Some(p) = &a.torch_script {
        return Some(p.clone());
    }
    let mut dir = std::env::current_dir().ok()?;
    loop {
        let p = dir.join("shared/bench/pytorch_tinyllama.py");
        if p.exists() {
            return Some(p);
        }
        if !dir.pop() {
            return None;
        }
    }
}

fn bench_train(a: &BenchArgs, w: &mut dyn Write) -> Result<()> {
    let args = TrainArgs::parse_from_words(&["--num-steps", &a.steps.to_string(), "--warmup-steps", "3"]);
    let p = plan(&args, |_| {})?;
    say!(w,
        "training step, walkthrough config (d 256, L 4, h 8, h_kv 4, F 512, B 8, S 128), fp32, {} threads, {} steps (3 warm-up):",
        a.threads, a.steps
    );
    let ours = execute(&p, &mut |_, _| {})?;
    let o = [ours.avg_step_s(), ours.avg_phase_s(Phase::Forward), ours.avg_phase_s(Phase::Backward), ours.avg_phase_s(Phase::Optimizer)];
    let mut skip = torch_skip(a);
    let script = find_script(a);
    if skip.is_none() && script.is_none() {
        skip = Some("shared/bench/pytorch_tinyllama.py not found above the current directory (give --torch-script)".into());
    }
    let torch = if skip.is_some() {
        None
    } else {
        script.and_then(|script| {
            // A private folder (random name, 0700), not a guessable name in the shared temp dir.
            let tmp = crate::export::cleanup::PrivateDir::new_in(&std::env::temp_dir(), "vramscope-bench-").ok()?;
            let out = tmp.path().join("pytorch.json");
            let st = Command::new(&a.python)
                .arg(&script)
                .args(["--threads", &a.threads.to_string(), "--num-steps", &a.steps.to_string(), "--skip-steps", "3", "--no-flops", "--json-out"])
                .arg(&out)
                .output()
                .ok()?;
            if !st.status.success() {
                return None;
            }
            let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).ok()?).ok()?;
            let g = |k: &str| v[k].as_f64().map(|x| x / 1e3);
            Some([g("avg_step_ms")?, g("avg_forward_ms")?, g("avg_backward_ms")?, g("avg_optimizer_ms")?])
        })
    };
    let names = ["step", "forward", "backward", "optimizer"];
    match torch {
        Some(t) => {
            say!(w, "  {:>10} | {:>10} {:>10} | {:>14}", "ms", "vramscope", "pytorch", "pytorch/ours");
            for (i, name) in names.iter().enumerate() {
                say!(w, "  {:>10} | {:10.2} {:10.2} | {:13.2}x", name, o[i] * 1e3, t[i] * 1e3, t[i] / o[i]);
            }
        }
        None => {
            say!(w, "  (PyTorch column left out: {})", skip.unwrap_or_else(|| "the PyTorch reference run failed".into()));
            say!(w, "  {:>10} | {:>10}", "ms", "vramscope");
            for (i, name) in names.iter().enumerate() {
                say!(w, "  {:>10} | {:10.2}", name, o[i] * 1e3);
            }
        }
    }
    Ok(())
}

fn bench_ops(out: &mut dyn Write) {
    runtime::reset();
    let _g = runtime::no_grad();
    let n = 1 << 20;
    let mk = |f: &dyn Fn(usize) -> f64, shape: &[usize]| {
        Tensor::from_f64(&(0..shape.iter().product()).map(f).collect::<Vec<_>>(), shape, DType::F32, Device::Cpu)
    };
    let a = mk(&|i| (i % 100) as f64 / 50.0 - 1.0, &[64, 128, 128]);
    let b = mk(&|i| (i % 7) as f64, &[64, 128, 128]);
    let w = mk(&|i| i as f64, &[128]);
    say!(out, "kernels on (64, 128, 128) f32 = 4 MiB, median ms per call (GB/s of inputs + output):");
    let mut row = |name: &str, bytes: f64, f: &dyn Fn()| {
        let s = median_time(0.3, f);
        say!(out, "  {name:<28} {:8.3} ms {:7.1} GB/s", s * 1e3, bytes / s / 1e9);
    };
    let mb = (n * 4) as f64;
    row("add (same shape)", 3.0 * mb, &|| drop(a.add(&b)));
    row("mul by (128,) broadcast", 2.0 * mb, &|| drop(a.mul(&w)));
    row("mul_scalar", 2.0 * mb, &|| drop(a.mul_scalar(0.5)));
    row("exp", 2.0 * mb, &|| drop(a.exp()));
    row("silu", 2.0 * mb, &|| drop(a.silu()));
    row("softmax(-1)", 2.0 * mb, &|| drop(a.softmax(-1)));
    row("sum(-1, keepdim)", mb, &|| drop(a.sum_dim(-1, true)));
    row("transpose(1,2).contiguous()", 2.0 * mb, &|| drop(a.transpose(1, 2).contiguous()));
    row("host: vec![0f32; 1Mi]", mb, &|| drop(std::hint::black_box(vec![0f32; n])));
    say!(out, "  sgemm micro-kernel peak, one thread: {:.1} GFLOP/s", crate::engine::sgemm::kernel_peak_gflops());
    bench_attention(out);
}

/// Causal attention forward + backward, naive (scores, mask, softmax, weights·V, as the
/// tinyllama flavour composes it) against the flash primitive, f32.
fn bench_attention(w: &mut dyn Write) {
    say!(w, "causal attention forward + backward, f32, B·h = 4, d 64, median ms per call:");
    say!(w, "  {:>6} | {:>9} {:>9} | {:>11}", "S", "naive", "flash", "naive/flash");
    for s in [512, 1024] {
        let (n, f) = (attention_time(s, false), attention_time(s, true));
        say!(w, "  {:>6} | {:9.2} {:9.2} | {:10.2}x", s, n * 1e3, f * 1e3, n / f);
    }
}

fn bench_record(a: &BenchArgs, w: &mut dyn Write) -> Result<()> {
    // Interleave the two configurations so machine noise hits both alike.
    let (mut off, mut on) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        off.push(step_time(false, a.steps.max(3) / 3)?);
        on.push(step_time(true, a.steps.max(3) / 3)?);
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (off, on) = (med(&mut off), med(&mut on));
    say!(w,
        "recording overhead, walkthrough training step on cpu ({} threads): without {:.2} ms, with events + allocator model {:.2} ms: {:+.1}%",
        a.threads,
        off * 1e3,
        on * 1e3,
        (on / off - 1.0) * 100.0
    );
    Ok(())
}

/// Run the benchmarks `a` asks for, their lines written to `w` as they are measured.
pub fn run(a: &BenchArgs, w: &mut dyn Write) -> Result<()> {
    crate::session::set_threads(Some(a.threads))?;
    if a.which == Which::Record {
        return bench_record(a, w);
    }
    if a.which == Which::Analyze {
        return analyze::bench(a.events, a.snapshot.as_deref(), w);
    }
    if a.which == Which::ProfileSteps {
        return profile_rss::bench(w);
    }
    if a.which == Which::Ops {
        bench_ops(w);
        return Ok(());
    }
    if matches!(a.which, Which::Matmul | Which::All) {
        bench_matmul(a, w);
    }
    if matches!(a.which, Which::Train | Which::All) {
        bench_train(a, w).context("training benchmark")?;
    }
    Ok(())
}
