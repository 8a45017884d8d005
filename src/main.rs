use clap::Parser;

fn main() {
    // Die quietly on a closed pipe (`vramscope analyze … | head`), as command-line tools do.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    vramscope::engine::host::keep_freed_memory();
    let cli = vramscope::cli::Cli::parse();
    std::process::exit(vramscope::cli::run(cli));
}
