//! `fit --profile-type generate`: every answer checked against profile on both sides (the
//! answer fits, one more does not), over llama, mistral, qwen2 and qwen3, fp32 and bf16
//! weights, and the three searches (batch at a prompt and a new-token count, the longest
//! prompt, the most new tokens). Each case's memory limit is the peak reserved of a profile at
//! a chosen point, so the answers stay small (each probe is a whole generate() on meta).
use std::path::Path;
use vramscope::options::{self, parse_words};
use vramscope::session::fit::Find;
use vramscope::session::profile::{profile_one, ProfileType};

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// A small config.json of `model_type`: 2 layers, 4 query and 2 key/value heads of 64.
fn config(dir: &Path, model_type: &str) -> String {
    let path = dir.join(format!("{model_type}.json"));
    let json = format!(
        r#"{{"model_type": "{model_type}", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 4096, "eos_token_id": 2, "tie_word_embeddings": false}}"#
    );
    std::fs::write(&path, json).unwrap();
    path.to_str().unwrap().to_string()
}

/// Profile on meta under `limit` (None: no limit): (fits, peak reserved, the cache at the end).
fn profile(model: &str, limit: Option<usize>, batch: usize, ctx: usize, new_tokens: usize) -> (bool, usize, usize) {
    let limit = limit.map_or(String::new(), |l| format!(" --memory-limit {l}"));
    let flags = format!("{model} --device meta --profile-type generate --warmup-steps 0 --batch-size {batch} --context-length {ctx} --max-new-tokens {new_tokens}{limit}");
    let a: options::profile::ProfileArgs = parse_words("profile", &words(&flags)).unwrap();
    let mut p = options::profile::options(&a).unwrap();
    p.keep_trace = false;
    let run = profile_one(&p, ctx, ProfileType::Generate).unwrap();
    let fits = run.oom.is_none() && run.stats.reserved_bytes.peak <= p.capacity;
    (fits, run.stats.reserved_bytes.peak, run.generate.unwrap().kv_cache_bytes)
}

struct Case {
    model_type: &'static str,
    precision: &'static str,
    find: &'static str,
    /// (batch, prompt, new tokens) where the limit is calibrated; the searched one is left out.
    at: (usize, usize, usize),
}

#[test]
fn each_answer_fits_and_one_more_does_not() {
    // The probes past the answer run out of memory (an unwinding panic, as the CLI's do).
    vramscope::session::quiet_oom_panics();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        Case { model_type: "llama", precision: "fp32", find: "max-new-tokens", at: (4, 24, 12) },
        Case { model_type: "mistral", precision: "pure-bf16", find: "batch", at: (6, 20, 5) },
        Case { model_type: "qwen2", precision: "fp32", find: "context", at: (2, 40, 3) },
        Case { model_type: "qwen3", precision: "pure-bf16", find: "max-new-tokens", at: (8, 16, 10) },
        Case { model_type: "llama", precision: "pure-bf16", find: "context", at: (3, 24, 2) },
        Case { model_type: "qwen2", precision: "pure-bf16", find: "batch", at: (5, 12, 4) },
    ];
    for c in cases {
        let model = format!("--config {} --precision {}", config(dir.path(), c.model_type), c.precision);
        check_case(&model, &c);
    }
}

