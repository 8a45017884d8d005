//! The error a user caused with an input (a flag, a keyword argument, a file), kept apart from
//! the rest so each front end can tell them: exit code 2 on the command line, ValueError in
//! Python.

/// An error the user caused with a flag: printed with the flag's name, exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl From<crate::model::ConfigError> for UsageError {
    fn from(e: crate::model::ConfigError) -> Self {
        UsageError(e.to_string())
    }
}

pub fn usage(flag: &str, msg: impl std::fmt::Display) -> anyhow::Error {
    UsageError(format!("invalid {flag}: {msg}")).into()
}


/// The answer to the question a command asked is "it does not fit": a profile whose every run
/// ran out of memory, a `fit` search in which no value fits. The command has printed and
/// written its outputs (marked OOM) before returning it; exit code 3 ([`ExitCode::DoesNotFit`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct DoesNotFit(pub String);

/// Every command's process exit code, in one place (the command line's `run` maps its result
/// through [`ExitCode::of`]; `vramscope --help` states the rule as [`EXIT_CODES_HELP`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum ExitCode {
    /// An answer: the run fits, the requested numbers were produced.
    Ok = 0,
    /// A failure: I/O, an unreadable file we wrote, an internal error.
    Failure = 1,
    /// A usage error: a bad flag or value, named in the message; nothing is written.
    Usage = 2,
    /// The answer is "it does not fit" (see [`DoesNotFit`]); the outputs are written.
    DoesNotFit = 3,
}

impl ExitCode {
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The code of a command's result.
    pub fn of(r: &anyhow::Result<()>) -> ExitCode {
        match r {
            Ok(()) => ExitCode::Ok,
            Err(e) if e.downcast_ref::<UsageError>().is_some() => ExitCode::Usage,
            Err(e) if e.downcast_ref::<DoesNotFit>().is_some() => ExitCode::DoesNotFit,
            Err(_) => ExitCode::Failure,
        }
    }
}

/// The exit-code rule, as `vramscope --help` prints it.
pub const EXIT_CODES_HELP: &str = "\
Exit codes (every command):
  0  an answer: the run fits, or the requested numbers were produced
  1  failure: I/O or an internal error
  2  usage error: a bad flag or value (named in the message); nothing is written
  3  the answer is \"it does not fit\": the outputs are written, the OOM runs marked in them
Commands that run several configurations (profile with a --context-length list, profile
--compare, sweep, run-all) exit 3 only when every run ran out of memory, and 0 when at least
one fits (the OOM runs are marked 'OOM in <phase>' in their tables, JSON and plots). fit exits
3 when no value fits (for --find world-size: when no layout fits up to --max);
study passes on its training run's code. estimate and analyze answer no fit question: 0.";
