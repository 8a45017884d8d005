//! The Tiny LLaMA workshop's model as `shared/bench/pytorch_tinyllama.py` writes it, the
//! PyTorch model the tinyllama flavour mirrors (written from the workshop's description: the
//! workshop's own `tiny_llama_v1.py` is not in the seeds). Lines are the `def` lines of that
//! file; a test checks each one against it where `shared/` is present.
use crate::record::PyFn;

const MODEL: &str = "pytorch_tinyllama.py";

pub static RMSNORM: PyFn = PyFn { file: MODEL, line: 45, name: "RMSNorm.forward" };
pub static ROTARY_TABLES: PyFn = PyFn { file: MODEL, line: 60, name: "Rotary.tables" };
pub static ROTARY_APPLY: PyFn = PyFn { file: MODEL, line: 71, name: "Rotary.apply" };
pub static ATTENTION: PyFn = PyFn { file: MODEL, line: 103, name: "Attention.forward" };
pub static SWIGLU: PyFn = PyFn { file: MODEL, line: 132, name: "SwiGLU.forward" };
pub static BLOCK: PyFn = PyFn { file: MODEL, line: 144, name: "Block.forward" };
pub static FORWARD: PyFn = PyFn { file: MODEL, line: 166, name: "TinyLlama.forward" };

/// Every frame, for the test that checks them against the reference file.
pub static ALL: [&PyFn; 7] = [&RMSNORM, &ROTARY_TABLES, &ROTARY_APPLY, &ATTENTION, &SWIGLU, &BLOCK, &FORWARD];

#[cfg(test)]
mod tests {
    /// Each frame's line is the `def` of its function, inside its class, in
    /// shared/bench/pytorch_tinyllama.py.
    #[test]
    fn lines_are_the_bench_copys_defs() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/pytorch_tinyllama.py");
        let Ok(src) = std::fs::read_to_string(&path) else {
            eprintln!("NOTICE: no {} (a fresh clone has no ../shared): the tinyllama frame lines are not checked", path.display());
            return;
        };
        let lines: Vec<&str> = src.lines().collect();
        for f in super::ALL {
            let def = f.name.rsplit('.').next().unwrap();
            let at = lines[f.line as usize - 1].trim_start();
            assert!(at.starts_with(&format!("def {def}(")), "{}:{} is {at:?}, not def {def}", f.file, f.line);
            let (class, _) = f.name.split_once('.').unwrap();
            let owner = lines[..f.line as usize].iter().rev().find(|l| l.starts_with("class ")).unwrap();
            assert!(owner.starts_with(&format!("class {class}")), "{} sits in {owner:?}", f.name);
        }
    }
}
