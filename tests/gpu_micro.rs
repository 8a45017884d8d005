//! Single-op allocator traces measured on an H200 (tests/fixtures/gpu/micro2.json: torch
//! 2.11.0+cu130, cuDNN 9.19; tools/pytorch/measure_gpu.py --part micro2) replayed through
//! vramscope's ops on meta: every alloc and free, its size and its place in the sequence.
//!
//! cuDNN attention: `q, k, v` (bf16, requires_grad; k and v with fewer heads under
//! `enable_gqa`), optionally a boolean causal mask `ones(S, S).tril().expand(B, 1, S, S)`, then
//! `F.scaled_dot_product_attention` under `sdpa_kernel(CUDNN_ATTENTION)` and
//! `o.sum().backward()`. The sum's reduce kernel also takes a staging buffer and a 4 B semaphore
//! that vramscope does not model (tests/gpu_grid.rs's KNOWN_MISSES); those two pairs are the
//! only events of the measured trace left out of the comparison.
use serde_json::Value;
use vramscope::engine::{runtime, DType, Device, Tensor};
use vramscope::model::hf::SdpaBackend;
use vramscope::record::{EventKind, MemEvent};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu");

fn rows(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{DIR}/{file}")).unwrap_or_else(|e| panic!("{file}: {e}"));
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["versions"]["torch"], "2.11.0+cu130", "{file}: the measured release");
    v["rows"].as_array().unwrap().clone()
}

/// The measured trace without segment events: ('a' | 'f', requested bytes).
fn measured(row: &Value) -> Vec<(char, usize)> {
    row["trace"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let size = e[1].as_u64().unwrap() as usize;
            match e[0].as_str().unwrap() {
                "alloc" => Some(('a', size)),
                "free_completed" => Some(('f', size)),
                _ => None,
            }
        })
        .collect()
}

fn replayed(ev: &[MemEvent]) -> Vec<(char, usize)> {
    ev.iter()
        .filter_map(|e| match e.kind {
            EventKind::Alloc => Some(('a', e.bytes)),
            EventKind::Free => Some(('f', e.bytes)),
            _ => None,
        })
        .collect()
}

/// Allocs and frees so far (the recording's length; it starts after `runtime::reset`).
fn events() -> usize {
    let s = runtime::stats();
    (s.num_allocs + s.num_frees) as usize
}

