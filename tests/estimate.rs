//! `vramscope estimate`: the closed form written independently of the model code agrees
//! with what the engine keeps — exactly for parameters, gradients, optimizer state and the
//! activations alive when the forward returns — and bounds the simulated training peak.
mod scratch;
use std::process::Command;

fn estimate(args: &[&str]) -> serde_json::Value {
    let out = scratch::dir().join(format!("vramscope-estimate-{}-{}.json", std::process::id(), args.join("_").replace(['-', ' '], "")));
    let mut a = vec!["estimate", "--json", out.to_str().unwrap()];
    a.extend_from_slice(args);
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&a).output().expect("run vramscope");
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let _ = std::fs::remove_file(&out);
    v
}

fn u(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a byte count: {v}"))
}

fn bytes(terms: &serde_json::Value) -> u64 {
    terms.as_array().unwrap().iter().map(|t| u(&t["elements"]) * u(&t["elem"])).sum()
}

/// Every exact quantity of the closed form equals the simulated run's, and the loss moment
/// bounds the simulated training peak from below.
fn check_exact(args: &[&str]) -> serde_json::Value {
    let v = estimate(args);
    let (e, s) = (&v["estimate"], &v["simulated"]);
    let activations = u(&e["layers"]) * bytes(&e["block"]) + bytes(&e["outside"]);
    assert_eq!(activations, u(&s["activation_bytes"]), "{args:?}: activations when the forward returns");
    assert_eq!(u(&e["param_bytes"]), u(&s["parameter_bytes"]), "{args:?}: parameters");
    assert_eq!(u(&e["grad_bytes"]), u(&s["gradient_bytes"]), "{args:?}: gradients");
    assert_eq!(u(&e["optimizer_bytes"]), u(&s["optimizer_bytes"]), "{args:?}: optimizer state");
    assert_eq!(u(&e["autocast_cache_bytes"]), u(&s["autocast_cache_bytes"]), "{args:?}: autocast cache");
    assert_eq!(u(&e["logits"]["elements"]) * u(&e["logits"]["elem"]), u(&s["logits_bytes"]), "{args:?}: logits");
    // The training bound is a bound, and a close one (the simulated peak is in allocator
    // blocks, rounded up to 512 bytes or 2 MiB, and backward can add a little).
    let lo = u(&e["param_bytes"]) + u(&e["optimizer_bytes"]) + activations + u(&e["autocast_cache_bytes"]);
    assert!(lo <= u(&s["training_peak_allocated"]), "{args:?}");
    v
}

#[test]
fn closed_form_equals_the_simulation_where_it_is_exact() {
    let configs: [&[&str]; 6] = [
        &["--batch-size", "2", "--context-length", "64"],
        &["--batch-size", "2", "--context-length", "64", "--num-kv-heads", "8"],
        &["--batch-size", "2", "--context-length", "64", "--attention", "flash"],
        &["--batch-size", "3", "--context-length", "48", "--model", "small", "--flavour", "cs336"],
        &["--batch-size", "3", "--context-length", "48", "--model", "small", "--flavour", "cs336", "--attention", "flash"],
        &["--batch-size", "2", "--context-length", "32", "--flavour", "tinyllama", "--hidden-dim", "96", "--num-heads", "6", "--num-kv-heads", "2", "--vocab-size", "77"],
    ];
    for args in configs {
        check_exact(args);
    }
}

/// Adafactor's state in closed form (fp32 row and column per matrix, each vector whole, a 0-d
/// fp32 RMS per parameter; fused projections and untied heads included) equals what the
/// simulated run's optimizer keeps, over fp32 and pure bf16 weights.
#[test]
fn adafactor_state_closed_form_equals_the_simulation() {
    let configs: [&[&str]; 5] = [
        &["--batch-size", "2", "--context-length", "64"],
        &["--batch-size", "3", "--context-length", "48", "--model", "small", "--flavour", "cs336"],
        &["--batch-size", "2", "--context-length", "32", "--flavour", "tinyllama", "--hidden-dim", "96", "--num-heads", "6", "--num-kv-heads", "2", "--vocab-size", "77"],
        &["--batch-size", "2", "--context-length", "32", "--flavour", "tinyllama", "--hidden-dim", "96", "--num-heads", "6", "--num-kv-heads", "6", "--vocab-size", "77", "--precision", "pure-bf16", "--attention", "flash"],
        &["--batch-size", "3", "--context-length", "20", "--model", "small", "--flavour", "cs336", "--precision", "pure-bf16"],
    ];
    for args in configs {
        let mut a = args.to_vec();
        a.extend(["--optimizer", "adafactor"]);
        let v = check_exact(&a);
        assert!(v["estimate"]["optimizer_formula"].as_str().unwrap().contains("Adafactor"), "{a:?}: {}", v["estimate"]["optimizer_formula"]);
    }
}

