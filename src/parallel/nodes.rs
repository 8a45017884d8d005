//! The autograd nodes through which FSDP2's backward hooks fire: an identity whose backward
//! runs a callback and passes the gradient on. FSDP2 uses a custom Function on a unit's
//! inputs (`RegisterPostBackwardFunction`: runs once everything inside the unit has
//! backpropagated) and tensor hooks on its outputs (`_pre_backward`: runs before the unit's
//! own backward). Neither allocates; both only order work.
use crate::engine::autograd::attach;
use crate::engine::{runtime, Tensor};

/// `x` unchanged, with `hook` run when its gradient flows back through.
pub fn on_backward(x: Tensor, name: &'static str, hook: impl FnOnce() + 'static) -> Tensor {
    if !x.requires_grad() || !runtime::is_grad_enabled() {
        return x;
    }
    let alias = x.detach();
    attach(
        alias,
        name,
        &[&x],
        Box::new(move |g| {
            hook();
            vec![Some(g)]
        }),
    )
}
