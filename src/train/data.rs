//! Seeded synthetic token batches.
use crate::engine::runtime;
use crate::engine::{Device, Tensor};
use crate::model::init::Rng;
use crate::record::Category;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DataKind {
    /// Uniform random ids (what the reference benchmarks feed).
    Random,
    /// A repeating sequence (period 16, random phase per row): learnable, so loss must fall.
    Pattern,
    /// tiny_llama_v1.py's `SimpleTextDataset`: a fixed pool of 1000 sequences of uniform ids
    /// in [1, V), drawn once from the seed; each batch takes B distinct pool rows at random
    /// (`np.random.choice(1000, B, replace=False)`), so rows recur and the model can fit them.
    Workshop,
}

impl DataKind {
    /// Every kind, in `--data`'s order.
    pub const ALL: [DataKind; 3] = [DataKind::Workshop, DataKind::Random, DataKind::Pattern];
    pub fn name(self) -> &'static str {
        match self {
            DataKind::Random => "random",
            DataKind::Pattern => "pattern",
            DataKind::Workshop => "workshop",
        }
    }
    pub fn parse(s: &str) -> Option<DataKind> {
        match s {
            "random" => Some(DataKind::Random),
            "pattern" => Some(DataKind::Pattern),
            "workshop" => Some(DataKind::Workshop),
            _ => None,
        }
    }
}

pub const PATTERN_PERIOD: usize = 16;
/// Sequences in the workshop's pool (`SimpleTextDataset(num_samples=1000)`).
pub const WORKSHOP_POOL: usize = 1000;

pub struct Batcher {
    pub kind: DataKind,
    pub vocab: usize,
    pub batch: usize,
    pub seq: usize,
    pub device: Device,
    rng: Rng,
    /// The workshop pool's rows of S+1 ids (host data, as the script's numpy array), cpu only.
    pool: Vec<i64>,
}

impl Batcher {
    pub fn new(kind: DataKind, vocab: usize, batch: usize, seq: usize, device: Device, seed: u64) -> Batcher {
        let mut rng = Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        let pool = if kind == DataKind::Workshop && device != Device::Meta {
            // `np.random.randint(1, vocab_size, size=(num_samples, seq_length + 1))`; a batch
            // larger than the pool (where numpy would refuse) gets a pool of its own size.
            let rows = WORKSHOP_POOL.max(batch);
            // Id 0 never occurs (a one-token vocabulary has only id 0).
            (0..rows * (seq + 1)).map(|_| if vocab > 1 { 1 + rng.below(vocab - 1) as i64 } else { 0 }).collect()
        } else {
            Vec::new()
        };
        Batcher { kind, vocab, batch, seq, device, rng, pool }
    }

    /// The next causal-LM batch as Hugging Face's collator builds it
    /// (`DataCollatorForLanguageModeling`, mlm=False), rebinding the loop's variables one at a
    /// time as Python does (each old tensor dies once its new one exists): input_ids (B, S)
    /// int64, labels = a copy of them when `labels` (the model shifts), and, when `mask`, the all-ones
    /// (B, S) int64 attention_mask a tokenizer gives unpadded rows.
    pub fn next_causal_lm_batch(&mut self, batch: &mut CausalLmBatch, labels: bool, mask: bool) {
        let _c = runtime::category(Category::Input);
        let _s = runtime::scope("data");
        let (b, s, vocab, rng) = (self.batch, self.seq, self.vocab, &mut self.rng);
        let kind = self.kind;
        let period = PATTERN_PERIOD.min(vocab);
        let ids = Tensor::from_i64_with(&[b, s], self.device, || match kind {
            DataKind::Pattern => {
                let mut v = Vec::with_capacity(b * s);
                for _ in 0..b {
                    let phase = rng.below(period);
                    v.extend((0..s).map(|i| ((phase + i) % period) as i64));
                }
                v
            }
            _ => (0..b * s).map(|_| rng.below(vocab) as i64).collect(),
        });
        let ids = batch.input_ids.insert(ids);
        // `labels = input_ids.clone() if ... else None`
        batch.labels = labels.then(|| ids.clone_contiguous());
        batch.attention_mask = mask.then(|| Tensor::from_i64_with(&[b, s], self.device, || vec![1; b * s]));
    }

    /// The batch's explicit `position_ids = torch.arange(S).unsqueeze(0)` (int64, (1, S)),
    /// made after the rest of the batch (the old ones die once the new exist).
    pub fn next_position_ids(&mut self, batch: &mut CausalLmBatch) {
        let _c = runtime::category(Category::Input);
        let _s = runtime::scope("data");
        let s = self.seq;
        batch.position_ids = Some(Tensor::from_i64_with(&[1, s], self.device, || (0..s as i64).collect()));
    }

    /// (inputs, labels), each (B, S) int64: a (B, S+1) sequence split into the two shifted
    /// views and made contiguous, as the reference `get_batch` does.
    pub fn next_batch(&mut self) -> (Tensor, Tensor) {
        let _c = runtime::category(Category::Input);
        let _s = runtime::scope("data");
        let (b, s) = (self.batch, self.seq);
        // The ids are drawn only on a device that holds data: on meta the (B, S+1) batch is
        // a shape and the generator is not advanced.
        let (kind, vocab, pool, rng) = (self.kind, self.vocab, &self.pool, &mut self.rng);
        let seq = Tensor::from_i64_with(&[b, s + 1], self.device, || match kind {
            DataKind::Random => (0..b * (s + 1)).map(|_| rng.below(vocab) as i64).collect(),
            DataKind::Pattern => {
                let period = PATTERN_PERIOD.min(vocab);
                let mut v = Vec::with_capacity(b * (s + 1));
                for _ in 0..b {
                    let phase = rng.below(period);
                    v.extend((0..=s).map(|i| ((phase + i) % period) as i64));
                }
                v
            }
            DataKind::Workshop => {
                let rows = pool.len() / (s + 1);
                let mut order: Vec<usize> = (0..rows).collect();
                let mut v = Vec::with_capacity(b * (s + 1));
                // B distinct rows: a partial Fisher–Yates shuffle.
                for i in 0..b {
                    let j = i + rng.below(rows - i);
                    order.swap(i, j);
                    v.extend_from_slice(&pool[order[i] * (s + 1)..(order[i] + 1) * (s + 1)]);
                }
                v
            }
        });
        let inputs = seq.narrow(1, 0, s).contiguous();
        let labels = seq.narrow(1, 1, s).contiguous();
        (inputs, labels)
    }
}

/// The tensors a Hugging Face training loop binds per step (see [`Batcher::next_causal_lm_batch`]).
#[derive(Default)]
pub struct CausalLmBatch {
    pub input_ids: Option<Tensor>,
    pub labels: Option<Tensor>,
    pub attention_mask: Option<Tensor>,
    /// `torch.arange(S).unsqueeze(0)`, passed to the model under sequence parallelism.
    pub position_ids: Option<Tensor>,
}
