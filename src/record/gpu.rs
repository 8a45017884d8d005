//! Device presets: the memory a GPU gives the caching allocator, and its published peaks.
//!
//! Capacity is what CUDA reports to the process, `torch.cuda.mem_get_info()[1]`
//! (`cudaMemGetInfo`'s total, the figure PyTorch's OOM message and vLLM's
//! `total_gpu_memory` print; on Linux it equals `get_device_properties().total_memory`): the
//! allocator can never reserve more. It is below nvidia-smi's total (kept beside it), and it
//! moves by up to ~250 MiB with the driver version, so each figure names the driver or report
//! it comes from; `--memory-limit` gives a machine's own. ROCm parts give torch's
//! `total_memory`. Peaks are the vendors' dense (no sparsity) datasheet figures: bf16/fp16
//! tensor-core TFLOP/s, fp32 TFLOP/s without tensor cores (PyTorch's default for fp32
//! matmuls), and memory bandwidth in TB/s (10¹² B/s). H100 and H200 are the SXM parts; MI250X
//! is one GCD (half the package).

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct Gpu {
    pub name: &'static str,
    /// The total CUDA reports to the process (`torch.cuda.mem_get_info()[1]`): the capacity.
    pub memory_bytes: usize,
    /// nvidia-smi's (rocm-smi's) total, MiB: more than a process can use.
    pub smi_mib: usize,
    /// Where `memory_bytes` comes from.
    pub source: &'static str,
    pub peak_bf16_tflops: f64,
    pub peak_fp32_tflops: f64,
    pub hbm_tb_per_s: f64,
    /// What kernels choose by (bitsandbytes' gemm_4bit): the SM count and compute capability
    /// `torch.cuda.get_device_properties` reports, or an AMD CDNA part.
    pub arch: Option<Arch>,
}

impl Gpu {
    /// Whether PyTorch's SDPA tries cuDNN attention first on this GPU: torch 2.11's
    /// `check_prefer_cudnn_attention` (sdp_utils.cpp) holds for compute capability 9.x and 10.x
    /// with cuDNN > 9.15.0, which its cu130 wheel ships (9.19: measured on an H200,
    /// tests/fixtures/gpu). The H100 and H200 of the table; not Ampere, Ada or ROCm.
    pub fn sdpa_prefers_cudnn(&self) -> bool {
        matches!(self.arch, Some(Arch::Cuda { major: 9 | 10, .. }))
    }

