//! How FSDP2 cuts a parameter: `torch.chunk` along dim 0 over the shard group, every rank's
//! storage padded to the largest chunk (`_init_sharded_param`, `_get_dim0_padded_size`).

/// Rows of each rank's padded shard: ⌈rows / ranks⌉.
pub fn padded_rows(rows: usize, ranks: usize) -> usize {
    rows.div_ceil(ranks)
}

/// Rows rank `rank` really holds: `torch.chunk` gives ⌈rows / ranks⌉ rows to each rank in turn
/// until they run out, so trailing ranks may hold fewer, or none.
pub fn local_rows(rows: usize, ranks: usize, rank: usize) -> usize {
    let chunk = padded_rows(rows, ranks);
    rows.saturating_sub(chunk * rank).min(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_torch_chunk() {
        // torch.chunk(torch.arange(10), 4): sizes 3, 3, 3, 1.
        assert_eq!((0..4).map(|r| local_rows(10, 4, r)).collect::<Vec<_>>(), [3, 3, 3, 1]);
        // torch.chunk(torch.arange(5), 4): sizes 2, 2, 1 and nothing for rank 3.
        assert_eq!((0..4).map(|r| local_rows(5, 4, r)).collect::<Vec<_>>(), [2, 2, 1, 0]);
        assert_eq!(padded_rows(5, 4), 2);
        assert_eq!((0..8).map(|r| local_rows(64, 8, r)).sum::<usize>(), 64);
    }
}
