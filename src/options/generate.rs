//! GenerationConfig's options of `--profile-type generate` (transformers 5.23), named as
//! `generate()` takes them: what is modelled, and refusals (exit 2, naming the flag) for what
//! transformers refuses or vramscope does not model yet.
use super::usage;
use crate::model::hf::generation_config::{CacheImplementation, GenerateConfig};
use clap::Args;

#[derive(Args, Debug, Clone, Default)]
pub struct GenerateFlags {
    /// generate's cache_implementation: dynamic (DynamicCache, the default) or static
    ///
    /// static: StaticCache, max_new_tokens + prompt - 1 positions per layer allocated at the
    /// prefill and written in place (a sliding layer of Gemma 2/3, gpt-oss, Mistral, Mixtral,
    /// Phi-3, Qwen2, Qwen3 or Qwen3-MoE: at most its window, rolled once full; DeepSeek-V3: its
    /// latent and k_rot); needs --disable-compile (on CUDA transformers
    /// otherwise compiles the decode forward, which is not modelled). offloaded is not modelled.
    #[arg(help_heading = super::heading::RUN, long, value_name = "CACHE")]
    pub cache_implementation: Option<String>,
    /// GenerationConfig's disable_compile: no automatic torch.compile of the decode forward
    #[arg(help_heading = super::heading::RUN, long)]
    pub disable_compile: bool,
    /// GenerationConfig's do_sample: multinomial sampling after the warpers (default top_k 50)
    #[arg(help_heading = super::heading::RUN, long)]
    pub do_sample: bool,
    /// Sampling temperature (default 1.0: no TemperatureLogitsWarper)
    #[arg(help_heading = super::heading::RUN, long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Top-k filtering when sampling (default 50; 0 turns TopKLogitsWarper off)
    #[arg(help_heading = super::heading::RUN, long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Nucleus filtering when sampling (default 1.0: none); below 1.0 not modelled yet (CUDA's
    /// sort scratch is unmeasured)
    #[arg(help_heading = super::heading::RUN, long, value_name = "P")]
    pub top_p: Option<f64>,
    /// Tokens generated before eos may end a row (MinLength/MinNewTokensLength processors)
    #[arg(help_heading = super::heading::RUN, long, value_name = "N")]
    pub min_new_tokens: Option<usize>,
    /// Beam search's beams (default 1): `_beam_search`, the cache reordered every step
    ///
    /// GenerationConfig's length_penalty 1.0 and early_stopping False; every step runs to
    /// --max-new-tokens. With --do-sample: beam sampling (the warpers on the log-probabilities,
    /// multinomial draws of 2 x beams candidates).
    #[arg(help_heading = super::heading::RUN, long, value_name = "N")]
    pub num_beams: Option<usize>,
    /// Sequences returned per prompt (default 1); with beam search at most --num-beams
    ///
    /// With sampling the batch is repeated this many times before the prefill; with beam
    /// search generate returns the best num_return_sequences beams of each prompt.
    #[arg(help_heading = super::heading::RUN, long, value_name = "N")]
    pub num_return_sequences: Option<usize>,
}

