//! `PYTORCH_CUDA_ALLOC_CONF` settings and the size rules that depend on them
//! (formats.md §4.1–4.3, §4.9).

pub const MIN_BLOCK: usize = 512;
pub const SMALL_SIZE: usize = 1 << 20;
pub const SMALL_BUFFER: usize = 2 << 20;
pub const LARGE_BUFFER: usize = 20 << 20;
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
pub const ROUND_LARGE: usize = 2 << 20;
pub(crate) const MIB: usize = 1 << 20;

/// `PYTORCH_CUDA_ALLOC_CONF` settings the model honours.
#[derive(Clone, Debug, PartialEq)]
pub struct AllocatorConfig {
    /// Blocks at least this large are never split (None = unlimited).
    pub max_split_size: Option<usize>,
    pub max_non_split_rounding: usize,
    /// Divisions per power-of-two interval [1 MiB·2^i, 1 MiB·2^(i+1)), i = 0..16.
    pub roundup_power2_divisions: [usize; 16],
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: bool,
    /// The string it was parsed from.
    pub raw: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; 16],
            garbage_collection_threshold: None,
            expandable_segments: false,
            raw: String::new(),
        }
    }
}

impl AllocatorConfig {
    /// Every setting `PYTORCH_CUDA_ALLOC_CONF` accepts for the native allocator (the last four
    /// concern pinned host memory and the lock, and change nothing modelled here).
    pub const SETTINGS: [&'static str; 10] = [
        "max_split_size_mb",
        "max_non_split_rounding_mb",
        "roundup_power2_divisions",
        "garbage_collection_threshold",
        "expandable_segments",
        "backend",
        "release_lock_on_cudamalloc",
        "pinned_use_cuda_host_register",
        "pinned_num_register_threads",
        "pinned_use_background_threads",
    ];

    /// Parse a `PYTORCH_CUDA_ALLOC_CONF` string (`key:value,key2:[a:b,>:c]`).
    pub fn parse(s: &str) -> Result<AllocatorConfig, String> {
        let mut c = AllocatorConfig { raw: s.to_string(), ..Default::default() };
        let mut rest = s.trim();
        while !rest.is_empty() {
            let (key, after) = rest.split_once(':').ok_or_else(|| format!("'{rest}': expected key:value"))?;
            let key = key.trim();
            if key.is_empty() {
                let entry = rest.split(',').next().unwrap_or(rest).trim();
                return Err(format!("'{entry}': no setting name before ':'"));
            }
            let (value, next) = if after.trim_start().starts_with('[') {
                let end = after.find(']').ok_or_else(|| format!("{key}: unclosed '['"))?;
                (&after[..=end], after[end + 1..].trim_start_matches([',', ' ']))
            } else {
                match after.split_once(',') {
                    Some((v, n)) => (v, n),
                    None => (after, ""),
                }
            };
            let value = value.trim();
            // Sizes are MiB counts; a count whose bytes do not fit a usize is refused, not wrapped.
            let mib_value = |v: &str| -> Result<usize, String> {
                let n = v.parse::<usize>().map_err(|_| format!("{key}: '{v}' is not a whole number of MiB"))?;
                n.checked_mul(MIB).map(|_| n).ok_or_else(|| format!("{key}: {n} MiB is more bytes than this machine can address"))
            };
            match key {
                "max_split_size_mb" => {
                    let v = mib_value(value)?;
                    if v <= LARGE_BUFFER / MIB {
                        return Err(format!("max_split_size_mb: {v} must be larger than {} MiB", LARGE_BUFFER / MIB));
                    }
                    c.max_split_size = Some(v * MIB);
                }
                "max_non_split_rounding_mb" => {
                    let v = mib_value(value)?;
                    if v < LARGE_BUFFER / MIB {
                        return Err(format!("max_non_split_rounding_mb: {v} must be at least {} MiB", LARGE_BUFFER / MIB));
                    }
                    c.max_non_split_rounding = v * MIB;
                }
                "roundup_power2_divisions" => c.roundup_power2_divisions = parse_divisions(value)?,
                "garbage_collection_threshold" => {
                    let v: f64 = value.parse().map_err(|_| format!("garbage_collection_threshold: '{value}' is not a number"))?;
                    if !(v > 0.0 && v < 1.0) {
                        return Err(format!("garbage_collection_threshold: {v} must be in (0, 1)"));
                    }
                    c.garbage_collection_threshold = Some(v);
                }
                "expandable_segments" => {
                    c.expandable_segments = match value {
                        "True" | "true" => true,
                        "False" | "false" => false,
                        v => return Err(format!("expandable_segments: '{v}' (expected True or False)")),
                    };
                }
                "backend" => {
                    if value != "native" {
                        return Err(format!("backend: '{value}': only the native caching allocator is modelled"));
                    }
                }
                "release_lock_on_cudamalloc" | "pinned_use_cuda_host_register" | "pinned_num_register_threads" | "pinned_use_background_threads" => {}
                k => return Err(format!("unknown setting '{k}' (known: {})", Self::SETTINGS.join(", "))),
            }
            rest = next.trim();
        }
        Ok(c)
    }
}

