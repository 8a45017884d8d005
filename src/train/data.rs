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
}

impl DataKind {
    pub fn parse(s: &str) -> Option<DataKind> {
        match s {
            "random" => Some(DataKind::Random),
            "pattern" => Some(DataKind::Pattern),
            _ => None,
        }
    }
}

pub const PATTERN_PERIOD: usize = 16;

pub struct Batcher {
    pub kind: DataKind,
    pub vocab: usize,
    pub batch: usize,
    pub seq: usize,
    pub device: Device,
    rng: Rng,
}

impl Batcher {
    pub fn new(kind: DataKind, vocab: usize, batch: usize, seq: usize, device: Device, seed: u64) -> Batcher {
        Batcher { kind, vocab, batch, seq, device, rng: Rng::new(seed ^ 0x9e37_79b9_7f4a_7c15) }
    }

    /// (inputs, labels), each (B, S) int64: a (B, S+1) sequence split into the two shifted
    /// views and made contiguous, as the reference `get_batch` does.
    pub fn next_batch(&mut self) -> (Tensor, Tensor) {
        let _c = runtime::category(Category::Input);
        let _s = runtime::scope("data");
        let (b, s) = (self.batch, self.seq);
        let ids: Vec<i64> = if self.device == Device::Meta {
            vec![0; b * (s + 1)]
        } else {
            match self.kind {
                DataKind::Random => (0..b * (s + 1)).map(|_| self.rng.below(self.vocab) as i64).collect(),
                DataKind::Pattern => {
                    let period = PATTERN_PERIOD.min(self.vocab);
                    let mut v = Vec::with_capacity(b * (s + 1));
                    for _ in 0..b {
                        let phase = self.rng.below(period);
                        v.extend((0..=s).map(|i| ((phase + i) % period) as i64));
                    }
                    v
                }
            }
        };
        let seq = Tensor::from_i64(&ids, &[b, s + 1], self.device);
        let inputs = seq.narrow(1, 0, s).contiguous();
        let labels = seq.narrow(1, 1, s).contiguous();
        (inputs, labels)
    }
}
