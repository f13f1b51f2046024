#!/usr/bin/env bash
# The test command: installs the peers the tests need, then runs every test of the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-deps.sh
# The load generator is built on protocol crates only, never on a service or the runtime (a client must
# build without a server's dependencies), nor do its tests (they use fakes; tests against real services live
# beside the binary, in crates/tern/tests).
forbidden="$(cargo tree -p tern-load -e normal,dev --prefix none \
  | grep -E '^tern-(runtime|executor|metrics|ping|bench|pacer|pacer-core|pacer-store|pacer-sim|cache|cache-client|cache-storage|graph|graph-service|recommend|model) v' | sort -u || true)"
if [ -n "$forbidden" ]; then
  echo "tern-load must depend on protocol crates only, but depends on: $forbidden" >&2
  exit 1
fi
# The pacer's decision core and its simulator build no I/O stack: no tokio, no PostgreSQL or Redis client.
for crate in tern-pacer-core tern-pacer-sim; do
  heavy="$(cargo tree -p "$crate" -e normal --prefix none | grep -E '^(tokio|mio|postgres|redis|tern-runtime|tern-pacer-store) v' | sort -u || true)"
  if [ -n "$heavy" ]; then
    echo "$crate must not depend on an I/O stack, but depends on: $heavy" >&2
    exit 1
  fi
done
# No two source files of a crate may import each other, directly or around a circle.
python3 scripts/import_cycles.py
cargo test --workspace --no-fail-fast "$@"
