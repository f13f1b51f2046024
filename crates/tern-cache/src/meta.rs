//! The meta commands' door (`mg`, `ms`, `md`, `ma`, `me`, `mn`): flags in, meta replies out, against the
//! same store as the text commands, with memcached 1.6.18's flag order and counting.

use tern_cache_storage::{
    ArithOptions, ArithOutcome, DeleteOutcome, MetaGetOptions, StoreMode, StoreOutcome,
    StoreRequest,
};
use tern_memcache_proto::reply::{self, ErrorReply, MetaDebugInfo, MetaFields, MetaStatus};
use tern_memcache_proto::request::{MetaFlags, MetaKey, MetaSetMode, StoreKind};

use crate::cache::{count_arith, Cache, CacheLoop};
use crate::stats::*;

impl Cache {
    /// Seconds left before `exptime` (memcached's `t` flag), -1 for none. Like memcached's `itoa_u32`, a
    /// time already past wraps around as an unsigned 32-bit number.
    fn ttl(exptime: u32, now: u32) -> i64 {
        if exptime == 0 {
            -1
        } else {
            i64::from(exptime.wrapping_sub(now))
        }
    }

    /// The exptime memcached reports for `t`: it applies `T` (and `N`, to an item the command created) in
    /// request order, printing `t` as it goes, so `t` before `T` shows the exptime before the touch.
    fn exptime_at_t(
        flags: &MetaFlags<'_>,
        before: u32,
        created: bool,
        touch: Option<u32>,
        vivify: Option<u32>,
        after: u32,
    ) -> u32 {
        let mut exptime = if created { 0 } else { before };
        for &flag in flags.order() {
            match flag {
                b't' => return exptime,
                b'T' => exptime = touch.unwrap_or(exptime),
                b'N' if created => exptime = vivify.unwrap_or(exptime),
                _ => {}
            }
        }
        after
    }

