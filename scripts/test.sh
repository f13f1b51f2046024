#!/usr/bin/env bash
# The test command: installs the peers the tests need, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
cargo test --workspace --no-fail-fast "$@"
