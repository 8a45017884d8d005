//! What each memory optimisation (or each parallel layout) buys: every variant profiled at
//! each (context, profile type), then one table per pair, each variant's peaks, what is live
//! at the peak by category and the cpu step time, relative to the first (the baseline).
use super::profile::{profile_one, ProfileOptions, ProfileType, Run};
use crate::export::compare::{compare_table, VariantRow};
use crate::record::Category;
use crate::train::optim::OptimConfig;
use anyhow::Result;
use serde_json::{json, Value};

/// One column of the comparison.
pub struct Variant {
    pub name: String,
    pub options: ProfileOptions,
}

/// The comparison's figures: its Markdown tables and a JSON row per run.
pub struct Comparison {
    pub markdown: String,
    pub rows: Vec<Value>,
    /// Every variant's optimizer (None without a training run).
    pub optimizer: Option<OptimConfig>,
}

impl Comparison {
    /// compare.json's object (`run_id`: the output set the files belong to, when written).
    pub fn json(&self, run_id: Option<&str>) -> Value {
        json!({ "run_id": run_id, "units": "bytes; GiB = 1024³ bytes", "optimizer": self.optimizer, "runs": self.rows })
    }
}

const CATS: [Category; 6] = [Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Activation, Category::AutocastCache, Category::Temporary];
/// Comparing layouts adds their collective buffers.
const LAYOUT_CATS: [Category; 7] =
    [Category::Parameter, Category::Gradient, Category::OptimizerState, Category::Activation, Category::AutocastCache, Category::Temporary, Category::Communication];

/// A variant name as a file-name part ("flash attention" → "flash-attention").
fn slug(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).collect::<String>()
}

impl Variant {
    /// Where `--compare` puts this variant's snapshot of run `r` under `dir`.
    pub fn snapshot_path(&self, dir: &std::path::Path, r: &Run) -> std::path::PathBuf {
        dir.join(format!("{}_ctx{}_{}_{}_snapshot.pickle", self.options.model_name, r.context, r.kind.name(), slug(&self.name)))
    }
}

/// Profile every variant (the baseline first) at each context of the first and each of
/// `kinds`; `layouts` adds the communication column. `each` sees every run as it is made (to
/// write its files) before the tables are built.
pub fn compare(vs: &[Variant], kinds: &[ProfileType], layouts: bool, mut each: impl FnMut(&Variant, &mut Run) -> Result<()>) -> Result<Comparison> {
    let cat_list: &[Category] = if layouts { &LAYOUT_CATS } else { &CATS };
    let p0 = &vs[0].options;
    let cpu = p0.device == crate::engine::Device::Cpu;
    let mut md = String::new();
    let mut json_rows = Vec::new();
    for &ctx in &p0.contexts {
        for &kind in kinds {
            let mut runs: Vec<Run> = Vec::new();
            for v in vs {
                let mut r = profile_one(&v.options, ctx, kind)?;
                each(v, &mut r)?;
                runs.push(r);
            }
            let base = &runs[0];
            let rows: Vec<VariantRow> = vs
                .iter()
                .zip(&runs)
                .map(|(v, r)| VariantRow {
                    name: v.name.clone(),
                    oom: r.oom.is_some(),
                    peak_allocated: r.stats.allocated_bytes.peak,
                    peak_reserved: r.stats.reserved_bytes.peak,
                    at_peak: cat_list.iter().map(|&c| r.report.category_bytes(c)).collect(),
                    step_seconds: r.step_seconds,
                })
                .collect();
            let title = format!("{} ({}), {}, context {ctx}, batch {} on {}", p0.model_name, p0.model.flavour, kind.name(), p0.batch, p0.device);
            let optimizer = (kind == ProfileType::Training).then(|| p0.optim.summary());
            md += &compare_table(&title, optimizer.as_deref(), cat_list, &rows, cpu);
            for (v, r) in vs.iter().zip(&runs) {
                let (pa, pr) = (r.stats.allocated_bytes.peak, r.stats.reserved_bytes.peak);
                json_rows.push(json!({
                    "variant": v.name,
                    "context_length": ctx,
                    "profile_type": kind,
                    "oom": r.oom,
                    "peak_allocated_bytes": pa,
                    "peak_reserved_bytes": pr,
                    "peak_allocated_vs_baseline": pa as f64 / base.stats.allocated_bytes.peak.max(1) as f64,
                    "live_at_peak_bytes": cat_list.iter().map(|&c| (c.name(), r.report.category_bytes(c))).collect::<std::collections::BTreeMap<_, _>>(),
                    "step_seconds": if cpu { r.step_seconds } else { None },
                    "snapshot": r.snapshot,
                }));
            }
        }
    }
    md.push_str("\nCategory columns: memory live at the peak of allocated memory, in the table's unit.");
    md.push_str(if cpu { "\n" } else { " Meta: memory only; step times are measured with `--device cpu`.\n" });
    let optimizer = kinds.contains(&ProfileType::Training).then(|| p0.optim.clone());
    Ok(Comparison { markdown: md, rows: json_rows, optimizer })
}