#[test]
fn mixed_precision_closed_form_equals_the_simulation() {
    // Autocast (bf16, fp16) and pure bf16, both flavours, naive and flash attention, two
    // (B, S) points each. Pure bf16 tinyllama needs flash (its fp32 mask breaks `probs @ v`).
    let tiny = ["--flavour", "tinyllama", "--hidden-dim", "96", "--num-heads", "6", "--num-kv-heads", "6", "--vocab-size", "77"];
    let cs = ["--model", "small", "--flavour", "cs336"];
    for (b, s) in [("2", "32"), ("3", "20")] {
        for precision in ["bf16", "fp16", "pure-bf16"] {
            for flavour in [&tiny[..], &cs[..]] {
                for attention in ["naive", "flash"] {
                    if precision == "pure-bf16" && flavour[1] == "tinyllama" && attention == "naive" {
                        continue;
                    }
                    let mut args = vec!["--batch-size", b, "--context-length", s, "--precision", precision, "--attention", attention];
                    args.extend_from_slice(flavour);
                    let v = check_exact(&args);
                    let cache = u(&v["estimate"]["autocast_cache_bytes"]);
                    assert_eq!(cache > 0, precision != "pure-bf16", "{args:?}: only autocast caches weight copies");
                }
            }
        }
    }
    // Grouped-query attention under autocast: k/v_proj weights are h_kv·d_k × d.
    check_exact(&["--batch-size", "2", "--context-length", "32", "--precision", "bf16", "--flavour", "tinyllama", "--hidden-dim", "96", "--num-heads", "6", "--num-kv-heads", "2", "--vocab-size", "77"]);
    // CS336's spelling of the same flag.
    let v = estimate(&["--batch-size", "2", "--context-length", "32", "--use-mixed-precision", "--model", "small", "--flavour", "cs336", "--no-simulate"]);
    assert_eq!(v["estimate"]["precision"], "bf16");
}

#[test]
fn mixed_precision_derivation_for_2_7b() {
    // cs336 2.7B at B 4, S 512: the per-block sums a student derives from the autocast rules,
    // and the training peak within 1% below the simulation, as for fp32.
    let p = 3_406_809_600u64;
    let d = 2560u64;
    let f = 10240u64;
    let v = 10000u64;
    for (precision, symbolic, cache, pe) in [
        ("bf16", "4a + 9·½a + 5·½f + s + ½s + m + small", 2 * (32 * (4 * d * d + 3 * d * f) + v * d), 4),
        ("pure-bf16", "4a + 6·½a + 5·½f + 2·½s + m + small", 0, 2),
    ] {
        let args = ["--model", "2.7B", "--batch-size", "4", "--context-length", "512", "--precision", precision];
        let r = estimate(&args);
        let e = &r["estimate"];
        assert_eq!(e["block_symbolic"], symbolic, "{precision}");
        assert_eq!(u(&e["autocast_cache_bytes"]), cache, "{precision}");
        assert_eq!(u(&e["param_bytes"]), p * pe, "{precision}");
        let at_loss = (u(&e["param_bytes"]) + u(&e["optimizer_bytes"]) + 32 * bytes(&e["block"]) + bytes(&e["outside"]) + cache
            + u(&e["logits"]["elements"]) * u(&e["logits"]["elem"])
            + bytes(&e["loss"])) as f64;
        let sim = u(&r["simulated"]["training_peak_allocated"]) as f64;
        assert!(at_loss <= sim && at_loss > 0.99 * sim, "{precision}: estimate {at_loss} vs simulated {sim}");
        let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(["estimate", "--no-simulate"]).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        for needle in ["½a = B·S·d·2", "B·S·d·2 = ½a", "B·h·S²·2 = ½s", "in 4-byte symbols"] {
            assert!(text.contains(needle), "{precision}: missing {needle:?} in\n{text}");
        }
        if precision == "bf16" {
            for needle in ["autocast weight cache: every weight a matmul-class op reads", "ln1 output cast to bf16 for q_proj", "rope(Q) (fp32: fp32 RoPE buffer) cast to bf16", "8.5a + 2.5f + 1.5s + m + small"] {
                assert!(text.contains(needle), "missing {needle:?} in\n{text}");
            }
        }
    }
    // Flash attention under autocast: the scores terms go, the output and logsumexp stay.
    let f = estimate(&["--model", "2.7B", "--batch-size", "4", "--context-length", "512", "--attention", "flash", "--precision", "bf16", "--no-simulate"]);
    assert_eq!(f["estimate"]["block_symbolic"], "4a + 10·½a + 5·½f + small");
}

