//! The files a user pasted or dropped on the page, by the name the flags give them
//! (`--config config.json`): the page has no file system, so `--config` reads them from here,
//! for the duration of one [`super::run`].
use std::cell::RefCell;
use std::path::Path;

thread_local! {
    static PASTED: RefCell<Vec<(String, String)>> = const { RefCell::new(Vec::new()) };
}

/// The pasted files, set while this lives.
pub struct Scope(());

impl Scope {
    pub fn set(files: &[(String, String)]) -> Scope {
        PASTED.with(|p| *p.borrow_mut() = files.to_vec());
        Scope(())
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        PASTED.with(|p| p.borrow_mut().clear());
    }
}

/// The text pasted under `path`'s name, if any (during a page's run only).
pub fn text(path: &Path) -> Option<String> {
    let name = path.to_str()?;
    PASTED.with(|p| p.borrow().iter().find(|(n, _)| n == name).map(|(_, t)| t.clone()))
}
