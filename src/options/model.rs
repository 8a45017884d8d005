//! Flags that choose and reshape a model, shared by the subcommands that build one.
use super::usage;
use crate::model::{presets, Attention, Flavour, ModelConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct ModelFlags {
    /// Model preset (the names below; a cs336-/tinyllama-/hf- prefix is accepted on any)
    ///
    /// small, medium and large exist in both cs336 and tinyllama: a bare name takes the
    /// command's seed's (profile, sweep, fit, estimate, run-all: CS336's; train, study: the
    /// workshop's); cs336-NAME / tinyllama-NAME or --flavour choose explicitly. Names are
    /// case-insensitive.
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::presets(), long, visible_alias = "model", alias = "model-size")]
    pub preset: Option<String>,
    /// A Hugging Face config.json (or a model folder holding one) instead of a preset
    ///
    /// Only config.json is read: model_type llama, mistral, qwen2, qwen3, phi3, olmo2, gemma2,
    /// gemma3_text, mixtral, qwen3_moe, qwen2_moe, gpt_oss or deepseek_v3, run as transformers
    /// 5.23.0's modeling code (the hf flavour), with that release's config defaults. Its
    /// torch_dtype is the weights' type, as from_pretrained(dtype="auto") loads them (--dtype
    /// overrides it). Shape flags override it; --flavour cs336|tinyllama maps a plain llama
    /// shape onto those flavours
    #[arg(help_heading = super::heading::MODEL, long, value_name = "PATH")]
    pub config: Option<std::path::PathBuf>,
    /// Reference implementation to reproduce
    #[arg(help_heading = super::heading::MODEL, value_parser = super::values::flavours(), long)]
    pub flavour: Option<String>,
    /// Hidden size d_model
    #[arg(help_heading = super::heading::MODEL, long)]
    pub hidden_dim: Option<usize>,
    /// Transformer layers (also the workshop guide's --n-layers)
    #[arg(help_heading = super::heading::MODEL, long, alias = "n-layers")]
    pub num_layers: Option<usize>,
    /// Attention heads (also --n-heads)
    #[arg(help_heading = super::heading::MODEL, long, alias = "n-heads")]
    pub num_heads: Option<usize>,
    /// Key/value heads (grouped-query attention when fewer than --num-heads; also --n-kv-heads)
    #[arg(help_heading = super::heading::MODEL, long, alias = "n-kv-heads")]
    pub num_kv_heads: Option<usize>,
    /// Feed-forward size d_ff
    #[arg(help_heading = super::heading::MODEL, long)]
    pub intermediate_dim: Option<usize>,
    /// Vocabulary size (rows of the embedding and the LM head)
    #[arg(help_heading = super::heading::MODEL, long)]
    pub vocab_size: Option<usize>,
    /// Longest sequence the model accepts (sizes cs336's RoPE buffer)
    ///
    /// Default: the preset's, raised to the run's sequence length as both seed scripts do.
    #[arg(help_heading = super::heading::MODEL, long)]
    pub max_seq_len: Option<usize>,
    /// RoPE base frequency theta
    #[arg(help_heading = super::heading::MODEL, long)]
    pub rope_theta: Option<f64>,
    /// RMSNorm epsilon
    #[arg(help_heading = super::heading::MODEL, long)]
    pub norm_eps: Option<f64>,
    /// Attention computation (cs336 and tinyllama flavours)
    #[arg(help_heading = super::heading::MEMORY, value_parser = super::values::attentions(), long)]
    pub attention: Option<String>,
    #[command(flatten)]
    pub hf: super::hf::HfFlags,
}

/// A resolved model plus the run defaults of its preset.
pub struct Resolved {
    pub preset: presets::Preset,
    pub config: ModelConfig,
    /// Something the user should know about how the model is modelled (printed by the
    /// subcommand), e.g. a config.json's bf16 torch_dtype that --precision, not the file, decides.
    pub note: Option<String>,
}

