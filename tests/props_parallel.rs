//! Properties of the per-rank planner: which ranks can differ (`distinct_ranks`), ZeRO-1's
//! partition (`zero_assignment`) and its heaviest rank are the same as a rank-by-rank
//! reference over small worlds, and work per parameter, not per rank (a 2^24-rank world is
//! planned at once).
use proptest::prelude::*;
use vramscope::parallel::ddp::{zero_assignment, zero_partition};
use vramscope::parallel::shard::local_rows;
use vramscope::parallel::{distinct_ranks, heaviest_rank, Layout, ParallelConfig};

/// The rank-by-rank definition: every rank's local rows, the first rank of each new set.
fn distinct_reference(shapes: &[Vec<usize>], group: usize) -> Vec<usize> {
    let mut seen: Vec<Vec<usize>> = Vec::new();
    let mut ranks = Vec::new();
    for r in 0..group {
        let sig: Vec<usize> = shapes.iter().map(|s| local_rows(s[0], group, r)).collect();
        if !seen.contains(&sig) {
            seen.push(sig);
            ranks.push(r);
        }
    }
    ranks
}

/// `_partition_parameters` as written: each parameter, largest first, to the lightest rank.
fn zero_reference(numels: &[usize], world: usize) -> Vec<Vec<usize>> {
    let mut by_size: Vec<usize> = (0..numels.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(numels[i]));
    let mut sizes = vec![0usize; world];
    let mut parts = vec![Vec::new(); world];
    for i in by_size {
        let r = (0..world).min_by_key(|&r| (sizes[r], r)).unwrap();
        sizes[r] += numels[i];
        parts[r].push(i);
    }
    parts
}

fn shapes() -> impl Strategy<Value = Vec<Vec<usize>>> {
    prop::collection::vec((0usize..300, 1usize..4).prop_map(|(r, c)| vec![r, c]), 0..12)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn distinct_ranks_equal_the_rank_by_rank_reference(shapes in shapes(), world in 1usize..70) {
        let pc = ParallelConfig::new(Layout::Fsdp, world);
        prop_assert_eq!(distinct_ranks(&shapes, &pc), distinct_reference(&shapes, world));
    }

    #[test]
    fn zero_partitions_equal_the_greedy_reference(numels in prop::collection::vec(prop_oneof![Just(0usize), 1usize..50, 1usize..5000], 0..25), world in 1usize..40) {
        let want = zero_reference(&numels, world);
        for (r, part) in want.iter().enumerate() {
            prop_assert_eq!(&zero_partition(&numels, world, r), part);
        }
        prop_assert_eq!(zero_assignment(&numels, world).len(), numels.len());
        let shapes: Vec<Vec<usize>> = numels.iter().map(|&n| vec![n]).collect();
        let loads: Vec<usize> = want.iter().map(|p| p.iter().map(|&i| numels[i]).sum()).collect();
        let heaviest = (0..world).max_by_key(|&r| (loads[r], std::cmp::Reverse(r))).unwrap();
        prop_assert_eq!(heaviest_rank(&shapes, &ParallelConfig::new(Layout::Zero1, world)), heaviest);
    }
}

#[test]
fn the_planner_takes_no_time_per_rank() {
    let shapes: Vec<Vec<usize>> = (0..400).map(|i| vec![4096 + i, 4096]).collect();
    let world = vramscope::parallel::config::MAX_RANKS;
    for layout in [Layout::Fsdp, Layout::Zero2, Layout::Zero1] {
        let pc = ParallelConfig::new(layout, world);
        assert!(pc.validate().is_ok());
        assert!(!distinct_ranks(&shapes, &pc).is_empty());
    }
    let numels: Vec<usize> = shapes.iter().map(|s| s.iter().product()).collect();
    assert_eq!(zero_partition(&numels, world, world - 1), Vec::<usize>::new());
    // (Rank-by-rank work over 2^24 ranks and 400 parameters would take minutes here.)
    let e = ParallelConfig::new(Layout::Fsdp, world + 1).validate().unwrap_err();
    assert_eq!(e.0, "--world-size", "{e:?}");
}
