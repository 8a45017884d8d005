//! CS336's `cs336_basics` (assignment 1's model, which assignment 2 profiles). Files are
//! named as in the staff package; lines are the `def` lines of vramscope's reference copy,
//! `tools/pytorch/cs336_model.py` (one file, the code the PyTorch grids measure; a test
//! checks each line against it).
use crate::record::PyFn;

const MODEL: &str = "cs336_basics/model.py";
const NN_UTILS: &str = "cs336_basics/nn_utils.py";
const OPTIMIZER: &str = "cs336_basics/optimizer.py";

pub static LINEAR: PyFn = PyFn { file: MODEL, line: 34, name: "Linear.forward" };
pub static EMBEDDING: PyFn = PyFn { file: MODEL, line: 44, name: "Embedding.forward" };
pub static RMSNORM: PyFn = PyFn { file: MODEL, line: 54, name: "RMSNorm.forward" };
pub static ROPE: PyFn = PyFn { file: MODEL, line: 76, name: "RotaryEmbedding.forward" };
pub static SOFTMAX: PyFn = PyFn { file: NN_UTILS, line: 88, name: "softmax" };
pub static SDPA: PyFn = PyFn { file: MODEL, line: 94, name: "scaled_dot_product_attention" };
pub static ATTENTION: PyFn = PyFn { file: MODEL, line: 118, name: "CausalMultiHeadSelfAttention.forward" };
pub static SILU: PyFn = PyFn { file: MODEL, line: 148, name: "silu" };
pub static SWIGLU: PyFn = PyFn { file: MODEL, line: 164, name: "SwiGLU.forward" };
pub static BLOCK: PyFn = PyFn { file: MODEL, line: 179, name: "TransformerBlock.forward" };
pub static LM: PyFn = PyFn { file: MODEL, line: 200, name: "BasicsTransformerLM.forward" };
pub static LOG_SOFTMAX: PyFn = PyFn { file: NN_UTILS, line: 211, name: "log_softmax" };
pub static CROSS_ENTROPY: PyFn = PyFn { file: NN_UTILS, line: 217, name: "cross_entropy" };
pub static ADAMW_STEP: PyFn = PyFn { file: OPTIMIZER, line: 229, name: "AdamW.step" };

/// Every frame, for the test that checks them against the reference copy.
pub static ALL: [&PyFn; 14] =
    [&LINEAR, &EMBEDDING, &RMSNORM, &ROPE, &SOFTMAX, &SDPA, &ATTENTION, &SILU, &SWIGLU, &BLOCK, &LM, &LOG_SOFTMAX, &CROSS_ENTROPY, &ADAMW_STEP];

#[cfg(test)]
mod tests {
    /// Each frame's line is the `def` of its function in tools/pytorch/cs336_model.py.
    #[test]
    fn lines_are_the_reference_copys_defs() {
        let src = include_str!("../../../tools/pytorch/cs336_model.py");
        let lines: Vec<&str> = src.lines().collect();
        for f in super::ALL {
            let def = f.name.rsplit('.').next().unwrap();
            let at = lines[f.line as usize - 1].trim_start();
            assert!(at.starts_with(&format!("def {def}(")), "{}:{} is {at:?}, not def {def}", f.file, f.line);
            if let Some((class, _)) = f.name.split_once('.') {
                let owner = lines[..f.line as usize].iter().rev().find(|l| l.starts_with("class ")).unwrap();
                assert!(owner.starts_with(&format!("class {class}(")), "{} sits in {owner:?}", f.name);
            }
        }
    }
}
