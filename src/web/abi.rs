//! The page's WebAssembly interface: plain `extern "C"` exports over byte buffers, read by the
//! hand-written loader web/vramscope.js (wasm-bindgen does not compile for wasm64 with
//! panic=unwind, and the allocator model's out-of-memory is a panic that runs catch).
//!
//! JavaScript writes a request into a buffer from `vs_alloc`, calls `vs_run` or `vs_help`, and
//! reads the answer: 8 bytes of little-endian length, then that many bytes (see
//! [`super::frame`]); it frees both with `vs_free`. Pointers are 64-bit (BigInt in JS).
use std::panic::{catch_unwind, AssertUnwindSafe};

#[link(wasm_import_module = "vramscope")]
extern "C" {
    /// crypto.getRandomValues over `len` bytes of memory at `ptr`.
    fn random_fill(ptr: *mut u8, len: usize);
}

/// A zeroed buffer of `len` bytes for JavaScript to write a request into.
#[no_mangle]
pub extern "C" fn vs_alloc(len: usize) -> *mut u8 {
    Box::into_raw(vec![0u8; len].into_boxed_slice()).cast()
}

/// Frees a buffer from `vs_alloc`, or an answer (`len` is then 8 plus its length prefix).
///
/// # Safety
/// `ptr` and `len` are those of a buffer this module gave and has not freed.
#[no_mangle]
pub unsafe extern "C" fn vs_free(ptr: *mut u8, len: usize) {
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) });
}

fn answer(payload: Vec<u8>) -> *mut u8 {
    let mut b = Vec::with_capacity(payload.len() + 8);
    b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    b.extend_from_slice(&payload);
    Box::into_raw(b.into_boxed_slice()).cast()
}

/// # Safety
/// `ptr` and `len` are a buffer from `vs_alloc`.
unsafe fn request<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// Runs a request ([`super::Request`]'s JSON) and answers [`super::frame`]'s bytes. A panic
/// (a bug: bad input is an error, never a panic) answers exit code 1 and "internal error: …".
///
/// # Safety
/// `ptr` and `len` are a buffer from `vs_alloc`.
#[no_mangle]
pub unsafe extern "C" fn vs_run(ptr: *const u8, len: usize) -> *mut u8 {
    let req = unsafe { request(ptr, len) };
    remember_panics();
    LAST_PANIC.with(|l| l.borrow_mut().take());
    let out = catch_unwind(AssertUnwindSafe(|| super::run_request(req))).unwrap_or_else(|p| {
        let told = LAST_PANIC.with(|l| l.borrow_mut().take());
        let mut out = super::internal_error(&p);
        if let Some(t) = told {
            out.error = Some(format!("internal error: {t}"));
        }
        out
    });
    answer(super::frame(&out))
}

thread_local! {
    /// The last panic's message and place, as the panic hook formats them.
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// Keeps each panic's message for [`vs_run`]'s answer: the browser has no stderr for the default
/// hook to print it to, and a payload of `panic_any` is not text. The allocator model's
/// out-of-memory panics never reach this hook (the session's hook stops them first).
fn remember_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            LAST_PANIC.with(|l| *l.borrow_mut() = Some(info.to_string()));
            prev(info)
        }));
    });
}

/// The `--help` text of the subcommand named by the request's UTF-8 bytes (all of
/// vramscope's for an empty name).
///
/// # Safety
/// `ptr` and `len` are a buffer from `vs_alloc`.
#[no_mangle]
pub unsafe extern "C" fn vs_help(ptr: *const u8, len: usize) -> *mut u8 {
    let req = unsafe { request(ptr, len) };
    let name = String::from_utf8_lossy(req).into_owned();
    let text = catch_unwind(|| super::help(&name)).unwrap_or_default();
    answer(text.into_bytes())
}

/// getrandom's OS source in the browser (its custom backend): crypto.getRandomValues.
///
/// # Safety
/// getrandom passes a writable buffer of `len` bytes.
#[no_mangle]
unsafe extern "Rust" fn __getrandom_v03_custom(dest: *mut u8, len: usize) -> Result<(), getrandom::Error> {
    unsafe { random_fill(dest, len) };
    Ok(())
}
