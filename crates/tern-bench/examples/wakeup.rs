//! Runs the `wakeup` experiment standalone: `cargo run --release -p tern-bench --example wakeup -- --help`.

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    options: tern_bench::wakeup::Options,
}

fn main() -> anyhow::Result<()> {
    let report = tern_bench::wakeup::run(&Cli::parse().options)?;
    print!("{}", report.table);
    println!("{}", report.json);
    Ok(())
}
