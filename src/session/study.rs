//! The workshop's performance study (`launch_performance_study.sh`): its five problem sizes,
//! the banner's parameter counts set against the guide's table, a step's estimated FLOPs
//! (which decide whether a size trains on cpu within a time budget) and the folder's
//! timestamp. The command line runs the training and writes the folder.
use crate::model::presets;
use crate::session::text::train::grouped;

pub const SIZES: [&str; 5] = ["tiny", "small", "medium", "large", "very_large"];

/// The "Params" column of the workshop guide's table of problem sizes (§6.2), as printed.
pub const GUIDE_TABLE: [(&str, &str); 5] = [("tiny", "~2.9M"), ("small", "~20.9M"), ("medium", "~167M"), ("large", "~1.3B"), ("very_large", "~10.7B")];

/// The parameter lines of the banner: the count PyTorch reports, the count with the tied
/// head counted twice (the guide's way of counting), and the guide's table entry, each
/// saying why it differs.
pub fn parameter_lines(size: &str, m: &crate::model::ModelConfig) -> String {
    let (n, twice) = (m.param_count(), m.param_count_head_twice());
    let mut s = format!(
        "  Parameters:          {} ({:.1}M): sum(p.numel() for p in model.parameters()){}\n",
        grouped(n),
        n as f64 / 1e6,
        if m.tied_embeddings { "; the LM head is the embedding's weight (tied), counted once" } else { "" }
    );
    if twice != n {
        s += &format!(
            "  Head counted twice:  {} ({:.1}M): the workshop guide's hand count adds the LM head [{} × {}] = {} again, as if untied\n",
            grouped(twice),
            twice as f64 / 1e6,
            m.d_model,
            m.vocab_size,
            grouped(twice - n)
        );
    }
    let table = GUIDE_TABLE.iter().find(|(k, _)| *k == size).map_or("?", |(_, v)| v);
    let why = if size == "tiny" {
        format!("its walkthrough model's count (intermediate 512, head counted twice: 2,873,600); this size's intermediate is {}", m.d_ff)
    } else {
        "an estimate that no count of this configuration, tied or untied, reproduces".to_string()
    };
    s += &format!("  Guide's table:       {table}: {why}\n");
    s
}

/// Training FLOPs of one step: 6 per parameter per token for the matmuls, plus the
/// attention products (forward 4·B·S²·d per layer, backward twice that).
pub fn step_flops(p: &presets::Preset) -> f64 {
    let m = &p.model;
    let tokens = (p.batch_size * p.seq_len) as f64;
    let attn = 12.0 * (m.num_layers * p.batch_size * p.seq_len * p.seq_len * m.d_model) as f64;
    6.0 * m.param_count() as f64 * tokens + attn
}

pub fn timestamp() -> String {
    // UTC from the system clock, formatted without a date crate (civil-from-days).
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}{m:02}{d:02}_{:02}{:02}{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