impl GenerateFlags {
    /// The first of these flags given (for the refusal when generate is not run).
    pub fn first_given(&self) -> Option<&'static str> {
        [
            (self.cache_implementation.is_some(), "--cache-implementation"),
            (self.disable_compile, "--disable-compile"),
            (self.do_sample, "--do-sample"),
            (self.temperature.is_some(), "--temperature"),
            (self.top_k.is_some(), "--top-k"),
            (self.top_p.is_some(), "--top-p"),
            (self.min_new_tokens.is_some(), "--min-new-tokens"),
            (self.num_beams.is_some(), "--num-beams"),
            (self.num_return_sequences.is_some(), "--num-return-sequences"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The GenerateConfig for `max_new_tokens` (already checked ≥ 1) on a model whose
    /// config has a sliding window or not; `static_sliding_measured`: a StaticCache over that
    /// window (StaticSlidingWindowLayer) is measured for the model's family
    /// ([`static_sliding_measured`]).
    pub fn resolve(&self, max_new_tokens: usize, sliding_window: Option<usize>, static_sliding_measured: bool) -> anyhow::Result<GenerateConfig> {
        let mut gc = GenerateConfig::greedy(max_new_tokens);
        gc.cache = match self.cache_implementation.as_deref() {
            None | Some("dynamic") => CacheImplementation::Dynamic,
            Some("static") => CacheImplementation::Static,
            Some("offloaded" | "offloaded_static") => {
                return Err(usage("--cache-implementation", "offloaded caches (layers moved to the CPU between uses) are not modelled yet: use dynamic or static"));
            }
            Some("sliding_window" | "hybrid" | "hybrid_chunked" | "quantized") => {
                return Err(usage("--cache-implementation", format!("{} is not modelled: use dynamic or static", self.cache_implementation.as_deref().unwrap_or_default())));
            }
            Some(other) => {
                return Err(usage("--cache-implementation", format!("Invalid `cache_implementation` ({other}): transformers accepts dynamic, static, offloaded, offloaded_static, quantized (vramscope models dynamic and static)")));
            }
        };
        if gc.cache == CacheImplementation::Static {
            if !self.disable_compile {
                return Err(usage("--cache-implementation", "a static cache on CUDA makes generate() torch.compile the decode forward (CompileConfig mode reduce-overhead, CUDA graphs), which is not modelled: add --disable-compile (GenerationConfig's disable_compile=True) to profile the eager decode"));
            }
            if sliding_window.is_some() && !static_sliding_measured {
                return Err(usage("--cache-implementation", "static with a sliding window (StaticSlidingWindowLayer) is modelled on gemma2, gemma3_text, gpt_oss, qwen2/qwen3 (sliding and full layers or all sliding), and mistral/phi3/mixtral/qwen3_moe whose every layer slides (tests/fixtures/pytorch_grid/generate_static_*.json), not on this model yet: use dynamic, or a config without sliding_window"));
            }
        }
        if let Some(n) = self.num_beams.filter(|&n| n != 1) {
            if n == 0 {
                return Err(usage("--num-beams", "must be at least 1"));
            }
            gc.num_beams = n;
        }
        if let Some(n) = self.num_return_sequences.filter(|&n| n != 1) {
            if n == 0 {
                return Err(usage("--num-return-sequences", "must be at least 1"));
            }
            if gc.num_beams > 1 && n > gc.num_beams {
                return Err(usage("--num-return-sequences", format!("`num_return_sequences` ({n}) has to be smaller or equal to `num_beams` ({}).", gc.num_beams)));
            }
            if !self.do_sample && gc.num_beams == 1 {
                return Err(usage("--num-return-sequences", format!("Greedy methods without beam search do not support `num_return_sequences` different than 1 (got {n}).")));
            }
            gc.num_return_sequences = n;
        }
        if let Some(t) = self.temperature {
            if !self.do_sample {
                return Err(usage("--temperature", "is a sampling parameter: it needs --do-sample (transformers ignores it in greedy decoding)"));
            }
            if !(t > 0.0 && t.is_finite()) {
                return Err(usage("--temperature", format!("`temperature` (={t}) has to be a strictly positive float, otherwise your next token scores will be invalid")));
            }
            gc.temperature = t;
        }
        if let Some(k) = self.top_k {
            if !self.do_sample {
                return Err(usage("--top-k", "is a sampling parameter: it needs --do-sample (transformers ignores it in greedy decoding)"));
            }
            gc.top_k = k;
        }
        if let Some(p) = self.top_p {
            if !self.do_sample {
                return Err(usage("--top-p", "is a sampling parameter: it needs --do-sample (transformers ignores it in greedy decoding)"));
            }
            if !(p > 0.0 && p <= 1.0) {
                return Err(usage("--top-p", format!("`top_p` has to be a float > 0 and <= 1, but is {p}")));
            }
            if p < 1.0 {
                return Err(usage("--top-p", "TopPLogitsWarper (top_p below 1.0: a torch.sort of the vocabulary) is not modelled yet: CUDA's sort of a vocabulary row (cub's segmented radix sort and its temporary storage above 4096 entries) differs from the CPU's, and no GPU has measured it"));
            }
        }
        gc.do_sample = self.do_sample;
        if let Some(n) = self.min_new_tokens {
            if n > max_new_tokens {
                return Err(usage("--min-new-tokens", format!("{n} is more than --max-new-tokens {max_new_tokens} (transformers warns: unfeasible length constraints)")));
            }
            gc.min_new_tokens = n;
        }
        Ok(gc)
    }
}

/// Whether a StaticCache over this model's sliding window is measured:
/// generate_static_sliding.json (Gemma 2, Gemma 3 text and gpt-oss: sliding and full layers;
/// Mistral and Qwen2: every layer sliding), generate_static_families.json (Phi-3, Qwen3, Mixtral
/// and Qwen3-MoE: every layer sliding) and generate_static_mixed.json (Qwen2/Qwen3 with sliding
/// and full layers), generate_qwen2_moe_sliding.json (Qwen2-MoE's window: layers 0, 2, ... below
/// max_window_layers sliding).
pub fn static_sliding_measured(hf: &crate::model::hf::HfConfig) -> bool {
    use crate::model::hf::moe::MoeFamily;
    use crate::model::hf::Arch;
    match &hf.moe {
        Some(m) => m.gpt_oss.is_some() || matches!(m.family, MoeFamily::Mixtral | MoeFamily::Qwen3Moe | MoeFamily::Qwen2Moe),
        None => matches!(hf.model_type, Arch::Mistral | Arch::Qwen2 | Arch::Qwen3 | Arch::Phi3 | Arch::Gemma2 | Arch::Gemma3Text),
    }
}

/// Windows measured for generate with a StaticCache only, where create_masks_for_generate hands
/// the model its masks: Qwen2/Qwen3 whose `max_window_layers` / `layer_types` slide some layers
/// and not others (HfConfig::sliding_layers; generate_static_mixed.json) and Qwen3-MoE's
/// `use_sliding_window` (generate_static_families.json). Every other run builds its masks in
/// the model's forward, not measured for them: refused, naming the flag that chose the run
/// (`what`: "--profile-type ...", "estimate", "train", "serve"). Qwen2-MoE's window is measured
/// for every profile type of `profile` (`profiled`): inference, forward and training
/// (moe_grid/qwen2_moe_sliding.json) and generate with the DynamicCache and a StaticCache
/// (generate_qwen2_moe_sliding.json), and its closed form derived (`estimate` passes
/// `profiled`: analyse/estimate/hf.rs); `train` and `serve` are not.
pub fn check_static_only_window(hf: Option<&crate::model::hf::HfConfig>, static_generate: bool, profiled: bool, flag: &str, what: &str) -> anyhow::Result<()> {
    use crate::model::hf::moe::MoeFamily;
    let Some(hf) = hf else { return Ok(()) };
    let why = match (&hf.sliding_layers, &hf.moe) {
        (Some(layers), Some(m)) if m.family == MoeFamily::Qwen2Moe => {
            if profiled {
                return Ok(());
            }
            return Err(usage(flag, format!(
                "{what}: Qwen2-MoE's sliding window (use_sliding_window: {} of {} layers sliding, every other layer below max_window_layers) is modelled only for `vramscope profile` (inference, forward and training: moe_grid/qwen2_moe_sliding.json; generate: generate_qwen2_moe_sliding.json) and `estimate`'s training step and generate; train and serve are not measured for it",
                layers.iter().filter(|&&s| s).count(),
                layers.len()
            )));
        }
        (Some(layers), _) => format!(
            "use_sliding_window gives {} of {} layers a sliding window (max_window_layers / layer_types), a mix of sliding and full layers",
            layers.iter().filter(|&&s| s).count(),
            layers.len()
        ),
        (None, Some(m)) if m.family == MoeFamily::Qwen3Moe && hf.sliding_window.is_some() => "Qwen3-MoE's sliding window (use_sliding_window)".to_string(),
        _ => return Ok(()),
    };
    if static_generate {
        return Ok(());
    }
    Err(usage(flag, format!("{what}: {why} is modelled only for --profile-type generate --cache-implementation static --disable-compile (generate_static_mixed.json, generate_static_families.json)")))
}
