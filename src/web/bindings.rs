//! The page's JavaScript interface (wasm-bindgen): `run(words, names, texts)` gives an
//! [`Answer`], whose `json()` is [`super::Outcome::json`] and whose files are fetched by name
//! as bytes (a Uint8Array) for the page's downloads and its inline report.
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
pub struct Answer(super::Outcome);

#[wasm_bindgen]
impl Answer {
    /// The command line's exit code: 0 an answer, 2 a usage error, 3 it does not fit.
    #[wasm_bindgen(getter)]
    pub fn exit_code(&self) -> i32 {
        self.0.exit_code
    }

    /// The outcome as JSON text: text, error, notes, answer and the files' names and sizes.
    pub fn json(&self) -> String {
        self.0.json().to_string()
    }

    /// A file's bytes by its name, as `json()` lists them.
    pub fn file(&self, name: &str) -> Option<Vec<u8>> {
        self.0.files.iter().find(|(n, _)| n == name).map(|(_, b)| b.clone())
    }
}

/// Run the command line `words` (without `vramscope`); `names[i]` is a pasted file's name as
/// the flags give it (`config.json` for `--config config.json`), `texts[i]` its text.
#[wasm_bindgen]
pub fn run(words: Vec<String>, names: Vec<String>, texts: Vec<String>) -> Answer {
    let pasted: Vec<(String, String)> = names.into_iter().zip(texts).collect();
    Answer(super::run(&words, &pasted))
}

/// The `--help` text of a subcommand (or of vramscope with ""), for the page's flag list.
#[wasm_bindgen]
pub fn help(subcommand: &str) -> String {
    use clap::CommandFactory;
    let mut cmd = crate::cli::Cli::command();
    match cmd.find_subcommand_mut(subcommand) {
        Some(s) => s.render_long_help().to_string(),
        None => cmd.render_long_help().to_string(),
    }
}

#[cfg(target_family = "wasm")]
#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &mut [u8]);
}

/// getrandom's OS source in the browser (its custom backend): crypto.getRandomValues, at most
/// 65536 bytes a call.
///
/// # Safety
/// getrandom passes a writable buffer of `len` bytes.
#[cfg(target_family = "wasm")]
#[no_mangle]
unsafe extern "Rust" fn __getrandom_v03_custom(dest: *mut u8, len: usize) -> Result<(), getrandom::Error> {
    let buf = unsafe { std::slice::from_raw_parts_mut(dest, len) };
    for chunk in buf.chunks_mut(65536) {
        get_random_values(chunk);
    }
    Ok(())
}
