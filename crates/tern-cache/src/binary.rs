//! The binary protocol's door: memcached 1.6.18's binary commands (`proto_bin.c`) answered with its response
//! packets, on the same store and counters as the text door. A quiet command answers only its errors (a
//! quiet get also its hits); errors carry memcached's texts; the response carries the request's opcode and
//! opaque, and the item's CAS where memcached sets it.

use bytes::Bytes;
use tern_cache_storage::{
    ArithOptions, ArithOutcome, DeleteOutcome, StoreMode, StoreOutcome, StoreRequest,
};
use tern_memcache_proto::binary::{self, BinaryCommand, BinaryStore, Header, Status};
use tern_memcache_proto::request::{MetaKey, StoreKind};
use tern_memcache_proto::sasl::Mechanism;
use tern_memcache_proto::Words;
use tern_runtime::{Output, ServerControl};

use crate::cache::{Answer, Cache, CacheLoop, Flow, SaslStarted, MEMCACHED_VERSION, SHARE_MIN};
use crate::stats::{AUTH_CMDS, AUTH_ERRORS};
use crate::vlog;

/// memcached's `-vv` dump of a binary packet's 24-byte header: `<dir><id> <title>:`, then the bytes four to
/// a line, each line `<dir><id>` and `pad` spaces (`proto_bin.c` pads requests with three, responses with
/// two), each byte ` 0x%02x`.
fn dump_header(log: &mut Vec<u8>, dir: u8, id: usize, title: &[u8], pad: &[u8], bytes: &[u8]) {
    let id = itoa::Buffer::new().format(id).as_bytes().to_vec();
    log.push(dir);
    log.extend_from_slice(&id);
    log.push(b' ');
    log.extend_from_slice(title);
    log.push(b':');
    for (i, byte) in bytes.iter().enumerate() {
        if i % 4 == 0 {
            log.push(b'\n');
            log.push(dir);
            log.extend_from_slice(&id);
            log.extend_from_slice(pad);
        }
        log.extend_from_slice(format!(" 0x{byte:02x}").as_bytes());
    }
    log.push(b'\n');
}

/// memcached's `-vv` lines for a binary request before it runs: its header, then what the command's
/// handler prints (`proto_bin.c`: `GET`/`TOUCH` and the key, the storage commands' key and value length,
/// `Deleting`, `incr`, `STATS`).
pub(crate) fn log_request(
    log: &mut Vec<u8>,
    id: usize,
    raw_header: &[u8],
    header: &Header,
    command: &BinaryCommand<'_>,
) {
    use binary::opcode;
    dump_header(
        log,
        b'<',
        id,
        b"Read binary protocol data",
        b"   ",
        raw_header,
    );
    let named = |log: &mut Vec<u8>, name: &[u8], key: &[u8], tail: &[u8]| {
        let mut text = name.to_vec();
        text.push(b' ');
        text.extend_from_slice(key);
        text.extend_from_slice(tail);
        vlog::line(log, b'<', id, &text);
    };
    let value_len = |with_extras: bool| {
        let extras = if with_extras {
            u32::from(header.extlen)
        } else {
            0
        };
        header
            .bodylen
            .saturating_sub(u32::from(header.keylen) + extras)
    };
    let store_name = match header.opcode {
        opcode::SET | opcode::SETQ => Some(&b"SET"[..]),
        opcode::ADD | opcode::ADDQ => Some(&b"ADD"[..]),
        opcode::REPLACE | opcode::REPLACEQ => Some(&b"REPLACE"[..]),
        _ => None,
    };
    match *command {
        BinaryCommand::Get { key, .. } => named(log, b"GET", key, b""),
        BinaryCommand::Gat { key, .. } | BinaryCommand::Touch { key, .. } => {
            named(log, b"TOUCH", key, b"")
        }
        BinaryCommand::Store { key, .. } | BinaryCommand::TooLarge { key, .. }
            if store_name.is_some() =>
        {
            let tail = format!(" Value len is {}", value_len(true));
            named(log, store_name.unwrap_or_default(), key, tail.as_bytes());
        }
        BinaryCommand::Concat { .. } | BinaryCommand::TooLarge { .. } => {
            log.extend_from_slice(format!("Value len is {}\n", value_len(false)).as_bytes());
        }
        BinaryCommand::Delete { key, .. } => {
            log.extend_from_slice(b"Deleting ");
            log.extend_from_slice(key);
            log.push(b'\n');
        }
        BinaryCommand::Arith {
            key,
            delta,
            initial,
            exptime,
            ..
        } => {
            // memcached prints `incr` for decrements too, and the expiry as a signed number.
            log.extend_from_slice(b"incr ");
            log.extend_from_slice(key);
            log.extend_from_slice(
                format!(" {}, {initial}, {}\n", delta as i64, exptime as i32).as_bytes(),
            );
        }
        BinaryCommand::Stat { group } => named(log, b"STATS", group, b""),
        _ => {}
    }
}

