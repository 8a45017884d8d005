//! `--allocator-conf` / `PYTORCH_CUDA_ALLOC_CONF` parsing and the size rules that use it.
//! Never a panic; an error names the setting or the text it could not use; an accepted
//! configuration is valid (divisions 0 or powers of two, split limit above 20 MiB) and its
//! rounding never shrinks a request; the allocator runs with it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::record::allocator::{allocation_size, round_size, AllocatorConfig, CachingAllocator, MIN_BLOCK};

/// The one call site of the parser.
fn parse(s: &str) -> Result<AllocatorConfig, String> {
    AllocatorConfig::parse(s)
}

const KEYS: [&str; 10] = AllocatorConfig::SETTINGS;

fuzz_target!(|data: &[u8]| {
    // The first 8 bytes (when present) are a request size for the rounding rules.
    let (size, text) = match data.split_first_chunk::<8>() {
        Some((s, rest)) => (usize::from_le_bytes(*s), rest),
        None => (0, data),
    };
    let Ok(s) = std::str::from_utf8(text) else { return };
    match parse(s) {
        Err(e) => {
            let names_key = KEYS.iter().any(|k| e.starts_with(&format!("{k}:")));
            let quotes_input = quotes_a_piece_of(&e, s);
            assert!(names_key || quotes_input, "error names neither a setting nor the input's text: {e:?} for {s:?}");
        }
        Ok(c) => {
            assert_eq!(parse(s).as_ref(), Ok(&c), "parsing is not deterministic");
            assert!(c.roundup_power2_divisions.iter().all(|&d| d == 0 || d.is_power_of_two()));
            assert!(c.max_split_size.is_none_or(|m| m > 20 << 20));
            assert!(c.max_non_split_rounding >= 20 << 20);
            assert!(c.garbage_collection_threshold.is_none_or(|t| t > 0.0 && t < 1.0));
            let r = round_size(size, &c.roundup_power2_divisions);
            assert!(r >= size && r >= MIN_BLOCK, "round_size({size}) = {r}");
            assert!(r.is_multiple_of(MIN_BLOCK) || r == usize::MAX, "round_size({size}) = {r} is not a multiple of {MIN_BLOCK}");
            let a = allocation_size(r);
            assert!(a >= r, "allocation_size({r}) = {a}");
            // The configuration in the allocator: a request (below 1 TiB, so that sizes
            // themselves cannot overflow) on a 1 TiB device, its free, and one more.
            let mut alloc = CachingAllocator::new(c, 1 << 40);
            let req = size % (1 << 40);
            if let Ok(addr) = alloc.malloc(req) {
                alloc.free(addr);
            }
            let _ = alloc.malloc(req / 2 + 1);
        }
    }
});

/// Does `e` hold `'x'` for some non-empty piece `x` of `s` (which may contain quotes itself)?
fn quotes_a_piece_of(e: &str, s: &str) -> bool {
    let quotes: Vec<usize> = e.match_indices('\'').map(|(i, _)| i).collect();
    quotes.iter().enumerate().any(|(k, &a)| quotes[k + 1..].iter().any(|&b| b > a + 1 && s.contains(&e[a + 1..b])))
}
