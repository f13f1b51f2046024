"""A TLS client of a memcached-compatible server, for tests/cache_tls.rs: each mode prints one JSON object
that the test compares between memcached and tern cache.

    python3 tls_client.py <mode> <port> <certificate directory> [args...]
"""

import json
import os
import socket
import ssl
import sys

from pymemcache.client.base import Client

mode, port, certs = sys.argv[1], int(sys.argv[2]), sys.argv[3]
extra = sys.argv[4:]
CA = f"{certs}/ca_crt.pem"
# The address of the listener: a `notls:` one may be on another loopback address.
HOST = os.environ.get("TERN_TLS_HOST", "127.0.0.1")


def context(version=None, client_cert=False):
    ctx = ssl.create_default_context(cafile=CA)
    if version == "1.2":
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    elif version == "1.3":
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    if client_cert:
        ctx.load_cert_chain(f"{certs}/client_crt.pem", f"{certs}/client_key.pem")
    return ctx


def read_until(sock, end, data=b""):
    """Reads from `sock` until what was read ends with `end` (or the connection closes)."""
    while not data.endswith(end):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def raw(ctx, lines, session=None):
    """Sends `lines` over a new TLS connection and returns (first reply line, the TLS socket)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    tls = ctx.wrap_socket(sock, server_hostname="127.0.0.1", session=session)
    tls.sendall(lines)
    return read_until(tls, b"\r\n").decode(), tls


def attempt(ctx, lines=b"version\r\n"):
    """What a connection gets: the first word of its first reply, or `refused` (the handshake failed or the
    server closed the connection)."""
    try:
        reply, tls = raw(ctx, lines)
        tls.close()
        return reply.split(" ")[0].strip() or "refused"
    except (ssl.SSLError, ConnectionError, OSError):
        return "refused"


def peer_unit(tls):
    subject = dict(x[0] for x in tls.getpeercert()["subject"])
    return subject.get("organizationalUnitName")


if mode == "commands":
    # The same session of commands on both servers; values that differ by design (CAS numbers, times,
    # pids) are left out.
    client = Client(("127.0.0.1", port), tls_context=context(), timeout=10)
    out = {}
    client.set("a", "1")
    out["get"] = client.get("a").decode()
    out["add_existing"] = client.add("a", "2", noreply=False)
    out["incr"] = client.incr("a", 41)
    out["append"] = client.append("a", "x", noreply=False)
    out["after_append"] = client.get("a").decode()
    value, cas = client.gets("a")
    out["cas_ok"] = client.cas("a", "new", cas)
    out["cas_stale"] = client.cas("a", "newer", cas)
    out["delete"] = client.delete("a", noreply=False)
    out["delete_again"] = client.delete("a", noreply=False)
    many = {f"key:{i}": f"value {i}" * 20 for i in range(300)}
    client.set_many(many)
    got = client.get_many(list(many) + ["missing"])
    out["get_many"] = len(got) == 300 and all(got[k].decode() == v for k, v in many.items())
    big = bytes(range(256)) * 3900  # just under 1 MB, many TLS records each way
    client.set("big", big)
    out["big"] = client.get("big") == big
    bigs = {f"big:{i}": bytes([i]) * 200_000 for i in range(20)}
    client.set_many(bigs)
    got = client.get_many(list(bigs))
    out["bigs"] = all(got[k] == v for k, v in bigs.items())
    settings = client.stats("settings")
    out["settings"] = {
        k.decode(): (v.decode() if isinstance(v, bytes) else v)
        for k, v in settings.items()
        if k.startswith(b"ssl_")
    }
    stats = client.stats()
    out["stats"] = sorted(k.decode() for k in stats if k.startswith(b"ssl_") or b"cert" in k)
    print(json.dumps(out, sort_keys=True))

elif mode == "doors":
    # Who gets in: versions, client certificates, plain text on a TLS port.
    out = {}
    out["tls12"] = attempt(context("1.2"))
    out["tls13"] = attempt(context("1.3"))
    out["with_client_cert"] = attempt(context(client_cert=True))
    plain = socket.create_connection((HOST, port), timeout=10)
    plain.sendall(b"version\r\n")
    try:
        data = plain.recv(100)
        out["plain_text"] = "answered" if data.startswith(b"VERSION") else "refused"
    except (ConnectionError, socket.timeout):
        out["plain_text"] = "refused"
    print(json.dumps(out, sort_keys=True))

elif mode == "plain":
    # A notls: listener: plain text works.
    sock = socket.create_connection((HOST, port), timeout=10)
    sock.sendall(b"get shared\r\n")
    data = read_until(sock, b"END\r\n")
    print(json.dumps({"plain_get": data.decode()}))

elif mode == "set_shared":
    reply, tls = raw(context(), b"set shared 0 0 3\r\nabc\r\n")
    print(json.dumps({"set": reply.strip()}))

elif mode == "refresh":
    # refresh_certs between connections: `extra` names the certificate and key files the server reads, and
    # the files to copy over them.
    cert, key, new_cert, new_key = extra
    first_reply, first = raw(context(), b"version\r\n")
    out = {"first": peer_unit(first)}
    for src, dst in ((new_cert, cert), (new_key, key)):
        with open(src, "rb") as s, open(dst, "wb") as d:
            d.write(s.read())
    first.sendall(b"refresh_certs\r\n")
    out["refresh"] = first.recv(1000).decode().strip()
    _, second = raw(context(), b"version\r\n")
    out["second"] = peer_unit(second)
    # The first connection goes on with the certificate it started with.
    first.sendall(b"version\r\n")
    out["first_still_served"] = first.recv(1000).startswith(b"VERSION")
    out["first_after"] = peer_unit(first)
    with open(cert, "wb") as d:
        d.write(b"not a certificate\n")
    second.sendall(b"refresh_certs\r\n")
    out["broken_refresh"] = second.recv(1000).decode().split(":")[0]
    _, third = raw(context(), b"version\r\n")
    out["third"] = peer_unit(third)
    print(json.dumps(out, sort_keys=True))

elif mode == "resume":
    # TLS 1.2 session resumption through the server's session cache.
    ctx = context("1.2")
    _, first = raw(ctx, b"version\r\n")
    session = first.session
    first.close()
    first_part, second = raw(ctx, b"stats\r\n", session=session)
    data = read_until(second, b"END\r\n", first_part.encode())
    stats = dict(
        line.split(" ")[1:3] for line in data.decode().splitlines() if line.startswith("STAT ")
    )
    print(json.dumps({"reused": second.session_reused, "new_sessions": stats.get("ssl_new_sessions")}))

else:
    sys.exit(f"unknown mode {mode}")
