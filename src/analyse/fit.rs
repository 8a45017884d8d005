//! Scaling fits over sweep results: least-squares polynomials (memory = a + b·B per batch
//! size; a + b·S + c·S² per sequence length), their R², and the scaling factor per doubling
//! that seed 002's tables ask for (mem(2x) / mem(x)).
use serde::Serialize;

/// A least-squares polynomial y ≈ Σ coeffs[k]·x^k.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Poly {
    /// Coefficients, constant term first.
    pub coeffs: Vec<f64>,
    /// Coefficient of determination (1 when the fit is exact).
    pub r2: f64,
    /// Points fitted.
    pub n: usize,
}

impl Poly {
    pub fn eval(&self, x: f64) -> f64 {
        self.coeffs.iter().rev().fold(0.0, |acc, c| acc * x + c)
    }
    pub fn coeff(&self, k: usize) -> f64 {
        self.coeffs.get(k).copied().unwrap_or(0.0)
    }
}

/// Least squares of degree `degree` (at most `xs.len() - 1`; None when fewer points than
/// coefficients or the x values do not determine the fit). x is scaled to [-1, 1] before the
/// normal equations are solved, so S² terms at S in the thousands stay well conditioned.
pub fn polyfit(xs: &[f64], ys: &[f64], degree: usize) -> Option<Poly> {
    let powers: Vec<usize> = (0..=degree).collect();
    lstsq(xs, ys, &powers, degree)
}

/// Least squares over the monomials x^k for k in `powers` (the other coefficients up to
/// `degree` are 0).
fn lstsq(xs: &[f64], ys: &[f64], powers: &[usize], degree: usize) -> Option<Poly> {
    let n = xs.len();
    if n != ys.len() || n < powers.len() {
        return None;
    }
    let scale = xs.iter().fold(0.0f64, |m, x| m.max(x.abs()));
    if scale == 0.0 {
        return None;
    }
    let m = powers.len();
    // Normal equations A c = b over t = x / scale.
    let mut a = vec![vec![0.0f64; m + 1]; m];
    for (&x, &y) in xs.iter().zip(ys) {
        let t = x / scale;
        for i in 0..m {
            let ti = t.powi(powers[i] as i32);
            for j in 0..m {
                a[i][j] += ti * t.powi(powers[j] as i32);
            }
            a[i][m] += ti * y;
        }
    }
    // Gaussian elimination with partial pivoting.
    for col in 0..m {
        let piv = (col..m).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, piv);
        for row in 0..m {
            if row != col {
                let f = a[row][col] / a[col][col];
                for k in col..=m {
                    a[row][k] -= f * a[col][k];
                }
            }
        }
    }
    let mut coeffs = vec![0.0; degree + 1];
    for (i, &k) in powers.iter().enumerate() {
        coeffs[k] = a[i][m] / a[i][i] / scale.powi(k as i32);
    }
    let mut p = Poly { coeffs, r2: 1.0, n };
    p.r2 = r_squared(&p, xs, ys);
    Some(p)
}

fn r_squared(p: &Poly, xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len();
    let mean = ys.iter().sum::<f64>() / n as f64;
    let ss_tot: f64 = ys.iter().map(|y| (y - mean).powi(2)).sum();
    let ss_res: f64 = xs.iter().zip(ys).map(|(&x, &y)| (y - p.eval(x)).powi(2)).sum();
    if ss_tot > 0.0 {
        1.0 - ss_res / ss_tot
    } else if ss_res <= 1e-9 * (1.0 + mean * mean) {
        1.0
    } else {
        0.0
    }
}

/// Least squares of degree ≤ 2 with every coefficient ≥ 0: memory is a constant plus
/// terms that grow with x, none of which can be negative, so a fit with a negative term is
/// explaining noise or a jump (a cached block, a phase change) and its "shares" mean
/// nothing. Solved exactly by trying every subset of the monomials (at most 8) and keeping
/// the feasible one with the least residual; equal to [`polyfit`] whenever that is
/// already non-negative. None when no subset can be fitted.
pub fn nonneg_polyfit(xs: &[f64], ys: &[f64], degree: usize) -> Option<Poly> {
    assert!(degree <= 2, "nonneg_polyfit enumerates subsets: degree ≤ 2");
    let mut best: Option<(f64, Poly)> = None;
    for mask in 1u32..(1 << (degree + 1)) {
        let powers: Vec<usize> = (0..=degree).filter(|k| mask & (1 << k) != 0).collect();
        let Some(p) = lstsq(xs, ys, &powers, degree) else { continue };
        if p.coeffs.iter().any(|&c| c < 0.0) {
            continue;
        }
        let res: f64 = xs.iter().zip(ys).map(|(&x, &y)| (y - p.eval(x)).powi(2)).sum();
        if best.as_ref().is_none_or(|(r, _)| res < *r) {
            best = Some((res, p));
        }
    }
    best.map(|(_, p)| p)
}

/// y ≈ a + b·x.
pub fn linear(xs: &[f64], ys: &[f64]) -> Option<Poly> {
    polyfit(xs, ys, 1)
}

/// y ≈ a + b·x + c·x².
pub fn quadratic(xs: &[f64], ys: &[f64]) -> Option<Poly> {
    polyfit(xs, ys, 2)
}

/// How memory grows from one point of an axis to the next.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Step {
    pub from: f64,
    pub to: f64,
    /// y(to) / y(from).
    pub factor: f64,
    /// The factor per doubling of x: factor^(1 / log2(to / from)) (equal to `factor` when
    /// `to` = 2·`from`): 2 for linear growth, 4 for quadratic.
    pub per_doubling: f64,
}

