//! Helpers shared by the integration tests.
use vramscope::model::{presets, ModelConfig};

/// A small config of either flavour (GQA for tinyllama) whose runs take milliseconds.
pub fn small(flavour: &str) -> ModelConfig {
    let mut cfg = presets::find(if flavour == "cs336" { "cs336-small" } else { "walkthrough" }, None).unwrap().model;
    cfg.d_model = 64;
    cfg.d_ff = 128;
    cfg.num_layers = 2;
    cfg.num_heads = 4;
    cfg.num_kv_heads = if flavour == "cs336" { 4 } else { 2 };
    cfg.vocab_size = 64;
    cfg.max_seq_len = 32;
    cfg
}
