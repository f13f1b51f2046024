#!/usr/bin/env bash
# Installs the real peers the tests talk to (memcached with Cyrus SASL's tools, libmemcached tools, Redis, PostgreSQL 15, twemproxy,
# HAProxy, pymemcache, prometheus_client, pylibmc, curl, openssl, Chromium with Selenium, Apache Thrift's compiler and Python library, LightGBM,
# what memcached's own test suite is built with) when they are missing, and fetches the real graphs (scripts/fetch-graphs.sh). Debian packages; needs root or sudo.
set -euo pipefail
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

missing=()
command -v memcached >/dev/null || missing+=(memcached)
command -v memcaslap >/dev/null || missing+=(libmemcached-tools)
command -v redis-server >/dev/null || missing+=(redis-server)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)
command -v nutcracker >/dev/null || missing+=(nutcracker)
# The recommender cluster's test puts HAProxy (TCP mode) in front of two recommenders.
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing+=(haproxy)
command -v curl >/dev/null || missing+=(curl)
# The TLS tests make their certificates with the openssl command.
command -v openssl >/dev/null || missing+=(openssl)
command -v python3 >/dev/null || missing+=(python3 python3-pip)
# Apache Thrift's own implementation, to show wire compatibility: the compiler generates a Python client from
# our IDL files, Debian's python3-thrift runs it (with /usr/bin/python3).
command -v thrift >/dev/null || missing+=(thrift-compiler)
/usr/bin/python3 -c 'import thrift' 2>/dev/null || missing+=(python3-thrift)
# pylibmc (libmemcached's Python binding) speaks the binary protocol with SASL.
/usr/bin/python3 -c 'import pylibmc' 2>/dev/null || missing+=(python3-pylibmc)
# memcached's -S uses Cyrus SASL: its password database is made with saslpasswd2, so that the SASL tests run
# the same exchanges against memcached.
command -v saslpasswd2 >/dev/null || missing+=(sasl2-bin)
# The admin endpoint's live dashboard is tested in a real browser: Debian's Chromium, driven by Selenium.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# memcached's own test suite runs against tern cache (crates/tern/tests/memcached_suite.rs); its `timedrun` helper
# is built from memcached's source, which needs a C toolchain and libevent's and OpenSSL's headers.
command -v make >/dev/null || missing+=(make)
command -v cc >/dev/null || missing+=(gcc)
command -v xz >/dev/null || missing+=(xz-utils)
[ -f /usr/include/event2/event.h ] || missing+=(libevent-dev)
[ -f /usr/include/openssl/ssl.h ] || missing+=(libssl-dev)
perl -MTest::More -e 1 2>/dev/null || missing+=(perl)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# pymemcache talks to tern cache; prometheus_client's parser reads the admin endpoint's /metrics; Selenium
# drives Chromium through the dashboard.
if ! python3 -c 'import pymemcache, prometheus_client, selenium' 2>/dev/null; then
  python3 -m pip install -q pymemcache prometheus_client selenium 2>/dev/null ||
    python3 -m pip install -q --break-system-packages pymemcache prometheus_client selenium
fi
# The recommender's model is trained offline with LightGBM (scripts/train_model.py); its parity test runs it.
if ! python3 -c 'import lightgbm, numpy' 2>/dev/null; then
  python3 -m pip install -q lightgbm numpy 2>/dev/null || python3 -m pip install -q --break-system-packages lightgbm numpy
fi
# The real graphs (pgp-strong-2009, email-Enron) the graph crate's tests load.
bash "$(dirname "$0")/fetch-graphs.sh"