/// The name outputs of a `--config FILE` model carry: the last part of its `_name_or_path`
/// (`meta-llama/Llama-3.1-8B` → `Llama-3.1-8B`); else, for a file named plainly
/// `config.json`, its folder (a downloaded model's directory); else the file's stem without a
/// `_config`/`-config` suffix. Characters unsafe in a file name become `_`.
pub(crate) fn config_model_name(path: &std::path::Path, name_or_path: Option<&str>) -> String {
    // "." or ".." (a config saved from the working folder) names nothing: hidden files otherwise.
    let from_hub = name_or_path.and_then(|n| n.trim_end_matches(['/', '\\']).rsplit(['/', '\\']).next()).map(|n| n.trim_start_matches('.')).filter(|n| !n.is_empty());
    let stem = path.file_stem().map_or_else(|| "config".to_string(), |s| s.to_string_lossy().into_owned());
    let folder = || {
        let abs = std::path::absolute(path).ok()?;
        abs.parent()?.file_name().map(|f| f.to_string_lossy().into_owned())
    };
    let name = match from_hub {
        Some(n) => n.to_string(),
        None if stem == "config" => folder().unwrap_or(stem),
        None => stem.strip_suffix("_config").or_else(|| stem.strip_suffix("-config")).unwrap_or(&stem).to_string(),
    };
    // Output names add a tag of up to ~150 bytes to this; 100 keeps them under NAME_MAX (255).
    let name: String = name.trim_start_matches('.').chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).take(MAX_MODEL_NAME).collect();
    if name.is_empty() {
        "config".into()
    } else {
        name
    }
}

/// The longest model name put in output file names.
const MAX_MODEL_NAME: usize = 100;

/// The preset a `--config PATH` stands for: its model, named after the file, with run
/// defaults batch 4 and context min(512, max_position_embeddings). PATH is a config.json or
/// a model folder holding one (a downloaded model: tokenizer and weights files beside it).
fn from_config_file(path: &std::path::Path, flavour: Option<Flavour>) -> anyhow::Result<presets::Preset> {
    let flag = "--config";
    let (file, text) = crate::model::hf::config_file::read(path).map_err(|e| usage(flag, e))?;
    let path = file.as_path();
    let hf = crate::model::hf::parse(&text).map_err(|e| usage(flag, format!("{}: {e}", path.display())))?;
    let mut model = hf.config;
    if let Some(f) = flavour {
        model = crate::model::hf::config_json::onto_flavour(model, f).map_err(|e| usage("--flavour", format!("{f} with --config {}: {e}", path.display())))?;
    }
    let name: &'static str = Box::leak(config_model_name(path, hf.name_or_path.as_deref()).into_boxed_str());
    let seq_len = model.max_seq_len.min(512);
    let expected_params = model.param_count();
    Ok(presets::Preset { name, model, batch_size: 4, seq_len, num_steps: 10, expected_params })
}

/// Whose preset names a command uses when a bare name exists in both flavours: the seed script
/// the command stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Names {
    /// CS336's profile_memory.py / run_all.sh (profile, sweep, fit, estimate, run-all).
    Cs336,
    /// The workshop's tiny_llama_v1.py / launch_performance_study.sh (train, study).
    Workshop,
}

impl Names {
    fn flavour(self) -> Flavour {
        match self {
            Names::Cs336 => Flavour::Cs336,
            Names::Workshop => Flavour::Tinyllama,
        }
    }
    fn whose(self) -> &'static str {
        match self {
            Names::Cs336 => "CS336's",
            Names::Workshop => "the workshop's",
        }
    }
}

impl ModelFlags {
    /// The model's maximum sequence length follows the run's longest sequence unless
    /// --max-seq-len is given, as both seed scripts do: CS336 builds its RoPE buffer for the
    /// context length, tiny_llama_v1.py sets `max_seq_len=args.seq_len`. A config.json's
    /// max_position_embeddings stays a limit for the tinyllama flavour.
    pub fn follow_seq_len(&self, cfg: &mut ModelConfig, longest: usize) {
        if self.max_follows_run(cfg) {
            cfg.max_seq_len = cfg.max_seq_len.max(longest);
        }
    }

    /// Whether [`Self::follow_seq_len`] raises the maximum (no fixed limit on the run's length).
    /// transformers computes RoPE from the positions (no table sized by
    /// max_position_embeddings), so an hf model runs past it too.
    pub fn max_follows_run(&self, cfg: &ModelConfig) -> bool {
        self.max_seq_len.is_none() && (self.config.is_none() || matches!(cfg.flavour, Flavour::Cs336 | Flavour::Hf))
    }

