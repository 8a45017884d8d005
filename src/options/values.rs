//! The value sets flags accept, built from the tables that define them (the GPU table, the
//! presets, the optimizers, the parallel layouts, …), so that `--help` and the generated
//! reference pages (docs/reference/) list exactly what is accepted and cannot drift from it.
//!
//! Each set is a [`Listed`] value parser: clap shows its values (`[possible values: …]` in
//! `-h`, one line each with what it is in `--help`), while parsing stays the flag's own code
//! (case-insensitive names, prefixes, aliases and comma lists are checked where the flag is
//! resolved, with the error naming the flag as before).
use crate::model::{presets, Attention, Flavour};
use clap::builder::{PossibleValue, TypedValueParser};

/// A string flag whose accepted names come from a table: listed in help, passed through as
/// given (checked when the flag is resolved).
#[derive(Clone, Debug)]
pub struct Listed(Vec<PossibleValue>);

impl Listed {
    fn new(values: impl IntoIterator<Item = PossibleValue>) -> Listed {
        Listed(values.into_iter().collect())
    }
    /// The names listed, in order.
    pub fn names(&self) -> Vec<String> {
        self.0.iter().map(|v| v.get_name().to_string()).collect()
    }
}

impl TypedValueParser for Listed {
    type Value = String;
    fn parse_ref(&self, cmd: &clap::Command, arg: Option<&clap::Arg>, value: &std::ffi::OsStr) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }
    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.0.iter().cloned()))
    }
}

fn value(name: impl Into<String>, help: impl Into<String>) -> PossibleValue {
    let help: String = help.into();
    let v = PossibleValue::new(clap::builder::Str::from(name.into()));
    if help.is_empty() {
        v
    } else {
        v.help(help)
    }
}

/// A parameter count as "128.6M" / "3.41B".
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2}B", n as f64 / 1e9),
        n => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// The name a preset is listed under: its own, or `flavour-name` when both flavours have it.
pub fn preset_name(p: &presets::Preset) -> String {
    if presets::is_ambiguous(p.name) {
        format!("{}-{}", p.model.flavour, p.name)
    } else {
        p.name.to_string()
    }
}

/// `--preset` / `--model`: every preset of [`presets::all`], then the aliases.
pub fn presets() -> Listed {
    let all = presets::all();
    let mut v: Vec<PossibleValue> = all
        .iter()
        .map(|p| {
            let m = &p.model;
            value(
                preset_name(p),
                format!("{}, {} parameters (d_model {}, {} layers; batch {}, context {})", m.flavour, count(p.expected_params), m.d_model, m.num_layers, p.batch_size, p.seq_len),
            )
        })
        .collect();
    v.extend(presets::ALIASES.iter().map(|(alias, to)| value(*alias, format!("= {to}"))));
    Listed::new(v)
}

/// `--gpu`: the GPU table ([`crate::record::gpu::GPUS`]).
pub fn gpus() -> Listed {
    Listed::new(crate::record::gpu::GPUS.iter().map(|g| {
        let mib = g.memory_bytes >> 20;
        value(g.name, format!("{mib} MiB as CUDA reports it (nvidia-smi {} MiB), {} bf16 TFLOP/s, {} TB/s", g.smi_mib, g.peak_bf16_tflops, g.hbm_tb_per_s))
    }))
}

/// `--optimizer`: [`crate::train::optim::OptimizerKind::ALL`].
pub fn optimizers() -> Listed {
    use crate::train::optim::OptimizerKind;
    Listed::new(OptimizerKind::ALL.iter().map(|k| value(k.name(), k.describe())))
}

/// `--flavour`: [`Flavour::ALL`].
pub fn flavours() -> Listed {
    Listed::new(Flavour::ALL.iter().map(|f| value(f.name(), f.describe())))
}

/// `--attention`: [`Attention::ALL`].
pub fn attentions() -> Listed {
    Listed::new(Attention::ALL.iter().map(|a| value(a.name(), a.describe())))
}

/// `--precision`: [`crate::train::Precision::CHOICES`].
pub fn precisions() -> Listed {
    Listed::new(crate::train::Precision::CHOICES.iter().map(|p| value(p.name(), "")))
}

/// `--parallel`: [`crate::parallel::Layout::ALL`].
pub fn layouts() -> Listed {
    Listed::new(crate::parallel::Layout::ALL.iter().map(|l| value(l.name(), l.describe())))
}

