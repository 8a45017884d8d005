//! vramscope against a real GPU (issue #31): the points tools/pytorch/measure_gpu.py measured
//! on an NVIDIA H200 (tests/fixtures/gpu/: card.json names the card and the versions), each
//! predicted here on meta with the point's own `vramscope profile` flags.
//!
//! Measured is the whole run's `max_memory_allocated` / `max_memory_reserved` (fresh caching
//! allocator, model built on the device, warm-up + measured step). A real run also holds the
//! cuBLAS workspaces, which a meta run cannot allocate; `record::reserve` says how many (one
//! per thread that runs a matmul: the forward's, and autograd's in training) and how large
//! (32 MiB on Hopper). The fixture's `leftover_allocated` (what stays allocated once the run is
//! dropped) measures exactly them, so the test first holds that rule to the measurement, then
//! compares `measured` with `predicted + workspaces`: allocated within 1 %, reserved within 3 %
//! (the bounds). Points that miss are listed in KNOWN_MISSES with their cause; the test
//! fails when an unlisted point misses or a listed one starts to pass, so the list only shrinks.
//!
//! hf points compare the allocated peak over the steps (setup left out): the fixture builds
//! the model with `from_config` on the device, and with tied embeddings that allocates an
//! lm_head weight that `post_init`'s tie_weights frees at once (501 MiB for Llama-3.2-1B);
//! `from_pretrained`, whose setup vramscope models, never allocates it.
mod memviz_viewer;
use memviz_viewer::viewer;
use serde_json::Value;
use vramscope::options::{self, parse_words};
use vramscope::record::{gpu, reserve};
use vramscope::session;

const MIB: f64 = 1048576.0;
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu");

/// (point id, "allocated" | "reserved", the cause).
const KNOWN_MISSES: &[(&str, &str, &str)] = &[
    (
        "hf-Llama-3.1-8B-L2-S4096-B1-training",
        "reserved",
        "CUDA-only transient blocks vramscope does not model open new segments: the reduce kernel's global \
         staging buffer in RMSNorm's weight gradient (128 MiB + a 128 B semaphore block) and \
         embedding_dense_backward's partial-segment buffer ((n/10 + n) × hidden × 4 B for n tokens: 70.4 MiB) \
         — one more 2004 MiB segment in the real run (cuDNN attention's backward workspace, 128.5 MiB here, \
         is modelled and left the ratio as it was)",
    ),
    (
        "hf-Llama-3.1-8B-L2-S1024-B2-training-autocast",
        "reserved",
        "the same CUDA-only transients (reduce staging, embedding backward partials; cuDNN's backward \
         workspace is modelled) change which cached 2 GiB block the fp32 logits reuse: one more 2 GiB segment",
    ),
    (
        "hf-Llama-3.1-8B-L2-S2048-B2-training-qlora",
        "reserved",
        "the same CUDA-only transients (reduce staging, embedding backward partials), and bitsandbytes' CUDA load path (from_pretrained quantizes on the \
         device; vramscope's setup follows the CPU measurement's load): +1.3 GiB reserved",
    ),
    (
        "moe-Mixtral-8x7B-L2-S1024-B2-training-grouped_mm-balanced",
        "reserved",
        "the driver's address order: on the H200 most new segments land below the earlier ones (of the MoE and family snapshots' segments of 32 MiB and more, 131 of 162 consecutive pairs descend), while vramscope places each above the last; the caching allocator breaks size ties by address, so a freed block of the same size is reused in the other order and a split block cannot take the next request: one more segment (placed top-down, vramscope's prediction is within 0.2 %): one 1792 MiB segment less in the real run",
    ),
    (
        "hf-Llama-3.1-8B-L2-S1024-B2-training-fp16",
        "reserved",
        "the same CUDA-only transients as its bf16 autocast point (reduce staging, embedding backward partials), with the same allocated peak",
    ),
    (
        "moe-Mixtral-8x7B-L2-S1024-B2-training-grouped_mm-balanced-aux",
        "reserved",
        "the same address order as the balanced point (the router's aux loss adds only small tensors)",
    ),
    (
        "moe-Mixtral-8x7B-L2-S1024-B2-training-grouped_mm-worst",
        "reserved",
        "the same address order as the balanced point (the routing changes no block size here)",
    ),
    (
        "moe-DeepSeek-V3-L2-E32-S1024-B2-inference-grouped_mm-balanced",
        "reserved",
        "the same address order: the real run's second 512 MiB cast lands in the upper half of a freed 1 GiB block, \
         so the next softmax needs one more 1 GiB segment",
    ),
    (
        "fam-gemma-3-27b-text-L2-S768-B2-training-ckpt",
        "reserved",
        "the measurement's setup: from_config on the device allocates an untied lm_head weight (2688.7 MiB for Gemma-3's \
         262,144 × 5,376 bf16 embedding) that post_init's tie_weights frees at once, and its cached segment then takes the \
         220.5 MiB MLP blocks; from_pretrained, which vramscope models, never allocates it",
    ),
];

