//! Finite-difference gradient checks for every differentiable op, in f64 (central
//! differences, eps 1e-6), including broadcasting and non-contiguous (transposed, sliced,
//! expanded) inputs.
use vramscope::engine::{DType, Device, Tensor};

fn rand_vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn leaf(vals: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_f64(vals, shape, DType::F64, Device::Cpu).requires_grad_(true)
}

/// Checks d(sum(f(x) * w))/dx against central differences for every input element.
fn check(name: &str, shapes: &[&[usize]], positive: bool, f: impl Fn(&[Tensor]) -> Tensor) {
    let vals: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = s.iter().product();
            let v = rand_vals(n, 7 + i as u64 * 31);
            if positive { v.iter().map(|x| x.abs() + 0.5).collect() } else { v }
        })
        .collect();
    let inputs: Vec<Tensor> = vals.iter().zip(shapes).map(|(v, s)| leaf(v, s)).collect();
    let y = f(&inputs);
    let w = Tensor::from_f64(&rand_vals(y.numel(), 99), y.shape(), DType::F64, Device::Cpu);
    let loss = y.mul(&w).sum_all();
    loss.backward();
    let eval = |vals: &[Vec<f64>]| -> f64 {
        let _ng = vramscope::engine::runtime::no_grad();
        let ins: Vec<Tensor> = vals.iter().zip(shapes).map(|(v, s)| Tensor::from_f64(v, s, DType::F64, Device::Cpu)).collect();
        f(&ins).mul(&w).sum_all().item()
    };
    let eps = 1e-6;
    for (i, inp) in inputs.iter().enumerate() {
        let g = inp.grad().unwrap_or_else(|| panic!("{name}: input {i} got no gradient")).to_vec_f64();
        for j in 0..vals[i].len() {
            let mut p = vals.clone();
            p[i][j] += eps;
            let up = eval(&p);
            p[i][j] -= 2.0 * eps;
            let down = eval(&p);
            let num = (up - down) / (2.0 * eps);
            let tol = 1e-6 * (1.0 + num.abs());
            assert!((g[j] - num).abs() < tol, "{name}: input {i} element {j}: analytic {} vs numeric {}", g[j], num);
        }
    }
}

#[test]
fn binary_ops_with_broadcasting() {
    check("add", &[&[3, 4], &[4]], false, |x| x[0].add(&x[1]));
    check("sub", &[&[2, 1, 4], &[3, 1]], false, |x| x[0].sub(&x[1]));
    check("mul", &[&[2, 3, 4], &[2, 3, 1]], false, |x| x[0].mul(&x[1]));
    check("div", &[&[2, 3], &[3]], true, |x| x[0].div(&x[1]));
    check("mul same input", &[&[5]], false, |x| x[0].mul(&x[0]));
}

#[test]
fn binary_ops_on_non_contiguous_inputs() {
    check("mul transposed", &[&[3, 4], &[4, 3]], false, |x| x[0].mul(&x[1].t()));
    check("add sliced", &[&[4, 6], &[4, 3]], false, |x| x[0].slice(1, 0, 6, 2).add(&x[1]));
    check("div expanded", &[&[3, 1], &[3, 5]], true, |x| x[1].div(&x[0].expand(&[3, 5])));
}

#[test]
fn scalar_ops() {
    check("add_scalar", &[&[3, 2]], false, |x| x[0].add_scalar(1.5));
    check("mul_scalar", &[&[3, 2]], false, |x| x[0].mul_scalar(-2.5));
    check("div_scalar", &[&[3, 2]], false, |x| x[0].div_scalar(3.0));
    check("rsub_scalar", &[&[3, 2]], false, |x| x[0].rsub_scalar(1.0));
}

