//! User-space cost of one request/reply through the client codec: encoding a get or set into a
//! reused buffer and parsing the reply. The kernel's socket cost (measured by
//! `bench/client_cost.py`) dwarfs this; the benchmark keeps it that way.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use tern_memcache_proto::client::{
    encode_get, encode_storage, parse_reply, Limits, Parse, StorageCommand,
};

fn codec(c: &mut Criterion) {
    let key = b"k000000000012345";
    let value = [b'v'; 100];
    let limits = Limits::default();
    let mut reply = b"VALUE k000000000012345 0 100\r\n".to_vec();
    reply.extend_from_slice(&value);
    reply.extend_from_slice(b"\r\nEND\r\n");
    let mut out = Vec::with_capacity(4096);

    let mut group = c.benchmark_group("client_codec");
    group.throughput(Throughput::Elements(1));
    group.bench_function("encode_get", |b| {
        b.iter(|| {
            out.clear();
            encode_get(&mut out, [black_box(&key[..])], false).unwrap();
        })
    });
    group.bench_function("encode_set_100b", |b| {
        b.iter(|| {
            out.clear();
            encode_storage(
                &mut out,
                StorageCommand::Set,
                black_box(key),
                0,
                0,
                black_box(&value),
                false,
            )
            .unwrap();
        })
    });
    group.bench_function("parse_get_hit_100b", |b| {
        b.iter(|| {
            let mut input = black_box(&reply[..]);
            while let Ok(Parse::Complete { consumed, .. }) = parse_reply(input, &limits) {
                input = &input[consumed..];
            }
        })
    });
    group.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
