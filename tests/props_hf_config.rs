//! Properties of the config.json reader (`--config`): it parses files we did not write, so
//! random edits of the shipped configs (any field set to any JSON value, or removed) never
//! panic; a refusal names a field; an accepted config is a consistent hf model.
mod props_common;

use props_common::runner;
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use vramscope::model::hf::{self, Arch};
use vramscope::model::Flavour;

/// Every field the reader looks at, plus ones it ignores.
const KEYS: [&str; 27] = [
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "vocab_size", "max_position_embeddings", "rope_theta", "rope_parameters", "rope_scaling", "rms_norm_eps",
    "tie_word_embeddings", "torch_dtype", "dtype", "head_dim", "attention_bias", "mlp_bias", "sliding_window",
    "use_sliding_window", "max_window_layers", "layer_types", "use_cache", "hidden_act", "attention_dropout",
    "_name_or_path", "architectures",
];

const MODELS: [&str; 5] = ["Llama-3.2-1B", "Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen2.5-7B", "Qwen3-8B"];

fn base(i: usize) -> Map<String, Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hf_models").join(MODELS[i]).join("config.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (0u64..70).prop_map(|n| json!(n)),
        prop_oneof![Just(128u64), Just(4096), Just(1 << 20), Just(u64::MAX), Just(0)].prop_map(|n| json!(n)),
        any::<i64>().prop_map(|n| json!(n)),
        prop_oneof![Just(0.5f64), Just(1.0), Just(-1.0), Just(1e-5), Just(5e5), Just(f64::MAX)].prop_map(|f| json!(f)),
        prop_oneof![
            Just("llama"), Just("mistral"), Just("qwen2"), Just("qwen3"), Just("gemma"), Just("silu"), Just("gelu"),
            Just("bfloat16"), Just("full_attention"), Just("sliding_attention"), Just(""),
        ]
        .prop_map(|s| json!(s)),
    ];
    let rope = (prop_oneof![Just("default"), Just("llama3"), Just("linear"), Just("dynamic"), Just("yarn"), Just("x")], prop::option::of(leaf.clone()), any::<bool>())
        .prop_map(|(ty, theta, old)| {
            let mut m = Map::new();
            m.insert(if old { "type" } else { "rope_type" }.into(), json!(ty));
            if let Some(t) = theta {
                m.insert("rope_theta".into(), t);
            }
            Value::Object(m)
        });
    prop_oneof![6 => leaf.clone(), 2 => rope, 1 => prop::collection::vec(leaf, 0..6).prop_map(Value::Array)]
}

/// (field, Some(value) to set it, None to remove it).
fn edits() -> impl Strategy<Value = Vec<(usize, Option<Value>)>> {
    prop::collection::vec((0..KEYS.len(), prop::option::weighted(0.8, value())), 0..4)
}

fn check(text: &str) -> Result<bool, TestCaseError> {
    match hf::parse(text) {
        Ok(m) => {
            let c = &m.config;
            let h = c.hf.as_ref().expect("an hf model has hf options");
            prop_assert_eq!(c.flavour, Flavour::Hf);
            prop_assert!(h.head_dim > 0 && h.head_dim % 2 == 0, "head_dim {}", h.head_dim);
            prop_assert!(c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0);
            prop_assert!(c.rope_theta > 0.0 && c.norm_eps >= 0.0);
            prop_assert_eq!(h.qkv_bias, h.model_type == Arch::Qwen2 || h.o_bias, "only qwen2 has q/k/v biases without o_proj's");
            // Validation of the sizes refuses or accepts, naming a flag; counting never panics.
            if let Err(e) = c.validate() {
                prop_assert!(e.flag.starts_with("--"), "{e}");
            }
            let _ = c.param_count();
            Ok(true)
        }
        Err(e) => {
            prop_assert!(KEYS.iter().any(|k| e.contains(k)) || e.contains("JSON") || e.contains("'text_config'"), "names no field: {}", e);
            Ok(false)
        }
    }
}

#[test]
fn edited_configs_never_panic_and_refusals_name_a_field() {
    let accepted = AtomicUsize::new(0);
    runner(3000)
        .run(&(0..MODELS.len(), edits()), |(i, edits)| {
            let mut obj = base(i);
            for (k, v) in edits {
                match v {
                    Some(v) => obj.insert(KEYS[k].into(), v),
                    None => obj.remove(KEYS[k]),
                };
            }
            if check(&Value::Object(obj).to_string())? {
                accepted.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
        .unwrap();
    // Both sides are exercised.
    let accepted = accepted.into_inner();
    assert!((300..2700).contains(&accepted), "{accepted} of 3000 edited configs accepted");
}

#[test]
fn arbitrary_text_never_panics() {
    runner(2000).run(&"\\PC{0,80}", |s| check(&s).map(|_| ())).unwrap();
    runner(1000).run(&"\\{\"[a-z_]{1,20}\": \\PC{0,20}\\}", |s| check(&s).map(|_| ())).unwrap();
}
