//! Finding and reading a `config.json` given by `--config`: a file, or a model folder holding
//! one. Only regular files are read, at most [`MAX_CONFIG_BYTES`]: a FIFO or a device named as
//! the config is refused before it is opened for reading (a FIFO would block, /dev/zero would
//! never end), and an oversized file before it is read whole.
#[cfg(not(target_family = "wasm"))]
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest config.json read. Real ones are a few KiB (the largest shipped, with long
/// id2label maps or tokenizer lists pasted in, under 1 MiB); parsing 4 MiB of JSON takes tens of
/// MB.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// The file `path` names (a folder's config.json) and its text; errors say what was found
/// instead of a readable regular file.
pub fn read(path: &Path) -> Result<(PathBuf, String), String> {
    // The page's pasted or dropped config.json (src/web), held to the same size limit.
    if let Some(text) = crate::web::pasted::text(path) {
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(format!("{} holds {} bytes: more than the {MAX_CONFIG_BYTES} a config.json is read up to", path.display(), text.len()));
        }
        return Ok((path.to_path_buf(), text));
    }
    read_file(path)
}

/// The page has no file system: only what was pasted or dropped on it.
#[cfg(target_family = "wasm")]
fn read_file(path: &Path) -> Result<(PathBuf, String), String> {
    Err(format!("cannot read {}: the page reads only the config.json pasted or dropped on it", path.display()))
}

#[cfg(not(target_family = "wasm"))]
fn read_file(path: &Path) -> Result<(PathBuf, String), String> {
    let file = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            let f = path.join("config.json");
            match std::fs::symlink_metadata(&f) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(format!("{} is a folder without a config.json", path.display())),
                Err(e) => return Err(format!("cannot read {}: {e}", f.display())),
                Ok(l) if l.file_type().is_symlink() && std::fs::metadata(&f).is_err() => {
                    let to = std::fs::read_link(&f).map_or_else(|_| "?".into(), |t| t.display().to_string());
                    return Err(format!("{} is a link to {to}, which does not exist", f.display()));
                }
                Ok(_) => f,
            }
        }
        Ok(_) => path.to_path_buf(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let meta = std::fs::metadata(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let kind = kind_of(&meta);
    if kind != "file" {
        return Err(format!("{} is {kind}, not a regular file", file.display()));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!("{} holds {} bytes: more than the {MAX_CONFIG_BYTES} a config.json is read up to", file.display(), meta.len()));
    }
    // O_NONBLOCK: should the name be swapped for a FIFO after the check, open() does not wait
    // for a writer; the type is checked again on the open file.
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let meta = f.metadata().map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is {}, not a regular file", file.display(), kind_of(&meta)));
    }
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("{} grew past the {MAX_CONFIG_BYTES} bytes a config.json is read up to", file.display()));
    }
    let text = String::from_utf8(bytes).map_err(|e| format!("{}: not UTF-8 text (byte offset {})", file.display(), e.utf8_error().valid_up_to()))?;
    Ok((file, text))
}

#[cfg(not(target_family = "wasm"))]
fn kind_of(m: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_file() {
        "file"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_no_regular_file_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config.json");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let e = read(dir.path()).unwrap_err();
        assert!(e.contains("is a FIFO"), "{e}");
        assert!(read(Path::new("/dev/zero")).unwrap_err().contains("is a device"));
        std::fs::remove_file(&fifo).unwrap();
        assert!(read(dir.path()).unwrap_err().contains("folder without a config.json"));
        std::os::unix::fs::symlink(dir.path().join("gone.json"), &fifo).unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.contains("is a link to") && e.contains("gone.json") && e.contains("does not exist"), "{e}");
        std::fs::remove_file(&fifo).unwrap();
        std::fs::create_dir(&fifo).unwrap();
        assert!(read(dir.path()).unwrap_err().contains("is a folder, not a regular file"));
        std::fs::remove_dir(&fifo).unwrap();
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        assert!(read(&big).unwrap_err().contains("more than the"));
        std::fs::write(&fifo, "{}").unwrap();
        assert_eq!(read(dir.path()).unwrap(), (fifo, "{}".to_string()));
    }
}
