//! Properties of the snapshot pickle reader and writer (the `pickle_read` fuzz target's, on
//! stable): arbitrary value trees with shared sub-trees round-trip with their sharing, and
//! no mutation or truncation of a seed pickle panics the reader or gets an error offset
//! outside the input.
mod props_common;

use props_common::*;
use proptest::prelude::*;
use std::collections::HashSet;
use std::rc::Rc;
use vramscope::pickle::{write, Value};

/// A value tree whose `Ref` nodes reuse a container built earlier, so the result shares
/// sub-trees (and the same container may sit under several parents).
#[derive(Clone, Debug)]
enum Tree {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<Tree>),
    Tuple(Vec<Tree>),
    Dict(Vec<(Tree, Tree)>),
    Ref(usize),
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        -300i64..300,
        Just(i64::MIN),
        Just(i64::MAX),
        Just(i32::MIN as i64),
        Just(i32::MAX as i64 + 1),
        Just(1 << 31),
        Just(-(1 << 31) - 1),
    ]
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        Just(Tree::None),
        any::<bool>().prop_map(Tree::Bool),
        int().prop_map(Tree::Int),
        any::<f64>().prop_map(Tree::Float),
        Just(Tree::Float(f64::NAN)),
        Just(Tree::Float(-0.0)),
        "\\PC{0,12}".prop_map(Tree::Str),
        // Long enough for the 4-byte length forms.
        (0usize..3).prop_map(|k| Tree::Str("é".repeat([0, 200, 40_000][k]))),
        prop::collection::vec(any::<u8>(), 0..20).prop_map(Tree::Bytes),
        (0usize..64).prop_map(Tree::Ref),
    ];
    leaf.prop_recursive(6, 400, 12, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..12).prop_map(Tree::List),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Tree::Tuple),
            prop::collection::vec((inner.clone(), inner), 0..6).prop_map(Tree::Dict),
        ]
    })
}

/// Build the value; containers go to `pool` in the order they are finished, and `Ref(k)`
/// takes pool entry `k mod len` (a leaf when the pool is still empty).
fn build(t: &Tree, pool: &mut Vec<Value>) -> Value {
    let v = match t {
        Tree::None => return Value::None,
        Tree::Bool(b) => return Value::Bool(*b),
        Tree::Int(i) => return Value::Int(*i),
        Tree::Float(f) => return Value::Float(*f),
        Tree::Str(s) => return Value::str(s),
        Tree::Bytes(b) => return Value::Bytes(b.clone()),
        Tree::Ref(k) => return if pool.is_empty() { Value::Int(*k as i64) } else { pool[k % pool.len()].clone() },
        Tree::List(items) => Value::list(items.iter().map(|t| build(t, pool)).collect()),
        Tree::Tuple(items) => Value::tuple(items.iter().map(|t| build(t, pool)).collect()),
        Tree::Dict(items) => Value::Dict(Rc::new(items.iter().map(|(k, v)| (build(k, pool), build(v, pool))).collect())),
    };
    pool.push(v.clone());
    v
}

/// Distinct containers and references to them: the sharing a round trip must keep.
fn sharing(v: &Value) -> (usize, usize) {
    fn walk(v: &Value, seen: &mut HashSet<*const ()>, refs: &mut usize) {
        let (ptr, kids): (*const (), Vec<&Value>) = match v {
            Value::List(x) | Value::Tuple(x) => (Rc::as_ptr(x).cast(), x.iter().collect()),
            Value::Dict(x) => (Rc::as_ptr(x).cast(), x.iter().flat_map(|(k, v)| [k, v]).collect()),
            _ => return,
        };
        *refs += 1;
        if seen.insert(ptr) {
            for k in kids {
                walk(k, seen, refs);
            }
        }
    }
    let (mut seen, mut refs) = (HashSet::new(), 0);
    walk(v, &mut seen, &mut refs);
    (seen.len(), refs)
}

#[test]
fn arbitrary_trees_with_shared_subtrees_round_trip() {
    runner(256)
        .run(&tree(), |t| {
            let v = build(&t, &mut Vec::new());
            let bytes = write(&v);
            let back = read_pickle(&bytes).map_err(|e| TestCaseError::fail(format!("our own pickle refused: {e}")))?;
            prop_assert!(back == v, "value changed in the round trip");
            prop_assert_eq!(sharing(&back), sharing(&v), "(distinct containers, references) changed");
            prop_assert_eq!(write(&back), bytes, "writing is not stable");
            Ok(())
        })
        .unwrap();
}