    pub fn resolve(&self, default_preset: &str, names: Names) -> anyhow::Result<Resolved> {
        let flavour = match &self.flavour {
            Some(f) => Some(Flavour::parse(f).ok_or_else(|| usage("--flavour", format!("'{f}' (expected cs336, tinyllama or hf)")))?),
            None => None,
        };
        let note;
        let preset = if let Some(path) = &self.config {
            if let Some(p) = &self.preset {
                return Err(usage("--config", format!("gives the model; drop --preset/--model '{p}'")));
            }
            note = None;
            from_config_file(path, flavour)?
        } else {
            let (preset, n) = self.find_preset(default_preset, flavour, names)?;
            note = n;
            preset
        };
        let mut c = preset.model.clone();
        let set = |v: &mut usize, o: Option<usize>| {
            if let Some(o) = o {
                *v = o
            }
        };
        set(&mut c.d_model, self.hidden_dim);
        set(&mut c.num_layers, self.num_layers);
        if let Some(h) = self.num_heads {
            // Without GQA in the preset, changing the heads changes the kv heads too.
            if c.num_kv_heads == c.num_heads && self.num_kv_heads.is_none() {
                c.num_kv_heads = h;
            }
            c.num_heads = h;
        }
        set(&mut c.num_kv_heads, self.num_kv_heads);
        set(&mut c.d_ff, self.intermediate_dim);
        set(&mut c.vocab_size, self.vocab_size);
        set(&mut c.max_seq_len, self.max_seq_len);
        if let Some(t) = self.rope_theta {
            c.rope_theta = t;
        }
        if let Some(e) = self.norm_eps {
            c.norm_eps = e;
        }
        if let Some(a) = &self.attention {
            if c.flavour == Flavour::Hf {
                return Err(usage("--attention", "the hf flavour runs transformers' attention: choose it with --attn-implementation eager|sdpa|flash_attention_2 (and --sdpa-backend)"));
            }
            c.attention = Attention::parse(a).ok_or_else(|| usage("--attention", format!("'{a}' (expected naive or flash)")))?;
        }
        self.hf.apply(&mut c)?;
        c.validate().map_err(super::UsageError::from)?;
        Ok(Resolved { preset, config: c, note })
    }

    /// The preset, and a note when a bare name in both flavours took the command's seed's.
    fn find_preset(&self, default_preset: &str, flavour: Option<Flavour>, names: Names) -> anyhow::Result<(presets::Preset, Option<String>)> {
        let name = self.preset.as_deref().unwrap_or(default_preset);
        // A flavour without a preset picks that flavour's default model.
        let name = match (self.preset.as_deref(), flavour) {
            (None, Some(Flavour::Cs336)) => "small",
            (None, Some(Flavour::Hf)) => "Llama-3.2-1B",
            _ => name,
        };
        let mut note = None;
        let preset = if flavour.is_none() && presets::is_ambiguous(name) {
            let taken = names.flavour();
            let other = if taken == Flavour::Cs336 { Flavour::Tinyllama } else { Flavour::Cs336 };
            note = Some(format!(
                "--model {name} is {} {name} ({taken}-{name}): this command follows {} preset names; write {other}-{name} or --flavour {other} for the other",
                names.whose(),
                names.whose()
            ));
            presets::find(name, Some(taken))
        } else {
            presets::find(name, flavour)
        }
        .map_err(|e| usage("--preset", e))?;
        if let Some(f) = flavour {
            if f != preset.model.flavour {
                return Err(usage("--flavour", format!("preset '{name}' is a {} model", preset.model.flavour)));
            }
        }
        Ok((preset, note))
    }
}

#[cfg(test)]
mod tests {
    use super::config_model_name;
    use std::path::Path;

    #[test]
    fn model_names_are_safe_file_names() {
        let p = Path::new("/models/x/config.json");
        assert_eq!(config_model_name(p, Some("meta-llama/Llama-3.1-8B")), "Llama-3.1-8B");
        // "." names nothing (it would hide the outputs): the folder does.
        assert_eq!(config_model_name(p, Some(".")), "x");
        assert_eq!(config_model_name(Path::new("/m/.hidden.json"), None), "hidden");
        assert_eq!(config_model_name(p, Some(&"a".repeat(300))).len(), 100);
        assert_eq!(config_model_name(Path::new("/m/a b.json"), Some("org/a b")), "a_b");
    }
}
