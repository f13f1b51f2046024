//! `tern pacer` without the `tern` binary: `cargo run -p tern-pacer --release --example pacer -- simulate`.

use clap::Parser;

#[derive(Parser)]
#[command(name = "pacer")]
struct Cli {
    #[command(flatten)]
    pacer: tern_pacer::PacerArgs,
}

fn main() -> anyhow::Result<()> {
    tern_pacer::run(&Cli::parse().pacer)
}
