//! The Python package's keyword table (`options::keywords`), read off the clap definitions:
//! every keyword documented, shaped as its flag parses, and the flags a function leaves out
//! still existing (a renamed flag would otherwise slip back in unexplained).
use vramscope::options::keywords::{all_flags, functions, Kind, Type};

#[test]
fn every_keyword_has_help_and_a_unique_name() {
    for f in functions() {
        assert!(!f.about.is_empty(), "{}: the subcommand's about", f.name);
        let mut seen = std::collections::HashSet::new();
        for k in &f.keywords {
            assert!(!k.help.trim().is_empty(), "{}({}=): a help line", f.name, k.name);
            assert!(seen.insert(k.name.clone()), "{}: {} twice", f.name, k.name);
            for a in &k.aliases {
                assert!(f.keywords.iter().all(|o| o.name != *a), "{}: alias {a} of {} is another keyword", f.name, k.name);
            }
            assert!(k.name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'), "{}: {} is a Python name", f.name, k.name);
        }
    }
}

#[test]
fn excluded_flags_exist_and_are_left_out() {
    for f in functions() {
        let all = all_flags(f.command);
        for (e, why) in &f.excluded {
            assert!(all.iter().any(|a| a == e), "{}: excluded {e} is no flag of {}", f.name, f.command);
            assert!(!why.is_empty());
            assert!(f.keywords.iter().all(|k| k.name != *e), "{}: {e} is excluded", f.name);
        }
        // Everything else is a keyword.
        assert_eq!(f.keywords.len() + f.excluded.len(), all.len(), "{}", f.name);
    }
}

#[test]
fn shapes_types_defaults_and_choices_follow_the_flags() {
    let fs = functions();
    let get = |f: &str, k: &str| fs.iter().find(|x| x.name == f).unwrap().keywords.iter().find(|x| x.name == k).cloned().unwrap_or_else(|| panic!("{f}({k}=)"));
    let flops = get("profile", "flops");
    assert_eq!((flops.kind, flops.ty, flops.default.as_deref()), (Kind::Flag, Type::Bool, None));
    assert!(flops.aliases.contains(&"enable_deepspeed_flops".to_string()));
    let pt = get("profile", "profile_type");
    assert_eq!((pt.kind, pt.ty, pt.default.as_deref()), (Kind::List, Type::Choice, Some("training")));
    assert_eq!(pt.choices, ["forward", "forward-loss", "inference", "training", "generate"]);
    let ws = get("profile", "warmup_steps");
    assert_eq!((ws.kind, ws.ty, ws.default.as_deref(), ws.flag.as_str()), (Kind::Value, Type::Int, Some("1"), "--warmup-steps"));
    assert_eq!(get("fit", "find").ty, Type::Choice);
    assert_eq!(get("analyze", "detail").ty, Type::Float);
    let file = get("analyze", "file");
    assert!(file.positional && file.ty == Type::Path);
    let preset = get("sweep", "preset");
    assert!(preset.aliases.contains(&"model".to_string()), "sweep(model=) is --preset's visible alias");
    assert!(fs.iter().find(|x| x.name == "profile").unwrap().keywords.iter().all(|k| k.name != "out_dir"));
}

#[test]
fn the_table_is_json() {
    let v: serde_json::Value = serde_json::from_str(&vramscope::options::keywords::json()).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["profile", "compare", "sweep", "fit", "estimate", "analyze", "serve"]);
    assert_eq!(v[0]["keywords"].as_array().unwrap().iter().find(|k| k["name"] == "batch_size").unwrap()["type"], "int");
}
