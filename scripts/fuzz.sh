#!/usr/bin/env bash
# Runs every fuzz target of the workspace (the crates/*/fuzz crates) for a bounded time, starting from its
# committed seed corpus (fuzz/seeds/<target>), and fails if one finds a crash. One line per target:
#   fuzz <crate>/<target>: <seconds> s, <executions> executions
# Usage: bash scripts/fuzz.sh [seconds per target, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz --version "^0.12"
fi
# libFuzzer's instrumentation needs nightly flags: the nightly toolchain when rustup has one, else the stable
# one with its unstable features unlocked.
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  toolchain=(+nightly)
else
  toolchain=()
  export RUSTC_BOOTSTRAP=1
fi

status=0
for fuzz_dir in crates/*/fuzz; do
  crate_dir="$(dirname "$fuzz_dir")"
  crate="$(basename "$crate_dir")"
  for target in $(cd "$crate_dir" && cargo "${toolchain[@]}" fuzz list); do
    corpus="$(mktemp -d)"
    if [ -d "$fuzz_dir/seeds/$target" ]; then
      cp -r "$fuzz_dir/seeds/$target/." "$corpus/"
    fi
    log="$(mktemp)"
    if (cd "$crate_dir" && cargo "${toolchain[@]}" fuzz run "$target" "$corpus" -- \
          -max_total_time="$seconds" -print_final_stats=1) >"$log" 2>&1; then
      executions="$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -1)"
      echo "fuzz $crate/$target: $seconds s, ${executions:-?} executions"
    else
      echo "fuzz $crate/$target: FAILED (log follows)"
      tail -60 "$log"
      status=1
    fi
    rm -rf "$corpus" "$log"
  done
done
exit "$status"
