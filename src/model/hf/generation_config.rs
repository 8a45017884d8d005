//! The `GenerationConfig` fields `--profile-type generate` models (transformers 5.23), with
//! the defaults a model's generation config gets from `GenerationConfig()`.
use serde::{Deserialize, Serialize};

/// `cache_implementation`: what holds the keys and values between steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheImplementation {
    /// `DynamicCache` (the default): each layer grows by `torch.cat`.
    #[default]
    Dynamic,
    /// `StaticCache`: each layer's keys and values are allocated once, `max_cache_len`
    /// positions long (zeros), at its first update, then written in place (`index_copy_`).
    Static,
}

impl CacheImplementation {
    pub fn name(self) -> &'static str {
        match self {
            CacheImplementation::Dynamic => "dynamic",
            CacheImplementation::Static => "static",
        }
    }
}

/// What `model.generate(input_ids, **kwargs)` is asked to do.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenerateConfig {
    pub max_new_tokens: usize,
    /// `min_new_tokens` (0: none): with an eos token, generate adds MinLengthLogitsProcessor
    /// (min_length = prompt + min_new_tokens) and MinNewTokensLengthLogitsProcessor.
    pub min_new_tokens: usize,
    pub cache: CacheImplementation,
    /// `do_sample`: softmax and `torch.multinomial` instead of argmax, after the warpers.
    pub do_sample: bool,
    /// `temperature` (1.0: no TemperatureLogitsWarper).
    pub temperature: f64,
    /// `top_k` (0: no TopKLogitsWarper; GenerationConfig's default is 50).
    pub top_k: usize,
    /// `num_return_sequences` (sampling only): the prompts are repeated this many times over
    /// the batch before the prefill.
    #[serde(default = "one")]
    pub num_return_sequences: usize,
    /// `num_beams` (1: greedy or sampling; more: `_beam_search` with these many beams per
    /// prompt, GenerationConfig's length_penalty 1.0 and early_stopping False).
    #[serde(default = "one")]
    pub num_beams: usize,
}

fn one() -> usize {
    1
}

impl GenerateConfig {
    /// `generate(max_new_tokens=n, do_sample=False)` with GenerationConfig's other defaults.
    pub fn greedy(max_new_tokens: usize) -> GenerateConfig {
        GenerateConfig { max_new_tokens, min_new_tokens: 0, cache: CacheImplementation::Dynamic, do_sample: false, temperature: 1.0, top_k: 50, num_return_sequences: 1, num_beams: 1 }
    }

    /// A short description for the report ("greedy, DynamicCache" …).
    pub fn describe(&self) -> String {
        let mut s = if self.do_sample {
            let mut w = Vec::new();
            if self.temperature != 1.0 {
                w.push(format!("temperature {}", self.temperature));
            }
            if self.top_k > 0 {
                w.push(format!("top_k {}", self.top_k));
            }
            if self.num_return_sequences > 1 {
                w.push(format!("num_return_sequences {}", self.num_return_sequences));
            }
            let kind = if self.num_beams > 1 {
                w.insert(0, format!("{} beams", self.num_beams));
                "beam sampling"
            } else {
                "sampling"
            };
            if w.is_empty() { kind.to_string() } else { format!("{kind} ({})", w.join(", ")) }
        } else if self.num_beams > 1 {
            let mut t = format!("beam search ({} beams", self.num_beams);
            if self.num_return_sequences > 1 {
                t.push_str(&format!(", num_return_sequences {}", self.num_return_sequences));
            }
            t + ")"
        } else {
            "greedy".to_string()
        };
        s.push_str(match self.cache {
            CacheImplementation::Dynamic => ", DynamicCache",
            CacheImplementation::Static => ", StaticCache",
        });
        if self.min_new_tokens > 0 {
            s.push_str(&format!(", min_new_tokens {}", self.min_new_tokens));
        }
        s
    }
}
