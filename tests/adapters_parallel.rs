//! One rule (`options::parallel::adapters_refusal`) decides which parallel layouts a LoRA,
//! DoRA, 4-bit or 8-bit model runs under, for profile, `fit --find world-size` and
//! `profile --compare --world-size`: 8-bit and DoRA under none (exit 2 naming the flag, from
//! each command), LoRA and QLoRA under the layouts it lists.
mod scratch;
use std::process::{Command, Output};
use vramscope::options::parallel::{adapters_refusal, default_layouts, Adapted};
use vramscope::parallel::{Layout, ParallelConfig};

fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope")).args(args).output().expect("run vramscope")
}

fn refused(args: &[String], flag: &str) {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = vramscope(&args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert!(err.contains(flag) && err.contains("not modelled"), "{args:?} should name {flag}: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn eight_bit_and_dora_are_refused_alike_by_profile_fit_and_compare() {
    let dir = scratch::dir().join(format!("vramscope-adapters-parallel-{}", std::process::id()));
    let out = dir.to_str().unwrap();
    let model = ["--model", "Llama-3.2-1B", "--num-layers", "1", "--context-length", "64", "--batch-size", "1", "--lora-r", "8"];
    for (extra, flag) in [(&["--load-in-8bit"][..], "--load-in-8bit"), (&["--use-dora"][..], "--use-dora"), (&["--use-dora", "--load-in-4bit"][..], "--use-dora")] {
        let with = |head: &[&str], tail: &[&str]| -> Vec<String> { [head, &model[..], extra, tail].concat().into_iter().map(String::from).collect() };
        refused(&with(&["profile", "--device", "meta", "--out-dir", out], &["--parallel", "ddp", "--world-size", "2"]), flag);
        refused(&with(&["fit", "--find", "world-size", "--memory-limit", "8GiB"], &[]), flag);
        refused(&with(&["fit", "--find", "world-size", "--memory-limit", "8GiB"], &["--parallel", "ddp"]), flag);
        refused(&with(&["profile", "--device", "meta", "--out-dir", out, "--compare"], &["--world-size", "2"]), flag);
        assert!(!dir.exists(), "{extra:?} wrote {out}");
    }
}

/// The layouts fit and compare search are exactly those profile accepts, for every kind of
/// adapted model.
#[test]
fn default_layouts_are_the_ones_profile_accepts() {
    for lora in [false, true] {
        for dora in [false, true] {
            for four_bit in [false, true] {
                for eight_bit in [false, true] {
                    if (dora && !lora) || (four_bit && eight_bit) {
                        continue;
                    }
                    let m = Adapted { lora, dora, four_bit, eight_bit };
                    let accepted: Vec<Layout> = [Layout::Ddp, Layout::Zero1, Layout::Zero2, Layout::Fsdp].into_iter().filter(|&l| adapters_refusal(&ParallelConfig::new(l, 2), m).is_none()).collect();
                    match default_layouts(m) {
                        Ok(ls) => {
                            assert_eq!(ls, accepted, "{m:?}");
                            assert!(!ls.is_empty(), "{m:?}");
                        }
                        Err(e) => {
                            assert!(accepted.is_empty(), "{m:?}");
                            let flag = if eight_bit { "--load-in-8bit" } else { "--use-dora" };
                            assert!(e.to_string().contains(flag), "{m:?}: {e}");
                        }
                    }
                    assert_eq!(default_layouts(m).is_err(), eight_bit || dora, "{m:?}");
                }
            }
        }
    }
    assert_eq!(default_layouts(Adapted { lora: true, four_bit: true, ..Default::default() }).unwrap(), vec![Layout::Ddp, Layout::Zero2, Layout::Fsdp]);
    assert_eq!(default_layouts(Adapted { lora: true, ..Default::default() }).unwrap(), vec![Layout::Ddp, Layout::Zero2, Layout::Fsdp]);
}