#[test]
fn cudnn_attention_replays_the_measured_traces() {
    let rows: Vec<Value> = rows("micro2.json").into_iter().filter(|r| r["name"].as_str().unwrap().starts_with("cudnn ")).collect();
    assert_eq!(rows.len(), 8, "eight shapes: GQA or not, masked or not, S not a multiple of 64");
    for row in &rows {
        let name = row["name"].as_str().unwrap();
        let shape: Vec<usize> = row["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
        let [b, h, hk, s, d] = shape[..] else { panic!("{name}: shape") };
        let masked = row["mask"].as_bool().unwrap();
        let theirs = measured(row);

        runtime::reset();
        runtime::with(|rt| rt.log.start_recording());
        let mk = |heads| Tensor::zeros(&[b, heads, s, d], DType::BF16, Device::Meta).requires_grad_(true);
        let (q, k, v) = (mk(h), mk(hk), mk(hk));
        let mask = masked.then(|| {
            let ones = Tensor::ones(&[s, s], DType::Bool, Device::Meta);
            let tril = ones.triu(0);
            drop(ones);
            tril.expand(&[b, 1, s, s])
        });
        let setup = events();
        // SDPA turns the boolean mask into an additive one of q's type (convert_boolean_attn_mask:
        // where(mask, 0, -inf), two 0-d operands), which the kernel's node alone keeps.
        let bias = mask.as_ref().map(|m| Tensor::zeros(&[], DType::BF16, Device::Meta).where_scalar(m, f64::NEG_INFINITY));
        let o = Tensor::cudnn_attention(&q, &k, &v, bias.as_ref(), !masked, (d as f64).powf(-0.5));
        drop(bias);
        let forward = events();
        let loss = o.sum_all();
        let summed = events();
        loss.backward();
        let backward = events();
        drop((loss, q, k, v, o, mask));
        let ours = replayed(&runtime::with(|rt| rt.log.stop_recording()));

        // philox seed and offset, output, logsumexp, workspace (+ the mask's conversion).
        assert!(forward - setup >= 6 && backward - summed >= 10, "{name}: the op's events were counted");
        assert_eq!(ours[..setup], theirs[..setup], "{name}: inputs");
        assert_eq!(ours[setup..forward], theirs[setup..forward], "{name}: the forward");
        // o.sum(): its 2 B output, then the reduce kernel's staging buffer and semaphore.
        assert_eq!(ours[forward..summed], [('a', 2)], "{name}: the sum");
        let staging = &theirs[forward + 1..forward + 5];
        assert!(
            matches!(staging, [('a', x), ('a', 4), ('f', 4), ('f', y)] if x == y),
            "{name}: the measured sum's staging pairs: {staging:?}"
        );
        let bwd = forward + 5;
        let n = backward - summed;
        assert_eq!(ours[summed..backward], theirs[bwd..bwd + n], "{name}: the backward");
        // What the script frees at its end, in the order Python drops it.
        let mut rest_ours = ours[backward..].to_vec();
        let mut rest_theirs = theirs[bwd + n..].to_vec();
        rest_ours.sort();
        rest_theirs.sort();
        assert_eq!(rest_ours, rest_theirs, "{name}: the teardown");
    }
}

/// The kernel PyTorch picked by itself for the same calls (the profiler's names) is the one
/// `auto` resolves to on an sm90 GPU, and flash or the memory-efficient kernel without the
/// cuDNN preference, as before.
#[test]
fn auto_picks_cudnn_where_the_h200_did() {
    let mut n = 0;
    for row in rows("micro2.json").iter().filter(|r| r["name"].as_str().unwrap().starts_with("auto ")) {
        let name = row["name"].as_str().unwrap();
        let picked: Vec<&str> = row["picked"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        assert!(picked.contains(&"aten::_cudnn_attention_forward"), "{name}: {picked:?}");
        let dims: Vec<usize> = name.split(' ').filter_map(|w| w.trim_start_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()).collect();
        let [_, h, hk, s, d] = dims[..] else { panic!("{name}") };
        let masked = name.ends_with(" mask");
        assert_eq!(SdpaBackend::Auto.resolve(true, masked, hk < h, d, true, s), SdpaBackend::Cudnn, "{name}");
        let before = if masked { SdpaBackend::Efficient } else { SdpaBackend::Flash };
        if !(masked && hk < h) {
            assert_eq!(SdpaBackend::Auto.resolve(true, masked, hk < h, d, false, s), before, "{name} without the preference");
        }
        n += 1;
    }
    assert_eq!(n, 8);
    // DeepSeek-V3's q/k 192 and v 128 heads: cuDNN for bf16, the memory-efficient kernel for
    // fp32 (tests/fixtures/gpu/moe_sdpa.json).
    for row in rows("moe_sdpa.json") {
        let name = row["name"].as_str().unwrap();
        let picked: Vec<&str> = row["picked"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        let half = row["dtype"] == "bfloat16";
        let s = row["shape"][2].as_u64().unwrap() as usize;
        let want = if half { "aten::_cudnn_attention_forward" } else { "aten::_efficient_attention_forward" };
        assert!(picked.contains(&want), "{name}: {picked:?}");
        let got = SdpaBackend::Auto.resolve(half, false, false, 192, true, s);
        assert_eq!(got, if half { SdpaBackend::Cudnn } else { SdpaBackend::Efficient }, "{name}");
    }
}

/// tools/pytorch/measure_cudnn_sdpa.py's H200 run (tests/fixtures/gpu_cudnn/cudnn_sdpa.json).
fn cudnn_sdpa() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/gpu_cudnn/cudnn_sdpa.json");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!((v["versions"]["torch"].as_str(), v["versions"]["cudnn"].as_u64()), (Some("2.11.0+cu130"), Some(91900)));
    v
}

/// Without a gradient cuDNN computes no logsumexp: the forward keeps the philox pair and the
/// output, and frees its 256 B workspace (three shapes: GQA or not, S 1000 and 300, d 64–128).
#[test]
fn cudnn_inference_keeps_no_logsumexp() {
    let v = cudnn_sdpa();
    let mut n = 0;
    for (key, trace) in v["traces"].as_object().unwrap().iter().filter(|(k, _)| k.starts_with('i')) {
        let dims: Vec<usize> = key[1..].split(',').map(|x| x.parse().unwrap()).collect();
        let [b, h, g, s, d] = dims[..] else { panic!("{key}") };
        let theirs: Vec<(char, usize)> =
            trace.as_array().unwrap().iter().map(|e| (if e[0] == "alloc" { 'a' } else { 'f' }, e[1].as_u64().unwrap() as usize)).collect();
        runtime::reset();
        runtime::with(|rt| rt.log.start_recording());
        let q = Tensor::zeros(&[b, h, s, d], DType::BF16, Device::Meta);
        let k = Tensor::zeros(&[b, g, s, d], DType::BF16, Device::Meta);
        let before = events();
        let o = Tensor::cudnn_attention(&q, &k, &k, None, true, (d as f64).powf(-0.5));
        let n_ev = events() - before;
        drop((o, k, q));
        let ours = replayed(&runtime::with(|rt| rt.log.stop_recording()));
        assert_eq!(ours, theirs, "{key}");
        assert_eq!(n_ev, 7, "{key}: seed, offset, output, the workspace and its free, then seed and offset (no node keeps them)");
        n += 1;
    }
    assert_eq!(n, 3);
}

/// What auto picked there, per dtype and head size, for short sequences and a decode step,
/// is what `--sdpa-backend auto` resolves to with an H100/H200 `--gpu`.
#[test]
fn auto_picks_cudnn_for_every_measured_head_size() {
    let v = cudnn_sdpa();
    let picked = v["picked"].as_object().unwrap();
    assert_eq!(picked.len(), 29);
    for (key, names) in picked {
        let names: Vec<&str> = names.as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
        let (d, gqa, masked, kv) = if let Some(rest) = key.strip_prefix("torch.float16").or_else(|| key.strip_prefix("torch.bfloat16")) {
            (rest[..rest.len() - 1].parse().unwrap(), true, false, 256)
        } else {
            match key.as_str() {
                "dec" => (128, false, false, 37),
                "decm" => (128, false, true, 37),
                s => (128, false, false, s[1..].parse().unwrap()),
            }
        };
        let want = match SdpaBackend::Auto.resolve(true, masked, gqa, d, true, kv) {
            SdpaBackend::Cudnn => "_cudnn_att",
            SdpaBackend::Flash => "_flash_att",
            other => panic!("{key}: {other}"),
        };
        assert_eq!(names, [want], "{key}");
    }
}
