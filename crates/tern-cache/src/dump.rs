//! Listing the cache's keys: `lru_crawler metadump` (streamed over TCP a shard at a time) and `stats
//! cachedump`, both behind `-o no_lru_crawler`-style switches as in memcached.

use std::sync::Arc;

use tern_memcache_proto::reply::{self, ErrorReply, MetadumpEntry, Status};
use tern_memcache_proto::request::LruCrawler;
use tern_memcache_proto::Words;
use tern_runtime::{ReplyStream, Step};

use crate::cache::Cache;

/// Largest `stats cachedump` reply, as memcached's.
const CACHEDUMP_MAX_BYTES: usize = 2 << 20;

/// The item classes an `lru_crawler metadump` lists: `all` (or `hash`), or a comma-separated list.
struct MetadumpClasses {
    all: bool,
    wanted: Vec<u8>,
}

impl MetadumpClasses {
    fn parse(classes: &[u8]) -> MetadumpClasses {
        MetadumpClasses {
            all: classes == b"all" || classes == b"hash",
            wanted: classes
                .split(|&b| b == b',')
                .filter_map(|c| std::str::from_utf8(c).ok()?.parse().ok())
                .collect(),
        }
    }
}

impl Cache {
    /// The metadump lines of one shard's items.
    fn metadump_shard(&self, classes: &MetadumpClasses, shard: usize, now: u32, out: &mut Vec<u8>) {
        self.store.dump_shard(shard, now, |e| {
            if classes.all || classes.wanted.contains(&e.class_id) {
                reply::write_metadump_entry(
                    out,
                    &MetadumpEntry {
                        key: e.key,
                        expires_at: (e.exptime != 0).then(|| self.clock.unix(e.exptime)),
                        last_access: self.clock.unix(e.last_access),
                        cas: self.cas(e.cas),
                        fetched: e.fetched,
                        class: u32::from(e.class_id),
                        size: e.size as u64,
                    },
                );
            }
        });
    }

    /// `lru_crawler metadump` over TCP: a shard per step, as the client reads (a dump of a large cache is as
    /// large as its keys).
    pub(crate) fn metadump_stream(self: &Arc<Self>, classes: &[u8]) -> ReplyStream {
        let classes = MetadumpClasses::parse(classes);
        let cache = self.clone();
        let mut shard = 0;
        ReplyStream::new(move |out| {
            if shard == cache.store.shard_count() {
                reply::write_status(out, Status::End);
                return Step::Done;
            }
            cache.metadump_shard(&classes, shard, cache.clock.now(), out);
            shard += 1;
            Step::More
        })
    }

    pub(crate) fn lru_crawler(&self, cmd: LruCrawler<'_>, now: u32, out: &mut Vec<u8>) {
        match cmd {
            LruCrawler::Metadump { classes } => {
                if !self.settings.dump_enabled {
                    out.extend_from_slice(b"ERROR metadump not allowed\r\n");
                    return;
                }
                let classes = MetadumpClasses::parse(classes);
                for shard in 0..self.store.shard_count() {
                    self.metadump_shard(&classes, shard, now, out);
                }
                reply::write_status(out, Status::End);
            }
            // The store expires items in the background on its own; these tune memcached's crawler thread.
            LruCrawler::Crawl { .. }
            | LruCrawler::Tocrawl(_)
            | LruCrawler::Sleep(_)
            | LruCrawler::Enable
            | LruCrawler::Disable => reply::write_status(out, Status::Ok),
        }
    }

    /// `stats cachedump <class> [limit]`: the items of one class, at most 2 MiB of lines as memcached.
    pub(crate) fn cachedump(&self, mut args: Words<'_>, now: u32, out: &mut Vec<u8>) {
        if !self.settings.dump_enabled {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        let number =
            |w: Option<&[u8]>| w.and_then(|w| std::str::from_utf8(w).ok()?.parse::<u32>().ok());
        let (Some(class), limit) = (number(args.next()), number(args.next()).unwrap_or(0)) else {
            reply::write_error(out, ErrorReply::Error);
            return;
        };
        let mut n = 0;
        let start = out.len();
        let mut full = false;
        self.store.dump(now, |e| {
            if full || u32::from(e.class_id) != class || (limit != 0 && n >= limit) {
                return;
            }
            let exp = if e.exptime == 0 {
                self.clock.process_started()
            } else {
                self.clock.unix(e.exptime)
            };
            let mut line = b"ITEM ".to_vec();
            line.extend_from_slice(e.key);
            line.extend_from_slice(format!(" [{} b; {} s]\r\n", e.size, exp).as_bytes());
            // memcached caps the reply at 2 MiB, `END` included.
            if out.len() - start + line.len() + 6 > CACHEDUMP_MAX_BYTES {
                full = true;
                return;
            }
            n += 1;
            out.extend_from_slice(&line);
        });
        reply::write_status(out, Status::End);
    }
}
