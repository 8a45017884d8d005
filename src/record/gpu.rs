//! Device presets: the memory a GPU gives the caching allocator, and its published peaks.
//!
//! Capacities are the totals `nvidia-smi` / `rocm-smi` report (MiB), which is what
//! PyTorch's `total_memory` sees; the allocator may reserve up to this many bytes.
//! Peaks are the vendors' dense (no sparsity) datasheet figures: bf16/fp16 tensor-core
//! TFLOP/s, fp32 TFLOP/s without tensor cores (PyTorch's default for fp32 matmuls), and
//! memory bandwidth in TB/s (10¹² B/s). H100 and H200 are the SXM parts; MI250X is one GCD
//! (half the package).

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Gpu {
    pub name: &'static str,
    pub memory_bytes: usize,
    pub peak_bf16_tflops: f64,
    pub peak_fp32_tflops: f64,
    pub hbm_tb_per_s: f64,
    /// What kernels choose by (bitsandbytes' gemm_4bit): the SM count and compute capability
    /// `torch.cuda.get_device_properties` reports, or an AMD CDNA part.
    pub arch: Option<Arch>,
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum Arch {
    Cuda { sms: u32, major: u32, minor: u32 },
    RocmCdna,
}

const MIB: usize = 1 << 20;

pub const GPUS: &[Gpu] = &[
    Gpu { name: "H100-80GB", memory_bytes: 81_559 * MIB, peak_bf16_tflops: 989.4, peak_fp32_tflops: 66.9, hbm_tb_per_s: 3.35, arch: Some(Arch::Cuda { sms: 132, major: 9, minor: 0 }) },
    Gpu { name: "H200-141GB", memory_bytes: 143_771 * MIB, peak_bf16_tflops: 989.4, peak_fp32_tflops: 66.9, hbm_tb_per_s: 4.8, arch: Some(Arch::Cuda { sms: 132, major: 9, minor: 0 }) },
    Gpu { name: "A100-40GB", memory_bytes: 40_960 * MIB, peak_bf16_tflops: 312.0, peak_fp32_tflops: 19.5, hbm_tb_per_s: 1.555, arch: Some(Arch::Cuda { sms: 108, major: 8, minor: 0 }) },
    Gpu { name: "A100-80GB", memory_bytes: 81_920 * MIB, peak_bf16_tflops: 312.0, peak_fp32_tflops: 19.5, hbm_tb_per_s: 2.039, arch: Some(Arch::Cuda { sms: 108, major: 8, minor: 0 }) },
    Gpu { name: "MI250X-64GB", memory_bytes: 65_536 * MIB, peak_bf16_tflops: 191.5, peak_fp32_tflops: 47.9, hbm_tb_per_s: 1.638, arch: Some(Arch::RocmCdna) },
    Gpu { name: "MI300X-192GB", memory_bytes: 196_608 * MIB, peak_bf16_tflops: 1307.4, peak_fp32_tflops: 163.4, hbm_tb_per_s: 5.3, arch: Some(Arch::RocmCdna) },
    Gpu { name: "RTX4090-24GB", memory_bytes: 24_564 * MIB, peak_bf16_tflops: 165.2, peak_fp32_tflops: 82.6, hbm_tb_per_s: 1.008, arch: Some(Arch::Cuda { sms: 128, major: 8, minor: 9 }) },
    // A 48 GB workstation card (Ampere), nvidia-smi's 49,140 MiB.
    Gpu { name: "RTXA6000-48GB", memory_bytes: 49_140 * MIB, peak_bf16_tflops: 154.8, peak_fp32_tflops: 38.7, hbm_tb_per_s: 0.768, arch: Some(Arch::Cuda { sms: 84, major: 8, minor: 6 }) },
];

/// Look up a GPU by name, case-insensitively, ignoring dashes ("h100", "A100-40GB", "rtx4090").
pub fn find(name: &str) -> Result<Gpu, String> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['-', '_', ' '], "");
    let n = norm(name);
    let hits: Vec<&Gpu> = GPUS.iter().filter(|g| norm(g.name) == n || norm(g.name).starts_with(&n)).collect();
    match hits.as_slice() {
        [g] => Ok(**g),
        [] => Err(format!("unknown GPU '{name}'; known: {}", GPUS.iter().map(|g| g.name).collect::<Vec<_>>().join(", "))),
        many => Err(format!("'{name}' is ambiguous: {}", many.iter().map(|g| g.name).collect::<Vec<_>>().join(", "))),
    }
}

/// Parse a byte size: "24GiB", "80GB", "512MiB", "1073741824".
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a size (e.g. 24GiB, 80GB, 512MiB)"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        u => return Err(format!("'{s}': unknown unit '{u}' (B, KiB, MiB, GiB, KB, MB, GB)")),
    };
    let b = v * mult;
    if !(b >= 1.0 && b.is_finite()) {
        return Err(format!("'{s}' must be a positive size"));
    }
    if b > crate::record::allocator::MAX_DEVICE_BYTES as f64 {
        return Err(format!("'{s}' is more than 4 EiB (2^62 bytes), the most memory vramscope models"));
    }
    Ok(b as usize)
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn names_and_sizes() {
        assert_eq!(find("h100").unwrap().name, "H100-80GB");
        assert_eq!(find("RTX4090").unwrap().memory_bytes, 24_564 << 20);
        assert!(find("a100").unwrap_err().contains("ambiguous"));
        assert!(find("v100").is_err());
        assert_eq!(parse_size("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_size("80GB").unwrap(), 80_000_000_000);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }
}