/// memcached's `-vv` lines for the response packets a binary command wrote (`written`, in sending order):
/// each packet's header dumped (`add_bin_header`), an error's text first (`write_bin_error`; a GETK miss,
/// whose body is its key, is not written as an error); STAT's packets are not dumped (memcached writes them
/// without `add_bin_header`), its errors are.
pub(crate) fn log_responses(log: &mut Vec<u8>, id: usize, mut written: &[u8]) {
    while written.len() >= binary::HEADER_LEN {
        let opcode = written[1];
        let keylen = usize::from(u16::from_be_bytes([written[2], written[3]]));
        let status = u16::from_be_bytes([written[6], written[7]]);
        let bodylen =
            u32::from_be_bytes([written[8], written[9], written[10], written[11]]) as usize;
        let end = (binary::HEADER_LEN + bodylen).min(written.len());
        if status != 0 && keylen == 0 {
            let mut text = b"Writing an error: ".to_vec();
            text.extend_from_slice(&written[binary::HEADER_LEN..end]);
            vlog::line(log, b'>', id, &text);
        }
        if !(opcode == binary::opcode::STAT && status == 0) {
            dump_header(
                log,
                b'>',
                id,
                b"Writing bin response",
                b"  ",
                &written[..binary::HEADER_LEN],
            );
        }
        written = &written[end..];
    }
}

