//! `--help` and the generated command reference (docs/reference/) say what the flags accept:
//! every name of the GPU, preset, optimizer, flavour, layout, … tables appears in the help of
//! every subcommand that takes the flag; every option sits under a heading; and the
//! checked-in pages match their generator (`VRAMSCOPE_BLESS=1 cargo test --test
//! cli_reference` rewrites them).
use clap::CommandFactory;
use std::path::PathBuf;
use vramscope::cli::Cli;

/// Each listed flag (by long name, or a positional's id) and the names its table holds.
fn tables() -> Vec<(&'static str, Vec<String>)> {
    use vramscope::model::{presets, Attention, Flavour};
    let presets: Vec<String> = presets::all().iter().map(|p| p.name.to_string()).chain(presets::ALIASES.iter().map(|(a, _)| a.to_string())).collect();
    vec![
        ("gpu", vramscope::record::gpu::GPUS.iter().map(|g| g.name.to_string()).collect()),
        ("preset", presets.clone()),
        // run-all's --model is a preset.
        ("model", presets),
        ("optimizer", vramscope::train::OptimizerKind::ALL.iter().map(|k| k.name().to_string()).collect()),
        ("flavour", Flavour::ALL.iter().map(|f| f.name().to_string()).collect()),
        ("attention", Attention::ALL.iter().map(|a| a.name().to_string()).collect()),
        ("precision", vramscope::train::Precision::CHOICES.iter().map(|p| p.name().to_string()).collect()),
        ("parallel", vramscope::parallel::Layout::ALL.iter().map(|l| l.name().to_string()).collect()),
        ("attn-implementation", vramscope::model::hf::AttnImplementation::ALL.iter().map(|a| a.name().to_string()).collect()),
        ("sdpa-backend", vramscope::model::hf::SdpaBackend::ALL.iter().map(|b| b.name().to_string()).collect()),
        ("data", vramscope::train::DataKind::ALL.iter().map(|d| d.name().to_string()).collect()),
        ("target-modules", vramscope::model::lora::TARGETS.iter().map(|t| t.to_string()).collect()),
        ("modules-to-save", vramscope::model::lora::MODULES_TO_SAVE.iter().map(|t| t.to_string()).collect()),
        ("size", vramscope::session::study::SIZES.iter().map(|s| s.to_string()).collect()),
    ]
}

fn built() -> clap::Command {
    let mut cmd = Cli::command();
    cmd.build();
    cmd
}

