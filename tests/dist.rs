//! One rank of a data-parallel job: the library's rules (shards, partitions, distinct ranks,
//! DeepSpeed's model-state formulas) and the command line (`profile --parallel`, per-rank
//! outputs, `fit --find world-size`, bad flags).
mod scratch;
use std::process::Command;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::{presets, Model, ModelConfig};
use vramscope::parallel::{apply, distinct_ranks, heaviest_rank, Layout, ParallelConfig};
use vramscope::record::Category;
use vramscope::train::optim::{OptimConfig, OptimizerKind};
use vramscope::train::{Batcher, DataKind, Optimizer, StepRunner};

fn vramscope(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = scratch::dir().join(format!("vramscope-dist-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn small(vocab: usize, d_ff: usize) -> ModelConfig {
    let mut cfg = presets::find("cs336-small", None).unwrap().model;
    (cfg.vocab_size, cfg.d_model, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.d_ff, cfg.max_seq_len) = (vocab, 64, 2, 4, 4, d_ff, 32);
    cfg
}

/// Live bytes by category after `steps` training steps of one rank (between steps: sharded
/// parameters, their gradients and the optimizer state).
fn live_after_steps(cfg: &ModelConfig, pc: &ParallelConfig, compute: DType, steps: usize) -> std::collections::BTreeMap<Category, u64> {
    runtime::reset();
    let model = {
        let _d = pc.shards_params().then(runtime::defer_allocation);
        Model::new_in(cfg, Device::Meta, 42, compute).unwrap()
    };
    let layout = apply(&model, pc, DType::F32).expect("a data-parallel layout");
    let mut oc = OptimConfig::reference(cfg.flavour);
    oc.kind = OptimizerKind::AdamwTorch;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_parallel(layout);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 32, Device::Meta, 42);
    let mut bound: Option<(Tensor, Tensor)> = None;
    for _ in 0..steps {
        let (x, y) = &*bound.insert(data.next_batch());
        runner.step(x, y);
    }
    runner.finish();
    drop(bound);
    let mut by = std::collections::BTreeMap::new();
    for e in runtime::with(|rt| rt.log.live_as_events()) {
        *by.entry(e.category).or_insert(0u64) += e.bytes as u64;
    }
    drop(runner);
    by
}

#[test]
fn fsdp_keeps_padded_shards_and_sharded_state_only() {
    // vocab 1003 and d_ff 170 do not divide by 4: rank 0 holds ⌈rows / 4⌉ of each, the last
    // rank the remainder, and every rank's shard storage is padded to ⌈rows / 4⌉.
    let cfg = small(1003, 170);
    let shapes: Vec<Vec<usize>> = {
        let _d = runtime::defer_allocation();
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap().parameters().iter().map(|p| p.tensor.shape().to_vec()).collect()
    };
    runtime::reset();
    let padded: u64 = shapes.iter().map(|s| (s[0].div_ceil(4) * s[1..].iter().product::<usize>() * 4) as u64).sum();
    let local = |rank: usize| -> u64 {
        shapes.iter().map(|s| (s[0].saturating_sub(s[0].div_ceil(4) * rank).min(s[0].div_ceil(4)) * s[1..].iter().product::<usize>() * 4) as u64).sum()
    };
    let mut pc = ParallelConfig::new(Layout::Fsdp, 4);
    assert_eq!(distinct_ranks(&shapes, &pc), vec![0, 3], "1003 = 3·251 + 250 and 170 = 3·43 + 41: rank 3 differs");
    for rank in [0, 3] {
        pc.rank = rank;
        let live = live_after_steps(&cfg, &pc, DType::F32, 2);
        assert_eq!(live[&Category::Parameter], padded, "rank {rank}: padded shards");
        // Gradients are views of each unit's flat reduce-scatter output (padded per unit);
        // exp_avg and exp_avg_sq follow the local (unpadded) rows.
        assert_eq!(live[&Category::Gradient], padded, "rank {rank}: reduce-scatter outputs");
        assert_eq!(live[&Category::OptimizerState], 2 * local(rank), "rank {rank}: AdamW moments of the local rows");
        assert!(!live.contains_key(&Category::Communication), "rank {rank}: no collective buffer outlives the step: {live:?}");
    }
}

/// DeepSpeed's `estimate_zero3_model_states_mem_needs` (no offload): largest layer × 4 B
/// (its fp16 parameters and gradients) + 18 B × params / GPUs (fp16 parameter shard 2, fp32
/// master 4, momentum 4, variance 4, fp32 gradient 4). FSDP2 with bf16 parameters and fp32
/// reduction keeps no separate 16-bit shard (it casts while gathering): the sharded model
/// states between steps are the other 16 B × params / GPUs, exactly.
#[test]
fn fsdp_model_states_equal_deepspeed_zero3_less_the_16_bit_shard() {
    // Every dimension divides by 8, so there is no padding and the formula's division is exact.
    let cfg = small(1024, 128);
    for world in [2usize, 4, 8] {
        let mut pc = ParallelConfig::new(Layout::Fsdp, world);
        (pc.param_dtype, pc.reduce_dtype) = (Some(DType::BF16), Some(DType::F32));
        let live = live_after_steps(&cfg, &pc, DType::BF16, 2);
        let params = cfg.param_count();
        let deepspeed_sharded = 18 * params / world as u64;
        let ours = live[&Category::Parameter] + live[&Category::Gradient] + live[&Category::OptimizerState];
        assert_eq!(ours, deepspeed_sharded - 2 * params / world as u64, "world {world}");
    }
}

/// DeepSpeed's `estimate_zero2_model_states_mem_needs` (no offload): 4 B × params (16-bit
/// parameters and gradients, whole) + 16 B × params / GPUs. PyTorch's ZeRO-2 (FSDP2 without
/// resharding after forward) holds the same 16 B × params / GPUs between steps, and the whole
/// 16-bit parameters from the end of forward until backward reaches each block (its 16-bit
/// gradients are reduce-scattered block by block instead of kept whole).
#[test]
fn zero2_model_states_match_deepspeed_zero2_where_they_count_the_same() {
    let cfg = small(1024, 128);
    let world = 4usize;
    let mut pc = ParallelConfig::new(Layout::Zero2, world);
    (pc.param_dtype, pc.reduce_dtype) = (Some(DType::BF16), Some(DType::F32));
    let live = live_after_steps(&cfg, &pc, DType::BF16, 2);
    let params = cfg.param_count();
    assert_eq!(live[&Category::Parameter] + live[&Category::Gradient] + live[&Category::OptimizerState], 16 * params / world as u64);
}

#[test]
fn zero1_partitions_parameters_greedily_and_profiles_the_heaviest_rank() {
    let cfg = small(1000, 172);
    let shapes: Vec<Vec<usize>> = {
        let _d = runtime::defer_allocation();
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap().parameters().iter().map(|p| p.tensor.shape().to_vec()).collect()
    };
    runtime::reset();
    let pc = ParallelConfig::new(Layout::Zero1, 2);
    // Largest first: the embedding (64 000) to rank 0, the head (64 000) to rank 1, then each
    // 11 008-element projection to the lighter rank, …: rank 0 ends heaviest by one norm.
    let h = heaviest_rank(&shapes, &pc);
    let numels: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    let loads: Vec<usize> = (0..2).map(|r| vramscope::parallel::ddp::zero_partition(&numels, 2, r).iter().map(|&i| numels[i]).sum()).collect();
    assert_eq!(loads.iter().sum::<usize>(), numels.iter().sum::<usize>());
    assert_eq!(loads[h], *loads.iter().max().unwrap());
    assert!(loads[0].abs_diff(loads[1]) <= 64, "{loads:?}");
}

#[test]
fn profile_writes_one_snapshot_per_distinct_rank() {
    let out = tmp("ranks");
    let o = vramscope(&[
        "profile", "--model", "cs336-small", "--vocab-size", "1003", "--intermediate-dim", "170", "--num-layers", "2", "--context-length", "32",
        "--batch-size", "2", "--parallel", "fsdp", "--world-size", "4", "--device", "meta", "--out-dir", out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("parallel: fsdp over 4 ranks, rank 3"), "{stdout}");
    assert!(stdout.contains("| rank | context |"), "{stdout}");
    let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["parallel"]["layout"], "fsdp");
    assert_eq!(s["parallel"]["ranks_profiled"], serde_json::json!([0, 3]));
    let runs = s["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    let (r0, r3) = (&runs[0], &runs[1]);
    assert_eq!((r0["rank"].as_u64(), r3["rank"].as_u64()), (Some(0), Some(3)));
    assert!(r0["peak_allocated_bytes"].as_u64() > r3["peak_allocated_bytes"].as_u64(), "rank 3 holds fewer rows");
    for r in runs {
        let snap = r["snapshot"].as_str().unwrap();
        assert!(snap.ends_with(&format!("_fsdp4_rank{}_snapshot.pickle", r["rank"])), "{snap}");
        assert!(std::path::Path::new(snap).exists());
    }
    assert_eq!(r0["fsdp_units"].as_array().unwrap().len(), 3, "root + 2 blocks");
}

#[test]
fn fit_finds_the_fewest_ranks_per_layout() {
    // cs336-small at B 2, S 128 under a 1 GiB limit: the answer fits and one rank fewer does not.
    let o = vramscope(&[
        "fit", "--find", "world-size", "--model", "cs336-small", "--context-length", "128", "--batch-size", "2", "--memory-limit", "1GiB", "--reserve", "0", "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let layouts = j["layouts"].as_array().unwrap();
    assert_eq!(layouts.iter().map(|l| l["layout"].as_str().unwrap()).collect::<Vec<_>>(), ["ddp", "zero1", "zero2", "fsdp"]);
    let mut answered = 0;
    for l in layouts {
        let probes = l["probes"].as_array().unwrap();
        let Some(n) = l["world_size"].as_u64() else { continue };
        answered += 1;
        let at = |w: u64| probes.iter().find(|p| p["world_size"] == w).map(|p| p["fits"].as_bool().unwrap());
        assert_eq!(at(n), Some(true), "{l}");
        if n > 1 {
            assert_eq!(at(n - 1), Some(false), "{l}");
        }
    }
    assert!(answered >= 2, "{j}");
}

#[test]
fn bad_parallel_flags_exit_2_naming_the_flag() {
    let out = tmp("bad");
    let base = ["profile", "--model", "cs336-small", "--device", "meta", "--context-length", "32", "--out-dir", out.to_str().unwrap()];
    for (extra, flag) in [
        (vec!["--parallel", "fsdp"], "--world-size"),
        (vec!["--parallel", "pipeline", "--world-size", "4"], "--parallel"),
        (vec!["--world-size", "4"], "--world-size"),
        (vec!["--parallel", "fsdp", "--world-size", "0"], "--world-size"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--rank", "4"], "--rank"),
        (vec!["--parallel", "hsdp", "--world-size", "12", "--gpus-per-node", "8"], "--gpus-per-node"),
        (vec!["--parallel", "ddp", "--world-size", "4", "--fsdp-param-dtype", "bf16"], "--fsdp-param-dtype"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--fsdp-reduce-dtype", "int8"], "--fsdp-reduce-dtype"),
        (vec!["--parallel", "zero1", "--world-size", "4", "--no-reshard-after-forward"], "--no-reshard-after-forward"),
        (vec!["--parallel", "ddp", "--world-size", "4", "--gpus-per-node", "2"], "--gpus-per-node"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--fsdp-unit", "every-0"], "--fsdp-unit"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--fsdp-unit", "layer"], "--fsdp-unit"),
        (vec!["--parallel", "ddp", "--world-size", "4", "--fsdp-unit", "root"], "--fsdp-unit"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--offload", "optimizer"], "--offload"),
        (vec!["--parallel", "ddp", "--world-size", "4", "--offload", "params"], "--offload"),
    ] {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!out.join("summary.json").exists(), "{extra:?} wrote files");
    }
}

/// FSDP2 allocates its all-gather buffers on the all-gather copy-in stream and its
/// reduce-scatter outputs on the reduce-scatter stream: the caching allocator keeps their
/// segments for those streams, so a rank reserves more than one stream would.
#[test]
fn fsdp_collective_buffers_live_on_their_own_streams() {
    use vramscope::record::allocator::{AllocatorConfig, CachingAllocator, StreamId};
    let cfg = small(1024, 128);
    let pc = ParallelConfig::new(Layout::Fsdp, 4);
    runtime::reset();
    runtime::with(|rt| rt.log.allocator = Some(CachingAllocator::new(AllocatorConfig::default(), usize::MAX / 4)));
    let model = {
        let _d = runtime::defer_allocation();
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap()
    };
    let layout = apply(&model, &pc, DType::F32).expect("a data-parallel layout");
    let opt = Optimizer::new(OptimConfig::reference(cfg.flavour), model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_parallel(layout);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 32, Device::Meta, 42);
    for _ in 0..2 {
        let (x, y) = data.next_batch();
        runner.step(&x, &y);
    }
    let streams: std::collections::BTreeSet<StreamId> = runtime::with(|rt| rt.log.allocator.as_ref().unwrap().segments().map(|s| s.stream).collect());
    assert_eq!(streams.into_iter().collect::<Vec<_>>(), [StreamId(0), StreamId(1), StreamId(3)]);
    runner.finish();
}

/// CPUOffloadPolicy: between steps nothing of the model states is on the device; the host
/// holds the padded shards, the sharded gradients and AdamW's two moments of the local rows.
#[test]
fn offloaded_fsdp_keeps_model_states_on_the_host() {
    let cfg = small(1003, 170);
    let mut pc = ParallelConfig::new(Layout::Fsdp, 4);
    pc.offload_params = true;
    let live = live_after_steps(&cfg, &pc, DType::F32, 2);
    for c in [Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Communication] {
        assert!(!live.contains_key(&c), "{c} on the device between steps: {live:?}");
    }
    let shapes: Vec<Vec<usize>> = {
        let _d = runtime::defer_allocation();
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap().parameters().iter().map(|p| p.tensor.shape().to_vec()).collect()
    };
    let padded: usize = shapes.iter().map(|s| s[0].div_ceil(4) * s[1..].iter().product::<usize>() * 4).sum();
    let local: usize = shapes.iter().map(|s| s[0].div_ceil(4).min(s[0]) * s[1..].iter().product::<usize>() * 4).sum();
    // live_after_steps dropped the runner (and the host state with it): rerun and read the
    // host total while the state is held.
    runtime::reset();
    let model = {
        let _d = runtime::defer_allocation();
        Model::new_in(&cfg, Device::Meta, 42, DType::F32).unwrap()
    };
    let layout = apply(&model, &pc, DType::F32).expect("a data-parallel layout");
    let mut oc = OptimConfig::reference(cfg.flavour);
    oc.kind = OptimizerKind::AdamwTorch;
    let opt = Optimizer::new(oc, model.parameters().len());
    let mut runner = StepRunner::new(&model, opt).with_parallel(layout);
    let mut data = Batcher::new(DataKind::Random, cfg.vocab_size, 2, 32, Device::Meta, 42);
    for _ in 0..2 {
        let (x, y) = data.next_batch();
        runner.step(&x, &y);
    }
    // Shards (padded) + gradients (the local rows, copied off the device) + two moments.
    assert_eq!(runtime::host_memory().0, padded + 3 * local);
    runner.finish();
}

/// A small Llama config.json for the hf flavour's tensor-parallel runs.
fn tiny_llama(dir: &std::path::Path) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        r#"{"model_type": "llama", "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": false}"#,
    )
    .unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn tensor_and_sequence_parallel_flags_run_end_to_end() {
    let dir = tmp("tp");
    let cfg = tiny_llama(&dir.join("model"));
    let run = |name: &str, extra: &[&str]| -> (String, serde_json::Value) {
        let out = dir.join(name);
        let mut args = vec!["profile", "--config", &cfg, "--device", "meta", "--context-length", "256", "--batch-size", "2", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"];
        let out_s = out.to_string_lossy().into_owned();
        args.extend(["--out-dir", &out_s]);
        args.extend(extra);
        let o = vramscope(&args);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        (String::from_utf8_lossy(&o.stdout).into_owned(), s)
    };
    let peak = |s: &serde_json::Value| s["runs"][0]["peak_allocated_bytes"].as_u64().unwrap();
    let (_, one) = run("one", &[]);
    let (text, tp) = run("tp", &["--parallel", "tp", "--world-size", "2"]);
    assert!(text.contains("parallel: tp over 2 ranks, rank 0 (tensor-parallel rank 0, torch's Megatron-style plan)"), "{text}");
    assert_eq!(tp["parallel"]["tp"], 2);
    assert_eq!(tp["parallel"]["tp_plan"], "torch");
    // transformers' own plan on the same Llama (tp_plan="auto"): named in the text and the JSON.
    let (text, auto) = run("auto", &["--parallel", "tp", "--world-size", "2", "--tp-plan", "auto"]);
    assert!(text.contains("(tensor-parallel rank 0, transformers' tp_plan=\"auto\" plan)"), "{text}");
    assert_eq!(auto["parallel"]["tp_plan"], "auto");
    // Checkpointing under it (tests/tp_hf_grid.rs), both kinds: the layers' activations go.
    for kind in ["non-reentrant", "reentrant"] {
        let (_, ck) = run(&format!("auto_{kind}"), &["--parallel", "tp", "--world-size", "2", "--tp-plan", "auto", "--gradient-checkpointing", kind]);
        assert!(peak(&ck) < peak(&auto), "{kind} checkpointing under the auto plan");
    }
    assert!(tp["runs"][0]["snapshot"].as_str().unwrap().ends_with("_tp2_rank0_snapshot.pickle"));
    let (text, sp) = run("sp", &["--parallel", "tp", "--world-size", "2", "--sequence-parallel"]);
    assert!(text.contains("sequence parallel"), "{text}");
    assert!(peak(&tp) < peak(&one), "tensor parallelism holds half the weights and their state");
    assert!(peak(&sp) < peak(&tp), "sequence parallelism shards the norms' and residuals' activations");
    let (text, two_d) = run("2d", &["--parallel", "fsdp", "--world-size", "4", "--tp", "2"]);
    assert!(text.contains("on a (2 × 2) mesh: data-parallel rank 0, tensor-parallel rank 0"), "{text}");
    assert!(peak(&two_d) < peak(&tp), "FSDP shards the tensor-parallel shards again");
}

#[test]
fn transformers_plan_runs_on_mistral_qwen2_and_qwen3() {
    // tests/tp_hf_grid.rs measures their base_model_tp_plan (Qwen2's biased q/k/v, Qwen3's
    // replicated_with_grad_allreduce q/k norms); torch's plan stays their default.
    for m in ["Mistral-7B", "Qwen2.5-7B", "Qwen3-8B"] {
        let out = tmp(&format!("tp_auto_{m}"));
        let out_s = out.to_string_lossy().into_owned();
        let args = ["profile", "--model", m, "--num-layers", "1", "--device", "meta", "--context-length", "32", "--batch-size", "1", "--warmup-steps", "0",
            "--profile-type", "training", "--parallel", "tp", "--world-size", "2", "--tp-plan", "auto", "--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0", "--out-dir", &out_s];
        let o = vramscope(&args);
        assert!(o.status.success(), "{m}: {}", String::from_utf8_lossy(&o.stderr));
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
        assert_eq!(s["parallel"]["tp_plan"], "auto", "{m}");
        let _ = std::fs::remove_dir_all(&out);
    }
}

#[test]
fn bad_tensor_parallel_flags_exit_2_naming_the_flag() {
    let dir = tmp("badtp");
    let cfg = tiny_llama(&dir.join("model"));
    let out = dir.join("out");
    let out_s = out.to_string_lossy().into_owned();
    let hf = ["profile", "--config", &cfg, "--device", "meta", "--context-length", "64", "--out-dir", &out_s];
    let ok_optim = ["--optimizer", "adamw_torch_forloop", "--max-grad-norm", "0"];
    for (extra, flag) in [
        (vec!["--tp", "2"], "--tp"),
        (vec!["--parallel", "ddp", "--world-size", "4", "--tp", "2"], "--tp"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--tp", "3"], "--tp"),
        (vec!["--parallel", "tp", "--world-size", "2", "--tp", "4"], "--tp"),
        (vec!["--parallel", "tp", "--world-size", "4", "--num-kv-heads", "1"], "--tp"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--tp", "2", "--sequence-parallel"], "--sequence-parallel"),
        (vec!["--parallel", "tp", "--world-size", "2", "--sequence-parallel", "--attn-implementation", "eager"], "--sequence-parallel"),
        (vec!["--parallel", "tp", "--world-size", "2", "--sequence-parallel", "--context-length", "63"], "--context-length"),
        // transformers' plan: measured alone over the ranks, without sequence parallelism.
        (vec!["--tp-plan", "auto"], "--tp-plan"),
        (vec!["--parallel", "ddp", "--world-size", "2", "--tp-plan", "auto"], "--tp-plan"),
        (vec!["--parallel", "fsdp", "--world-size", "4", "--tp", "2", "--tp-plan", "auto"], "--tp-plan"),
        (vec!["--parallel", "tp", "--world-size", "2", "--tp-plan", "auto", "--sequence-parallel"], "--sequence-parallel"),
    ] {
        let args: Vec<&str> = hf.iter().copied().chain(ok_optim).chain(extra.iter().copied()).collect();
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!out.join("summary.json").exists(), "{extra:?} wrote files");
    }
    // PyTorch refuses these; the defaults (fused AdamW, clipping at 1.0) are refused by name.
    for (extra, flag) in [
        (vec!["--parallel", "tp", "--world-size", "2"], "--optimizer"),
        (vec!["--parallel", "tp", "--world-size", "2", "--optimizer", "adamw_torch_forloop"], "--max-grad-norm"),
    ] {
        let args: Vec<&str> = hf.iter().copied().chain(extra.iter().copied()).collect();
        let o = vramscope(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!out.join("summary.json").exists(), "{extra:?} wrote files");
    }
    // The reference flavours have no tensor-parallel plan; fit searches data-parallel sizes.
    let o = vramscope(&["profile", "--model", "cs336-small", "--device", "meta", "--context-length", "32", "--parallel", "tp", "--world-size", "2", "--out-dir", &out_s]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tp"));
    let o = vramscope(&["fit", "--find", "world-size", "--model", "cs336-small", "--gpu", "H100-80GB", "--tp", "2"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tp"));
}