fn rows() -> Vec<Value> {
    let mut out = Vec::new();
    for f in ["course.jsonl", "hf.jsonl", "expandable.jsonl", "moe.jsonl", "families.jsonl"] {
        let text = std::fs::read_to_string(format!("{DIR}/{f}")).unwrap_or_else(|e| panic!("{f}: {e}"));
        out.extend(text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()));
    }
    out
}

fn card() -> Value {
    serde_json::from_str(&std::fs::read_to_string(format!("{DIR}/card.json")).unwrap()).unwrap()
}

/// The `--gpu` table's entry for the measured card.
fn table_gpu(card: &Value) -> gpu::Gpu {
    let name = card["name"].as_str().unwrap();
    gpu::find(if name.contains("H200") { "H200" } else if name.contains("H100") { "H100" } else { panic!("no table entry for {name}") }).unwrap()
}

struct Predicted {
    allocated: u64,
    reserved: u64,
    /// The requested bytes' peak (the live tensors' own sizes, before the allocator rounds).
    requested: u64,
}

fn predict(args: &str, gpu: &str) -> Predicted {
    try_predict(args, gpu).unwrap_or_else(|e| panic!("{args}: {e}"))
}

/// The prediction, or the refusal of a run vramscope does not model (the fixture's
/// `modelled: false` points).
fn try_predict(args: &str, gpu: &str) -> anyhow::Result<Predicted> {
    let words: Vec<String> = format!("{args} --device meta --gpu {gpu}").split_whitespace().map(String::from).collect();
    let a: options::profile::ProfileArgs = parse_words("profile", &words).map_err(anyhow::Error::msg)?;
    let mut p = options::profile::options(&a)?;
    p.keep_trace = false;
    let ranks = p.ranks(false)?;
    let runs = session::profile::profile_all(&mut p, &a.profile_type, &ranks, |_, _| Ok(()))?;
    let s = session::summary::profile(&p, &a.profile_type, &ranks, &runs, None);
    let r = &s["runs"][0];
    Ok(Predicted {
        allocated: r["peak_allocated_bytes"].as_u64().unwrap(),
        reserved: r["peak_reserved_bytes"].as_u64().unwrap(),
        requested: r["allocator_stats"]["requested_bytes"]["peak"].as_u64().unwrap(),
    })
}

/// The measured allocated peak compared: hf points leave the setup out (module comment).
fn measured_allocated(row: &Value) -> u64 {
    let base = row["baseline_allocated"].as_u64().unwrap();
    let peak = if ["hf", "moe", "families"].contains(&row["group"].as_str().unwrap()) {
        row["phases"].as_array().unwrap().iter().filter(|s| s["phase"] != "setup").map(|s| s["peak_allocated"].as_u64().unwrap()).max().unwrap()
    } else {
        row["measured"]["peak_allocated"].as_u64().unwrap()
    };
    peak - base
}

