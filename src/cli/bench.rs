//! `vramscope bench`: speed, measured side by side in one run and printed as ratios.
use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> Result<()> {
    anyhow::bail!("bench: not implemented yet")
}
