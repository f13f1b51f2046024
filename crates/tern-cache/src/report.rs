//! The `stats` door: memcached's `stats` groups (general, settings, items, slabs, conns, sizes, detail,
//! reset, cachedump) made from the per-thread metrics, aggregated when asked, and the store's figures.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use tern_cache_storage::StoreStats;
use tern_memcache_proto::reply::{self, ErrorReply, Status};
use tern_memcache_proto::Words;
use tern_metrics::Snapshot;
use tern_runtime::ServerControl;

use crate::cache::{Cache, MEMCACHED_VERSION};
use crate::clock::Clock;
use crate::stats;

impl Cache {
    /// `asking`: the connection the command came on.
    pub(crate) fn stats(
        &self,
        mut args: Words<'_>,
        now: u32,
        out: &mut Vec<u8>,
        control: Option<&ServerControl>,
        asking: u64,
    ) {
        let group = args.next();
        match group {
            None => self.stats_general(now, out, control),
            Some(b"settings") => self.stats_settings(out),
            Some(b"items") => self.stats_items(now, out),
            Some(b"slabs") => self.stats_slabs(out),
            Some(b"conns") => {
                let sockets = control.map_or(&[][..], |c| c.sockets());
                self.conns.write(asking, now, sockets, out);
                reply::write_status(out, Status::End);
            }
            Some(b"sizes") => self.stats_sizes(now, out),
            // memcached 1.6.18 ends these two without `END` (its `item_stats_sizes_enable` and `_disable`
            // add no terminator), in text and in binary.
            Some(b"sizes_enable") => {
                if self.settings.cas_enabled {
                    self.track_sizes.store(true, Ordering::Relaxed);
                    reply::write_stat(out, b"sizes_status", b"enabled");
                } else {
                    reply::write_stat(out, b"sizes_status", b"error");
                    reply::write_stat(out, b"sizes_error", b"cas_support_disabled");
                }
            }
            Some(b"sizes_disable") => {
                self.track_sizes.store(false, Ordering::Relaxed);
                reply::write_stat(out, b"sizes_status", b"disabled");
            }
            // Debian's memcached is built with extstore; without `-o ext_path` it has no figures to give
            // and answers the bare `END`, as tern, which has no external storage, does.
            Some(b"extstore") => reply::write_status(out, Status::End),
            Some(b"reset") => {
                tern_metrics::reset();
                *self.reset_baseline_lock() = (self.store.stats(), self.crawler.starts());
                self.detail.clear();
                reply::write_status(out, Status::Reset);
            }
            Some(b"detail") => match args.next() {
                Some(b"on") => {
                    self.detail.set_enabled(true);
                    reply::write_status(out, Status::Ok)
                }
                Some(b"off") => {
                    self.detail.set_enabled(false);
                    reply::write_status(out, Status::Ok)
                }
                Some(b"dump") => self.detail.dump(out),
                _ => reply::write_error(out, ErrorReply::StatsDetailUsage),
            },
            Some(b"cachedump") => self.cachedump(args, now, out),
            Some(_) => reply::write_error(out, ErrorReply::Error),
        }
    }