#[test]
fn printed_derivation_names_the_terms_and_bounds_the_peak_closely() {
    // cs336 2.7B at B 4: the symbolic block sum the assignment derives, the residual-stream
    // sizes of seed 003 part (d), and the training peak within 1% below the simulation.
    for (s, residual_mib) in [(128, 5.0), (256, 10.0), (512, 20.0)] {
        let v = estimate(&["--model", "2.7B", "--batch-size", "4", "--context-length", &s.to_string(), "--no-simulate"]);
        let e = &v["estimate"];
        assert_eq!(e["block_symbolic"], "10a + 5f + 2s + m + small");
        assert_eq!(u(&e["params"]), 3_406_809_600);
        assert_eq!(u(&e["residual_bytes"]) as f64 / 1048576.0, residual_mib);
        assert!(v["simulated"].is_null());
    }
    let v = estimate(&["--model", "2.7B", "--batch-size", "4", "--context-length", "512"]);
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(["estimate", "--model", "2.7B", "--batch-size", "4", "--context-length", "512"]).output().unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in ["parameters: P = V·d (embedding) + V·d (lm_head) + L·(4d² + 3d·F + 2d) + d = 3406809600", "exp(scores − max)", "softmax weights", "B·h·S²·4", "beside a simulated meta run"] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    let sim = u(&v["simulated"]["training_peak_allocated"]) as f64;
    let e = &v["estimate"];
    let block: u64 = e["block"].as_array().unwrap().iter().map(|t| u(&t["elements"]) * u(&t["elem"])).sum();
    let outside: u64 = e["outside"].as_array().unwrap().iter().map(|t| u(&t["elements"]) * u(&t["elem"])).sum();
    let loss: u64 = e["loss"].as_array().unwrap().iter().map(|t| u(&t["elements"]) * u(&t["elem"])).sum();
    let at_loss = (u(&e["param_bytes"]) + u(&e["optimizer_bytes"]) + 32 * block + outside + u(&e["logits"]["elements"]) * 4 + loss) as f64;
    assert!(at_loss <= sim && at_loss > 0.99 * sim, "estimate {at_loss} vs simulated {sim}");
    // Fused attention removes the 2s term and keeps the output and logsumexp instead; in fp32
    // it is the memory-efficient kernel, whose (B, S, h, d) output makes merging the heads a
    // view (one a less than the naive block), in bf16 flash (the merge copies).
    let f = estimate(&["--model", "2.7B", "--batch-size", "4", "--context-length", "512", "--attention", "flash", "--no-simulate"]);
    assert_eq!(f["estimate"]["block_symbolic"], "10a + 5f + small");
    let f = estimate(&["--model", "2.7B", "--batch-size", "4", "--context-length", "512", "--attention", "flash", "--precision", "pure-bf16", "--no-simulate"]);
    assert!(f["estimate"]["block"].as_array().unwrap().iter().any(|t| t["op"] == "_scaled_dot_product_flash_attention"), "{f}");
}

#[test]
fn bad_estimate_flags_name_the_flag() {
    for (args, flag) in [
        (vec!["--batch-size", "0"], "--batch-size"),
        (vec!["--context-length", "0"], "--context-length"),
        (vec!["--model", "nope"], "--preset"),
        (vec!["--max-seq-len", "128", "--context-length", "100000"], "--context-length"),
        (vec!["--precision", "fp8"], "--precision"),
        (vec!["--precision", "bf16", "--pure-bf16"], "--pure-bf16"),
        (vec!["--flavour", "tinyllama", "--pure-bf16"], "--pure-bf16"),
    ] {
        let mut a = vec!["estimate"];
        a.extend(args.iter().copied());
        let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(&a).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
}

/// Shapes whose byte counts could pass 2^62 are refused naming the flags, never printed wrapped.
#[test]
fn huge_shapes_are_refused_not_wrapped() {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(["estimate", "--batch-size", "1000000000000", "--context-length", "1000000", "--max-seq-len", "1000000", "--no-simulate"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("invalid --batch-size") && err.contains("lower --batch-size or --context-length") && err.contains("2^62"), "{err}");
    assert!(o.stdout.is_empty(), "nothing printed before the refusal");
}

/// The closed form covers a training step: another profile type is refused naming the flag
/// and the command that answers it, not mistaken for a typo of another flag.
#[test]
fn estimate_refuses_a_profile_type_it_does_not_derive() {
    for t in ["forward", "forward-loss", "inference"] {
        let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(["estimate", "--no-simulate", "--profile-type", t]).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{t}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("--profile-type") && e.contains(&format!("profile --profile-type {t}")), "{e}");
        assert!(!e.contains("rope-theta"), "{e}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(["estimate", "--no-simulate", "--profile-type", "training"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
