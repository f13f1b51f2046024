//! Runs the `blocking` experiment standalone: `cargo run --release -p tern-bench --example blocking -- --help`.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: tern_bench::blocking::Options,
}

fn main() -> anyhow::Result<()> {
    let report = tern_bench::blocking::run(&Cli::parse().options)?;
    print!("{}", report.table);
    println!("{}", report.json);
    Ok(())
}
