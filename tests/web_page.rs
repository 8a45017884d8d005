//! The static page (web/, built into web/dist/ by tools/build_web.sh) in headless Chromium:
//! served from 127.0.0.1 by a small static server here, opened with the question in its URL's
//! hash, its DOM read back. The 2.7B training step's peaks, a pasted config.json's, and fit's
//! answer for Llama-3.1-8B (QLoRA) on a 24 GB card must equal the command line's to the byte;
//! a bad config.json must show the command line's error line. Skips with a printed notice
//! when web/dist/ was not built (the wasm toolchain is missing) or Chromium is not installed.
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

fn notice(msg: &str) {
    let _ = writeln!(std::io::stderr(), "NOTICE: {msg}: skipping the page's browser tests");
}

/// The built page and Chromium, or None after a notice.
fn setup() -> Option<(PathBuf, String)> {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("web/dist");
    if !dist.join("vramscope.wasm").exists() {
        notice("web/dist/ is not built (tools/build_web.sh needs the wasm toolchain)");
        return None;
    }
    let chromium = ["chromium", "chromium-browser", "google-chrome"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()));
    let Some(chromium) = chromium else {
        notice("no chromium");
        return None;
    };
    Some((dist, chromium.to_string()))
}

/// Serve `dir` on 127.0.0.1 (a thread answering GETs for the test's lifetime); its port.
fn serve(dir: PathBuf) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let dir = dir.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                let mut r = BufReader::new(s.try_clone().unwrap());
                if r.read_line(&mut line).is_err() {
                    return;
                }
                // The headers, up to the blank line.
                let mut h = String::new();
                while r.read_line(&mut h).is_ok_and(|n| n > 2) {
                    h.clear();
                }
                let path = line.split_whitespace().nth(1).unwrap_or("/").split(['?', '#']).next().unwrap().trim_start_matches('/');
                let path = if path.is_empty() { "index.html" } else { path };
                let file = (!path.contains("..")).then(|| std::fs::read(dir.join(path)).ok()).flatten();
                let _ = match file {
                    Some(b) => {
                        let kind = match path.rsplit('.').next() {
                            Some("html") => "text/html",
                            Some("js") => "text/javascript",
                            Some("css") => "text/css",
                            Some("wasm") => "application/wasm",
                            _ => "application/octet-stream",
                        };
                        write!(s, "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", b.len()).and_then(|_| s.write_all(&b))
                    }
                    None => write!(s, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"),
                };
            });
        }
    });
    port
}

/// The page's DOM after it answered the question in `hash`.
fn page(chromium: &str, port: u16, hash: &[(&str, &str)]) -> String {
    let mut q = String::new();
    for (k, v) in hash {
        let enc: String = v.bytes().map(|b| if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) { (b as char).to_string() } else { format!("%{b:02X}") }).collect();
        q.push_str(&format!("{}{k}={enc}", if q.is_empty() { "" } else { "&" }));
    }
    let url = format!("http://127.0.0.1:{port}/index.html#{q}");
    let prof = tempfile::tempdir().unwrap();
    let o = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=300000", "--dump-dom"])
        .arg(format!("--user-data-dir={}", prof.path().display()))
        .arg(&url)
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(dom.contains("data-state=\"done\""), "the page did not answer {url}:\n{}\n{}", &dom[..dom.len().min(3000)], String::from_utf8_lossy(&o.stderr));
    dom
}

/// The value of `attr` on the element with `id` in `dom`.
fn attr(dom: &str, id: &str, attr: &str) -> String {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no #{id} in the page:\n{}", &dom[..dom.len().min(4000)]));
    let tag = &dom[dom[..at].rfind('<').unwrap()..];
    let tag = &tag[..tag.find('>').unwrap()];
    let k = format!("{attr}=\"");
    let v = &tag[tag.find(&k).unwrap_or_else(|| panic!("no {attr} on #{id}: {tag}")) + k.len()..];
    v[..v.find('"').unwrap()].to_string()
}

fn cli(dir: &Path, line: &str) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_vramscope")).args(line.split_whitespace()).current_dir(dir).output().unwrap();
    (o.status.code().unwrap(), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn summary(dir: &Path, line: &str) -> Value {
    let (code, _, err) = cli(dir, &format!("{line} --out-dir out"));
    assert_eq!(code, 0, "{line}: {err}");
    serde_json::from_slice(&std::fs::read(dir.join("out/summary.json")).unwrap()).unwrap()
}

fn html_text(s: &str) -> String {
    s.replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"")
}

#[test]
fn the_page_answers_as_the_command_line_does() {
    let Some((dist, chromium)) = setup() else { return };
    let port = serve(dist);
    let dir = tempfile::tempdir().unwrap();

    // The 2.7B training step from a preset.
    let want = summary(dir.path(), "profile --preset 2.7B --device meta --profile-type training");
    let dom = page(&chromium, port, &[("command", "profile"), ("preset", "2.7B"), ("flags", "--profile-type training")]);
    assert_eq!(attr(&dom, "peak-allocated-0", "data-bytes"), want["runs"][0]["peak_allocated_bytes"].to_string());
    assert_eq!(attr(&dom, "peak-reserved-0", "data-bytes"), want["runs"][0]["peak_reserved_bytes"].to_string());
    assert!(dom.contains("_report.html"), "the report is offered for download");

    // A pasted config.json.
    let cfg = r#"{"model_type": "qwen2", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 2048, "_name_or_path": "someone/tiny-qwen2"}"#;
    std::fs::write(dir.path().join("config.json"), cfg).unwrap();
    let want = summary(dir.path(), "profile --config config.json --device meta --profile-type training --batch-size 2");
    let dom = page(&chromium, port, &[("command", "profile"), ("config", cfg), ("flags", "--profile-type training --batch-size 2")]);
    assert_eq!(attr(&dom, "peak-allocated-0", "data-bytes"), want["runs"][0]["peak_allocated_bytes"].to_string());
    assert_eq!(attr(&dom, "peak-reserved-0", "data-bytes"), want["runs"][0]["peak_reserved_bytes"].to_string());

    // fit: the largest batch of a QLoRA step of Llama-3.1-8B on an RTX 4090.
    let flags = "--gpu RTX4090-24GB --load-in-4bit --lora-r 16 --dtype bf16";
    let (code, out, err) = cli(dir.path(), &format!("fit --preset Llama-3.1-8B {flags} --json -"));
    assert_eq!(code, 0, "{err}");
    let want: Value = serde_json::from_str(&out).unwrap();
    let dom = page(&chromium, port, &[("command", "fit"), ("preset", "Llama-3.1-8B"), ("flags", flags)]);
    assert_eq!(attr(&dom, "fit-answer", "data-value"), want["answer"].to_string());

    // A bad config.json: the command line's error line on the page.
    let bad = r#"{"model_type": "llama", "hidden_size": "x"}"#;
    std::fs::write(dir.path().join("config.json"), bad).unwrap();
    let (code, _, err) = cli(dir.path(), "profile --config config.json --device meta");
    assert_eq!(code, 2);
    let dom = page(&chromium, port, &[("command", "profile"), ("config", bad), ("flags", "")]);
    let shown = &dom[dom.find("id=\"error\"").unwrap()..];
    let shown = html_text(&shown[shown.find('>').unwrap() + 1..shown.find("</div>").unwrap()]);
    assert_eq!(shown, err.trim_end());
    assert!(dom.contains("data-exit-code=\"2\""));
}
