//! Who made an allocation: the phase of the step and the category of memory.
use serde::{Deserialize, Serialize};
use std::fmt;

/// The phase of a training step an allocation happened in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Model construction, data loading, anything outside a step.
    Setup,
    ZeroGrad,
    Forward,
    Loss,
    Backward,
    Optimizer,
    /// `generate()`'s setup, its prompt forward and the first token.
    Prefill,
    /// `generate()`'s one-token steps after the prefill.
    Decode,
}

impl Phase {
    pub const ALL: [Phase; 8] =
        [Phase::Setup, Phase::ZeroGrad, Phase::Forward, Phase::Loss, Phase::Backward, Phase::Optimizer, Phase::Prefill, Phase::Decode];
    pub fn name(self) -> &'static str {
        match self {
            Phase::Setup => "setup",
            Phase::ZeroGrad => "zero_grad",
            Phase::Forward => "forward",
            Phase::Loss => "loss",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a piece of memory is for. An allocation starts as `Temporary` (or what its
/// creator declares) and is re-categorised when its role becomes known: saved by autograd
/// → `Activation`, stored into `.grad` → `Gradient`, kept as optimizer state →
/// `OptimizerState`. This mirrors how PyTorch's memory profiler categorises after the fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Parameter,
    Gradient,
    OptimizerState,
    /// Saved by autograd for backward.
    Activation,
    Temporary,
    Input,
    /// Persistent module buffers that are not parameters (RoPE cos/sin tables).
    Buffer,
    AutocastCache,
    /// Kernel scratch space (e.g. bf16 operands widened to f32 for the CPU matmul).
    Workspace,
    /// Buffers of collectives: all-gather outputs, reduce-scatter inputs, DDP's gradient
    /// buckets (a parallel layout's own memory).
    Communication,
}

impl Category {
    pub const ALL: [Category; 10] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Temporary,
        Category::Input,
        Category::Buffer,
        Category::AutocastCache,
        Category::Workspace,
        Category::Communication,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Temporary => "temporary",
            Category::Input => "input",
            Category::Buffer => "buffer",
            Category::AutocastCache => "autocast_cache",
            Category::Workspace => "workspace",
            Category::Communication => "communication",
        }
    }
}

impl AsRef<str> for Category {
    fn as_ref(&self) -> &str {
        self.name()
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name shown for an allocation's module path. Outside every module there is no path,
/// so the phase says whose code ran: the model's own forward (embedding lookups, the mask,
/// between blocks), the loss, autograd's engine (gradient accumulation and buffers in
/// backward), the optimizer, zero_grad, or setup (model construction, data).
pub fn scope_name(scope: &str, phase: Phase) -> std::borrow::Cow<'_, str> {
    if !scope.is_empty() {
        return scope.into();
    }
    match phase {
        Phase::Setup => "(setup: outside the step)",
        Phase::ZeroGrad => "(zero_grad)",
        Phase::Forward => "(model: outside its submodules)",
        Phase::Loss => "(loss)",
        Phase::Backward => "(autograd engine)",
        Phase::Optimizer => "(optimizer)",
        Phase::Prefill | Phase::Decode => "(generate: outside the model)",
    }
    .into()
}