/// Seeds: CPython's pickles of every protocol, the fuzz corpus (vramscope snapshots and the
/// shared-reference bombs) and, when present, the hostile snapshots of issue #15.
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut s = cpython_seeds();
    s.extend(fuzz_seeds("pickle_read"));
    // Hostile files up to 1 MiB (each case copies and reads its seed).
    s.extend(hostile_seeds().into_iter().filter(|(_, d)| d.len() <= 1 << 20));
    assert!(s.len() >= 8, "seed corpus missing: {} files", s.len());
    s
}

#[derive(Clone, Debug)]
enum Edit {
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    /// Copy a slice elsewhere (repeats opcodes, memo references, lengths).
    Splice(usize, usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let pos = any::<prop::sample::Index>();
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Edit::Set(p, b)),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..9)).prop_map(|(p, b)| Edit::Insert(p, b)),
        1 => (any::<usize>(), 1usize..64).prop_map(|(p, n)| Edit::Remove(p, n)),
        1 => (pos.clone(), 1usize..64, pos).prop_map(|(a, n, b)| Edit::Splice(a.index(1 << 20), n, b.index(1 << 20))),
    ]
}

fn apply(data: &mut Vec<u8>, e: &Edit) {
    let len = data.len().max(1);
    match e {
        Edit::Set(p, b) if !data.is_empty() => data[p % len] = *b,
        Edit::Insert(p, b) => {
            let at = p % (data.len() + 1);
            data.splice(at..at, b.iter().copied());
        }
        Edit::Remove(p, n) if !data.is_empty() => {
            let at = p % len;
            data.drain(at..(at + n).min(data.len()));
        }
        Edit::Splice(a, n, b) if !data.is_empty() => {
            let from = a % len;
            let piece = data[from..(from + n).min(data.len())].to_vec();
            let at = b % (data.len() + 1);
            data.splice(at..at, piece);
        }
        _ => {}
    }
}

#[test]
fn mutated_and_truncated_seed_pickles_never_panic_and_errors_point_inside() {
    let seeds = seeds();
    let n = seeds.len();
    let case = (0..n, prop::collection::vec(edit(), 0..6), any::<prop::sample::Index>(), any::<bool>());
    runner(384)
        .run(&case, |(k, edits, cut, truncate)| {
            let mut data = seeds[k].1.clone();
            for e in &edits {
                apply(&mut data, e);
            }
            if truncate {
                data.truncate(cut.index(data.len() + 1));
            }
            match read_pickle(&data) {
                Err(e) => prop_assert!(e.offset <= data.len(), "{}: offset {} past {} bytes: {e}", seeds[k].0, e.offset, data.len()),
                Ok(v) => {
                    let again = read_pickle(&write(&v)).map_err(|e| TestCaseError::fail(format!("re-read of our pickle: {e}")))?;
                    prop_assert!(again == v);
                }
            }
            Ok(())
        })
        .unwrap();
}

/// Every prefix of every readable seed that ends at its STOP is refused with an offset
/// inside the prefix (no proper prefix of such a pickle is complete).
#[test]
fn every_truncation_of_the_seeds_is_an_error_inside_the_input() {
    let complete: Vec<_> =
        seeds().into_iter().filter(|(_, d)| d.len() <= 64 << 10 && d.last() == Some(&b'.') && read_pickle(d).is_ok()).collect();
    assert!(complete.len() >= 8, "only {} readable seeds", complete.len());
    for (name, data) in &complete {
        let step = (data.len() / 512).max(1);
        for cut in (0..data.len()).step_by(step) {
            match read_pickle(&data[..cut]) {
                Err(e) => assert!(e.offset <= cut, "{name}[..{cut}]: offset {}: {e}", e.offset),
                Ok(_) => panic!("{name}[..{cut}] of {} bytes was accepted", data.len()),
            }
        }
    }
}

/// The committed bomb seeds are exactly what the builders write (regenerate them with
/// `VRAMSCOPE_WRITE_FUZZ_SEEDS=1 cargo test --test props_pickle`), and the reader takes
/// each without unfolding its sharing.
#[test]
fn fuzz_seed_bombs_are_the_builders_pickles_and_read_back_shared() {
    let write_them = std::env::var_os("VRAMSCOPE_WRITE_FUZZ_SEEDS").is_some();
    for (name, v) in seed_bombs() {
        let bytes = write(&v);
        assert!(bytes.len() <= 64 << 10, "{name}: {} bytes, over the fuzzers' input length", bytes.len());
        let back = read_pickle(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(sharing(&back), sharing(&v), "{name}");
        for target in ["pickle_read", "snapshot_report"] {
            let path = root().join("fuzz/corpus").join(target).join(name);
            if write_them {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
            }
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(committed == bytes, "{} differs from its builder's pickle", path.display());
        }
    }
}