/// `--attn-implementation`: [`crate::model::hf::AttnImplementation::ALL`].
pub fn attn_implementations() -> Listed {
    Listed::new(crate::model::hf::AttnImplementation::ALL.iter().map(|a| value(a.name(), "")))
}

/// `--sdpa-backend`: [`crate::model::hf::SdpaBackend::ALL`].
pub fn sdpa_backends() -> Listed {
    Listed::new(crate::model::hf::SdpaBackend::ALL.iter().map(|b| value(b.name(), "")))
}

/// `--data`: [`crate::train::DataKind::ALL`].
pub fn data_kinds() -> Listed {
    Listed::new(crate::train::DataKind::ALL.iter().map(|d| value(d.name(), "")))
}

/// `--target-modules`: all-linear, or some of [`crate::model::lora::TARGETS`] and Phi-3's fused
/// linears.
pub fn target_modules() -> Listed {
    let fused = [value("qkv_proj", "Phi-3's fused q, k, v projection"), value("gate_up_proj", "Phi-3's fused gate and up projection")];
    // Mixtral's transformers-4 expert and router names, which peft converts into target_parameters.
    let mixtral = [value("w1", "Mixtral's experts' gate half (with w3)"), value("w3", "Mixtral's experts' up half (with w1)"), value("w2", "Mixtral's experts' down projection"), value("gate", "an MoE router")];
    Listed::new(std::iter::once(value("all-linear", "every linear of the decoder")).chain(crate::model::lora::TARGETS.iter().map(|t| value(*t, ""))).chain(fused).chain(mixtral))
}

/// `--target-parameters`: [`crate::model::lora_params::TARGET_PARAMETERS`] (a comma list).
pub fn target_parameters() -> Listed {
    Listed::new([
        value("mlp.gate.weight", "the router's weight (experts × hidden)"),
        value("mlp.router.weight", "gpt-oss's router weight (experts × hidden)"),
        value("mlp.experts.gate_up_proj", "the experts' fused gate and up projections (3-D)"),
        value("mlp.experts.down_proj", "the experts' down projections (3-D)"),
    ])
}

/// `--modules-to-save`: [`crate::model::lora::MODULES_TO_SAVE`] (a comma list).
pub fn modules_to_save() -> Listed {
    Listed::new([value("embed_tokens", "the input embedding"), value("lm_head", "the output head")])
}

/// `study SIZE`: [`crate::session::study::SIZES`].
pub fn study_sizes() -> Listed {
    Listed::new(crate::session::study::SIZES.iter().map(|s| {
        let help = presets::find(s, Some(Flavour::Tinyllama)).map(|p| format!("{} parameters", count(p.expected_params))).unwrap_or_default();
        value(*s, help)
    }))
}

/// `--dtype` (from_pretrained's, with `auto`) and `--bnb-4bit-compute-dtype` (without):
/// [`crate::model::hf::config_json::TORCH_DTYPES`].
pub fn torch_dtypes(auto: bool) -> Listed {
    let auto = auto.then(|| value("auto", "the config's torch_dtype (float32 when it names none)"));
    // --dtype is also CS336's autocast type with --use-mixed-precision, spelled bf16/fp16.
    let short = auto.is_some().then(|| [value("bf16", "= bfloat16 (CS336's spelling)"), value("fp16", "= float16 (CS336's spelling)")]);
    Listed::new(auto.into_iter().chain(crate::model::hf::config_json::TORCH_DTYPES.iter().map(|(n, _)| value(*n, ""))).chain(short.into_iter().flatten()))
}

/// `--bnb-4bit-quant-type`: [`crate::model::bnb::QUANT_TYPES`].
pub fn bnb_quant_types() -> Listed {
    Listed::new(crate::model::bnb::QUANT_TYPES.iter().map(|(n, h)| value(*n, *h)))
}

/// `--bnb-4bit-quant-storage`: [`crate::model::bnb::QUANT_STORAGES`].
pub fn bnb_quant_storages() -> Listed {
    Listed::new(crate::model::bnb::QUANT_STORAGES.iter().map(|(n, _, h)| value(*n, *h)))
}

/// `--fsdp-param-dtype` / `--fsdp-reduce-dtype`: [`super::parallel::FSDP_DTYPES`].
pub fn fsdp_dtypes() -> Listed {
    Listed::new(super::parallel::FSDP_DTYPES.iter().map(|(n, _)| value(*n, "")))
}

/// `--offload`: [`super::parallel::OFFLOADS`].
pub fn offloads() -> Listed {
    Listed::new(super::parallel::OFFLOADS.iter().map(|(n, h)| value(*n, *h)))
}

