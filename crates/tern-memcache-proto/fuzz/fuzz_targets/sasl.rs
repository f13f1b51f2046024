//! Reads arbitrary bytes as a Cyrus user database (looking up a key the input names), as a Cyrus
//! configuration file, and as SASL messages: an answer or an error, never a panic or a loop.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_memcache_proto::sasl::{
    mech_list, parse_config, parse_cram_answer, parse_plain, sasldb_get, sasldb_key, split_realm,
};

fuzz_target!(|data: &[u8]| {
    let (user, realm) = split_realm(data.get(..16).unwrap_or(data), b"host");
    let _ = sasldb_get(data, &sasldb_key(user, realm));
    let _ = sasldb_get(data, &sasldb_key(b"alice", b"vm"));
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(entries) = parse_config(text) {
            for (_, value) in &entries {
                mech_list(value);
            }
        }
    }
    if let Some(plain) = parse_plain(data) {
        assert!(plain.authzid.len() + plain.authcid.len() + plain.password.len() + 2 == data.len());
    }
    if let Some((user, digest)) = parse_cram_answer(data) {
        assert_eq!(user.len() + digest.len() + 1, data.len());
    }
});
