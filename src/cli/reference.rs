//! The command reference of docs/reference/, generated from the clap definitions: one
//! Markdown page per subcommand (about, usage, then its options grouped by heading with their
//! value names, defaults, possible values and help) and an index. tests/cli_reference.rs
//! fails when the checked-in pages differ from what this produces;
//! `VRAMSCOPE_BLESS=1 cargo test --test cli_reference` rewrites them.
use clap::{Arg, Command};

/// Every page as (file name under docs/reference/, contents): `README.md` first, then one
/// `<command>.md` per subcommand.
pub fn pages() -> Vec<(String, String)> {
    use clap::CommandFactory;
    let mut cli = super::Cli::command();
    cli.build();
    let subs: Vec<&Command> = cli.get_subcommands().filter(|s| s.get_name() != "help" && !s.is_hide_set()).collect();
    let mut index = String::from(
        "# Command reference\n\n\
         Generated from the command-line definitions (`src/options/`); do not edit by hand. \
         `VRAMSCOPE_BLESS=1 cargo test --test cli_reference` regenerates these pages, and \
         that test fails when they differ from the definitions.\n\n\
         | Command | What it does |\n|---|---|\n",
    );
    let mut out = Vec::new();
    for sub in &subs {
        let name = sub.get_name();
        let about = sub.get_about().map(|a| one_line(&a.to_string())).unwrap_or_default();
        index.push_str(&format!("| [`vramscope {name}`]({name}.md) | {} |\n", escape(&about).replace('|', "\\|")));
        out.push((format!("{name}.md"), page(sub)));
    }
    out.insert(0, ("README.md".to_string(), index));
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The page of one subcommand.
fn page(sub: &Command) -> String {
    let name = sub.get_name();
    let mut s = format!("# vramscope {name}\n\n");
    if let Some(about) = sub.get_long_about().or(sub.get_about()) {
        s.push_str(&paragraphs(&about.to_string()));
        s.push_str("\n\n");
    }
    let usage = sub.clone().render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    s.push_str(&format!("```text\n{usage}\n```\n"));
    // Headings in the order of their first option, as `--help` shows them.
    let args: Vec<&Arg> = sub.get_arguments().filter(|a| !matches!(a.get_id().as_str(), "help" | "version") && !a.is_hide_set()).collect();
    let mut headings: Vec<&str> = Vec::new();
    for a in &args {
        let h = a.get_help_heading().unwrap_or(if a.is_positional() { "Arguments" } else { "Options" });
        if !headings.contains(&h) {
            headings.push(h);
        }
    }
    for h in headings {
        s.push_str(&format!("\n## {h}\n"));
        for a in args.iter().filter(|a| a.get_help_heading().unwrap_or(if a.is_positional() { "Arguments" } else { "Options" }) == h) {
            s.push_str(&option(a));
        }
    }
    s
}

/// `--flag <VALUE>`, `-s, --flag`, or `<NAME>` / `[NAME]` for a positional.
fn spelling(a: &Arg) -> String {
    let names: Vec<String> = a.get_value_names().map(|v| v.iter().map(|n| n.to_string()).collect()).unwrap_or_else(|| vec![a.get_id().as_str().to_uppercase()]);
    if a.is_positional() {
        let n = names.join(" ");
        return if a.is_required_set() { format!("<{n}>") } else { format!("[{n}]") };
    }
    let mut s = String::new();
    if let Some(c) = a.get_short() {
        s.push_str(&format!("-{c}, "));
    }
    if let Some(l) = a.get_long() {
        s.push_str(&format!("--{l}"));
    }
    if a.get_action().takes_values() {
        let optional = a.get_num_args().is_some_and(|r| r.min_values() == 0);
        let v = names.iter().map(|n| format!("<{n}>")).collect::<Vec<_>>().join(" ");
        s.push_str(&if optional { format!(" [{v}]") } else { format!(" {v}") });
    }
    s
}

fn option(a: &Arg) -> String {
    let mut s = format!("\n### `{}`\n\n", spelling(a));
    if let Some(help) = a.get_long_help().or(a.get_help()) {
        s.push_str(&paragraphs(&help.to_string()));
        s.push('\n');
    }
    let mut facts = Vec::new();
    let aliases: Vec<String> = a.get_visible_aliases().unwrap_or_default().iter().map(|x| format!("`--{x}`")).collect();
    if !aliases.is_empty() {
        facts.push(format!("Also: {}.", aliases.join(", ")));
    }
    let defaults: Vec<String> = a.get_default_values().iter().map(|d| format!("`{}`", d.to_string_lossy())).collect();
    if !defaults.is_empty() && a.get_action().takes_values() {
        facts.push(format!("Default: {}.", defaults.join(", ")));
    }
    if a.is_required_set() {
        facts.push("Required.".to_string());
    }
    if !facts.is_empty() {
        s.push('\n');
        s.push_str(&facts.join(" "));
        s.push('\n');
    }
    let values: Vec<_> = a.get_possible_values().into_iter().filter(|v| !v.is_hide_set()).collect();
    if !values.is_empty() && a.get_action().takes_values() {
        s.push_str("\nPossible values:\n\n");
        for v in values {
            match v.get_help() {
                Some(h) => s.push_str(&format!("- `{}`: {}\n", v.get_name(), escape(&one_line(&h.to_string())))),
                None => s.push_str(&format!("- `{}`\n", v.get_name())),
            }
        }
    }
    s
}

/// Help text as Markdown paragraphs (clap's paragraphs are separated by a blank line).
fn paragraphs(text: &str) -> String {
    text.split("\n\n").map(|p| escape(&one_line(p))).filter(|p| !p.is_empty()).collect::<Vec<_>>().join("\n\n")
}

/// Escapes what GitHub would read as HTML or emphasis outside `code spans`.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut code = false;
    for c in text.chars() {
        match c {
            '`' => {
                code = !code;
                out.push(c);
            }
            '<' if !code => out.push_str("&lt;"),
            '>' if !code => out.push_str("&gt;"),
            '*' | '_' | '[' | ']' | '\\' if !code => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}