    pub(crate) fn meta_get(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut impl MetaOut,
        lp: &CacheLoop,
    ) {
        let expiry = |t: Option<i32>| t.map(|t| self.clock.expiry(i64::from(t), now));
        let order = flags.order();
        let position = |flag: u8| order.iter().position(|&f| f == flag);
        let opts = MetaGetOptions {
            touch: expiry(flags.ttl),
            vivify: expiry(flags.vivify_ttl),
            recache: expiry(flags.recache_ttl),
            // memcached applies the flags in request order: `R` before `T` sees the TTL before the touch.
            recache_before_touch: matches!(
                (position(b'R'), position(b'T')),
                (Some(r), Some(t)) if r < t
            ),
            no_bump: flags.no_update,
        };
        let decoded = key.decoded();
        let mut size = 0;
        let mut answer = |view: &tern_cache_storage::MetaView| {
            size = view.item.value.len();
            self.write_meta_hit(view, flags, &opts, now, out)
        };
        // memcached applies `T` and `N` in request order, so an item `N` creates keeps `N`'s TTL when `N`
        // comes after `T`; the store always applies `T` last. Then: look up (and touch) without vivifying
        // first, and vivify without touching on a miss.
        let vivify_last = matches!(
            (position(b'T'), position(b'N')),
            (Some(t), Some(n)) if n > t
        );
        let hit = if vivify_last {
            let lookup = MetaGetOptions {
                vivify: None,
                ..opts
            };
            let vivify = MetaGetOptions {
                touch: None,
                ..opts
            };
            self.store
                .meta_get(&decoded, now, &lookup, &mut answer)
                .or_else(|| self.store.meta_get(&decoded, now, &vivify, &mut answer))
        } else {
            self.store.meta_get(&decoded, now, &opts, &mut answer)
        };
        if hit.is_some() {
            // The reply references the item until it is written out.
            lp.pin(&decoded);
        }
        self.log_fetch(lp, &decoded, hit.map(|_| size));
        count_meta_get(hit.is_some(), opts.touch.is_some());
        if hit.is_none() && !flags.quiet {
            let fields = MetaFields {
                key: Some((&decoded, key.base64)),
                ..MetaFields::default()
            };
            reply::write_meta(out.bytes(), MetaStatus::Miss, flags, &fields);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn meta_set(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        data: &[u8],
        now: u32,
        out: &mut Vec<u8>,
        log: Option<&mut Vec<u8>>,
        lp: &CacheLoop,
    ) {
        CMD_SET.incr();
        let decoded = key.decoded();
        // The classic command each mode is, as `watch mutations` names it.
        let (mode, kind) = match flags.set_mode() {
            MetaSetMode::Set => (StoreMode::Set, StoreKind::Set),
            MetaSetMode::Add => (StoreMode::Add, StoreKind::Add),
            MetaSetMode::Append => (StoreMode::Append, StoreKind::Append),
            MetaSetMode::Prepend => (StoreMode::Prepend, StoreKind::Prepend),
            MetaSetMode::Replace => (StoreMode::Replace, StoreKind::Replace),
        };
        let req = StoreRequest {
            mode,
            key: &decoded,
            value: data,
            flags: flags.client_flags.unwrap_or(0),
            exptime: flags
                .ttl
                .map_or(0, |t| self.clock.expiry(i64::from(t), now)),
            cas: flags.compare_cas,
            invalidate: flags.invalidate,
            key_binary: key.base64,
        };
        let kind = if flags.compare_cas.is_some() {
            StoreKind::Cas
        } else {
            kind
        };
        let outcome = self.store_logged(lp, kind, &req, now);
        if let StoreOutcome::Stored { .. } = outcome {
            lp.unpin(&decoded);
        }
        if let (StoreOutcome::Exists, Some(log), Some(cas)) = (outcome, log, flags.compare_cas) {
            self.log_cas_failure(log, &decoded, cas, now);
        }
        self.count_store_failure(outcome);
        // memcached echoes `c` on every `ms` reply: the new CAS, or 0 when nothing was stored.
        let mut fields = MetaFields {
            key: Some((&decoded, key.base64)),
            cas: Some(0),
            ..MetaFields::default()
        };
        let status = match outcome {
            StoreOutcome::Stored { cas } => {
                if flags.quiet {
                    return;
                }
                fields.cas = Some(self.cas(cas));
                MetaStatus::Done
            }
            StoreOutcome::NotStored => MetaStatus::NotStored,
            StoreOutcome::Exists => MetaStatus::Exists,
            StoreOutcome::NotFound => MetaStatus::NotFound,
            StoreOutcome::TooLarge => return reply::write_error(out, ErrorReply::ObjectTooLarge),
            StoreOutcome::OutOfMemory => {
                return reply::write_error(out, ErrorReply::OutOfMemoryStoring)
            }
        };
        reply::write_meta(out, status, flags, &fields);
    }

    pub(crate) fn meta_delete(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
    ) {
        let decoded = key.decoded();
        self.log_lookup(lp, &decoded, now);
        let outcome = if flags.invalidate {
            let exptime = flags.ttl.map(|t| self.clock.expiry(i64::from(t), now));
            self.store
                .mark_stale(&decoded, now, flags.compare_cas, exptime)
        } else {
            self.store.delete(&decoded, now, flags.compare_cas)
        };
        let status = match outcome {
            DeleteOutcome::Deleted => {
                if !flags.invalidate {
                    // (`md I` marks the same item stale: earlier replies still hold it.)
                    lp.unpin(&decoded);
                }
                DELETE_HITS.incr();
                if flags.quiet {
                    return;
                }
                MetaStatus::Done
            }
            DeleteOutcome::NotFound => {
                DELETE_MISSES.incr();
                MetaStatus::NotFound
            }
            DeleteOutcome::Exists => MetaStatus::Exists,
        };
        let fields = MetaFields {
            key: Some((&decoded, key.base64)),
            ..MetaFields::default()
        };
        reply::write_meta(out, status, flags, &fields);
    }

    pub(crate) fn meta_arithmetic(
        &self,
        key: MetaKey<'_>,
        flags: &MetaFlags<'_>,
        now: u32,
        out: &mut Vec<u8>,
        lp: &CacheLoop,
    ) {
        let decoded = key.decoded();
        let incr = flags.incr();
        let opts = ArithOptions {
            cas: flags.compare_cas,
            vivify: flags.vivify_ttl.map(|t| {
                (
                    flags.initial.unwrap_or(0),
                    self.clock.expiry(i64::from(t), now),
                )
            }),
            exptime: flags.ttl.map(|t| self.clock.expiry(i64::from(t), now)),
            replace: lp.is_pinned(&decoded),
        };
        let delta = flags.delta.unwrap_or(1);
        // `q` hides the reply of an update but not of a creation (`N`), and `t` depends on it too; the store
        // does not say which happened, so a vivifying `ma` first tries without vivifying. (Another client
        // creating the item between the two calls makes this one count as the creator: its reply is then
        // shown.) A created item gets the TTL of the last of `N` and `T`, as memcached applies them in order.
        self.log_lookup(lp, &decoded, now);
        let (outcome, created) = self.meta_incr_decr(&decoded, flags, &opts, incr, delta, now);
        if opts.replace {
            lp.unpin(&decoded);
        }
        count_arith(incr, &outcome);
        let mut fields = MetaFields {
            key: Some((&decoded, key.base64)),
            ..MetaFields::default()
        };
        match outcome {
            ArithOutcome::Value {
                value,
                cas,
                exptime,
                exptime_before,
                ..
            } => {
                fields.cas = Some(self.cas(cas));
                // `t` before `T` shows the TTL before the touch.
                let reported = Self::exptime_at_t(
                    flags,
                    exptime_before,
                    created,
                    opts.exptime,
                    opts.vivify.map(|(_, exptime)| exptime),
                    exptime,
                );
                fields.ttl = Some(Self::ttl(reported, now));
                if flags.quiet && !created {
                    return;
                }
                if flags.value {
                    let mut digits = itoa_buf(value);
                    reply::write_meta(out, MetaStatus::Value(digits.len()), flags, &fields);
                    digits.extend_from_slice(b"\r\n");
                    out.extend_from_slice(&digits);
                } else {
                    reply::write_meta(out, MetaStatus::Done, flags, &fields);
                }
            }
            ArithOutcome::NotFound => reply::write_meta(out, MetaStatus::NotFound, flags, &fields),
            ArithOutcome::Exists => reply::write_meta(out, MetaStatus::Exists, flags, &fields),
            ArithOutcome::NonNumeric => reply::write_error(out, ErrorReply::NonNumeric),
            ArithOutcome::OutOfMemory => reply::write_error(out, ErrorReply::OutOfMemoryStoring),
        }
    }

    pub(crate) fn meta_debug(&self, key: MetaKey<'_>, now: u32, out: &mut Vec<u8>) {
        // memcached 1.6.18 counts `cmd_meta` for `me` only (its `meta_cmds`, in process_meta_command).
        CMD_META.incr();
        let decoded = key.decoded();
        // Like memcached's `me`: no access recorded, and a stale item's token is not handed out.
        let found = self.store.peek(&decoded, now, |item| {
            let size = crate::footprint::item_size(
                item.key.len(),
                item.value.len(),
                item.flags,
                self.settings.cas_enabled,
            );
            let info = MetaDebugInfo {
                // memcached echoes a key in base64 when the item was stored with a binary key.
                key: (item.key, item.key_binary),
                exp: if item.exptime == 0 {
                    -1
                } else {
                    i64::from(now) - i64::from(item.exptime)
                },
                last_access: u64::from(now.saturating_sub(item.last_access)),
                cas: self.cas(item.cas),
                fetched: item.fetched,
                class: self.slab_classes.class_of(size),
                size: size as u64,
            };
            reply::write_meta_debug(out, &info);
        });
        if found.is_none() {
            // memcached 1.6.18 answers a missing key with `EN`, like an `mg` miss without flags.
            reply::write_meta(
                out,
                MetaStatus::Miss,
                &MetaFlags::default(),
                &MetaFields::default(),
            );
        }
    }

    /// An `mg` hit's reply (the item, or the item `N` made); whether the item was created.
    fn write_meta_hit(
        &self,
        view: &tern_cache_storage::MetaView,
        flags: &MetaFlags<'_>,
        opts: &MetaGetOptions,
        now: u32,
        out: &mut impl MetaOut,
    ) -> bool {
        let item = &view.item;
        let fields = MetaFields {
            // A hit echoes the key as the item was stored (base64 if it was stored binary), a miss as
            // the request sent it.
            key: Some((item.key, item.key_binary)),
            size: Some(item.value.len()),
            ttl: Some(Self::ttl(
                Self::exptime_at_t(
                    flags,
                    view.exptime_before,
                    view.created,
                    opts.touch,
                    opts.vivify,
                    item.exptime,
                ),
                now,
            )),
            cas: Some(self.cas(item.cas)),
            client_flags: Some(item.flags),
            last_access: Some(u64::from(now.saturating_sub(item.last_access))),
            fetched: Some(item.fetched),
            token_sent: view.already_won,
            stale: view.stale,
            won: view.won,
        };
        if flags.value {
            reply::write_meta(
                out.bytes(),
                MetaStatus::Value(item.value.len()),
                flags,
                &fields,
            );
            out.value(item);
        } else {
            reply::write_meta(out.bytes(), MetaStatus::Done, flags, &fields);
        }
        view.created
    }

    /// The store's side of `ma`, and whether it created the item.
    fn meta_incr_decr(
        &self,
        decoded: &[u8],
        flags: &MetaFlags<'_>,
        opts: &ArithOptions,
        incr: bool,
        delta: u64,
        now: u32,
    ) -> (ArithOutcome, bool) {
        match opts.vivify {
            Some((initial, vivify_exptime)) => {
                let update = ArithOptions {
                    vivify: None,
                    ..*opts
                };
                match self.store.incr_decr(decoded, now, incr, delta, &update) {
                    ArithOutcome::NotFound => {
                        let exptime = flags.order().iter().fold(0, |exptime, &flag| match flag {
                            b'N' => vivify_exptime,
                            b'T' => opts.exptime.unwrap_or(exptime),
                            _ => exptime,
                        });
                        let create = ArithOptions {
                            vivify: Some((initial, exptime)),
                            exptime: None,
                            ..*opts
                        };
                        let outcome = self.store.incr_decr(decoded, now, incr, delta, &create);
                        (outcome, true)
                    }
                    outcome => (outcome, false),
                }
            }
            None => (self.store.incr_decr(decoded, now, incr, delta, opts), false),
        }
    }
}

/// As memcached 1.6.18: an item found or made by `N` counts as a touch hit when `T` is given, else as a get
/// hit; a miss counts as a get miss even with `T` (memcached only sees `T` on an item).
fn count_meta_get(hit: bool, touch: bool) {
    match (hit, touch) {
        (true, true) => {
            CMD_TOUCH.incr();
            TOUCH_HITS.incr();
        }
        (true, false) => {
            CMD_GET.incr();
            GET_HITS.incr();
        }
        (false, _) => {
            CMD_GET.incr();
            GET_MISSES.incr();
        }
    }
}

/// Where an `mg` reply goes: a plain buffer (UDP, and the replies built whole) copies a value; a TCP
/// connection's output shares a large one with the store, as a text `get` does, so a client that never
/// reads does not make the I/O thread copy megabytes it then holds.
pub(crate) trait MetaOut {
    fn bytes(&mut self) -> &mut Vec<u8>;
    /// Appends the item's value and its line end.
    fn value(&mut self, item: &tern_cache_storage::ItemView<'_>);
}

impl MetaOut for Vec<u8> {
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }

    fn value(&mut self, item: &tern_cache_storage::ItemView<'_>) {
        self.extend_from_slice(item.value);
        self.extend_from_slice(b"\r\n");
    }
}

impl MetaOut for tern_runtime::Output {
    fn bytes(&mut self) -> &mut Vec<u8> {
        self
    }

    fn value(&mut self, item: &tern_cache_storage::ItemView<'_>) {
        if item.value.len() >= crate::cache::SHARE_MIN {
            self.push_shared(bytes::Bytes::from_owner(item.share_value()), b"\r\n");
        } else {
            self.extend_from_slice(item.value);
            self.extend_from_slice(b"\r\n");
        }
    }
}

/// A number's digits, for `ma`'s value.
fn itoa_buf(n: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    reply::write_number(&mut v, n);
    v.truncate(v.len() - 2); // write_number ends the line
    v
}