/// Consecutive growth factors over points sorted by x (points with y = 0 or equal x skipped).
pub fn doubling_factors(xs: &[f64], ys: &[f64]) -> Vec<Step> {
    let mut pts: Vec<(f64, f64)> = xs.iter().copied().zip(ys.iter().copied()).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.windows(2)
        .filter(|w| w[0].1 > 0.0 && w[0].0 > 0.0 && w[1].0 > w[0].0)
        .map(|w| {
            let factor = w[1].1 / w[0].1;
            let doublings = (w[1].0 / w[0].0).log2();
            Step { from: w[0].0, to: w[1].0, factor, per_doubling: factor.powf(1.0 / doublings) }
        })
        .collect()
}

/// The share of the fitted value at `x_max` that the x² term carries: c·x² / (a + b·x + c·x²).
/// Meaningful only for a fit whose coefficients are all ≥ 0 ([`nonneg_polyfit`]): then it lies
/// in [0, 1]. None for a fit with a negative coefficient, or a fitted value that is not
/// positive.
pub fn quadratic_share(p: &Poly, x_max: f64) -> Option<f64> {
    let total = p.eval(x_max);
    if !(total > 0.0) || p.coeffs.iter().any(|&c| c < 0.0) {
        return None;
    }
    Some((p.coeff(2) * x_max * x_max / total).clamp(0.0, 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovers_a_line_exactly() {
        let xs = [1.0, 2.0, 4.0, 8.0, 16.0];
        let ys: Vec<f64> = xs.iter().map(|x| 13.6e9 + 2.5e8 * x).collect();
        let p = linear(&xs, &ys).unwrap();
        assert!((p.coeffs[0] - 13.6e9).abs() < 1.0, "{p:?}");
        assert!((p.coeffs[1] - 2.5e8).abs() < 1e-3, "{p:?}");
        assert!((p.r2 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn recovers_a_quadratic_in_sequence_length() {
        // A 2.7B-like curve: fixed state, linear activations, S² attention tensors.
        let (a, b, c) = (5.45e10, 3.0e7, 6.5e4);
        let xs = [128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0];
        let ys: Vec<f64> = xs.iter().map(|s| a + b * s + c * s * s).collect();
        let p = quadratic(&xs, &ys).unwrap();
        assert!((p.coeffs[0] - a).abs() / a < 1e-9, "{p:?}");
        assert!((p.coeffs[1] - b).abs() / b < 1e-7, "{p:?}");
        assert!((p.coeffs[2] - c).abs() / c < 1e-7, "{p:?}");
        assert!(p.r2 > 1.0 - 1e-12);
        assert!(quadratic_share(&p, 4096.0).unwrap() > 0.5);
    }

    #[test]
    fn noisy_data_gives_r2_below_one_and_the_slope_close() {
        let xs: Vec<f64> = (1..=20).map(f64::from).collect();
        let ys: Vec<f64> = xs.iter().enumerate().map(|(i, x)| 100.0 + 7.0 * x + if i % 2 == 0 { 3.0 } else { -3.0 }).collect();
        let p = linear(&xs, &ys).unwrap();
        assert!((p.coeffs[1] - 7.0).abs() < 0.1, "{p:?}");
        assert!(p.r2 < 1.0 && p.r2 > 0.95, "{p:?}");
    }

    #[test]
    fn too_few_points_or_one_x_give_no_fit() {
        assert!(quadratic(&[1.0, 2.0], &[1.0, 2.0]).is_none());
        assert!(linear(&[3.0, 3.0], &[1.0, 2.0]).is_none());
    }

    #[test]
    fn nonneg_fit_keeps_every_term_non_negative_and_its_share_in_0_1() {
        // A flat component with one jump at the end: the free quadratic needs a negative
        // linear term (and its x² "share" exceeds 100 %); the constrained one does not.
        let xs = [1.0, 2.0, 4.0, 8.0];
        let ys = [100.0, 100.0, 100.0, 1000.0];
        let free = quadratic(&xs, &ys).unwrap();
        assert!(free.coeffs.iter().any(|&c| c < 0.0), "{free:?}");
        assert!(quadratic_share(&free, 8.0).is_none(), "a fit with a negative term has no share");
        let p = nonneg_polyfit(&xs, &ys, 2).unwrap();
        assert!(p.coeffs.iter().all(|&c| c >= 0.0), "{p:?}");
        let share = quadratic_share(&p, 8.0).unwrap();
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert!(p.r2 < free.r2 && p.r2 > 0.5, "{p:?} vs {free:?}");
        // Already non-negative data: the same fit as the free one.
        let clean: Vec<f64> = xs.iter().map(|x| 5.0 + 2.0 * x + 0.5 * x * x).collect();
        let (a, b) = (nonneg_polyfit(&xs, &clean, 2).unwrap(), quadratic(&xs, &clean).unwrap());
        for k in 0..3 {
            assert!((a.coeffs[k] - b.coeffs[k]).abs() < 1e-9, "{a:?} vs {b:?}");
        }
        // All-zero component: nothing to share.
        assert!(nonneg_polyfit(&xs, &[0.0; 4], 2).map_or(true, |p| quadratic_share(&p, 8.0).is_none()));
    }

    #[test]
    fn doubling_factors_are_2_for_linear_and_4_for_quadratic() {
        let xs = [64.0, 128.0, 512.0];
        let lin = doubling_factors(&xs, &xs.map(|x| 3.0 * x));
        assert!(lin.iter().all(|s| (s.per_doubling - 2.0).abs() < 1e-12), "{lin:?}");
        assert!((lin[1].factor - 4.0).abs() < 1e-12);
        let quad = doubling_factors(&xs, &xs.map(|x| x * x));
        assert!(quad.iter().all(|s| (s.per_doubling - 4.0).abs() < 1e-12), "{quad:?}");
    }
}
