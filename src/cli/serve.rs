//! `vramscope serve`: vLLM 0.33.0's start-up memory plan, printed in vLLM's words; when vLLM
//! would not start (one request of --max-model-len does not fit, the weights do not fit, or
//! `--find` finds nothing), its error and exit code 3.
use crate::error::DoesNotFit;
use crate::options::serve::ServeArgs;
use anyhow::Result;

pub fn run(a: ServeArgs) -> Result<()> {
    let o = crate::session::serve::outcome(&a)?;
    let weights_too_big = o.serve.plan.weights > o.serve.config.total_memory;
    if !weights_too_big {
        print!("{}", o.text());
    }
    match o.error {
        Some(e) if weights_too_big => Err(DoesNotFit(e).into()),
        Some(e) if e.starts_with("not even one") => Err(DoesNotFit(e).into()),
        Some(e) => Err(DoesNotFit(format!("ValueError: {e}")).into()),
        None => Ok(()),
    }
}
