#!/usr/bin/env bash
# Fetches the real graphs tern graph and tern recommend are evaluated on: pgp-strong-2009 (the PGP web of trust,
# directed) and email-Enron (undirected), from Debian's python3-graph-tool package, extracted without installing
# it. Only the .gt.gz files are kept (topology is all tern reads; pgp-strong-2009's vertex properties hold
# PGP user ids and are never read). Never committed: they go to $TERN_GRAPHS_DIR (default: target/graphs).
set -euo pipefail
cd "$(dirname "$0")/.."
dest="${TERN_GRAPHS_DIR:-target/graphs}"
mkdir -p "$dest"
wanted=(pgp-strong-2009 email-Enron)
missing=0
for g in "${wanted[@]}"; do
  [ -s "$dest/$g.gt.gz" ] || missing=1
done
if [ "$missing" = 0 ]; then
  echo "graphs already in $dest"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
# A fresh machine may have no package lists yet: update them once if the download fails.
(cd "$work" && { apt-get download python3-graph-tool >/dev/null 2>&1 || {
  $sudo_cmd apt-get update -qq && apt-get download python3-graph-tool >/dev/null 2>&1
}; })
dpkg-deb -x "$work"/python3-graph-tool_*.deb "$work/x"
for g in "${wanted[@]}"; do
  cp "$work/x/usr/lib/python3/dist-packages/graph_tool/collection/$g.gt.gz" "$dest/"
done
echo "graphs in $dest: ${wanted[*]}"