/// Issue 30's models through the same searches: Phi-3 and OLMo-2, and Mixtral and Qwen3-MoE
/// (the routing fit assumes unless told: worst), each a small config.json of the same
/// attention shape (2 layers, 2 key/value heads of 64).
#[test]
fn the_families_and_moe_answers_fit_and_one_more_does_not() {
    vramscope::session::quiet_oom_panics();
    let dir = tempfile::tempdir().unwrap();
    let shape = r#""hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": false"#;
    let configs = [
        ("phi3", r#""pad_token_id": 0, "eos_token_id": 2"#),
        ("olmo2", r#""pad_token_id": 1, "eos_token_id": 2"#),
        ("mixtral", r#""num_local_experts": 4, "num_experts_per_tok": 2, "eos_token_id": 2"#),
        ("qwen3_moe", r#""num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "head_dim": 64"#),
    ];
    let cases = [
        Case { model_type: "phi3", precision: "fp32", find: "max-new-tokens", at: (3, 24, 10) },
        Case { model_type: "olmo2", precision: "pure-bf16", find: "batch", at: (5, 20, 4) },
        Case { model_type: "mixtral", precision: "pure-bf16", find: "max-new-tokens", at: (4, 16, 9) },
        Case { model_type: "qwen3_moe", precision: "fp32", find: "batch", at: (3, 12, 5) },
    ];
    for c in cases {
        let extra = configs.iter().find(|(t, _)| *t == c.model_type).unwrap().1;
        let path = dir.path().join(format!("{}.json", c.model_type));
        std::fs::write(&path, format!(r#"{{"model_type": "{}", {shape}, {extra}}}"#, c.model_type)).unwrap();
        check_case(&format!("--config {} --precision {}", path.display(), c.precision), &c);
    }
}

/// One case: the limit is the peak reserved of a profile at `c.at`; the search's answer is at
/// least the calibrated value, profile fits at the answer and not at one more, and the cache
/// at the answer is the DynamicCache's bytes.
fn check_case(model: &str, c: &Case) {
    {
        let model = model.to_string();
        let (b, s, n) = c.at;
        let (_, limit, _) = profile(&model, None, b, s, n);
        let fixed = match c.find {
            "batch" => format!("--context-length {s} --max-new-tokens {n}"),
            "context" => format!("--batch-size {b} --max-new-tokens {n}"),
            _ => format!("--batch-size {b} --context-length {s}"),
        };
        let flags = format!("{model} --profile-type generate --find {} {fixed} --memory-limit {limit} --reserve 0 --warmup-steps 0", c.find);
        let a: options::fit::FitArgs = parse_words("fit", &words(&flags)).unwrap();
        let plan = options::fit::plan(&a, |_| {}).unwrap();
        let found = plan.search(|v| options::fit::probe(&a, &plan, v)).unwrap();
        let answer = found.answer.as_ref().unwrap_or_else(|| panic!("{flags}: nothing fits"));
        let target = match plan.find {
            Find::Batch => b,
            Find::Context => s,
            _ => n,
        };
        eprintln!("{} {} {}: calibrated at {target}, answer {} ({} probes)", c.model_type, c.precision, c.find, answer.value, found.probes.len());
        assert!(answer.value >= target, "{flags}: {} < {target}, the calibrated point", answer.value);
        assert_eq!(found.first_fail.as_ref().map(|p| p.value), Some(answer.value + 1), "{flags}");
        let point = |v: usize| match plan.find {
            Find::Batch => (v, s, n),
            Find::Context => (b, v, n),
            _ => (b, s, v),
        };
        let (pb, ps, pn) = point(answer.value);
        let (fits, reserved, kv) = profile(&model, Some(limit), pb, ps, pn);
        assert!(fits, "{flags}: profile at the answer {} does not fit", answer.value);
        assert_eq!(reserved, answer.peak_reserved_bytes, "{flags}");
        let g = answer.generate.as_ref().expect("a generate probe");
        assert_eq!(g.kv_cache_bytes, kv, "{flags}");
        // 2 layers × keys and values × B × 2 kv heads × (prompt + new − 1) × 64 × the weights' bytes.
        let elem = if c.precision == "fp32" { 4 } else { 2 };
        assert_eq!(kv, 2 * 2 * pb * 2 * (ps + pn - 1) * 64 * elem, "{flags}");
        let (qb, qs, qn) = point(answer.value + 1);
        let (fits, _, _) = profile(&model, Some(limit), qb, qs, qn);
        assert!(!fits, "{flags}: profile at {} fits, past the answer {}", answer.value + 1, answer.value);
        // The text names the step of the peak and the cache.
        let text = plan.text(&found);
        assert!(text.contains("the DynamicCache holds") && text.contains(&format!("{kv} B")), "{text}");
        let json = plan.json(&found);
        assert_eq!(json["generate_at_answer"]["kv_cache_bytes"], kv, "{json}");
        assert_eq!(json["find"], c.find, "{json}");
    }
}

#[test]
fn fit_refuses_generate_flags_that_do_not_go_together() {
    let dir = tempfile::tempdir().unwrap();
    let model = format!("--config {}", config(dir.path(), "llama"));
    for (extra, flag) in [
        ("--profile-type generate --find batch --context-length 16", "--max-new-tokens"),
        ("--profile-type generate --find max-new-tokens --max-new-tokens 4", "--max-new-tokens"),
        ("--profile-type generate --find batch --context-length 16 --max-new-tokens 0", "--max-new-tokens"),
        ("--profile-type inference --find batch --max-new-tokens 4", "--max-new-tokens"),
        ("--profile-type inference --find max-new-tokens", "--find"),
        ("--profile-type generate --find world-size --max-new-tokens 4", "--find"),
        ("--profile-type generate --find max-new-tokens --context-length 4096", "--context-length"),
        ("--profile-type generate --find max-new-tokens --context-length 96 --max 4001", "--max"),
        ("--profile-type generate --find context --max-new-tokens 8 --max 4089", "--max"),
        ("--profile-type generate --find batch --context-length 4090 --max-new-tokens 8", "--max-new-tokens"),
    ] {
        let a: options::fit::FitArgs = parse_words("fit", &words(&format!("{model} --memory-limit 1GiB {extra}"))).unwrap();
        let e = match a.find {
            Find::WorldSize => options::fit::world_plan(&a, |_| {}).err(),
            _ => options::fit::plan(&a, |_| {}).err(),
        };
        let e = e.unwrap_or_else(|| panic!("{extra}: accepted"));
        assert!(e.downcast_ref::<vramscope::error::UsageError>().is_some() && e.to_string().contains(flag), "{extra}: {e}");
    }
    // The searches end where prompt and new tokens fill the model's positions.
    let a: options::fit::FitArgs = parse_words("fit", &words(&format!("{model} --memory-limit 1GiB --profile-type generate --find max-new-tokens --context-length 96"))).unwrap();
    assert_eq!(options::fit::plan(&a, |_| {}).unwrap().cap, 4000);
    let a: options::fit::FitArgs = parse_words("fit", &words(&format!("{model} --memory-limit 1GiB --profile-type generate --find context --max-new-tokens 8"))).unwrap();
    assert_eq!(options::fit::plan(&a, |_| {}).unwrap().cap, 4088);
}

#[test]
fn fit_inference_says_it_is_one_prefill_and_points_to_generate_and_serve() {
    let a: options::fit::FitArgs = parse_words("fit", &words("--model small --memory-limit 2GiB --profile-type inference --context-length 64 --max 4")).unwrap();
    let plan = options::fit::plan(&a, |_| {}).unwrap();
    let found = plan.search(|v| options::fit::probe(&a, &plan, v)).unwrap();
    let text = plan.text(&found);
    for needle in ["ONE forward pass", "prefill", "--profile-type generate", "vramscope serve"] {
        assert!(text.contains(needle), "{needle}: {text}");
        assert!(plan.json(&found)["note"].as_str().unwrap().contains(needle), "{needle}");
    }
}
