use clap::Parser;

fn main() {
    vramscope::engine::host::keep_freed_memory();
    let cli = vramscope::cli::Cli::parse();
    std::process::exit(vramscope::cli::run(cli));
}