/// `--checkpoint`: [`crate::model::Checkpoint::CHOICES`].
pub fn checkpoints() -> Listed {
    Listed::new(crate::model::Checkpoint::CHOICES.iter().map(|(n, h)| value(*n, *h)))
}

/// `--fusion`: [`super::memory::FUSIONS`].
pub fn fusions() -> Listed {
    Listed::new(super::memory::FUSIONS.iter().map(|(n, h)| value(*n, *h)))
}

/// `--sort-by`: [`super::train::SORT_KEYS`].
pub fn sort_keys() -> Listed {
    Listed::new(super::train::SORT_KEYS.iter().map(|(n, h)| value(*n, *h)))
}

/// A small fixed set defined beside its flag's parser: (name, help) pairs.
pub fn listed(values: &[(&str, &str)]) -> Listed {
    Listed::new(values.iter().map(|(n, h)| value(*n, *h)))
}

#[cfg(test)]
mod tests {
    use super::Listed;
    use crate::options::{hf::HfFlags, memory::MemoryFlags, parallel::ParallelFlags};

    fn names(l: Listed) -> Vec<String> {
        let n = l.names();
        assert!(!n.is_empty());
        n
    }

    /// Every value help lists is one its flag's parser takes (`every-N` as every-2).
    #[test]
    fn every_listed_value_is_accepted() {
        for d in names(super::torch_dtypes(true)) {
            assert!(d == "auto" || crate::model::hf::config_json::parse_dtype(&d).is_some(), "--dtype {d}");
        }
        for c in names(super::checkpoints()) {
            assert!(crate::model::Checkpoint::parse(&c.replace('N', "2")).is_some(), "--checkpoint {c}");
        }
        let mut cfg = crate::model::presets::find("small", Some(crate::model::Flavour::Cs336)).unwrap().model.clone();
        for f in names(super::fusions()) {
            MemoryFlags { fusion: Some(f.clone()), ..MemoryFlags::default() }.apply(&mut cfg).unwrap_or_else(|e| panic!("--fusion {f}: {e}"));
        }
        let mut hf = crate::model::presets::find("Llama-3.1-8B", None).unwrap().model.clone();
        for (flag, set) in [("gradient", names(super::listed(&super::super::hf::GRADIENT_CHECKPOINTING))), ("mask", names(super::listed(&super::super::hf::ATTENTION_MASKS)))] {
            for v in set {
                let f = if flag == "gradient" { HfFlags { gradient_checkpointing: Some(v.clone()), ..HfFlags::default() } } else { HfFlags { attention_mask: Some(v.clone()), ..HfFlags::default() } };
                f.apply(&mut hf).unwrap_or_else(|e| panic!("{flag} {v}: {e}"));
            }
        }
        for t in names(super::bnb_quant_types()) {
            let f = HfFlags { load_in_4bit: true, bnb_4bit_quant_type: Some(t.clone()), lora_r: Some(8), ..HfFlags::default() };
            f.apply(&mut hf.clone()).unwrap_or_else(|e| panic!("--bnb-4bit-quant-type {t}: {e}"));
        }
        for d in names(super::torch_dtypes(false)) {
            let f = HfFlags { load_in_4bit: true, bnb_4bit_compute_dtype: Some(d.clone()), lora_r: Some(8), ..HfFlags::default() };
            f.apply(&mut hf.clone()).unwrap_or_else(|e| panic!("--bnb-4bit-compute-dtype {d}: {e}"));
        }
        for s in names(super::bnb_quant_storages()) {
            let f = HfFlags { load_in_4bit: true, bnb_4bit_quant_storage: Some(s.clone()), lora_r: Some(8), ..HfFlags::default() };
            f.apply(&mut hf.clone()).unwrap_or_else(|e| panic!("--bnb-4bit-quant-storage {s}: {e}"));
        }
        for d in names(super::fsdp_dtypes()) {
            let p = ParallelFlags { parallel: Some("fsdp".into()), world_size: Some(2), fsdp_param_dtype: Some(d.clone()), ..ParallelFlags::default() };
            p.resolve().unwrap_or_else(|e| panic!("--fsdp-param-dtype {d}: {e}"));
        }
        for o in names(super::offloads()) {
            let p = ParallelFlags { parallel: Some("fsdp".into()), world_size: Some(2), offload: Some(o.clone()), ..ParallelFlags::default() };
            p.resolve().unwrap_or_else(|e| panic!("--offload {o}: {e}"));
        }
    }
}
