//! `--max-*` flags of the commands that read a snapshot file: each raises one budget of
//! `analyse::budget::Budget` (defaults and their reasoning there).
use crate::analyse::budget::Budget;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct BudgetArgs {
    /// Largest snapshot file to read, in bytes (2 GiB; a pipe or device: at most 256 MiB, read whole)
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "BYTES", default_value_t = Budget::default().input_bytes)]
    pub max_input_bytes: u64,
    /// Most values the pickle may store: container elements (a dict entry counts 2) plus strings and bytes objects, a count
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().items)]
    pub max_items: usize,
    /// Most lists, tuples, dicts, sets and bytes objects in the pickle, a count
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().containers)]
    pub max_containers: usize,
    /// Most memo entries of the pickle, a count
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().memo)]
    pub max_memo: usize,
    /// Deepest unpickler stack, in values
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().stack)]
    pub max_stack: usize,
    /// Deepest nesting of containers (and of open MARKs), in levels
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().depth)]
    pub max_depth: usize,
    /// Most payload bytes of bytes objects in the pickle, in bytes (32 MiB)
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "BYTES", default_value_t = Budget::default().bytes_objects)]
    pub max_bytes_objects: usize,
    /// Most distinct frames plus entries of distinct frame lists, a count
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().frames)]
    pub max_frames: usize,
    /// Most trace entries of the device plus blocks of its segments, a count
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "N", default_value_t = Budget::default().trace_entries)]
    pub max_trace_entries: usize,
    /// Largest HTML page or JSON report to write, in bytes (128 MiB)
    #[arg(help_heading = super::heading::BUDGETS, long, value_name = "BYTES", default_value_t = Budget::default().output_bytes)]
    pub max_output_bytes: u64,
}

impl BudgetArgs {
    pub fn budget(&self) -> Budget {
        Budget {
            input_bytes: self.max_input_bytes,
            items: self.max_items,
            containers: self.max_containers,
            memo: self.max_memo,
            stack: self.max_stack,
            depth: self.max_depth,
            bytes_objects: self.max_bytes_objects,
            frames: self.max_frames,
            trace_entries: self.max_trace_entries,
            output_bytes: self.max_output_bytes,
        }
    }
}

