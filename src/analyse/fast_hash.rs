//! The hasher of the maps on the snapshot reader's hot paths (frame lists by content,
//! allocations by address: one lookup per trace entry). SipHash cost a tenth of `analyze`'s
//! time there; foldhash is several times faster. Keys come from files we did not write, so
//! each map's seed is drawn from std's `RandomState` (OS randomness), not from foldhash's
//! own address-space seed: a file cannot be crafted ahead to collide.
use std::hash::{BuildHasher, RandomState};

pub type Seeded = foldhash::fast::SeedableRandomState;
pub type HashMap<K, V> = std::collections::HashMap<K, V, Seeded>;

/// A build-hasher with a fresh random seed.
pub fn seeded() -> Seeded {
    Seeded::with_seed(RandomState::new().hash_one(0u64), foldhash::SharedSeed::global_random())
}

/// An empty map with a fresh random seed.
pub fn map<K, V>() -> HashMap<K, V> {
    HashMap::with_hasher(seeded())
}
