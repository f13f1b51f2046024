//! SASL as memcached 1.6.18 does it with Cyrus SASL, the pure parts: the mechanisms tern implements and
//! their messages (PLAIN's `authzid NUL authcid NUL password`, CRAM-MD5's challenge and `user SP digest`
//! answer), the Cyrus configuration file memcached points Cyrus at (`memcached.conf`: `mech_list`,
//! `sasldb_path`), and the user database `saslpasswd2` writes (a Berkeley DB hash file whose keys are
//! `user NUL realm NUL userPassword`), read straight from its bytes.
//!
//! The database is read here rather than through libdb: no Rust crate reads Berkeley DB files, and linking
//! the C library would put a deprecated dependency into every build for one lookup in a small file. Only
//! what Cyrus's files use is read (hash pages, on-page and overflow items), in either byte order;
//! encrypted or checksummed files are refused.

/// A SASL mechanism tern implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    CramMd5,
    Plain,
}

impl Mechanism {
    /// Every mechanism, in the order Cyrus lists its plugins when no `mech_list` is set (strongest first).
    pub const ALL: [Mechanism; 2] = [Mechanism::CramMd5, Mechanism::Plain];

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::CramMd5 => "CRAM-MD5",
            Mechanism::Plain => "PLAIN",
        }
    }

    /// The mechanism a client names (Cyrus compares names without regard to case).
    pub fn from_name(name: &[u8]) -> Option<Mechanism> {
        Mechanism::ALL
            .into_iter()
            .find(|m| name.eq_ignore_ascii_case(m.name().as_bytes()))
    }
}

/// The mechanisms a `mech_list` names (separated by white space, as Cyrus reads it), in its order: the
/// names tern implements, and those it does not.
pub fn mech_list(value: &str) -> (Vec<Mechanism>, Vec<&str>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for name in value.split_ascii_whitespace() {
        match Mechanism::from_name(name.as_bytes()) {
            Some(m) if !known.contains(&m) => known.push(m),
            Some(_) => {}
            None => unknown.push(name),
        }
    }
    (known, unknown)
}

/// PLAIN's message: `authzid NUL authcid NUL password` (RFC 4616).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainMessage<'a> {
    pub authzid: &'a [u8],
    pub authcid: &'a [u8],
    pub password: &'a [u8],
}

pub fn parse_plain(message: &[u8]) -> Option<PlainMessage<'_>> {
    let mut parts = message.splitn(3, |&b| b == 0);
    Some(PlainMessage {
        authzid: parts.next()?,
        authcid: parts.next()?,
        password: parts.next()?,
    })
}

/// The challenge Cyrus's CRAM-MD5 sends: `<random.time@host>`, the time in seconds modulo 0xFFFFFF.
pub fn cram_challenge(random: u32, unix_seconds: u64, host: &str) -> Vec<u8> {
    format!("<{random}.{}@{host}>", unix_seconds % 0xFF_FFFF).into_bytes()
}

/// CRAM-MD5's answer: the user (everything before the last space) and what follows that space, which
/// Cyrus compares, by its first 32 bytes, with the lowercase hex of HMAC-MD5(password, challenge). `None`
/// where Cyrus finds no user ("need authentication name").
pub fn parse_cram_answer(answer: &[u8]) -> Option<(&[u8], &[u8])> {
    let space = answer.iter().rposition(|&b| b == b' ')?;
    (space > 0).then(|| (&answer[..space], &answer[space + 1..]))
}

/// The user and realm an authentication id names in the database: `user@realm`, split at the first `@`,
/// or the id in `default_realm` (memcached gives Cyrus the host's name).
pub fn split_realm<'a>(authid: &'a [u8], default_realm: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    match authid.iter().position(|&b| b == b'@') {
        Some(at) => (&authid[..at], &authid[at + 1..]),
        None => (authid, default_realm),
    }
}

/// The database key of a user's password.
pub fn sasldb_key(user: &[u8], realm: &[u8]) -> Vec<u8> {
    [user, b"\0", realm, b"\0userPassword"].concat()
}

/// A Cyrus configuration file (`memcached.conf`) that Cyrus refuses, so memcached does not start.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {what}")]
pub struct ConfigError {
    pub line: usize,
    pub what: &'static str,
}