    fn reset_baseline_lock(&self) -> std::sync::MutexGuard<'_, (StoreStats, u64)> {
        self.reset_baseline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The store's figures with its counters taken from the last `stats reset` on, as memcached's
    /// `stats_reset` zeroes them (`total_items`, evictions, reclaims and the crawler's, globally and per
    /// class; an `evicted_time` with no eviction since is 0); the levels (items, bytes, memory) as they are.
    pub(crate) fn store_stats(&self) -> StoreStats {
        let mut now = self.store.stats();
        let base = &self.reset_baseline_lock().0;
        let since = |now: &mut u64, base: u64| *now = now.saturating_sub(base);
        since(&mut now.total_items, base.total_items);
        since(&mut now.evictions, base.evictions);
        since(&mut now.reclaimed, base.reclaimed);
        since(&mut now.expired_unfetched, base.expired_unfetched);
        since(&mut now.evicted_unfetched, base.evicted_unfetched);
        since(&mut now.evicted_active, base.evicted_active);
        since(&mut now.crawler_reclaimed, base.crawler_reclaimed);
        since(&mut now.crawler_items_checked, base.crawler_items_checked);
        since(&mut now.lrutail_reflocked, base.lrutail_reflocked);
        since(&mut now.outofmemory, base.outofmemory);
        since(&mut now.malloc_fails, base.malloc_fails);
        for class in &mut now.classes {
            let Some(base) = base.classes.iter().find(|b| b.class_id == class.class_id) else {
                continue;
            };
            since(&mut class.evicted, base.evicted);
            since(&mut class.evicted_nonzero, base.evicted_nonzero);
            since(&mut class.evicted_unfetched, base.evicted_unfetched);
            since(&mut class.evicted_active, base.evicted_active);
            since(&mut class.expired_unfetched, base.expired_unfetched);
            since(&mut class.reclaimed, base.reclaimed);
            since(&mut class.crawler_reclaimed, base.crawler_reclaimed);
            since(&mut class.crawler_items_checked, base.crawler_items_checked);
            since(&mut class.lrutail_reflocked, base.lrutail_reflocked);
            since(&mut class.outofmemory, base.outofmemory);
            if class.evicted == 0 {
                class.evicted_time = 0;
            }
        }
        now
    }

