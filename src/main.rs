use clap::Parser;

fn main() {
    let cli = vramscope::cli::Cli::parse();
    std::process::exit(vramscope::cli::run(cli));
}