/// The `key: value` entries of a Cyrus configuration file, as Cyrus reads them: blank lines and lines
/// starting with `#` skipped, keys lowercased, white space around values dropped; a key of other than
/// letters, digits, `-` and `_`, a line without `:` or an empty value makes the file unusable.
pub fn parse_config(text: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let error = |what| ConfigError { line: i + 1, what };
        let key_len = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .unwrap_or(line.len());
        let Some(value) = line[key_len..].strip_prefix(':') else {
            return Err(error("a key must be followed by ':'"));
        };
        let value = value.trim();
        if value.is_empty() {
            return Err(error("a key has no value"));
        }
        entries.push((line[..key_len].to_ascii_lowercase(), value.to_owned()));
    }
    Ok(entries)
}

/// A user database tern cannot read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SasldbError {
    #[error("not a Berkeley DB hash file")]
    NotHash,
    #[error("an encrypted or checksummed Berkeley DB file")]
    Unsupported,
    #[error("a damaged Berkeley DB file")]
    Damaged,
}

/// Berkeley DB's hash file magic number.
const HASH_MAGIC: u32 = 0x0006_1561;
/// Every page starts with this header: LSN, page number, previous and next page, entries, the offset of
/// the free space's end (an overflow page's length), level and type.
const PAGE_HEADER: usize = 26;
const P_HASH_UNSORTED: u8 = 2;
const P_OVERFLOW: u8 = 7;
const P_HASH: u8 = 13;
const H_KEYDATA: u8 = 1;
const H_OFFPAGE: u8 = 3;

/// A Berkeley DB hash file's pages, in the file's byte order.
struct Pages<'f> {
    file: &'f [u8],
    page_size: usize,
    big_endian: bool,
}

impl<'f> Pages<'f> {
    fn open(file: &'f [u8]) -> Result<Pages<'f>, SasldbError> {
        let magic = file.get(12..16).ok_or(SasldbError::NotHash)?;
        let magic: [u8; 4] = magic.try_into().expect("four bytes");
        let big_endian = match (u32::from_le_bytes(magic), u32::from_be_bytes(magic)) {
            (HASH_MAGIC, _) => false,
            (_, HASH_MAGIC) => true,
            _ => return Err(SasldbError::NotHash),
        };
        let mut pages = Pages {
            file,
            page_size: 0,
            big_endian,
        };
        let page_size = pages.u32_at(file, 20).ok_or(SasldbError::NotHash)? as usize;
        if !(512..=65536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(SasldbError::Damaged);
        }
        // The encryption algorithm, and the metadata flags' checksum bit.
        if file.get(24) != Some(&0) || file.get(26).is_some_and(|flags| flags & 1 != 0) {
            return Err(SasldbError::Unsupported);
        }
        pages.page_size = page_size;
        Ok(pages)
    }

    fn count(&self) -> usize {
        self.file.len() / self.page_size
    }

    fn page(&self, number: usize) -> Option<&'f [u8]> {
        let start = number.checked_mul(self.page_size)?;
        self.file.get(start..start.checked_add(self.page_size)?)
    }

