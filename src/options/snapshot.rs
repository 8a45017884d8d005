//! The flags of the commands that read snapshot pickles (`analyze`, `view`).
use super::budget::BudgetArgs;
use super::usage;
use crate::export::html::Capacity;
use crate::record::gpu;
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// A snapshot pickle (torch.cuda.memory._dump_snapshot or vramscope profile)
    #[arg(help_heading = super::heading::INPUT)]
    pub file: PathBuf,
    /// Device whose trace to analyse (default: the one with the most events)
    #[arg(help_heading = super::heading::INPUT, long)]
    pub device: Option<usize>,
    /// Keep the largest PERCENT of allocations, like memory_viz's Detail slider
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = 100.0)]
    pub detail: f64,
    /// How many of the largest allocations and live groups to list
    #[arg(help_heading = super::heading::OUTPUT, long, default_value_t = 10)]
    pub top: usize,
    /// Print the report as JSON
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub json: bool,
    #[command(flatten)]
    pub budget: BudgetArgs,
}

#[derive(Args, Debug, Clone)]
pub struct ViewArgs {
    /// A snapshot pickle (torch.cuda.memory._dump_snapshot or vramscope profile)
    #[arg(help_heading = super::heading::INPUT)]
    pub file: PathBuf,
    /// A second snapshot, shown beside the first on the same scale
    #[arg(help_heading = super::heading::INPUT)]
    pub file2: Option<PathBuf>,
    /// The HTML file to write (default: beside FILE, `_snapshot.pickle` → `_report.html`)
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub output: Option<PathBuf>,
    /// Device whose trace to show (default: the one with the most events)
    #[arg(help_heading = super::heading::INPUT, long)]
    pub device: Option<usize>,
    /// Draw this GPU's capacity
    #[arg(help_heading = super::heading::OUTPUT, value_parser = super::values::gpus(), long, conflicts_with = "memory_limit")]
    pub gpu: Option<String>,
    /// Draw this device capacity instead of a --gpu preset (e.g. 24GiB, 80GB)
    #[arg(help_heading = super::heading::OUTPUT, long)]
    pub memory_limit: Option<String>,
    #[command(flatten)]
    pub budget: BudgetArgs,
}


impl ViewArgs {
    /// The device capacity the report draws: `--gpu`'s, or `--memory-limit`.
    pub fn capacity(&self) -> anyhow::Result<Option<Capacity>> {
        let a = self;
        Ok(match (&a.gpu, &a.memory_limit) {
            (Some(g), _) => {
                let g = gpu::find(g).map_err(|e| usage("--gpu", e))?;
                Some(Capacity { label: g.name.to_string(), bytes: g.memory_bytes as u64 })
            }
            (None, Some(m)) => Some(Capacity { label: "memory limit".into(), bytes: gpu::parse_size(m).map_err(|e| usage("--memory-limit", e))? as u64 }),
            (None, None) => None,
        })
    }
}
