//! `--config`'s config.json reader (`model::hf::parse`) and the size checks after it, on
//! arbitrary text: never a panic; a refusal names a field (or says the text is no JSON); an
//! accepted config validates or is refused naming a flag, and its parameter count never wraps.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vramscope::model::hf;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match hf::parse(text) {
        Err(e) => assert!(e.contains("field") || e.contains('\'') || e.contains("JSON") || e.contains("num_") || e.contains("head_dim") || e.contains("multimodal"), "names nothing: {e}"),
        Ok(m) => {
            let c = &m.config;
            if let Err(e) = c.validate() {
                assert!(e.flag.starts_with("--"), "{e}");
                return;
            }
            let _ = c.param_count();
            for (b, s) in [(1, 1), (8, 4096), (usize::MAX, usize::MAX)] {
                if let Err(e) = c.check_sizes(b, s, "--context-length") {
                    assert!(e.flag.starts_with("--"), "{e}");
                }
            }
        }
    }
});