    fn stats_general(&self, now: u32, out: &mut Vec<u8>, control: Option<&ServerControl>) {
        let snapshot = tern_metrics::snapshot();
        let store = self.store_stats();
        let mut s = String::with_capacity(2048);
        self.stats_process(&mut s, &snapshot, &store, now, control);
        self.stats_store(&mut s, &snapshot, &store);
        if let Some(tls) = &self.tls {
            if self.settings.tls.session_cache {
                let _ = write!(s, "STAT ssl_new_sessions {}\r\n", tls.new_sessions());
            }
            let _ = write!(
                s,
                "STAT ssl_handshake_errors {}\r\nSTAT time_since_server_cert_refresh {}\r\n",
                tls.handshake_errors(),
                tls.since_reload().as_secs()
            );
        }
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    /// The process's and its connections' lines of `stats`.
    fn stats_process(
        &self,
        s: &mut String,
        snapshot: &Snapshot,
        store: &StoreStats,
        now: u32,
        control: Option<&ServerControl>,
    ) {
        let (user, system) = rusage();
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("pid", &std::process::id());
        stat("uptime", &Clock::uptime(now));
        stat("time", &self.clock.unix(now));
        stat("version", &MEMCACHED_VERSION);
        stat("tern_version", &env!("CARGO_PKG_VERSION"));
        stat("pointer_size", &(usize::BITS));
        stat("rusage_user", &format_args!("{user:.6}"));
        stat("rusage_system", &format_args!("{system:.6}"));
        stat("max_connections", &self.settings.max_connections);
        stat("curr_connections", &control.map_or(0, |c| c.connections()));
        stat(
            "total_connections",
            &snapshot
                .counter("tern_connections_accepted_total")
                .unwrap_or(0),
        );
        stat(
            "rejected_connections",
            &snapshot
                .counter("tern_connections_refused_total")
                .unwrap_or(0),
        );
        stat(
            "connection_structures",
            &control.map_or(0, |c| c.connections()),
        );
        stat(
            "response_obj_oom",
            &snapshot
                .counter(stats::RESPONSE_OBJ_OOM.name())
                .unwrap_or(0),
        );
        // memcached counts the descriptors it keeps for itself (listeners, pipes, log files, ...); these are
        // the ones this process has open besides its client connections.
        let clients = control.map_or(0, |c| c.connections());
        stat(
            "reserved_fds",
            &open_descriptors().map_or(0, |open| open.saturating_sub(clients)),
        );
        for (name, value) in stats::totals(snapshot) {
            stat(name, &value);
        }
        if self.settings.idle_timeout.is_some() {
            stat(
                "idle_kicks",
                &snapshot
                    .counter("tern_connections_idle_closed_total")
                    .unwrap_or(0),
            );
        }
        stat(
            "bytes_read",
            &snapshot.counter("tern_bytes_read_total").unwrap_or(0),
        );
        stat(
            "bytes_written",
            &snapshot.counter("tern_bytes_written_total").unwrap_or(0),
        );
        stat("limit_maxbytes", &store.limit_maxbytes);
        stat(
            "accepting_conns",
            &u8::from(!control.is_some_and(|c| c.is_shutting_down())),
        );
        // Past `-c` tern refuses each new connection (memcached's default `maxconns_fast`); it stops
        // accepting only for the runtime's pauses on EMFILE/ENFILE, which these count.
        stat(
            "listen_disabled_num",
            &snapshot.counter("tern_accept_pauses_total").unwrap_or(0),
        );
        stat(
            "time_in_listen_disabled_us",
            &snapshot
                .counter("tern_accept_paused_microseconds_total")
                .unwrap_or(0),
        );
    }

    /// The store's lines of `stats`.
    fn stats_store(&self, s: &mut String, snapshot: &Snapshot, store: &StoreStats) {
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("threads", &self.settings.threads);
        stat(
            "conn_yields",
            &snapshot.counter(stats::CONN_YIELDS.name()).unwrap_or(0),
        );
        // memcached's table has 2^hash_power_level buckets; the shards' tables are any size.
        stat("hash_power_level", &store.hash_slots.max(1).ilog2());
        stat("hash_bytes", &store.hash_bytes);
        stat("hash_is_expanding", &store.hash_expanding);
        if self.crawler.enabled() {
            stat("lru_crawler_running", &u8::from(self.crawler.running()));
            let since_reset = self
                .crawler
                .starts()
                .saturating_sub(self.reset_baseline_lock().1);
            stat("lru_crawler_starts", &since_reset);
        }
        stat("malloc_fails", &store.malloc_fails);
        let (written, skipped, sent) = self.watchers.counters();
        // Every logged line reaches the watchers' buffers: tern has no per-thread buffer to drop from.
        stat("log_worker_dropped", &0);
        stat("log_worker_written", &written);
        stat("log_watcher_skipped", &skipped);
        stat("log_watcher_sent", &sent);
        stat("log_watchers", &self.watchers.count());
        stat("bytes", &store.bytes);
        stat("curr_items", &store.curr_items);
        stat("total_items", &store.total_items);
        // Segments mapped and free, which any queue can take (memcached: pages no slab class holds).
        stat("slab_global_page_pool", &store.segments_free);
        stat("expired_unfetched", &store.expired_unfetched);
        stat("evicted_unfetched", &store.evicted_unfetched);
        stat("evictions", &store.evictions);
        stat("reclaimed", &store.reclaimed);
        stat("crawler_reclaimed", &store.crawler_reclaimed);
        stat("crawler_items_checked", &store.crawler_items_checked);
        stat("lrutail_reflocked", &store.lrutail_reflocked);
    }

    fn stats_settings(&self, out: &mut Vec<u8>) {
        let st = &self.settings;
        let store = self.store.stats();
        let yes_no = |b: bool| if b { "yes" } else { "no" };
        let mut s = String::with_capacity(1024);
        let mut stat = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "STAT {name} {value}\r\n");
        };
        stat("maxbytes", &store.limit_maxbytes);
        stat("maxconns", &st.max_connections);
        stat("tcpport", &st.port);
        stat("udpport", &st.udp_port);
        stat("inter", &st.interfaces);
        stat("verbosity", &self.vlog.level());
        stat("oldest", &self.oldest_live.load(Ordering::Relaxed));
        stat("evictions", &if st.evictions { "on" } else { "off" });
        let socket = st.unix.as_ref().map(|(path, _)| path.display().to_string());
        stat("domain_socket", &socket.as_deref().unwrap_or("NULL"));
        stat("umask", &format_args!("{:o}", st.unix_mask));
        stat("shutdown_command", &yes_no(st.shutdown_enabled));
        stat("growth_factor", &format_args!("{:.2}", st.growth_factor));
        stat("chunk_size", &st.slab_min_size);
        stat("num_threads", &st.threads);
        stat("num_threads_per_udp", &st.threads);
        stat(
            "stat_key_prefix",
            &String::from_utf8_lossy(&[self.detail.delimiter()]),
        );
        stat("detail_enabled", &yes_no(self.detail.enabled()));
        stat("reqs_per_event", &st.reqs_per_event);
        stat("cas_enabled", &yes_no(st.cas_enabled));
        stat("tcp_backlog", &st.backlog);
        stat("binding_protocol", &st.protocol.name());
        stat("auth_enabled_sasl", &yes_no(st.sasl.is_some()));
        let auth_file = st.ascii_auth.as_ref().map(|a| a.path.display().to_string());
        stat("auth_enabled_ascii", &auth_file.as_deref().unwrap_or("no"));
        stat("item_size_max", &st.item_size_max);
        stat("maxconns_fast", &yes_no(st.maxconns_fast));
        stat("hashpower_init", &st.hashpower_init);
        stat("slab_reassign", &"no");
        let crawler = &self.crawler;
        stat("lru_crawler", &yes_no(crawler.enabled()));
        stat("lru_crawler_sleep", &crawler.sleep_us());
        stat("lru_crawler_tocrawl", &crawler.tocrawl());
        stat("flush_enabled", &yes_no(st.flush_enabled));
        stat("dump_enabled", &yes_no(st.dump_enabled));
        // The store's key hash (memcached: jenkins, murmur3 or xxh3, chosen by `-o hash_algorithm`).
        stat("hash_algorithm", &"foldhash");
        stat("lru_maintainer_thread", &yes_no(crawler.maintainer()));
        // The store has neither memcached's hot/warm/cold sub-LRUs nor its TTL-only LRU.
        stat("lru_segmented", &"no");
        stat("temp_lru", &"no");
        stat("idle_timeout", &st.idle_timeout.map_or(0, |d| d.as_secs()));
        stat("watcher_logbuf_size", &st.watcher_logbuf_size);
        stat("worker_logbuf_size", &st.worker_logbuf_size);
        stat("read_buf_mem_limit", &st.read_buf_mem_limit);
        stat(
            "track_sizes",
            &yes_no(self.track_sizes.load(Ordering::Relaxed)),
        );
        // memcached's setting is dead and says `no`; tern writes replies as memcached does without it.
        stat("inline_ascii_response", &"no");
        // memcached prints its unset paths with printf's "%s" of NULL.
        let path = |p: &Option<std::path::PathBuf>, unset: &'static str| {
            p.as_ref()
                .map_or_else(|| unset.to_owned(), |p| p.display().to_string())
        };
        let tls = &st.tls;
        stat("ssl_enabled", &yes_no(tls.enabled));
        stat("ssl_chain_cert", &path(&tls.chain_cert, "(null)"));
        stat("ssl_key", &path(&tls.key, "(null)"));
        stat("ssl_verify_mode", &tls.openssl_verify_flags());
        stat("ssl_keyformat", &tls.key_format);
        stat("ssl_ciphers", &tls.ciphers.as_deref().unwrap_or("NULL"));
        stat("ssl_ca_cert", &path(&tls.ca_cert, "NULL"));
        stat("ssl_wbuf_size", &tls.wbuf_size);
        stat("ssl_session_cache", &yes_no(tls.session_cache));
        stat("ssl_kernel_tls", &yes_no(tls.kernel_tls));
        stat("ssl_min_version", &tls.min_version_name());
        stat("memory_file", &path(&st.memory_file, "(null)"));
        stat("segment_size", &store.segment_size);
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    /// `stats sizes`: how many items fall in each 32-byte range of memcached's item size (`me`'s `size=`:
    /// footprint.rs), ranges with none left out. memcached counts only the items stored since the
    /// histogram was turned on (it keeps it as items come and go); tern counts every item, walking the
    /// store when asked (docs/cache-compat.md).
    fn stats_sizes(&self, now: u32, out: &mut Vec<u8>) {
        if !self.track_sizes.load(Ordering::Relaxed) {
            reply::write_stat(out, b"sizes_status", b"disabled");
            reply::write_status(out, Status::End);
            return;
        }
        // memcached's buckets: an item of n bytes in ceil(n / 32), up to `item_size_max / 32` (its array of
        // them, allocated once, would be 128 MiB under `-I 1g`: only the occupied ones are kept here).
        let last = self.settings.item_size_max / 32;
        let mut buckets = std::collections::BTreeMap::<usize, u64>::new();
        self.store.dump(now, |e| {
            let size = crate::footprint::item_size(
                e.key.len(),
                e.value_len,
                e.flags,
                self.settings.cas_enabled,
            );
            let bucket = size.div_ceil(32);
            if bucket <= last {
                *buckets.entry(bucket).or_default() += 1;
            }
        });
        for (bucket, count) in buckets {
            reply::write_stat_u64(out, (bucket * 32).to_string().as_bytes(), count);
        }
        reply::write_status(out, Status::End);
    }

    fn stats_items(&self, now: u32, out: &mut Vec<u8>) {
        let st = self.store_stats();
        let mut s = String::with_capacity(1024);
        for c in st.classes.iter().filter(|c| c.items > 0 || c.segments > 0) {
            let id = c.class_id;
            let mut stat = |name: &str, value: u64| {
                let _ = write!(s, "STAT items:{id}:{name} {value}\r\n");
            };
            stat("number", c.items);
            // memcached: seconds since the last access of the item its LRU would evict next; here the age of
            // the segment the queue evicts next (the crate doc of tern-cache-storage).
            let age = match c.oldest_item_time {
                0 => 0,
                oldest => now.saturating_sub(oldest),
            };
            stat("age", u64::from(age));
            stat("mem_requested", c.bytes);
            stat("evicted", c.evicted);
            stat("evicted_nonzero", c.evicted_nonzero);
            stat("evicted_time", u64::from(c.evicted_time));
            stat("outofmemory", c.outofmemory);
            stat("reclaimed", c.reclaimed);
            stat("expired_unfetched", c.expired_unfetched);
            stat("evicted_unfetched", c.evicted_unfetched);
            stat("evicted_active", c.evicted_active);
            stat("crawler_reclaimed", c.crawler_reclaimed);
            stat("crawler_items_checked", c.crawler_items_checked);
            stat("lrutail_reflocked", c.lrutail_reflocked);
        }
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }

    /// Classes are the store's queues, a "page" is a segment and a "chunk" an item of the class's mean size
    /// (the crate doc of tern-cache-storage describes the mapping). The store does not say which queue a command's item was in, so the first
    /// class listed carries the command counts and the others 0: the sums over the classes are `stats`'s
    /// totals, as in memcached (the Prometheus memcached_exporter needs `cmd_set`, `cas_hits` and
    /// `cas_badval` in every class).
    fn stats_slabs(&self, out: &mut Vec<u8>) {
        let st = self.store_stats();
        let snapshot = tern_metrics::snapshot();
        let mut s = String::with_capacity(1024);
        let mut active = 0;
        for c in st.classes.iter().filter(|c| c.segments > 0) {
            active += 1;
            let id = c.class_id;
            let mut stat = |name: &str, value: u64| {
                let _ = write!(s, "STAT {id}:{name} {value}\r\n");
            };
            // A chunk is an item of the class's mean size: `used_chunks` is its items, as in memcached
            // (one chunk an item), and its segments hold `total_chunks` of that size.
            let chunk_size = if c.items == 0 {
                st.segment_size
            } else {
                c.bytes.div_ceil(c.items).max(1)
            };
            let chunks_per_page = (st.segment_size / chunk_size).max(1);
            let total_chunks = c.segments * chunks_per_page;
            stat("chunk_size", chunk_size);
            stat("chunks_per_page", chunks_per_page);
            stat("total_pages", c.segments);
            stat("total_chunks", total_chunks);
            stat("used_chunks", c.items);
            stat("free_chunks", total_chunks.saturating_sub(c.items));
            stat("free_chunks_end", 0);
            for (name, counter) in stats::PER_CLASS {
                let count = if active == 1 {
                    snapshot.counter(counter.name()).unwrap_or(0)
                } else {
                    0
                };
                stat(name, count);
            }
        }
        let _ = write!(
            s,
            "STAT active_slabs {active}\r\nSTAT total_malloced {}\r\n",
            st.total_malloced
        );
        out.extend_from_slice(s.as_bytes());
        reply::write_status(out, Status::End);
    }
}

/// CPU seconds (user, system) of this process.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// The descriptors this process has open (`/proc/self/fd`, less the one reading it); `None` where there is
/// no such directory.
fn open_descriptors() -> Option<usize> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count().saturating_sub(1))
}