#[test]
fn unary_ops() {
    check("neg", &[&[4]], false, |x| x[0].neg());
    check("exp", &[&[2, 3]], false, |x| x[0].exp());
    check("log", &[&[2, 3]], true, |x| x[0].log());
    check("sqrt", &[&[2, 3]], true, |x| x[0].sqrt());
    check("rsqrt", &[&[2, 3]], true, |x| x[0].rsqrt());
    check("square", &[&[2, 3]], false, |x| x[0].square());
    check("pow 3", &[&[2, 3]], true, |x| x[0].pow_scalar(3.0));
    check("sigmoid", &[&[2, 3]], false, |x| x[0].sigmoid());
    check("silu", &[&[2, 3]], false, |x| x[0].silu());
    check("exp of transposed", &[&[2, 3]], false, |x| x[0].t().exp());
}

#[test]
fn reductions() {
    check("sum keepdim", &[&[2, 3, 4]], false, |x| x[0].sum_dim(-1, true));
    check("sum dim 1", &[&[2, 3, 4]], false, |x| x[0].sum_dim(1, false));
    check("sum_all", &[&[2, 3]], false, |x| x[0].sum_all());
    check("mean keepdim", &[&[2, 5]], false, |x| x[0].mean_dim(-1, true));
    check("mean dim 0", &[&[3, 2]], false, |x| x[0].mean_dim(0, false));
    check("mean_all", &[&[2, 3]], false, |x| x[0].mean_all());
    check("max values", &[&[3, 5]], false, |x| x[0].max_dim(-1, true).0);
    check("max values, no keepdim, transposed", &[&[5, 3]], false, |x| x[0].t().max_dim(-1, false).0);
}

#[test]
fn matrix_products() {
    check("mm", &[&[3, 4], &[4, 5]], false, |x| x[0].mm(&x[1]));
    check("mm transposed weight", &[&[3, 4], &[5, 4]], false, |x| x[0].mm(&x[1].t()));
    check("mm transposed input", &[&[4, 3], &[4, 5]], false, |x| x[0].t().mm(&x[1]));
    check("bmm", &[&[2, 3, 4], &[2, 4, 2]], false, |x| x[0].bmm(&x[1]));
    check("matmul fold (linear)", &[&[2, 3, 4], &[5, 4]], false, |x| x[0].matmul(&x[1].t()));
    check("matmul 4d", &[&[2, 2, 3, 4], &[2, 2, 4, 3]], false, |x| x[0].matmul(&x[1]));
    check("matmul 4d with transposed key", &[&[2, 2, 3, 4], &[2, 2, 3, 4]], false, |x| x[0].matmul(&x[1].transpose(-2, -1)));
    check("matmul of permuted views", &[&[2, 3, 2, 4], &[2, 3, 2, 4]], false, |x| {
        let q = x[0].transpose(1, 2);
        let v = x[1].transpose(1, 2);
        q.matmul(&v.transpose(-2, -1))
    });
    check("matmul broadcast batch", &[&[2, 3, 4], &[1, 4, 2]], false, |x| x[0].matmul(&x[1]));
}

#[test]
fn fused_nn_ops() {
    check("softmax", &[&[3, 5]], false, |x| x[0].softmax(-1));
    check("softmax of transposed", &[&[5, 3]], false, |x| x[0].t().softmax(-1));
    check("log_softmax", &[&[3, 5]], false, |x| x[0].log_softmax(-1));
    let tgt = Tensor::from_i64(&[1, 0, 4], &[3], Device::Cpu);
    check("cross_entropy", &[&[3, 5]], false, |x| x[0].cross_entropy(&tgt));
    check("nll_loss", &[&[3, 5]], false, |x| x[0].nll_loss(&tgt));
    let ids = Tensor::from_i64(&[1, 3, 1, 0, 2, 3], &[2, 3], Device::Cpu);
    check("embedding (repeated ids)", &[&[4, 3]], false, |x| x[0].embedding(&ids));
    let gi = Tensor::from_i64(&[0, 2, 1, 1, 3, 0], &[3, 2], Device::Cpu);
    check("gather", &[&[3, 4]], false, |x| x[0].gather(1, &gi));
    let mask = {
        let a = Tensor::arange(4, Device::Cpu);
        a.reshape(&[4, 1]).ge(&a.reshape(&[1, 4])).reshape(&[1, 4, 4])
    };
    check("where", &[&[2, 4, 4]], false, |x| x[0].where_scalar(&mask, 0.25));
}

