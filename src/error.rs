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

