//! Text renderings of analyse's values that more than one job prints (the FLOP report of
//! `train` and `profile`); the jobs' own text is `session/text/`. Units are said in the text.

pub mod compute;
