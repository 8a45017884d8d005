//! The Python package's keyword arguments, read off the same clap definitions both front ends
//! parse with: for each function the package exposes, each flag's Python name, help line,
//! default, possible values and shape (a switch, a value, a list). The package builds its
//! signatures, docstrings, keyword checks and type stubs from this table (through
//! `vramscope._vramscope.keywords()`), so a flag added, renamed or re-documented here shows up
//! in `help(vramscope.profile)` without a second copy to keep in step.
use serde::Serialize;

/// What a keyword takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A switch: `flops=True` is `--flops`.
    Flag,
    /// One value: `batch_size=4` is `--batch-size 4`.
    Value,
    /// A comma list: `profile_type=["forward", "training"]` is `--profile-type forward,training`.
    List,
}

/// The type of a keyword's value(s), from the flag's value parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    Bool,
    Int,
    Float,
    Path,
    /// Text: anything that prints as the flag's word (several flags take comma lists as text).
    Str,
    /// One of `choices`.
    Choice,
}

/// One keyword argument: a flag of the subcommand, in Python spelling.
#[derive(Debug, Clone, Serialize)]
pub struct Keyword {
    /// The Python name (`context_length`).
    pub name: String,
    /// The command line's spelling (`--context-length`), or the positional's value name.
    pub flag: String,
    /// The flag's help text, one paragraph.
    pub help: String,
    #[serde(rename = "type")]
    pub ty: Type,
    pub kind: Kind,
    /// clap's default as the command line would apply it (None: the flag is left out).
    pub default: Option<String>,
    /// The possible values of a choice (hidden ones left out).
    pub choices: Vec<String>,
    /// Other Python names the command line accepts for it (`seq_len` for `context_length`).
    pub aliases: Vec<String>,
    /// A positional argument (`analyze`'s file), passed first and not as a flag.
    pub positional: bool,
}

/// One function of the package and the subcommand whose flags are its keywords.
#[derive(Debug, Clone, Serialize)]
pub struct Function {
    /// `vramscope.<name>`.
    pub name: &'static str,
    /// The subcommand whose flags are parsed (`profile` for `compare`, which sets `--compare`).
    pub command: &'static str,
    /// The subcommand's one-line description (`vramscope <command> --help`).
    pub about: String,
    pub keywords: Vec<Keyword>,
    /// Flags the function does not take, each with the reason (shown in no signature).
    pub excluded: Vec<(&'static str, &'static str)>,
}

fn command_of<T: clap::Args>(name: &'static str) -> clap::Command {
    // The same wrapper `parse_words` parses with, so this is exactly what the package accepts.
    #[derive(clap::Parser)]
    struct W<T: clap::Args> {
        #[command(flatten)]
        a: T,
    }
    let mut cmd = <W<T> as clap::CommandFactory>::command().name(name);
    cmd.build();
    cmd
}

fn about_of(sub: &str) -> String {
    let cli = <crate::cli::Cli as clap::CommandFactory>::command();
    cli.find_subcommand(sub).and_then(|c| c.get_about().map(|a| a.to_string())).unwrap_or_default()
}

fn ty_of(arg: &clap::Arg) -> Type {
    use std::any::TypeId;
    if !arg.get_possible_values().is_empty() && !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        return Type::Choice;
    }
    let id = arg.get_value_parser().type_id();
    let int = [
        TypeId::of::<usize>(),
        TypeId::of::<u64>(),
        TypeId::of::<u32>(),
        TypeId::of::<u16>(),
        TypeId::of::<u8>(),
        TypeId::of::<i64>(),
        TypeId::of::<i32>(),
        TypeId::of::<isize>(),
    ];
    if id == TypeId::of::<bool>() {
        Type::Bool
    } else if int.iter().any(|t| id == *t) {
        Type::Int
    } else if id == TypeId::of::<f64>() || id == TypeId::of::<f32>() {
        Type::Float
    } else if id == TypeId::of::<std::path::PathBuf>() {
        Type::Path
    } else {
        Type::Str
    }
}

fn python_name(flag: &str) -> String {
    flag.replace('-', "_")
}