impl Cache {
    /// Runs one binary command and writes its response packets (none for a quiet success).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answer_binary(
        &self,
        header: &Header,
        command: BinaryCommand<'_>,
        now: u32,
        out: &mut Output,
        control: Option<&ServerControl>,
        lp: &CacheLoop,
        conn: u64,
    ) -> Answer {
        let flow = if command.closes() {
            Flow::Close
        } else {
            Flow::Continue
        };
        match command {
            BinaryCommand::Get {
                key,
                quiet,
                with_key,
            } => self.binary_get(header, key, None, quiet, with_key, now, out, lp),
            BinaryCommand::Gat {
                key,
                exptime,
                quiet,
                with_key,
            } => self.binary_get(header, key, Some(exptime), quiet, with_key, now, out, lp),
            BinaryCommand::Touch { key, exptime } => {
                self.binary_touch(header, key, exptime, now, out, lp)
            }
            BinaryCommand::Store {
                kind,
                key,
                flags,
                exptime,
                value,
                quiet,
            } => {
                // memcached: a CAS in the header turns set, add and replace alike into a compare-and-swap.
                let cas = (header.cas != 0).then_some(header.cas);
                let (mode, counted) = match (cas, kind) {
                    (Some(_), _) => (StoreMode::Set, StoreKind::Cas),
                    (None, BinaryStore::Set) => (StoreMode::Set, StoreKind::Set),
                    (None, BinaryStore::Add) => (StoreMode::Add, StoreKind::Add),
                    (None, BinaryStore::Replace) => (StoreMode::Replace, StoreKind::Replace),
                };
                let req = StoreRequest {
                    mode,
                    key,
                    value,
                    flags,
                    exptime: self.clock.expiry(i64::from(exptime), now),
                    cas,
                    invalidate: false,
                    key_binary: false,
                };
                let outcome = self.store_item(lp, counted, &req, now, None);
                let refused = match counted {
                    StoreKind::Add => Status::KeyExists,
                    StoreKind::Replace => Status::KeyNotFound,
                    _ => Status::NotStored,
                };
                self.write_binary_store(header, outcome, refused, quiet, out);
            }
            BinaryCommand::Concat {
                prepend,
                key,
                value,
                quiet,
            } => {
                let (mode, counted) = if prepend {
                    (StoreMode::Prepend, StoreKind::Prepend)
                } else {
                    (StoreMode::Append, StoreKind::Append)
                };
                let req = StoreRequest {
                    mode,
                    key,
                    value,
                    flags: 0,
                    exptime: 0,
                    cas: (header.cas != 0).then_some(header.cas),
                    invalidate: false,
                    key_binary: false,
                };
                let outcome = self.store_item(lp, counted, &req, now, None);
                self.write_binary_store(header, outcome, Status::NotStored, quiet, out);
            }
            BinaryCommand::TooLarge {
                key,
                unlink_existing,
            } => {
                self.refuse_too_large(MetaKey::plain(key), unlink_existing, false, now, lp);
                binary::write_error(out, header, Status::TooLarge, None);
            }
            BinaryCommand::Delete { key, quiet } => {
                let cas = (header.cas != 0).then_some(header.cas);
                match self.delete_item(lp, key, cas, now) {
                    DeleteOutcome::Deleted if quiet => {}
                    DeleteOutcome::Deleted => binary::write_success(out, header, b"", 0),
                    DeleteOutcome::Exists => {
                        binary::write_error(out, header, Status::KeyExists, None)
                    }
                    DeleteOutcome::NotFound => {
                        binary::write_error(out, header, Status::KeyNotFound, None)
                    }
                }
            }
            BinaryCommand::Arith {
                incr,
                key,
                delta,
                initial,
                exptime,
                quiet,
            } => {
                // An expiry of all ones asks not to create a missing counter.
                let vivify = (exptime != u32::MAX)
                    .then(|| (initial, self.clock.expiry(i64::from(exptime), now)));
                let opts = ArithOptions {
                    cas: (header.cas != 0).then_some(header.cas),
                    vivify,
                    ..ArithOptions::default()
                };
                match self.incr_decr_item(lp, incr, key, delta, opts, now) {
                    ArithOutcome::Value { .. } if quiet => {}
                    ArithOutcome::Value { value, cas, .. } => {
                        binary::write_success(out, header, &value.to_be_bytes(), self.cas(cas))
                    }
                    ArithOutcome::NotFound => {
                        binary::write_error(out, header, Status::KeyNotFound, None)
                    }
                    ArithOutcome::Exists => {
                        binary::write_error(out, header, Status::KeyExists, None)
                    }
                    ArithOutcome::NonNumeric => {
                        binary::write_error(out, header, Status::DeltaBadValue, None)
                    }
                    ArithOutcome::OutOfMemory => binary::write_error(
                        out,
                        header,
                        Status::OutOfMemory,
                        Some(b"Out of memory incrementing value"),
                    ),
                }
            }
            BinaryCommand::Flush { exptime, quiet } => {
                if !self.settings.flush_enabled {
                    // memcached's binary answer to a disabled flush.
                    binary::write_error(out, header, Status::AuthError, None);
                } else {
                    self.flush_all(i32::try_from(exptime).unwrap_or(i32::MAX), now);
                    if !quiet {
                        binary::write_success(out, header, b"", 0);
                    }
                }
            }
            BinaryCommand::Noop => binary::write_success(out, header, b"", 0),
            BinaryCommand::Version => {
                binary::write_success(out, header, MEMCACHED_VERSION.as_bytes(), 0)
            }
            BinaryCommand::Quit { quiet } => {
                if !quiet {
                    binary::write_success(out, header, b"", 0);
                }
            }
            BinaryCommand::Stat { group } => {
                self.binary_stats(header, group, now, out, control, lp)
            }
            BinaryCommand::SaslListMechs | BinaryCommand::SaslAuth { .. }
                if self.settings.sasl.is_some() =>
            {
                self.binary_sasl(header, command, out, lp, conn)
            }
            // Without SASL (`-S`), memcached knows none of its commands; lengths that do not add up are
            // answered the same (and close the connection).
            BinaryCommand::SaslListMechs
            | BinaryCommand::SaslAuth { .. }
            | BinaryCommand::Unknown
            | BinaryCommand::BadLengths => {
                binary::write_error(out, header, Status::UnknownCommand, None)
            }
            BinaryCommand::Invalid => {
                binary::write_error(out, header, Status::InvalidArguments, None)
            }
        }
        Answer {
            flow,
            hidden: false,
        }
    }

    /// The SASL commands under `-S` as memcached with Cyrus SASL answers them: the mechanisms; PLAIN in
    /// one step (its message with the start) or two (an empty start is answered "continue", the message
    /// comes with the step); CRAM-MD5 in two (an empty start is answered with a challenge, the step
    /// answers it). Every SASL command first takes the connection's authentication away (memcached's
    /// `init_sasl_conn`); a step with nothing started fails, and so does anything once an authentication
    /// has succeeded on the connection (Cyrus: "attempting server step after doneflag"); a mechanism name
    /// over 32 bytes is an invalid argument.
    fn binary_sasl(
        &self,
        header: &Header,
        command: BinaryCommand<'_>,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
        conn: u64,
    ) {
        let Some(sasl) = &self.settings.sasl else {
            return binary::write_error(out, header, Status::UnknownCommand, None);
        };
        let (step, mechanism, data) = match command {
            BinaryCommand::SaslAuth {
                step,
                mechanism,
                data,
            } => (step, mechanism, data),
            _ => {
                lp.authenticated.borrow_mut().remove(&conn);
                return match sasl.listed() {
                    Some(names) => binary::write_success(out, header, &names, 0),
                    None => binary::write_error(out, header, Status::AuthError, None),
                };
            }
        };
        // Refused as the request is read, before memcached's SASL code sees it.
        if mechanism.len() > binary::MAX_SASL_MECH_LEN {
            return binary::write_error(out, header, Status::InvalidArguments, None);
        }
        lp.authenticated.borrow_mut().remove(&conn);
        let mut exchanges = lp.sasl.borrow_mut();
        let exchange = exchanges.entry(conn).or_default();
        // What Cyrus's sasl_server_start or sasl_server_step says: `Err` to continue, with these bytes.
        let said: Result<bool, Vec<u8>> = if exchange.done {
            Ok(false)
        } else if step {
            match &mut exchange.started {
                None => Ok(false),
                Some(SaslStarted::Plain) => Ok(!data.is_empty() && sasl.plain(data)),
                Some(SaslStarted::CramMd5(challenge)) => Ok(challenge
                    .take()
                    .is_some_and(|challenge| sasl.cram_md5(&challenge, data))),
            }
        } else {
            let (started, said) = match sasl.offered(mechanism) {
                None => (None, Ok(false)),
                Some(Mechanism::Plain) if data.is_empty() => {
                    (Some(SaslStarted::Plain), Err(Vec::new()))
                }
                Some(Mechanism::Plain) => (None, Ok(sasl.plain(data))),
                // Cyrus's CRAM-MD5 takes no data with its start.
                Some(Mechanism::CramMd5) if !data.is_empty() => (None, Ok(false)),
                Some(Mechanism::CramMd5) => {
                    let challenge = sasl.challenge();
                    (
                        Some(SaslStarted::CramMd5(Some(challenge.clone()))),
                        Err(challenge),
                    )
                }
            };
            exchange.started = started;
            said
        };
        match said {
            Err(more) => binary::write_error(out, header, Status::AuthContinue, Some(&more)),
            Ok(true) => {
                exchange.done = true;
                AUTH_CMDS.incr();
                lp.authenticated.borrow_mut().insert(conn);
                binary::write_success(out, header, b"Authenticated", 0);
            }
            Ok(false) => {
                AUTH_CMDS.incr();
                AUTH_ERRORS.incr();
                binary::write_error(out, header, Status::AuthError, None);
            }
        }
    }

    /// GET, GETK, GAT, GATK and their quiet forms: the flags as extras, the key if asked, the value (a
    /// large one shared with the store, not copied).
    #[allow(clippy::too_many_arguments)]
    fn binary_get(
        &self,
        header: &Header,
        key: &[u8],
        touch: Option<u32>,
        quiet: bool,
        with_key: bool,
        now: u32,
        out: &mut Output,
        lp: &CacheLoop,
    ) {
        let touch = touch.map(|exptime| self.clock.expiry(i64::from(exptime), now));
        let hit = self.get_key(touch, key, now, lp, None, |item| {
            let cas = self.cas(item.cas);
            let shown_key = with_key.then_some(key);
            binary::write_hit_head(out, header, item.flags, shown_key, item.value.len(), cas);
            if item.value.len() >= SHARE_MIN {
                // A binary value has no `\r\n` after it: its last byte is the copied suffix the output
                // needs after a shared range.
                let last = item.value.len() - 1;
                let shared = Bytes::from_owner(item.share_value()).slice(..last);
                out.push_shared(shared, &item.value[last..]);
            } else {
                out.extend_from_slice(item.value);
            }
        });
        if hit {
            // The response references the item until it is written out (a NOOP writes them out).
            lp.pin(key);
        }
        if !hit && !quiet {
            if with_key {
                binary::write_key_miss(out, header, key);
            } else {
                binary::write_error(out, header, Status::KeyNotFound, None);
            }
        }
    }

    /// TOUCH: a hit is answered with its flags and CAS, without the value.
    fn binary_touch(
        &self,
        header: &Header,
        key: &[u8],
        exptime: u32,
        now: u32,
        out: &mut Output,
        lp: &CacheLoop,
    ) {
        let touch = Some(self.clock.expiry(i64::from(exptime), now));
        let hit = self.get_key(touch, key, now, lp, None, |item| {
            binary::write_hit_head(out, header, item.flags, None, 0, self.cas(item.cas));
        });
        if hit {
            lp.pin(key);
        } else {
            binary::write_error(out, header, Status::KeyNotFound, None);
        }
    }

    /// A storage command's response (`complete_update_bin`): `refused` is what NOT_STORED becomes for it.
    fn write_binary_store(
        &self,
        header: &Header,
        outcome: StoreOutcome,
        refused: Status,
        quiet: bool,
        out: &mut Vec<u8>,
    ) {
        match outcome {
            StoreOutcome::Stored { .. } if quiet => {}
            StoreOutcome::Stored { cas } => binary::write_success(out, header, b"", self.cas(cas)),
            StoreOutcome::Exists => binary::write_error(out, header, Status::KeyExists, None),
            StoreOutcome::NotFound => binary::write_error(out, header, Status::KeyNotFound, None),
            StoreOutcome::NotStored => binary::write_error(out, header, refused, None),
            StoreOutcome::TooLarge => binary::write_error(out, header, Status::TooLarge, None),
            StoreOutcome::OutOfMemory => binary::write_error(
                out,
                header,
                Status::OutOfMemory,
                Some(b"Out of memory allocating item"),
            ),
        }
    }

    /// STAT: the groups memcached's binary protocol serves (`process_bin_stat`), each stat a packet named by
    /// its key, then an empty packet; the text door's figures, so both protocols report the same.
    fn binary_stats(
        &self,
        header: &Header,
        group: &[u8],
        now: u32,
        out: &mut Output,
        control: Option<&ServerControl>,
        lp: &CacheLoop,
    ) {
        // memcached matches these by prefix, the engine's groups exactly.
        let text_group: &[u8] = if group.is_empty() {
            b""
        } else if group.starts_with(b"reset") {
            b"reset"
        } else if group.starts_with(b"settings") {
            b"settings"
        } else if let Some(detail) = group.strip_prefix(b"detail") {
            if detail.starts_with(b" dump") {
                b"detail dump"
            } else if detail.starts_with(b" on") {
                b"detail on"
            } else if detail.starts_with(b" off") {
                b"detail off"
            } else {
                return binary::write_error(out, header, Status::KeyNotFound, None);
            }
        } else if matches!(
            group,
            b"items" | b"slabs" | b"sizes" | b"sizes_enable" | b"sizes_disable"
        ) {
            group
        } else {
            return binary::write_error(out, header, Status::KeyNotFound, None);
        };
        let mut text = Vec::new();
        self.stats(
            Words::new(text_group),
            now,
            &mut text,
            control,
            lp.log_id.get() as u64,
        );
        if text_group == b"detail dump" {
            binary::write_stat(out, header, b"detailed", &text);
        } else {
            for line in text.split(|&b| b == b'\n') {
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let Some(stat) = line.strip_prefix(b"STAT ") else {
                    continue;
                };
                let (name, value) = match stat.iter().position(|&b| b == b' ') {
                    Some(space) => (&stat[..space], &stat[space + 1..]),
                    None => (stat, &b""[..]),
                };
                binary::write_stat(out, header, name, value);
            }
        }
        // memcached 1.6.18 sends no terminator after these two (see report.rs).
        if !matches!(text_group, b"sizes_enable" | b"sizes_disable") {
            binary::write_stat(out, header, b"", b"");
        }
    }
}
