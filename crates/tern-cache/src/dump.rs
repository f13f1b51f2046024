//! The `lru_crawler` commands, and listing the cache's keys: `lru_crawler metadump` (streamed over TCP a
//! shard at a time) and `stats cachedump`, behind memcached's switches (`-X`, the crawler on).

use std::sync::Arc;

use tern_memcache_proto::number::safe_strtoul;
use tern_memcache_proto::reply::{self, ErrorReply, MetadumpEntry, Status};
use tern_memcache_proto::request::{LruCrawler, CLASS_ID_MAX};
use tern_memcache_proto::{CrawlerClasses, Words};
use tern_runtime::{ReplyStream, Step};

use crate::cache::Cache;
use crate::crawler::Refused;

/// Largest `stats cachedump` reply, as memcached's.
const CACHEDUMP_MAX_BYTES: usize = 2 << 20;

/// A metadump under way: the crawler stays busy until it is over or its connection goes.
struct Dumping(Arc<Cache>);

impl Drop for Dumping {
    fn drop(&mut self) {
        self.0.crawler.finish();
    }
}

impl Cache {
    /// The metadump lines of one shard's items.
    fn metadump_shard(&self, classes: CrawlerClasses, shard: usize, now: u32, out: &mut Vec<u8>) {
        self.store.dump_shard(shard, now, |e| {
            if classes.contains(e.class_id) {
                reply::write_metadump_entry(
                    out,
                    &MetadumpEntry {
                        key: e.key,
                        expires_at: (e.exptime != 0).then(|| self.clock.unix(e.exptime)),
                        last_access: self.clock.unix(e.last_access),
                        cas: self.cas(e.cas),
                        fetched: e.fetched,
                        class: u32::from(e.class_id),
                        // memcached's item size, as `me` reports it (the store's records are smaller).
                        size: crate::footprint::item_size(
                            e.key.len(),
                            e.value_len,
                            e.flags,
                            self.settings.cas_enabled,
                        ) as u64,
                    },
                );
            }
        });
    }

    /// memcached's checks before a metadump, in its order: the crawler on, dumps allowed, no replies left
    /// unwritten before it (`pipelined`), then the classes (the crawler is busy from there until
    /// [`Crawler::finish`](crate::crawler::Crawler::finish)).
    pub(crate) fn metadump_start(
        &self,
        classes: &[u8],
        pipelined: bool,
    ) -> Result<CrawlerClasses, &'static [u8]> {
        if !self.crawler.enabled() {
            return Err(Refused::Disabled.reply());
        }
        if !self.settings.dump_enabled {
            return Err(b"ERROR metadump not allowed\r\n");
        }
        if pipelined {
            return Err(b"ERROR cannot pipeline other commands before metadump\r\n");
        }
        self.crawler.start(classes, true).map_err(Refused::reply)
    }

    /// `lru_crawler metadump` over TCP, once started: a shard per step, as the client reads (a dump of a
    /// large cache is as large as its keys).
    pub(crate) fn metadump_stream(self: &Arc<Self>, classes: CrawlerClasses) -> ReplyStream {
        let dumping = Dumping(self.clone());
        let mut shard = 0;
        ReplyStream::new(move |out| {
            let cache = &dumping.0;
            if shard == cache.store.shard_count() {
                reply::write_status(out, Status::End);
                return Step::Done;
            }
            cache.metadump_shard(classes, shard, cache.clock.now(), out);
            shard += 1;
            Step::More
        })
    }

    /// `lru_crawler ...` but a metadump over TCP (see `service.rs`).
    pub(crate) fn lru_crawler(&self, cmd: LruCrawler<'_>, now: u32, out: &mut Vec<u8>) {
        let answer: &[u8] = match cmd {
            LruCrawler::Metadump { classes } => match self.metadump_start(classes, false) {
                Ok(classes) => {
                    for shard in 0..self.store.shard_count() {
                        self.metadump_shard(classes, shard, now, out);
                    }
                    self.crawler.finish();
                    b"END\r\n"
                }
                Err(refused) => refused,
            },
            LruCrawler::Crawl { classes } => self.crawler.crawl(classes),
            LruCrawler::Tocrawl(items) => {
                self.crawler.set_tocrawl(items);
                b"OK\r\n"
            }
            LruCrawler::Sleep(us) => {
                self.crawler.set_sleep_us(us);
                b"OK\r\n"
            }
            LruCrawler::Enable => self.crawler.enable(),
            LruCrawler::Disable => self.crawler.disable(),
        };
        out.extend_from_slice(answer);
    }

    /// `stats cachedump <class> <limit>`: the items of one class (limit 0: all), at most 2 MiB of lines,
    /// with memcached's answers to missing, non-numeric and out-of-range arguments.
    pub(crate) fn cachedump(&self, mut args: Words<'_>, now: u32, out: &mut Vec<u8>) {
        if !self.settings.dump_enabled {
            out.extend_from_slice(b"CLIENT_ERROR stats cachedump not allowed\r\n");
            return;
        }
        let (Some(class), Some(limit)) = (args.next(), args.next()) else {
            reply::write_error(out, ErrorReply::BadCommandLine);
            return;
        };
        let (Some(class), Some(limit)) = (safe_strtoul(class), safe_strtoul(limit)) else {
            reply::write_error(out, ErrorReply::BadCommandLineFormat);
            return;
        };
        if class > CLASS_ID_MAX {
            reply::write_error(out, ErrorReply::IllegalSlabId);
            return;
        }
        let mut n = 0;
        let start = out.len();
        let mut full = false;
        self.store.dump(now, |e| {
            if full || u32::from(e.class_id) != class || (limit != 0 && n >= limit) {
                return;
            }
            // The value's length, and the expiry as a Unix time or 0 for none (memcached's `item_cachedump`).
            let exp = if e.exptime == 0 {
                0
            } else {
                self.clock.unix(e.exptime)
            };
            let mut line = b"ITEM ".to_vec();
            line.extend_from_slice(e.key);
            line.extend_from_slice(format!(" [{} b; {} s]\r\n", e.value_len, exp).as_bytes());
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