    fn u16_at(&self, bytes: &[u8], at: usize) -> Option<usize> {
        let b: [u8; 2] = bytes.get(at..at + 2)?.try_into().ok()?;
        Some(usize::from(if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }))
    }

    fn u32_at(&self, bytes: &[u8], at: usize) -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    /// Item `index` of a hash page: its bytes run from its offset to the previous item's (items are
    /// written from the page's end backwards).
    fn item(&self, page: &'f [u8], entries: usize, index: usize) -> Result<&'f [u8], SasldbError> {
        let damaged = SasldbError::Damaged;
        let offset = self.u16_at(page, PAGE_HEADER + 2 * index).ok_or(damaged)?;
        let end = match index {
            0 => self.page_size,
            _ => self
                .u16_at(page, PAGE_HEADER + 2 * (index - 1))
                .ok_or(damaged)?,
        };
        if offset < PAGE_HEADER + 2 * entries || offset >= end || end > self.page_size {
            return Err(damaged);
        }
        Ok(&page[offset..end])
    }

    /// An item's bytes: held on the page, or in a chain of overflow pages.
    fn item_bytes(&self, item: &'f [u8]) -> Result<std::borrow::Cow<'f, [u8]>, SasldbError> {
        let damaged = SasldbError::Damaged;
        match item[0] {
            H_KEYDATA => Ok(item[1..].into()),
            H_OFFPAGE if item.len() == 12 => {
                let mut next = self.u32_at(item, 4).ok_or(damaged)? as usize;
                let total = self.u32_at(item, 8).ok_or(damaged)? as usize;
                let mut bytes = Vec::with_capacity(total.min(self.file.len()));
                // A chain longer than the file has pages is a loop.
                for _ in 0..self.count() {
                    if bytes.len() >= total || next == 0 {
                        break;
                    }
                    let page = self.page(next).ok_or(damaged)?;
                    let len = self.u16_at(page, 22).ok_or(damaged)?;
                    if page[25] != P_OVERFLOW || PAGE_HEADER + len > self.page_size {
                        return Err(damaged);
                    }
                    bytes.extend_from_slice(&page[PAGE_HEADER..PAGE_HEADER + len]);
                    next = self.u32_at(page, 16).ok_or(damaged)? as usize;
                }
                if bytes.len() != total {
                    return Err(damaged);
                }
                Ok(bytes.into())
            }
            _ => Err(damaged),
        }
    }
}

/// The value stored under `key` in a Cyrus user database (`saslpasswd2`'s Berkeley DB hash file), if any.
pub fn sasldb_get(file: &[u8], key: &[u8]) -> Result<Option<Vec<u8>>, SasldbError> {
    let pages = Pages::open(file)?;
    for number in 1..pages.count() {
        let page = pages.page(number).ok_or(SasldbError::Damaged)?;
        if page[25] != P_HASH && page[25] != P_HASH_UNSORTED {
            continue;
        }
        let entries = pages.u16_at(page, 20).ok_or(SasldbError::Damaged)?;
        // Keys and their data alternate.
        for pair in (0..entries / 2).map(|p| 2 * p) {
            let stored_key = pages.item_bytes(pages.item(page, entries, pair)?)?;
            if *stored_key == *key {
                let data = pages.item_bytes(pages.item(page, entries, pair + 1)?)?;
                return Ok(Some(data.into_owned()));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: usize = 512;

    /// A little Berkeley DB hash file of one bucket page holding `pairs`, values longer than 100 bytes
    /// put in overflow pages of `PAGE` bytes, in the byte order asked for.
    fn hash_file(pairs: &[(Vec<u8>, Vec<u8>)], big_endian: bool) -> Vec<u8> {
        let u16b = |v: usize| {
            let v = u16::try_from(v).unwrap();
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let u32b = |v: usize| {
            let v = u32::try_from(v).unwrap();
            if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            }
        };
        let mut meta = vec![0u8; PAGE];
        meta[12..16].copy_from_slice(&u32b(HASH_MAGIC as usize));
        meta[16..20].copy_from_slice(&u32b(9));
        meta[20..24].copy_from_slice(&u32b(PAGE));
        meta[25] = 8;
        let mut bucket = vec![0u8; PAGE];
        let mut overflow: Vec<Vec<u8>> = Vec::new();
        let mut end = PAGE;
        let mut items = Vec::new();
        for (key, value) in pairs {
            items.push([&[H_KEYDATA][..], key].concat());
            if value.len() > 100 {
                let first = 2 + overflow.len();
                let chunks: Vec<&[u8]> = value.chunks(PAGE - PAGE_HEADER).collect();
                for (i, chunk) in chunks.iter().enumerate() {
                    let mut page = vec![0u8; PAGE];
                    page[22..24].copy_from_slice(&u16b(chunk.len()));
                    page[25] = P_OVERFLOW;
                    if i + 1 < chunks.len() {
                        page[16..20].copy_from_slice(&u32b(first + i + 1));
                    }
                    page[PAGE_HEADER..PAGE_HEADER + chunk.len()].copy_from_slice(chunk);
                    overflow.push(page);
                }
                let mut item = vec![H_OFFPAGE, 0, 0, 0];
                item.extend_from_slice(&u32b(first));
                item.extend_from_slice(&u32b(value.len()));
                items.push(item);
            } else {
                items.push([&[H_KEYDATA][..], value].concat());
            }
        }
        for (i, item) in items.iter().enumerate() {
            end -= item.len();
            bucket[end..end + item.len()].copy_from_slice(item);
            bucket[PAGE_HEADER + 2 * i..PAGE_HEADER + 2 * i + 2].copy_from_slice(&u16b(end));
        }
        assert!(
            end >= PAGE_HEADER + 2 * items.len(),
            "the test's pairs fit a page"
        );
        bucket[20..22].copy_from_slice(&u16b(items.len()));
        bucket[22..24].copy_from_slice(&u16b(end));
        bucket[25] = P_HASH;
        [meta, bucket, overflow.concat()].concat()
    }

    #[test]
    fn reads_passwords_on_the_page_and_in_overflow_pages_in_both_byte_orders() {
        let long = vec![b'x'; 1500];
        let pairs = vec![
            (sasldb_key(b"alice", b"vm"), b"wonderland".to_vec()),
            (sasldb_key(b"bob", b"other"), long.clone()),
        ];
        for big_endian in [false, true] {
            let file = hash_file(&pairs, big_endian);
            let get = |key: &[u8]| sasldb_get(&file, key).unwrap();
            assert_eq!(
                get(&sasldb_key(b"alice", b"vm")).as_deref(),
                Some(&b"wonderland"[..])
            );
            assert_eq!(get(&sasldb_key(b"bob", b"other")), Some(long.clone()));
            assert_eq!(get(&sasldb_key(b"alice", b"other")), None);
        }
        assert_eq!(
            sasldb_get(b"alice:secret\n", b"k"),
            Err(SasldbError::NotHash)
        );
        let mut encrypted = hash_file(&pairs, false);
        encrypted[24] = 1;
        assert_eq!(sasldb_get(&encrypted, b"k"), Err(SasldbError::Unsupported));
    }

    #[test]
    fn messages_and_configuration_read_as_cyrus_reads_them() {
        assert_eq!(
            parse_plain(b"\0alice\0pw\0x"),
            Some(PlainMessage {
                authzid: b"",
                authcid: b"alice",
                password: b"pw\0x"
            })
        );
        assert_eq!(parse_plain(b"\0alice"), None);
        assert_eq!(
            parse_cram_answer(b"a b 0123"),
            Some((&b"a b"[..], &b"0123"[..]))
        );
        assert_eq!(parse_cram_answer(b" 0123"), None);
        assert_eq!(parse_cram_answer(b"abc"), None);
        assert_eq!(split_realm(b"bob@x@y", b"vm"), (&b"bob"[..], &b"x@y"[..]));
        assert_eq!(split_realm(b"alice", b"vm"), (&b"alice"[..], &b"vm"[..]));
        assert_eq!(
            cram_challenge(7, 0x0100_0005, "vm"),
            b"<7.6@vm>".to_vec(),
            "the time modulo 0xFFFFFF"
        );
        assert_eq!(
            mech_list("plain  Cram-MD5 digest-md5 PLAIN"),
            (
                vec![Mechanism::Plain, Mechanism::CramMd5],
                vec!["digest-md5"]
            )
        );
        assert_eq!(mech_list("plain,cram-md5").0, vec![]);
        let config = "# memcached\n  Mech_List:  plain cram-md5 \n\nsasldb_path: /etc/sasldb2\n";
        assert_eq!(
            parse_config(config).unwrap(),
            vec![
                ("mech_list".to_owned(), "plain cram-md5".to_owned()),
                ("sasldb_path".to_owned(), "/etc/sasldb2".to_owned())
            ]
        );
        assert_eq!(parse_config("mech_list plain").unwrap_err().line, 1);
        assert_eq!(parse_config("\nlog_level:\n").unwrap_err().line, 2);
    }

    proptest! {
        #[test]
        fn every_stored_pair_is_found(
            pairs in proptest::collection::btree_map(
                proptest::collection::vec(any::<u8>(), 1..20),
                proptest::collection::vec(any::<u8>(), 0..1200),
                0..5,
            ),
            big_endian in any::<bool>(),
        ) {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> = pairs
                .into_iter()
                .map(|(k, v)| if v.len() > 100 { (k, v) } else { (k, v[..v.len().min(20)].to_vec()) })
                .collect();
            let file = hash_file(&pairs, big_endian);
            for (key, value) in &pairs {
                prop_assert_eq!(sasldb_get(&file, key).unwrap(), Some(value.clone()));
            }
            prop_assert_eq!(sasldb_get(&file, b"\xff not stored").unwrap(), None);
        }

        /// Any damage to a file is a lookup that finds nothing or an error, never a panic or a loop.
        #[test]
        fn damaged_files_are_refused_not_trusted(
            at in any::<proptest::sample::Index>(),
            bytes in proptest::collection::vec(any::<u8>(), 1..8),
            cut in any::<proptest::sample::Index>(),
        ) {
            let pairs = vec![
                (sasldb_key(b"alice", b"vm"), b"wonderland".to_vec()),
                (sasldb_key(b"bob", b"vm"), vec![b'y'; 700]),
            ];
            let mut file = hash_file(&pairs, false);
            let start = at.index(file.len());
            for (i, b) in bytes.iter().enumerate() {
                if let Some(slot) = file.get_mut(start + i) {
                    *slot = *b;
                }
            }
            let _ = sasldb_get(&file, &sasldb_key(b"bob", b"vm"));
            let _ = sasldb_get(&file[..cut.index(file.len())], &sasldb_key(b"bob", b"vm"));
        }
    }
}