    /// The SM count where a bf16 `_grouped_mm` runs CUTLASS's sm90 grouped GEMM
    /// (GroupMM.cu's `bf16bf16_grouped_gemm_impl_sm90_sm100`: compute capability 9.x; 10.x's
    /// kernel is another, unmeasured): None where PyTorch falls back to a loop of matmuls.
    pub fn grouped_mm_cutlass_sms(&self) -> Option<u32> {
        match self.arch {
            Some(Arch::Cuda { sms, major: 9, .. }) => Some(sms),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum Arch {
    Cuda { sms: u32, major: u32, minor: u32 },
    RocmCdna,
}

const MIB: usize = 1 << 20;

pub const GPUS: &[Gpu] = &[
    Gpu { name: "H100-80GB", memory_bytes: 85_028_896_768, smi_mib: 81_559, source: "deviceQuery, driver 12.8: 85,028,896,768 B; torch 2.7 prints total_memory=81089MB (81,008-81,121 MiB across drivers; vLLM logs 79.18-79.22 GiB)", peak_bf16_tflops: 989.4, peak_fp32_tflops: 66.9, hbm_tb_per_s: 3.35, arch: Some(Arch::Cuda { sms: 132, major: 9, minor: 0 }) },
    Gpu { name: "H200-141GB", memory_bytes: 150_109_880_320, smi_mib: 143_771, source: "measured here: mem_get_info total = total_memory = 150,109,880,320 B (torch 2.11, CUDA 13.0, driver 580.159.04; tests/fixtures/gpu/card.json); torch prints total_memory=143156MB, OOM messages and vLLM 139.80-139.81 GiB", peak_bf16_tflops: 989.4, peak_fp32_tflops: 66.9, hbm_tb_per_s: 4.8, arch: Some(Arch::Cuda { sms: 132, major: 9, minor: 0 }) },
    Gpu { name: "A100-40GB", memory_bytes: 40_536 * MIB, smi_mib: 40_960, source: "OOM message 'total capacity of 39.59 GiB' on an A100 40GB (= 40,536 MiB; deviceQuery on driver 12.2 gives 40,339 MiB)", peak_bf16_tflops: 312.0, peak_fp32_tflops: 19.5, hbm_tb_per_s: 1.555, arch: Some(Arch::Cuda { sms: 108, major: 8, minor: 0 }) },
    Gpu { name: "A100-80GB", memory_bytes: 85_100_068_864, smi_mib: 81_920, source: "deviceQuery, driver 12.5: 85,100,068,864 B (driver 12.2: 84,987,740,160 B); OOM messages print 79.14-79.32 GiB", peak_bf16_tflops: 312.0, peak_fp32_tflops: 19.5, hbm_tb_per_s: 2.039, arch: Some(Arch::Cuda { sms: 108, major: 8, minor: 0 }) },
    Gpu { name: "MI250X-64GB", memory_bytes: 65_520 * MIB, smi_mib: 65_536, source: "ROCm torch total_memory=65520MB (one GCD; OOM 'total capacity of 63.98 GiB')", peak_bf16_tflops: 191.5, peak_fp32_tflops: 47.9, hbm_tb_per_s: 1.638, arch: Some(Arch::RocmCdna) },
    Gpu { name: "MI300X-192GB", memory_bytes: 196_592 * MIB, smi_mib: 196_608, source: "ROCm 6.2.4 torch total_memory=196592MB (some setups report rocm-smi's 205,822,885,888 B instead)", peak_bf16_tflops: 1307.4, peak_fp32_tflops: 163.4, hbm_tb_per_s: 5.3, arch: Some(Arch::RocmCdna) },
    Gpu { name: "RTX4090-24GB", memory_bytes: 25_386_352_640, smi_mib: 24_564, source: "deviceQuery, Linux driver 12.4: 25,386,352,640 B (= OOM messages' 23.64 GiB; driver 13.0 gives 24,081 MiB)", peak_bf16_tflops: 165.2, peak_fp32_tflops: 82.6, hbm_tb_per_s: 1.008, arch: Some(Arch::Cuda { sms: 128, major: 8, minor: 9 }) },
    // A 48 GB workstation card (Ampere), nvidia-smi's 49,140 MiB.
    Gpu { name: "RTXA6000-48GB", memory_bytes: 48_676 * MIB, smi_mib: 49_140, source: "torch total_memory=48676MB (three reports; deviceQuery on driver 12.7 gives 48,790 MiB)", peak_bf16_tflops: 154.8, peak_fp32_tflops: 38.7, hbm_tb_per_s: 0.768, arch: Some(Arch::Cuda { sms: 84, major: 8, minor: 6 }) },
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
        assert_eq!(find("RTX4090").unwrap().memory_bytes, 25_386_352_640);
        assert_eq!(find("RTX4090").unwrap().smi_mib, 24_564);
        assert!(find("a100").unwrap_err().contains("ambiguous"));
        assert!(find("v100").is_err());
        // torch 2.11's SDPA tries cuDNN first on sm90 only (of the table).
        let cudnn: Vec<&str> = GPUS.iter().filter(|g| g.sdpa_prefers_cudnn()).map(|g| g.name).collect();
        assert_eq!(cudnn, ["H100-80GB", "H200-141GB"]);
        assert_eq!(parse_size("24GiB").unwrap(), 24 << 30);
        assert_eq!(parse_size("80GB").unwrap(), 80_000_000_000);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("12 parsecs").is_err());
    }
}