/// The cuBLASLt workspaces a run leaves besides cuBLAS's, which `reserve` does not count (not
/// modelled): a linear with a bias runs addmm through cuBLASLt's gemm_and_bias, whose 1 MiB
/// workspace is kept per thread that ran one — the forward's, and autograd's when checkpointing
/// recomputes the forward there (the backward's matmuls have no bias epilogue). Measured for
/// Qwen2-MoE (q/k/v biases) and gpt-oss (attention and router biases), 1 MiB and 2 MiB.
fn cublaslt_workspaces(row: &Value) -> usize {
    let args = row["args"].as_str().unwrap();
    if !["Qwen1.5-MoE", "gpt-oss"].iter().any(|m| args.contains(m)) {
        return 0;
    }
    if args.contains("--gradient-checkpointing") { 2 << 20 } else { 1 << 20 }
}

#[test]
fn the_cublas_workspaces_are_what_reserve_keeps() {
    let card = card();
    let g = table_gpu(&card);
    for row in rows() {
        let training = row["args"].as_str().unwrap().contains("--profile-type training");
        let parts = reserve::default_parts(Some(&g), training);
        let ws: usize = parts.iter().filter(|p| p.what.starts_with("cuBLAS")).map(|p| p.bytes).sum();
        // The first hf point also leaves one 512 B block transformers keeps on the device
        // (every later hf point starts with it: `baseline_allocated`).
        let left = row["leftover_allocated"].as_u64().unwrap() as usize;
        assert!(left % (1 << 20) <= 512, "{}: {left} B left", row["id"]);
        assert_eq!(left - left % (1 << 20), ws + cublaslt_workspaces(&row), "{}: the workspaces left allocated", row["id"]);
    }
    // The card: after two matmuls (the main thread's and autograd's) exactly two workspaces.
    let ws = card["after_del"]["allocated"].as_u64().unwrap();
    assert_eq!(ws, 64 << 20);
}

#[test]
fn the_card_is_the_table_entry() {
    let card = card();
    let g = table_gpu(&card);
    assert_eq!(card["mem_get_info_total"].as_u64().unwrap() as usize, g.memory_bytes, "mem_get_info's total is the --gpu capacity");
    assert_eq!(card["nvidia_smi"].as_str().unwrap().split(", ").nth(1).unwrap(), format!("{} MiB", g.smi_mib));
    let sms = match g.arch {
        Some(gpu::Arch::Cuda { sms, .. }) => sms,
        _ => panic!("a CUDA card"),
    };
    assert_eq!(card["sm_count"].as_u64().unwrap() as u32, sms);
    // What the driver holds outside PyTorch once the cuBLAS handles and kernels are loaded (the
    // allocator emptied): the context `fit` keeps free for this card.
    let after = &card["after_clear"];
    assert_eq!(after["reserved"].as_u64().unwrap(), 0);
    let context = after["used"].as_u64().unwrap() as usize;
    let kept = reserve::default_parts(Some(&g), false).iter().find(|p| p.what == "CUDA context").unwrap().bytes;
    assert!(kept >= context && kept - context < (4 << 20), "context measured {context} B, kept {kept} B");
}

/// Points whose requested peak is not yet PyTorch's to the byte: (id, measured − predicted).
const REQUESTED_OFF: &[(&str, i64)] = &[
    ("cs336-small-S128-B8-training-bf16", 4096),
    ("cs336-medium-S128-B8-training-bf16", 4096),
    ("cs336-small-S1024-B8-training-bf16-flash", 32768),
    ("tinyllama-walkthrough-training", 152),
];

