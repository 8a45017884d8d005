//! Host-memory behaviour of the cpu device.

/// Keep freed host memory in the process instead of returning it to the kernel.
///
/// Every op output is a fresh allocation; glibc would serve large ones with mmap and hand
/// them back on free, so each op pays page faults on memory it just released (PyTorch's
/// CPU runs amortise this the same way through malloc's arena). This changes speed only:
/// the memory numbers vramscope reports come from its own accounting, not from the OS.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        // 32 MiB is the largest threshold glibc accepts (larger values are ignored).
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