fn parse_divisions(v: &str) -> Result<[usize; 16], String> {
    let check = |d: usize| -> Result<usize, String> {
        if d == 0 || d.is_power_of_two() {
            Ok(d)
        } else {
            Err(format!("roundup_power2_divisions: {d} is not 0 or a power of two"))
        }
    };
    let mut out = [0usize; 16];
    if !v.starts_with('[') {
        let d = check(v.parse().map_err(|_| format!("roundup_power2_divisions: '{v}' is not a number"))?)?;
        return Ok([d; 16]);
    }
    let inner = v.trim_start_matches('[').trim_end_matches(']');
    let mut last: Option<usize> = None;
    let mut first = true;
    for item in inner.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (k, d) = item.split_once(':').ok_or_else(|| format!("roundup_power2_divisions: '{item}' (expected SIZE_MB:DIVISIONS)"))?;
        let d = check(d.trim().parse().map_err(|_| format!("roundup_power2_divisions: '{d}' is not a number"))?)?;
        if k.trim() == ">" {
            let from = last.map_or(0, |l| l + 1);
            for slot in out.iter_mut().skip(from) {
                *slot = d;
            }
            continue;
        }
        let mb: usize = k.trim().parse().map_err(|_| format!("roundup_power2_divisions: '{k}' is not a size in MiB"))?;
        if !mb.is_power_of_two() {
            return Err(format!("roundup_power2_divisions: {mb} MiB is not a power of two"));
        }
        let idx = (mb.trailing_zeros() as usize).min(15);
        if first {
            for slot in out.iter_mut().take(idx) {
                *slot = d;
            }
            first = false;
        }
        out[idx] = d;
        last = Some(idx);
    }
    Ok(out)
}

/// `round_size` (§4.2).
pub fn round_size(size: usize, divisions: &[usize; 16]) -> usize {
    if size < MIN_BLOCK {
        return MIN_BLOCK;
    }
    let log2 = usize::BITS as usize - 1 - size.leading_zeros() as usize;
    let idx = log2.saturating_sub(20).min(15);
    let div = divisions[idx];
    // A division count so large that MIN_BLOCK·div overflows can never apply (PyTorch's
    // size_t comparison is just as false), so the step below is never zero.
    if div > 1 && MIN_BLOCK.checked_mul(div).is_some_and(|m| size > m) {
        if size.is_power_of_two() {
            return size;
        }
        let step = (1usize << log2) / div;
        return round_up(size, step);
    }
    round_up(size, MIN_BLOCK)
}

/// `size` rounded up to a multiple of `step`. A size within `step` of `usize::MAX` has no such
/// multiple: it saturates, a request larger than any device, so it ends as an out-of-memory
/// instead of wrapping to a small block.
fn round_up(size: usize, step: usize) -> usize {
    size.div_ceil(step).checked_mul(step).unwrap_or(usize::MAX)
}

/// cudaMalloc size for a rounded request (§4.3).
pub fn allocation_size(size: usize) -> usize {
    if size <= SMALL_SIZE {
        SMALL_BUFFER
    } else if size < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        round_up(size, ROUND_LARGE)
    }
}