/// The requested peak (the live tensors' own sizes, before the allocator rounds them to its
/// blocks) of every modelled point equals PyTorch's to the byte, the workspaces the run leaves
/// aside; REQUESTED_OFF lists the few that do not yet, with the gap, and only shrinks. The
/// allocated and reserved peaks add the caching allocator's block choice (which free block a
/// request splits), held to the bounds of `every_point_is_within_the_bounds`.
#[test]
fn requested_peaks_are_pytorchs_to_the_byte() {
    let g = table_gpu(&card());
    let (mut off, mut fixed, mut exact) = (Vec::new(), Vec::new(), 0);
    for row in rows().iter().filter(|r| r["modelled"] != false) {
        let id = row["id"].as_str().unwrap();
        let p = predict(row["args"].as_str().unwrap(), g.name);
        let group = row["group"].as_str().unwrap();
        let ws = row["leftover_allocated"].as_u64().unwrap() - row["baseline_allocated"].as_u64().unwrap();
        let measured = if ["hf", "moe", "families"].contains(&group) {
            // The setup left out, as measured_allocated. The first card run's hf process also
            // held one 4 B tensor an import made on the device: the 512 B block its leftover
            // shows besides the whole-MiB workspaces.
            let peak = row["phases"].as_array().unwrap().iter().filter(|s| s["phase"] != "setup").map(|s| s["peak_requested"].as_u64().unwrap()).max().unwrap();
            peak - if row["leftover_allocated"].as_u64().unwrap() % (1 << 20) == 512 { 4 } else { 0 }
        } else {
            row["measured"]["peak_requested"].as_u64().unwrap()
        };
        // The workspaces are whole MiB (the import's block is not).
        let gap = measured as i64 - (p.requested + ws - ws % (1 << 20)) as i64;
        match (gap, REQUESTED_OFF.iter().find(|k| k.0 == id)) {
            (0, None) => exact += 1,
            (0, Some(_)) => fixed.push(id.to_string()),
            (g, Some(k)) if g == k.1 => {}
            (g, _) => off.push(format!("{id}: measured − predicted = {g} B")),
        }
    }
    println!("{exact} points byte-exact in requested bytes");
    assert!(exact >= 150, "{exact} byte-exact points");
    assert!(off.is_empty(), "requested peaks off:\n{}", off.join("\n"));
    assert!(fixed.is_empty(), "take these off REQUESTED_OFF: {fixed:?}");
}

#[test]
fn every_point_is_within_the_bounds() {
    let card = card();
    let g = table_gpu(&card);
    let mut table = String::from("| point | measured allocated MiB | predicted MiB | ratio | measured reserved MiB | predicted MiB | ratio |\n|---|---:|---:|---:|---:|---:|---:|\n");
    let (mut unexpected, mut fixed) = (Vec::new(), Vec::new());
    let rows = rows();
    assert!(rows.len() >= 80, "{} points", rows.len());
    for row in &rows {
        let id = row["id"].as_str().unwrap();
        assert!(row["ok"].as_bool().unwrap(), "{id}: {}", row["error"]);
        // What the run leaves allocated that was not there before it (the baseline is in both).
        let ws = row["leftover_allocated"].as_u64().unwrap() - row["baseline_allocated"].as_u64().unwrap();
        if row["modelled"] == false {
            // Measured for when it lands; vramscope refuses it today.
            let args = row["args"].as_str().unwrap();
            assert!(try_predict(args, g.name).is_err(), "{id} is predicted now: compare it (set modelled in measure_gpu.py and the fixture)");
            continue;
        }
        let p = predict(row["args"].as_str().unwrap(), g.name);
        let (ma, mr) = (measured_allocated(row), row["measured"]["peak_reserved"].as_u64().unwrap());
        let (pa, pr) = (p.allocated + ws, p.reserved + ws);
        let (ra, rr) = (ma as f64 / pa as f64, mr as f64 / pr as f64);
        table += &format!("| {id} | {:.1} | {:.1} | {ra:.4} | {:.1} | {:.1} | {rr:.4} |\n", ma as f64 / MIB, pa as f64 / MIB, mr as f64 / MIB, pr as f64 / MIB);
        for (what, ok) in [("allocated", (ra - 1.0).abs() <= 0.01), ("reserved", (rr - 1.0).abs() <= 0.03)] {
            let known = KNOWN_MISSES.iter().find(|k| k.0 == id && k.1 == what);
            match (ok, known) {
                (false, None) => unexpected.push(format!("{id} {what}: allocated {ra:.4}, reserved {rr:.4}")),
                (true, Some(k)) => fixed.push(format!("{id} {what} now passes (was: {})", k.2)),
                _ => {}
            }
        }
    }
    println!("{table}");
    for k in KNOWN_MISSES {
        println!("known miss: {} {}: {}", k.0, k.1, k.2);
    }
    assert!(unexpected.is_empty(), "points outside the bounds:\n{}", unexpected.join("\n"));
    assert!(fixed.is_empty(), "take these off KNOWN_MISSES:\n{}", fixed.join("\n"));
}

