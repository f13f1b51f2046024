//! Parses arbitrary datagrams and re-splits their payload into reply datagrams.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_memcache_proto::udp::{
    parse_request, reply_datagrams, UdpHeader, UDP_HEADER_SIZE, UDP_MAX_PAYLOAD_SIZE,
};

fuzz_target!(|data: &[u8]| {
    if let Some((request_id, payload)) = parse_request(data) {
        assert_eq!(payload.len() + UDP_HEADER_SIZE, data.len());
        let mut joined = Vec::new();
        for (i, (header, chunk)) in reply_datagrams(request_id, payload).enumerate() {
            let parsed = UdpHeader::parse(&header).unwrap();
            assert_eq!(
                (parsed.request_id, usize::from(parsed.sequence)),
                (request_id, i)
            );
            assert!(chunk.len() + UDP_HEADER_SIZE <= UDP_MAX_PAYLOAD_SIZE);
            joined.extend_from_slice(chunk);
        }
        assert_eq!(joined, payload);
    }
});
