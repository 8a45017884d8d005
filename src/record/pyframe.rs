//! The Python code an op mirrors: the reference implementation's function stack.
//!
//! PyTorch's snapshot names the Python lines that allocated (`cs336_basics/model.py`,
//! transformers' `modeling_llama.py`). vramscope runs the model in Rust, so each model
//! function says which Python function it mirrors by pushing a [`PyFn`] while it runs
//! (`runtime::py_frame`); every allocation keeps the stack as it stood. Frames are those of
//! functions: `line` is the line of the function's `def` in the reference file.
use std::rc::Rc;

/// One Python function of a reference implementation.
#[derive(Debug, PartialEq, Eq)]
pub struct PyFn {
    /// Path as PyTorch prints it for that package (`cs336_basics/model.py`,
    /// `transformers/models/llama/modeling_llama.py`).
    pub file: &'static str,
    /// Line of the `def` in the reference file (0 where the file is not available).
    pub line: u32,
    /// Qualified name: `CausalMultiHeadSelfAttention.forward`, `scaled_dot_product_attention`.
    pub name: &'static str,
}

/// A frame on the stack and the frames below it (shared: pushing is one `Rc`).
#[derive(Debug)]
pub struct PyNode {
    pub f: &'static PyFn,
    pub parent: PyStack,
}

/// The Python stack, innermost frame first; `None` outside every mirrored function.
pub type PyStack = Option<Rc<PyNode>>;

/// The frames of a stack, innermost first.
pub fn frames(s: &PyStack) -> impl Iterator<Item = &'static PyFn> + '_ {
    std::iter::successors(s.as_deref(), |n| n.parent.as_deref()).map(|n| n.f)
}

/// Identity of a stack (for caches keyed by it): the address of its top node.
pub fn stack_id(s: &PyStack) -> usize {
    s.as_ref().map_or(0, |n| Rc::as_ptr(n) as usize)
}
