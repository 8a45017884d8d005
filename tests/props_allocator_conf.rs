//! Properties of `--allocator-conf` / `PYTORCH_CUDA_ALLOC_CONF` parsing (the
//! `allocator_conf` fuzz target's, on stable): random keys and values (huge numbers,
//! negative, fractional, bracketed lists, garbage) never panic; a refusal names the setting
//! or quotes the text it could not use; an accepted configuration is valid and its size
//! rounding never shrinks a request nor wraps.
mod props_common;

use props_common::*;
use proptest::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use vramscope::record::allocator::{allocation_size, round_size, AllocatorConfig, MIN_BLOCK};

const KEYS: [&str; 10] = AllocatorConfig::SETTINGS;

/// The one call site of the parser.
fn parse(s: &str) -> Result<AllocatorConfig, String> {
    AllocatorConfig::parse(s)
}

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..5000).prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0u32..64).prop_map(|k| (1u128 << k).to_string()),
        (0u32..128).prop_map(|k| (1u128 << k).to_string()),
        Just(usize::MAX.to_string()),
        Just("340282366920938463463374607431768211456".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| f.to_string()),
        Just("NaN".into()),
        Just("inf".into()),
        Just("-0".into()),
        Just("".into()),
        Just("0x10".into()),
    ]
}

fn value() -> impl Strategy<Value = String> {
    let item = prop_oneof![
        (number(), number()).prop_map(|(a, b)| format!("{a}:{b}")),
        number().prop_map(|b| format!(">:{b}")),
        "[^,\\]]{0,6}",
    ];
    prop_oneof![
        4 => number(),
        2 => prop::collection::vec(item, 0..6).prop_map(|v| format!("[{}]", v.join(","))),
        1 => prop::sample::select(vec!["True", "False", "true", "false", "native", "cudaMallocAsync", "[", "]", "[1:2"]).prop_map(String::from),
        1 => "\\PC{0,10}",
    ]
}

fn conf() -> impl Strategy<Value = String> {
    let key = prop_oneof![6 => prop::sample::select(KEYS.to_vec()).prop_map(String::from), 1 => "[a-z_ :]{0,12}", 1 => "\\PC{0,8}"];
    let sep = prop::sample::select(vec![",", ", ", " ,", ",,", ";"]);
    prop::collection::vec((key, prop::sample::select(vec![":", ": ", " : ", "="]), value(), sep), 0..5)
        .prop_map(|items| items.into_iter().map(|(k, c, v, s)| format!("{k}{c}{v}{s}")).collect::<String>())
}

/// An accepted configuration is one PyTorch would accept, and rounding with it is sound.
fn check_accepted(s: &str, c: &AllocatorConfig, sizes: &[usize]) -> Result<(), TestCaseError> {
    prop_assert_eq!(&parse(s).map_err(TestCaseError::fail)?, c, "parsing twice differs");
    prop_assert!(c.roundup_power2_divisions.iter().all(|&d| d == 0 || d.is_power_of_two()), "{:?}", c.roundup_power2_divisions);
    prop_assert!(c.max_split_size.is_none_or(|m| m > 20 << 20));
    prop_assert!(c.max_non_split_rounding >= 20 << 20);
    prop_assert!(c.garbage_collection_threshold.is_none_or(|t| t > 0.0 && t < 1.0));
    for &size in sizes {
        let r = round_size(size, &c.roundup_power2_divisions);
        prop_assert!(r >= size && r >= MIN_BLOCK, "round_size({}) = {}", size, r);
        prop_assert!(r.is_multiple_of(MIN_BLOCK) || r == usize::MAX, "round_size({}) = {}", size, r);
        // A rounded size is a fixed point.
        prop_assert_eq!(round_size(r, &c.roundup_power2_divisions), r);
        prop_assert!(allocation_size(r) >= r);
    }
    Ok(())
}

/// A refusal names a setting (`key: …`) or quotes a piece of the input.
fn check_refused(s: &str, e: &str) -> Result<(), TestCaseError> {
    let names_key = KEYS.iter().any(|k| e.starts_with(&format!("{k}:")));
    let quotes_input = quotes_a_piece_of(e, s);
    prop_assert!(names_key || quotes_input, "error {:?} names neither a setting nor the text of {:?}", e, s);
    Ok(())
}

fn sizes() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![0usize..1 << 22, any::<usize>(), (0u32..64).prop_map(|k| 1usize << k), (0usize..1024).prop_map(|d| usize::MAX - d)], 4)
}

#[test]
fn generated_confs_never_panic_and_refusals_name_what_is_wrong() {
    let accepted = AtomicUsize::new(0);
    runner(4096)
        .run(&(conf(), sizes()), |(s, sizes)| match parse(&s) {
            Ok(c) => {
                accepted.fetch_add(1, Ordering::Relaxed);
                check_accepted(&s, &c, &sizes)
            }
            Err(e) => check_refused(&s, &e),
        })
        .unwrap();
    // Both sides are exercised: a generator that only made garbage would test little.
    let accepted = accepted.into_inner();
    assert!((400..3700).contains(&accepted), "{accepted} of 4096 generated confs accepted");
}

#[test]
fn arbitrary_strings_never_panic() {
    runner(2048)
        .run(&("\\PC{0,40}", sizes()), |(s, sizes)| match parse(&s) {
            Ok(c) => check_accepted(&s, &c, &sizes),
            Err(e) => check_refused(&s, &e),
        })
        .unwrap();
}

/// The fuzz target's seeds (8 bytes of request size, then the conf string) hold the same.
#[test]
fn fuzz_seed_confs_hold_the_properties() {
    let seeds = fuzz_seeds("allocator_conf");
    assert!(seeds.len() >= 8, "fuzz/corpus/allocator_conf seeds missing");
    let mut accepted = 0;
    for (name, data) in &seeds {
        let (size, text) = data.split_first_chunk::<8>().expect("8-byte size prefix");
        let s = std::str::from_utf8(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = match parse(s) {
            Ok(c) => {
                accepted += 1;
                check_accepted(s, &c, &[usize::from_le_bytes(*size)])
            }
            Err(e) => check_refused(s, &e),
        };
        r.unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert!(accepted >= 8, "only {accepted} of the seed confs parse");
}

/// Does `e` hold `'x'` for some non-empty piece `x` of `s` (which may contain quotes itself)?
fn quotes_a_piece_of(e: &str, s: &str) -> bool {
    let quotes: Vec<usize> = e.match_indices('\'').map(|(i, _)| i).collect();
    quotes.iter().enumerate().any(|(k, &a)| quotes[k + 1..].iter().any(|&b| b > a + 1 && s.contains(&e[a + 1..b])))
}
