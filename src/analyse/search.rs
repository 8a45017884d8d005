//! Searches over a monotone "does it fit?" (`fit`'s probes): exponential steps from a start,
//! then bisection between the last two answers. Each probe is a whole meta profile, so the
//! searches ask as few as they can and never the same value twice in a row.

/// The largest `n` in `start..=cap` for which `fits(n)` holds, for a `fits` that holds up to
/// some value and not beyond: (that `n`, the smallest `n` found not to fit). `(None,
/// Some(start))` when `start` does not fit; the second is None when `cap` fits.
pub fn largest<E>(start: usize, cap: usize, mut fits: impl FnMut(usize) -> Result<bool, E>) -> Result<(Option<usize>, Option<usize>), E> {
    if !fits(start)? {
        return Ok((None, Some(start)));
    }
    // Exponential: lo fits; double until one does not or the cap is reached.
    let mut lo = start;
    let mut hi = None;
    while lo < cap {
        let n = lo.saturating_mul(2).min(cap);
        if fits(n)? {
            lo = n;
        } else {
            hi = Some(n);
            break;
        }
    }
    // Binary: lo fits, hi does not.
    if let Some(h) = hi {
        let (l, h) = bisect(lo, h, &mut fits)?;
        (lo, hi) = (l, Some(h));
    }
    Ok((Some(lo), hi))
}

/// The smallest `n` in `1..=cap` for which `fits(n)` holds, for a `fits` that fails up to some
/// value and holds beyond (per-rank memory falls as ranks are added); None when `cap` does not fit.
pub fn smallest<E>(cap: usize, mut fits: impl FnMut(usize) -> Result<bool, E>) -> Result<Option<usize>, E> {
    let mut hi = None;
    let mut lo = 0; // largest known not to fit (0: none tried)
    let mut n = 1;
    while n <= cap {
        if fits(n)? {
            hi = Some(n);
            break;
        }
        lo = n;
        if n == cap {
            break;
        }
        n = n.saturating_mul(2).min(cap);
    }
    // Binary: lo does not fit (or is 0), hi does.
    match hi {
        Some(h) => Ok(Some(bisect(lo, h, |n| fits(n).map(|f| !f))?.1)),
        None => Ok(None),
    }
}

/// Narrows `lo < hi` to adjacent values, where `lo_side(n)` says whether `n` answers as `lo`
/// did (and `hi` did not): the last `lo`-side value and the first `hi`-side one.
fn bisect<E>(mut lo: usize, mut hi: usize, mut lo_side: impl FnMut(usize) -> Result<bool, E>) -> Result<(usize, usize), E> {
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if lo_side(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(f: impl Fn(usize) -> bool) -> impl FnMut(usize) -> Result<bool, ()> {
        move |n| Ok(f(n))
    }

    #[test]
    fn largest_finds_the_boundary_anywhere() {
        for limit in 1..70 {
            assert_eq!(largest(1, 64, calls(|n| n <= limit)).unwrap(), (Some(limit.min(64)), (limit < 64).then_some(limit + 1)));
        }
        assert_eq!(largest(2, 64, calls(|_| false)).unwrap(), (None, Some(2)));
    }

    #[test]
    fn smallest_finds_the_boundary_anywhere() {
        for need in 1..70 {
            assert_eq!(smallest(64, calls(|n| n >= need)).unwrap(), (need <= 64).then_some(need));
        }
        assert_eq!(smallest(1, calls(|_| false)).unwrap(), None);
    }
}
