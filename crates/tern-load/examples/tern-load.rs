//! `tern load` as a stand-alone program, for the bench scripts and manual runs before the
//! `tern` binary wires it in.

use clap::Parser;

#[derive(Parser)]
#[command(name = "tern-load", about = "tern load: memcached load generator")]
struct Cli {
    #[command(flatten)]
    load: tern_load::LoadArgs,
}

fn main() -> anyhow::Result<()> {
    tern_load::run(&Cli::parse().load)
}
