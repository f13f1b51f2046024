#!/usr/bin/env bash
# memcached 1.6.18's own test suite (its t/*.t) run against memcached and against tern cache, file by file.
#
# The suite comes from Debian's source of memcached 1.6.18 (the upstream release tarball, checked against the
# SHA-256 Debian's .dsc lists), into target/memcached-suite/ (never committed). The suite drives a
# `memcached-debug` binary in memcached's build directory (its debug build: `debugtime` and the other test
# hooks), so that is built from the tarball (./configure && make memcached-debug) and is the reference. Each
# server gets a directory of its own that looks like that build directory to the suite's
# t/lib/MemcachedTest.pm: the t/ and doc/ trees, the `timedrun` helper built from the tarball, and a
# `memcached-debug` that is memcached's own or runs `tern cache`. Every file runs alone under a time limit
# (a file tern does not answer at all, such as the binary protocol's, waits for it); the result is a line
# per file and a Markdown table (file, memcached, tern cache): `pass`, `skip` (the file skipped all its
# tests: a feature this build lacks), or `fail a/b` (failed checks of those run, `died` when the file
# stopped early).
#
#   bash scripts/memcached_suite.sh                    # every file, target/release/tern
#   TERN=target/debug/tern bash scripts/memcached_suite.sh t/getset.t t/cas.t
#   SSL_TEST=1 bash scripts/memcached_suite.sh          # every file over TLS (the suite's own switch)
#   SERVERS=tern bash scripts/memcached_suite.sh t/getset.t   # tern only (memcached-debug is not built)
#
# memcached-debug is built with TLS, as Debian builds memcached. Needs: perl, curl, a C compiler, libevent-dev
# and libssl-dev (to build memcached-debug), and libio-socket-ssl-perl for SSL_TEST. Logs:
# target/memcached-suite/<server>/logs/.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.6.18
tarball=memcached_${version}.orig.tar.xz
sha256=35872bd25f8d29d7cc2072d23e74344530891bfd0aa4f4f64184a8ae7291164b
work=target/memcached-suite
tern=$(realpath "${TERN:-target/release/tern}")
per_file_seconds=${PER_FILE_SECONDS:-300}
read -r -a servers <<< "${SERVERS:-memcached tern}"

[ -x "$tern" ] || { echo "no tern binary at $tern (cargo build --release -p tern)" >&2; exit 1; }
mkdir -p "$work"
if [ ! -f "$work/$tarball" ]; then
    curl -sSf -o "$work/$tarball.part" "http://deb.debian.org/debian/pool/main/m/memcached/$tarball"
    mv "$work/$tarball.part" "$work/$tarball"
fi
echo "$sha256  $work/$tarball" | sha256sum --check --quiet
rm -rf "$work/src"
mkdir -p "$work/src"
tar -xJf "$work/$tarball" -C "$work/src" --strip-components=1
targets="timedrun"
[[ " ${servers[*]} " == *" memcached "* ]] && targets="memcached-debug timedrun"
(cd "$work/src" && ./configure --quiet --enable-tls > ../configure.log 2>&1 && make -j2 $targets > ../make.log 2>&1) ||
    { echo "building memcached-debug failed (libevent-dev and libssl-dev installed?): see $work/configure.log, $work/make.log" >&2; exit 1; }

if [ $# -gt 0 ]; then
    files=("$@")
else
    files=()
    for f in "$work"/src/t/*.t; do files+=("t/$(basename "$f")"); done
fi

# The result of one file from its TAP output and exit status.
verdict() {
    local log=$1 status=$2
    local planned run failed
    planned=$(grep -m1 -oE '^1\.\.[0-9]+' "$log" | cut -d. -f3 || true)
    run=$(grep -cE '^(not )?ok ' "$log" || true)
    failed=$(grep -cE '^not ok ' "$log" || true)
    if grep -qE '^1\.\.0 # (SKIP|skip)' "$log"; then
        echo skip
    elif [ "$status" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$run" -gt 0 ]; then
        echo pass
    elif [ -n "$planned" ] && [ "$run" -lt "$planned" ]; then
        echo "fail $failed/$run of $planned, died"
    elif [ "$run" -eq 0 ]; then
        echo "fail, died"
    else
        echo "fail $failed/$run"
    fi
}

declare -A result
for server in "${servers[@]}"; do
    dir="$work/$server"
    rm -rf "$dir"
    mkdir -p "$dir/logs"
    cp -r "$work/src/t" "$dir/t"
    cp -r "$work/src/doc" "$dir/doc"
    cp "$work/src/timedrun" "$dir/timedrun"
    case $server in
        memcached) cp "$work/src/memcached-debug" "$dir/memcached-debug" ;;
        tern) printf '#!/bin/sh\nexec %s cache "$@"\n' "$tern" > "$dir/memcached-debug" ;;
    esac
    chmod +x "$dir/memcached-debug"
    for file in "${files[@]}"; do
        log="$dir/logs/$(basename "$file").log"
        status=0
        (cd "$dir" && timeout "$per_file_seconds" perl "$file") > "$log" 2>&1 || status=$?
        result[$server,$file]=$(verdict "$log" "$status")
        echo "$server $file: ${result[$server,$file]}"
    done
done

echo
echo "| file | memcached $version | tern cache |"
echo "|---|---|---|"
for file in "${files[@]}"; do
    echo "| $(basename "$file") | ${result[memcached,$file]:-not run} | ${result[tern,$file]:-not run} |"
done
for server in "${servers[@]}"; do
    pass=0 skip=0 total=${#files[@]}
    for file in "${files[@]}"; do
        case ${result[$server,$file]} in
            pass) pass=$((pass + 1)) ;;
            skip) skip=$((skip + 1)) ;;
        esac
    done
    echo "$server: $pass of $((total - skip)) files pass ($skip skipped)"
done