/// Every table entry appears in `-h` and in `--help` of every subcommand taking the flag.
#[test]
fn help_lists_every_table_entry() {
    let cmd = built();
    let mut found: Vec<(String, &str)> = Vec::new();
    let mut missing = Vec::new();
    for sub in cmd.get_subcommands() {
        let short = sub.clone().render_help().to_string();
        let long = sub.clone().render_long_help().to_string();
        for arg in sub.get_arguments() {
            let key = arg.get_long().unwrap_or(arg.get_id().as_str());
            let Some((flag, names)) = tables().into_iter().find(|(f, _)| *f == key) else { continue };
            found.push((sub.get_name().to_string(), flag));
            for n in &names {
                for (which, text) in [("-h", &short), ("--help", &long)] {
                    if !text.contains(n.as_str()) {
                        missing.push(format!("{} {which}: --{flag} does not list {n}", sub.get_name()));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "{} missing:\n{}", missing.len(), missing.join("\n"));
    // The walk saw the flags where they are (so the check above cannot pass vacuously).
    for (sub, flag) in [
        ("profile", "gpu"),
        ("train", "gpu"),
        ("fit", "gpu"),
        ("sweep", "gpu"),
        ("run-all", "gpu"),
        ("view", "gpu"),
        ("profile", "preset"),
        ("train", "preset"),
        ("estimate", "preset"),
        ("fit", "preset"),
        ("sweep", "preset"),
        ("run-all", "model"),
        ("study", "size"),
        ("profile", "optimizer"),
        ("sweep", "optimizer"),
        ("study", "optimizer"),
        ("profile", "parallel"),
        ("sweep", "parallel"),
        ("train", "data"),
    ] {
        assert!(found.iter().any(|(s, f)| s == sub && *f == flag), "{sub} --{flag} not seen");
    }
}

/// The table-built lists are what the flags accept: each listed name resolves.
#[test]
fn listed_names_are_accepted() {
    for v in vramscope::options::values::gpus().names() {
        vramscope::record::gpu::find(&v).unwrap();
    }
    for v in vramscope::options::values::presets().names() {
        vramscope::model::presets::find(&v, None).unwrap_or_else(|e| panic!("{v}: {e}"));
    }
    for v in vramscope::options::values::optimizers().names() {
        assert!(vramscope::train::OptimizerKind::parse(&v).is_some(), "{v}");
    }
    for v in vramscope::options::values::layouts().names() {
        assert!(vramscope::parallel::Layout::parse(&v).is_some(), "{v}");
    }
}

/// Every option of every subcommand sits under a heading (help and version aside).
#[test]
fn every_option_has_a_heading() {
    let cmd = built();
    let mut missing = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        for arg in sub.get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            if arg.get_help_heading().is_none_or(|h| h.trim().is_empty()) {
                missing.push(format!("{} {}", sub.get_name(), arg.get_long().map_or(id.to_string(), |l| format!("--{l}"))));
            }
        }
    }
    assert!(missing.is_empty(), "options without a heading: {missing:?}");
}

/// `-h` stays short: one line of help per option (the details are in `--help`).
#[test]
fn short_help_is_one_line_per_option() {
    let cmd = built();
    let mut long = Vec::new();
    for sub in cmd.get_subcommands() {
        for arg in sub.get_arguments() {
            if let Some(h) = arg.get_help().map(|h| h.to_string()) {
                if h.contains("\n\n") || h.chars().count() > 160 {
                    long.push(format!("{} --{} ({} characters)", sub.get_name(), arg.get_id(), h.chars().count()));
                }
            }
        }
    }
    assert!(long.is_empty(), "-h text longer than 160 characters or in paragraphs (move the details to a second paragraph of the doc comment): {long:#?}");
}

fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/reference")
}

/// The checked-in pages are what the generator writes; VRAMSCOPE_BLESS=1 rewrites them.
#[test]
fn reference_pages_match_the_definitions() {
    let dir = reference_dir();
    let bless = std::env::var_os("VRAMSCOPE_BLESS").is_some();
    let pages = vramscope::cli::reference::pages();
    if bless {
        std::fs::create_dir_all(&dir).unwrap();
    }
    let mut stale = Vec::new();
    for (name, text) in &pages {
        let path = dir.join(name);
        if bless {
            std::fs::write(&path, text).unwrap();
        }
        match std::fs::read_to_string(&path) {
            Ok(have) if have == *text => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name}: {e}")),
        }
    }
    // No page of a command that no longer exists.
    for entry in std::fs::read_dir(&dir).into_iter().flatten() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !pages.iter().any(|(n, _)| *n == name) {
            if bless {
                std::fs::remove_file(dir.join(&name)).unwrap();
            } else {
                stale.push(format!("{name} is no command's page"));
            }
        }
    }
    assert!(stale.is_empty(), "docs/reference/ is stale ({}); VRAMSCOPE_BLESS=1 cargo test --test cli_reference rewrites it", stale.join("; "));
}

/// Each page has the command's usage and every option's flag.
#[test]
fn reference_pages_cover_every_option() {
    let cmd = built();
    let pages = vramscope::cli::reference::pages();
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let (_, text) = pages.iter().find(|(n, _)| *n == format!("{}.md", sub.get_name())).unwrap_or_else(|| panic!("no page for {}", sub.get_name()));
        assert!(text.contains(&format!("vramscope {}", sub.get_name())), "{}", sub.get_name());
        for arg in sub.get_arguments() {
            if let Some(l) = arg.get_long().filter(|l| *l != "help" && *l != "version") {
                assert!(text.contains(&format!("`--{l}")), "{}.md lacks --{l}", sub.get_name());
            }
        }
        assert!(pages[0].1.contains(&format!("({}.md)", sub.get_name())), "the index lacks {}", sub.get_name());
    }
}