#[test]
fn shape_ops() {
    check("cat", &[&[2, 3], &[2, 2]], false, |x| Tensor::cat(&[x[0].clone(), x[1].clone()], 1));
    check("stack", &[&[2, 3], &[2, 3]], false, |x| Tensor::stack(&[x[0].clone(), x[1].clone()], -1));
    check("repeat_interleave", &[&[2, 2, 3]], false, |x| x[0].repeat_interleave(3, 1));
    check("reshape copy", &[&[2, 3, 4]], false, |x| x[0].transpose(0, 1).reshape(&[3, 8]));
    check("permute", &[&[2, 3, 4]], false, |x| x[0].permute(&[2, 0, 1]).mul_scalar(2.0));
    check("select", &[&[3, 4]], false, |x| x[0].select(1, 2));
    check("strided slice", &[&[3, 6]], false, |x| x[0].slice(-1, 1, 6, 2));
    check("expand", &[&[3, 1]], false, |x| x[0].expand(&[2, 3, 4]));
    check("contiguous", &[&[3, 4]], false, |x| x[0].t().contiguous());
    check("unsqueeze/squeeze", &[&[3, 4]], false, |x| x[0].unsqueeze(1).squeeze(1));
}

#[test]
fn casts_pass_gradients_through() {
    // f32 rounding makes finite differences meaningless here; the gradient is exact instead.
    let x = leaf(&[0.5, -1.25, 3.0], &[3]);
    let y = x.to_dtype(DType::F32).mul_scalar(2.0).to_dtype(DType::F64);
    assert_eq!(y.dtype(), DType::F64);
    y.sum_all().backward();
    assert_eq!(x.grad().unwrap().to_vec_f64(), vec![2.0, 2.0, 2.0]);
    assert_eq!(x.grad().unwrap().dtype(), DType::F64);
}

/// Forward values of the strided kernels (gather, broadcasting, cat, sum_to_shape) on
/// transposed and sliced f32 inputs, against indexing done by hand.
#[test]
fn strided_kernels_match_hand_indexing() {
    let (a, b, c) = (3usize, 40usize, 300usize); // large enough for the parallel paths
    let vals: Vec<f64> = rand_vals(a * b * c, 5);
    let x = Tensor::from_f64(&vals, &[a, b, c], DType::F32, Device::Cpu);
    let at = |i: usize, j: usize, k: usize| vals[(i * b + j) * c + k] as f32 as f64;
    // transpose(0, 2).contiguous(): (c, b, a)
    let t = x.transpose(0, 2).contiguous().to_vec_f64();
    for k in 0..c {
        for j in 0..b {
            for i in 0..a {
                assert_eq!(t[(k * b + j) * a + i], at(i, j, k));
            }
        }
    }
    // Broadcast mul of a transposed tensor by a (b, 1) column.
    let col_vals = rand_vals(b, 9);
    let col = Tensor::from_f64(&col_vals, &[b, 1], DType::F32, Device::Cpu);
    let m = x.transpose(1, 2).mul(&col.transpose(0, 1)).to_vec_f64(); // (a, c, b) * (1, b)
    for i in 0..a {
        for k in 0..c {
            for j in 0..b {
                let want = (at(i, j, k) as f32 * col_vals[j] as f32) as f64;
                assert_eq!(m[(i * c + k) * b + j], want);
            }
        }
    }
    // cat of a sliced view and a negated slice along the last dim (RoPE's rotate_half).
    let h = c / 2;
    let x1 = x.slice(2, 0, h, 1);
    let x2 = x.slice(2, h, c, 1);
    let r = Tensor::cat(&[x2.neg(), x1], -1).to_vec_f64();
    for i in 0..a {
        for j in 0..b {
            for k in 0..c {
                let want = if k < h { -at(i, j, k + h) } else { at(i, j, k - h) };
                assert_eq!(r[(i * b + j) * c + k], want);
            }
        }
    }
    // cat along a middle dim.
    let r = Tensor::cat(&[x.slice(1, 0, 10, 1), x.slice(1, 10, b, 1)], 1).to_vec_f64();
    assert_eq!(r, x.to_vec_f64());
    // sum_to_shape: trailing reduction (b, 1) per row, and leading reduction to (c,).
    let s = x.sum_to_shape(&[a, b, 1]).to_vec_f64();
    let l = x.sum_to_shape(&[c]).to_vec_f64();
    for i in 0..a {
        for j in 0..b {
            let want: f64 = (0..c).map(|k| at(i, j, k)).sum();
            assert!((s[i * b + j] - want).abs() < 1e-3, "{} vs {want}", s[i * b + j]);
        }
    }
    for k in 0..c {
        let want: f64 = (0..a).flat_map(|i| (0..b).map(move |j| (i, j))).map(|(i, j)| at(i, j, k)).sum();
        assert!((l[k] - want).abs() < 1e-3);
    }
}

