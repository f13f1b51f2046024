//! Decoding cost of the common requests: a `get`, a 16-key `get`, a `set` with a 100-byte value, an `mg`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tern_memcache_proto::{decode, Decoded, Limits, Request};

fn decode_and_walk(buf: &[u8], limits: &Limits) -> usize {
    match decode(buf, limits) {
        Decoded::Frame { request, consumed } => {
            // Walk the keys too: a server always does, and `Words` is lazy.
            let keys = match request {
                Request::Get { keys, .. } => keys.map(<[u8]>::len).sum(),
                _ => 0,
            };
            consumed + keys
        }
        other => panic!("{other:?}"),
    }
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let multiget = format!(
        "get {}\r\n",
        (0..16)
            .map(|i| format!("user:session:{i:08}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let set = [
        &b"set user:session:00000001 0 3600 100\r\n"[..],
        &[b'v'; 100],
        b"\r\n",
    ]
    .concat();
    let cases: [(&str, &[u8]); 4] = [
        ("get", b"get user:session:00000001\r\n"),
        ("get_16_keys", multiget.as_bytes()),
        ("set_100b", &set),
        ("mg", b"mg user:session:00000001 v f t c k O12345\r\n"),
    ];
    let mut group = c.benchmark_group("decode");
    for (name, input) in cases {
        group.throughput(Throughput::Bytes(input.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| decode_and_walk(black_box(input), &limits))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
