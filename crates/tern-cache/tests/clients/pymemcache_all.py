"""Every memcached command through pymemcache (a real client library) against the server on argv[1]'s port.

Run by tests/clients.rs; prints "ok <n> checks" and exits 0, or raises with the failing check.
"""
import sys
import time

from pymemcache.client.base import Client

port = int(sys.argv[1])
c = Client(("127.0.0.1", port), connect_timeout=5, timeout=5, default_noreply=False)
checks = 0


def check(got, want, what):
    global checks
    checks += 1
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


check(c.flush_all(), True, "flush_all")
check(c.set("k", b"v1", expire=0), True, "set")
check(c.get("k"), b"v1", "get")
check(c.set("f", b"x", flags=123) and c.raw_command(b"get f", b"END\r\n"), b"VALUE f 123 1\r\nx\r\n", "flags")
check(c.add("k", b"other"), False, "add existing")
check(c.add("new", b"n"), True, "add new")
check(c.replace("missing", b"r"), False, "replace missing")
check(c.replace("k", b"v2"), True, "replace")
check(c.append("k", b"-tail"), True, "append")
check(c.prepend("k", b"head-"), True, "prepend")
check(c.get("k"), b"head-v2-tail", "after append/prepend")
check(c.append("missing", b"x"), False, "append missing")
value, cas = c.gets("k")
check(value, b"head-v2-tail", "gets value")
check(c.cas("k", b"swapped", cas), True, "cas match")
check(c.cas("k", b"again", cas), False, "cas stale")
check(c.cas("missing", b"x", 1), None, "cas missing")
check(c.get("k"), b"swapped", "after cas")
check(c.set_many({"m1": b"1", "m2": b"2", "m3": b"3"}), [], "set_many")
check(c.get_many(["m1", "m2", "m3", "nope"]), {"m1": b"1", "m2": b"2", "m3": b"3"}, "get_many")
got = c.gets_many(["m1", "m2"])
check(sorted(got), ["m1", "m2"], "gets_many keys")
check(c.delete("m1"), True, "delete")
check(c.delete("m1", noreply=False), False, "delete missing")
check(c.delete_many(["m2", "m3"]), True, "delete_many")
check(c.set("n", b"10"), True, "set counter")
check(c.incr("n", 5), 15, "incr")
check(c.decr("n", 20), 0, "decr floors at 0")
check(c.incr("n", 2**64 - 1), 2**64 - 1, "incr to max")
check(c.incr("n", 1), 0, "incr wraps")
check(c.incr("missing", 1), None, "incr missing")
check(c.set("ten", b"10") and c.decr("ten", 4), 6, "decr 10 by 4")
check(c.get("ten"), b"6 ", "decr pads in place like memcached")
try:
    c.incr("k", 1)
    raise AssertionError("incr on a non-number must fail")
except Exception as e:  # pymemcache raises MemcacheClientError
    check("non-numeric" in str(e), True, "incr non-numeric error")
check(c.touch("k", 100), True, "touch")
check(c.touch("missing", 100), False, "touch missing")
# pymemcache has no gat/gats methods: its raw command path.
check(c.raw_command(b"gat 100 k", b"END\r\n"), b"VALUE k 0 7\r\nswapped\r\n", "gat")
check(c.raw_command(b"gats 100 k", b"END\r\n").startswith(b"VALUE k 0 7 "), True, "gats")
check(c.raw_command(b"gat 100 missing", b"END\r\n"), b"", "gat miss")
check(c.version().decode(), "1.6.18", "version")
stats = c.stats()
check(stats[b"curr_items"] > 0 and b"get_hits" in stats and b"uptime" in stats, True, "stats")
check(b"maxbytes" in c.stats("settings"), True, "stats settings")
check(isinstance(c.stats("items"), dict), True, "stats items")
check(isinstance(c.stats("slabs"), dict), True, "stats slabs")
check(isinstance(c.stats("conns"), dict), True, "stats conns")
# noreply: the client does not wait, the next command sees the effect.
c.set("nr", b"quiet", noreply=True)
check(c.get("nr"), b"quiet", "set noreply")
# Expiry: a 1-second TTL.
c.set("ttl", b"soon", expire=1)
check(c.get("ttl"), b"soon", "ttl before")
time.sleep(2.1)
check(c.get("ttl"), None, "ttl expired")
# Meta commands through raw_command.
check(c.raw_command(b"ms mk 2 T0 F7 c\r\nhi", b"\r\n").startswith(b"HD c"), True, "ms")
check(c.raw_command(b"mg mk v f s k O42", b"\r\nhi\r\n"), b"VA 2 f7 s2 kmk O42", "mg")
check(c.raw_command(b"mg nope v", b"\r\n"), b"EN", "mg miss")
check(c.raw_command(b"ma mnum N0 J41 v", b"\r\n41\r\n"), b"VA 2", "ma vivify")
check(c.raw_command(b"ma mnum v", b"\r\n42\r\n"), b"VA 2", "ma incr")
check(c.raw_command(b"ma mnum MD D2 v", b"\r\n40\r\n"), b"VA 2", "ma decr")
check(c.raw_command(b"mg mnum v", b"\r\n40\r\n"), b"VA 2", "ma result stored")
check(c.raw_command(b"md mk", b"\r\n"), b"HD", "md")
check(c.raw_command(b"md mk", b"\r\n"), b"NF", "md missing")
check(c.raw_command(b"mn", b"\r\n"), b"MN", "mn")
check(c.raw_command(b"ms bWs= 1 b\r\nx", b"\r\n"), b"HD", "ms base64 key")
check(c.raw_command(b"mg bWs= b v", b"\r\nx\r\n"), b"VA 1", "mg base64 key")
check(c.raw_command(b"me ten", b"\r\n").startswith(b"ME ten exp=-1"), True, "me")
check(c.raw_command(b"verbosity 1", b"\r\n"), b"OK", "verbosity")
check(c.flush_all(delay=0), True, "flush_all")
check(c.get("k"), None, "flushed")
c.quit()
check(c.get("nr"), None, "quit, then a new connection")
print(f"ok {checks} checks")