#[test]
fn flash_attention() {
    // Causal and not, more keys than queries, strided inputs. Tiles and partial tiles are
    // checked against the naive composition in tests/attention.rs.
    let (q, kv): (&[usize], &[usize]) = (&[2, 2, 5, 4], &[2, 2, 5, 4]);
    check("flash_attention causal", &[q, kv, kv], false, |x| Tensor::flash_attention(&x[0], &x[1], &x[2], true, 0.7));
    check("flash_attention", &[&[1, 2, 3, 4], &[1, 2, 6, 4], &[1, 2, 6, 4]], false, |x| Tensor::flash_attention(&x[0], &x[1], &x[2], false, 0.5));
    check("flash_attention transposed q", &[&[1, 5, 2, 4], kv, kv], false, |x| {
        Tensor::flash_attention(&x[0].transpose(1, 2), &x[1].slice(0, 0, 1, 1), &x[2].slice(0, 1, 2, 1), true, 0.5)
    });
}

/// The optimizers' fused in-place updates (one pass on contiguous f32) against hand
/// arithmetic, and the strided fallback against the fused path.
#[test]
fn addcmul_and_addcdiv_in_place_match_hand_arithmetic() {
    let n = 70_000; // more than one parallel chunk
    let xs: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    let a: Vec<f64> = (0..n).map(|i| (i as f64 * 0.11).cos()).collect();
    let b: Vec<f64> = (0..n).map(|i| 1.5 + (i as f64 * 0.05).sin()).collect();
    let t = |v: &[f64]| Tensor::from_f64(v, &[n], DType::F32, Device::Cpu);
    let (ta, tb) = (t(&a), t(&b));
    let x = t(&xs);
    x.addcmul_(&ta, &tb, 0.25);
    let y = t(&xs);
    y.addcdiv_(&ta, &tb, -0.5);
    let (xv, yv) = (x.to_vec_f64(), y.to_vec_f64());
    for i in 0..n {
        let (x0, a0, b0) = (xs[i] as f32, a[i] as f32, b[i] as f32);
        assert_eq!(xv[i] as f32, x0 + 0.25f32 * a0 * b0, "addcmul_ at {i}");
        assert_eq!(yv[i] as f32, x0 + -0.5f32 * (a0 / b0), "addcdiv_ at {i}");
    }
    // A strided self takes the general path and gets the same values.
    let base = Tensor::from_f64(&xs.iter().flat_map(|&v| [v, 0.0]).collect::<Vec<_>>(), &[n, 2], DType::F32, Device::Cpu);
    let strided = base.select(1, 0);
    strided.addcmul_(&ta, &tb, 0.25);
    let sv = strided.to_vec_f64();
    for i in 0..n {
        assert!((sv[i] - xv[i]).abs() <= 1e-6 * (1.0 + xv[i].abs()), "strided addcmul_ at {i}: {} vs {}", sv[i], xv[i]);
    }
}