/// One paragraph: clap's long help (the whole doc comment) when there is one, lines joined.
fn help_of(arg: &clap::Arg) -> String {
    let h = arg.get_long_help().or(arg.get_help()).map(|s| s.to_string()).unwrap_or_default();
    h.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn keyword(arg: &clap::Arg) -> Keyword {
    use clap::ArgAction;
    let positional = arg.is_positional();
    let long = arg.get_long().map(str::to_string);
    let value_name = arg.get_value_names().and_then(|v| v.first()).map(|s| s.as_str().to_string());
    let name = match &long {
        Some(l) => python_name(l),
        None => arg.get_id().as_str().to_string(),
    };
    let flag = match &long {
        Some(l) => format!("--{l}"),
        None => value_name.unwrap_or_else(|| arg.get_id().as_str().to_ascii_uppercase()),
    };
    let ty = ty_of(arg);
    let kind = match arg.get_action() {
        ArgAction::SetTrue => Kind::Flag,
        ArgAction::Append => Kind::List,
        _ if arg.get_value_delimiter().is_some() => Kind::List,
        _ => Kind::Value,
    };
    let default = match kind {
        Kind::Flag => None,
        _ => {
            let d: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            (!d.is_empty()).then(|| d.join(","))
        }
    };
    let choices = if ty == Type::Choice {
        arg.get_possible_values().iter().filter(|p| !p.is_hide_set()).map(|p| p.get_name().to_string()).collect()
    } else {
        Vec::new()
    };
    let aliases = arg.get_all_aliases().unwrap_or_default().into_iter().map(python_name).collect();
    Keyword { name, flag, help: help_of(arg), ty: if kind == Kind::Flag { Type::Bool } else { ty }, kind, default, choices, aliases, positional }
}

/// The keywords of subcommand `T`, less clap's own (`--help`) and the `excluded` ones.
fn keywords_of<T: clap::Args>(command: &'static str, excluded: &[(&'static str, &'static str)]) -> Vec<Keyword> {
    let cmd = command_of::<T>(command);
    cmd.get_arguments()
        .filter(|a| !matches!(a.get_action(), clap::ArgAction::Help | clap::ArgAction::HelpShort | clap::ArgAction::HelpLong | clap::ArgAction::Version))
        .map(keyword)
        .filter(|k| !excluded.iter().any(|(e, _)| *e == k.name))
        .collect()
}

/// Flags a function leaves out, with why: each is checked to exist (tests/python_keywords.rs).
const PROFILE_EXCLUDED: &[(&str, &str)] = &[
    ("compare", "vramscope.compare(...) runs the comparison"),
    ("out_dir", "nothing is written: save_snapshot(path) and save_report(path) write a run's files"),
    ("output", "save_snapshot(path) names the snapshot"),
];
const COMPARE_EXCLUDED: &[(&str, &str)] = &[
    ("compare", "compare() is the comparison"),
    ("output", "--compare writes one snapshot per variant under out_dir"),
];
const JSON_EXCLUDED: &[(&str, &str)] = &[("json", "the result is the --json object")];

/// Every function of the package that takes a subcommand's flags, in the order of `__all__`.
pub fn functions() -> Vec<Function> {
    use super::{estimate::EstimateArgs, fit::FitArgs, profile::ProfileArgs, snapshot::AnalyzeArgs, sweep::SweepArgs};
    fn f(name: &'static str, command: &'static str, keywords: Vec<Keyword>, excluded: &[(&'static str, &'static str)]) -> Function {
        Function { name, command, about: about_of(command), keywords, excluded: excluded.to_vec() }
    }
    vec![
        f("profile", "profile", keywords_of::<ProfileArgs>("profile", PROFILE_EXCLUDED), PROFILE_EXCLUDED),
        f("compare", "profile", keywords_of::<ProfileArgs>("profile", COMPARE_EXCLUDED), COMPARE_EXCLUDED),
        f("sweep", "sweep", keywords_of::<SweepArgs>("sweep", &[]), &[]),
        f("fit", "fit", keywords_of::<FitArgs>("fit", JSON_EXCLUDED), JSON_EXCLUDED),
        f("estimate", "estimate", keywords_of::<EstimateArgs>("estimate", JSON_EXCLUDED), JSON_EXCLUDED),
        f("analyze", "analyze", keywords_of::<AnalyzeArgs>("analyze", JSON_EXCLUDED), JSON_EXCLUDED),
        f("serve", "serve", keywords_of::<super::serve::ServeArgs>("serve", &[]), &[]),
    ]
}

/// Every flag name (Python spelling) of `command`'s clap definition, help left out.
pub fn all_flags(command: &'static str) -> Vec<String> {
    use super::{estimate::EstimateArgs, fit::FitArgs, profile::ProfileArgs, snapshot::AnalyzeArgs, sweep::SweepArgs};
    let ks = match command {
        "profile" => keywords_of::<ProfileArgs>(command, &[]),
        "sweep" => keywords_of::<SweepArgs>(command, &[]),
        "fit" => keywords_of::<FitArgs>(command, &[]),
        "estimate" => keywords_of::<EstimateArgs>(command, &[]),
        "analyze" => keywords_of::<AnalyzeArgs>(command, &[]),
        "serve" => keywords_of::<super::serve::ServeArgs>(command, &[]),
        _ => Vec::new(),
    };
    ks.into_iter().map(|k| k.name).collect()
}

/// [`functions`] as JSON text: what `vramscope._vramscope.keywords()` returns.
pub fn json() -> String {
    serde_json::to_string(&functions()).expect("the keyword table serialises")
}
