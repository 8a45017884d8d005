//! Parameter initialisation (seeded, cpu only; meta allocates shapes).
use crate::engine::{DType, Device, Tensor};
use rand::{Rng as _, SeedableRng};
use rand_distr::{Distribution, Normal};

pub struct Rng(rand::rngs::StdRng);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(rand::rngs::StdRng::seed_from_u64(seed))
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n)
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Init {
    Ones,
    /// Every element `value` (a stand-in of the right magnitude where only cpu runs see values).
    Const { value: f64 },
    Normal { std: f64 },
    /// Normal truncated to ±`clip`·std (`nn.init.trunc_normal_`).
    TruncNormal { std: f64, clip: f64 },
}

pub fn make(shape: &[usize], dtype: DType, device: Device, init: Init, rng: &mut Rng) -> Tensor {
    let n: usize = shape.iter().product();
    // Same op name on every device: cpu and meta must record identical events.
    Tensor::compute::<f64>(device, dtype, shape, "empty", &[], || match init {
        Init::Ones => vec![1.0; n],
        Init::Const { value } => vec![value; n],
        Init::Normal { std } => {
            let d = Normal::new(0.0, std).expect("valid std");
            (0..n).map(|_| d.sample(&mut rng.0)).collect()
        }
        Init::TruncNormal { std, clip } => {
            let d = Normal::new(0.0, std).expect("valid std");
            (0..n)
                .map(|_| loop {
                    let v: f64 = d.sample(&mut rng.0);
                    if v.abs() <= clip * std {
                        break v;
                    }
                })
                .collect()
        }
    })
}