/// The GPU-made `_dump_snapshot` pickles (a real caching allocator, its own segments and
/// frees): `analyze` gives the peaks the run's own `memory_stats()` recorded (the history was
/// on for the whole run), and memory_viz's code (tests/memviz_replay.mjs) gives the same.
#[test]
fn gpu_snapshots_read_as_the_allocator_counted() {
    use std::io::Read;
    let dir = std::path::Path::new(DIR).join("snapshots");
    let tmp = tempfile::tempdir().unwrap();
    let mut rows_by_id = std::collections::HashMap::new();
    for row in rows() {
        rows_by_id.insert(row["id"].as_str().unwrap().to_string(), row);
    }
    for f in ["rerun/course.jsonl", "rerun/hf.jsonl", "rerun/moe.jsonl", "rerun/families.jsonl"] {
        for l in std::fs::read_to_string(format!("{DIR}/{f}")).unwrap().lines() {
            let row: Value = serde_json::from_str(l).unwrap();
            rows_by_id.insert(row["id"].as_str().unwrap().to_string(), row);
        }
    }
    let viewer = viewer();
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 9, "{} snapshots", files.len());
    for gz in files {
        let name = gz.file_name().unwrap().to_string_lossy().into_owned();
        let id = name.trim_start_matches("snapshot_").trim_end_matches(".pickle.gz").to_string();
        let row = rows_by_id.get(&id).unwrap_or_else(|| panic!("{name}: no measured point {id}"));
        assert_eq!(row["snapshot"].as_str(), Some(name.trim_end_matches(".gz")), "{id}");
        let mut bytes = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()).read_to_end(&mut bytes).unwrap();
        let file = tmp.path().join(name.trim_end_matches(".gz"));
        std::fs::write(&file, &bytes).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope")).arg("analyze").arg(&file).arg("--json").output().unwrap();
        assert!(out.status.success(), "analyze {id}: {}", String::from_utf8_lossy(&out.stderr));
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let m = &row["measured"];
        assert_eq!(r["peak_active_bytes"], m["peak_requested"], "{id}: peak active (the trace's requested sizes) = memory_stats' requested_bytes peak");
        assert_eq!(r["peak_reserved_bytes"], m["peak_reserved"], "{id}: peak reserved = max_memory_reserved");
        // The viewer's JavaScript unpickler is slow on python frames (72 s for the 1.3 MB
        // Llama-3.2-1B file on 2 cores): files up to 512 KiB are replayed in every run, all of
        // them with VRAMSCOPE_MEMVIZ_ALL=1 (all but the 8 MB generate file agreed when it was
        // set last; that one takes over 10 minutes).
        let all = std::env::var_os("VRAMSCOPE_MEMVIZ_ALL").is_some();
        if bytes.len() > 512 << 10 && !all {
            eprintln!("NOTICE: {id}: {} B, not replayed in memory_viz's code (VRAMSCOPE_MEMVIZ_ALL=1 does)", bytes.len());
        } else if let Some(viewer) = &viewer {
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/memviz_replay.mjs");
            let o = std::process::Command::new("node").arg(&script).arg(viewer).arg(&file).output().unwrap();
            assert!(o.status.success(), "memviz_replay {id}: {}", String::from_utf8_lossy(&o.stderr));
            let v: Value = serde_json::from_slice(&o.stdout).unwrap();
            let d = v["devices"].as_array().unwrap().iter().find(|d| d["device"] == v["default_device"]).unwrap().clone();
            assert_eq!(d["active_peak"], r["peak_active_bytes"], "{id}: memory_viz's Active Memory Timeline peak");
            assert_eq!(d["state_reserved_peak"], r["peak_reserved_bytes"], "{id}: memory_viz's Allocator State History peak");
        }
    }
}
