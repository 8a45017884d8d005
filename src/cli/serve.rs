//! `vramscope serve`: vLLM 0.33.0's start-up memory plan, printed in vLLM's words; when one
//! request of --max-model-len does not fit, vLLM's error and exit code 3.
use crate::error::DoesNotFit;
use crate::options::serve::{resolve, ServeArgs};
use anyhow::Result;

pub fn run(a: ServeArgs) -> Result<()> {
    let (name, gpu, config) = resolve(&a)?;
    let (serve, err) = crate::session::serve::run(name, gpu, config);
    if serve.plan.weights > serve.config.total_memory {
        return Err(DoesNotFit(format!(
            "the weights ({} GiB) are more than the GPU's memory ({} GiB): vLLM runs out of CUDA memory loading them, before any plan",
            crate::model::vllm_0_33::format_gib(serve.plan.weights as i128),
            crate::model::vllm_0_33::format_gib(serve.config.total_memory as i128)
        ))
        .into());
    }
    print!("{}", serve.text(err.is_none()));
    match err {
        Some(e) => Err(DoesNotFit(format!("ValueError: {e}")).into()),
        None => Ok(()),
    }
}
