//! The crawler's thread, one per server (started with it; ended by a stop, or once the server is dropped):
//! it runs the crawls `lru_crawler crawl` hands it (crawler.rs), a segment at a time, and once a second the
//! store's background step, which frees and compacts mostly dead segments and, while the crawler and
//! memcached's LRU maintainer are on, expires items.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tern_memcache_proto::CrawlerClasses;

use crate::cache::Cache;
use crate::crawler::Job;

/// The item classes tern's store has: 1, its small queue, and 2, its main one.
const CLASSES: [u8; 2] = [1, 2];
/// How often the background step runs.
const STEP: Duration = Duration::from_secs(1);
/// Segments a shard's background step goes through.
const STEP_SEGMENTS: usize = 4;
/// Items between two of the crawler's sleeps (memcached's `crawls_persleep`).
const ITEMS_PER_SLEEP: u64 = 1000;

/// Starts the crawler thread of `cache`; it ends with `Crawler::stop_thread`, or by itself once the cache
/// is gone (a server started in a test process is simply dropped).
pub(crate) fn spawn(cache: &Arc<Cache>) -> std::io::Result<()> {
    let weak = Arc::downgrade(cache);
    let thread = std::thread::Builder::new()
        .name("tern-cache-crawler".into())
        .spawn(move || run(weak))?;
    cache.crawler.set_thread(thread);
    Ok(())
}

fn run(cache: Weak<Cache>) {
    let mut step_due = Instant::now() + STEP;
    // The cache is let go of between jobs, so that a dropped server ends the thread.
    while let Some(cache) = cache.upgrade() {
        let crawler = &cache.crawler;
        match crawler.next_job(step_due) {
            Job::Stop => return,
            Job::Crawl(classes) => {
                crawl(&cache, classes);
                crawler.finish();
            }
            Job::Step => {
                let expire = crawler.enabled() && crawler.maintainer();
                cache
                    .store
                    .maintain(cache.clock.now(), STEP_SEGMENTS, expire);
                step_due = Instant::now() + STEP;
            }
            Job::Nothing => {}
        }
    }
}

/// One `lru_crawler crawl`: every segment of each class named, shard by shard, a segment per lock.
fn crawl(cache: &Cache, classes: CrawlerClasses) {
    let crawler = &cache.crawler;
    for class in CLASSES.into_iter().filter(|&c| classes.contains(c)) {
        let limit = u64::from(crawler.tocrawl());
        let mut checked = 0u64;
        let mut since_sleep = 0u64;
        'class: for shard in 0..cache.store.shard_count() {
            for segment in cache.store.class_segments(shard, class) {
                if crawler.interrupted() {
                    return;
                }
                let step = cache
                    .store
                    .crawl_segment(shard, class, segment, cache.clock.now());
                checked += step.checked;
                since_sleep += step.checked;
                if since_sleep >= ITEMS_PER_SLEEP {
                    let sleeps = since_sleep / ITEMS_PER_SLEEP;
                    since_sleep %= ITEMS_PER_SLEEP;
                    let us = u64::from(crawler.sleep_us()) * sleeps;
                    std::thread::sleep(Duration::from_micros(us));
                }
                if limit != 0 && checked >= limit {
                    break 'class;
                }
            }
        }
    }
}
