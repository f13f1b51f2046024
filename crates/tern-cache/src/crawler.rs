//! memcached's LRU crawler on tern's store: the `lru_crawler` commands and the thread that runs what they
//! start, which is also the store's background step (expiry, and the freeing and compacting of segments).
//!
//! As in memcached 1.6.18: the crawler is on unless `-o no_lru_crawler` (or `no_modern`), and `lru_crawler
//! enable|disable` turns it on and off at run time; `lru_crawler crawl <classes>` checks every item of the
//! classes named and reclaims the expired and flushed ones, one crawl at a time (`lru_crawler_running`,
//! `BUSY` to a second), `lru_crawler sleep` microseconds every 1,000 items, at most `lru_crawler tocrawl`
//! items a class. Expired items are also looked for once a second while the crawler is on and memcached's
//! LRU maintainer would be running (`-o no_lru_maintainer` and `no_modern` stop it), as memcached's
//! maintainer schedules its own crawls; otherwise they wait to be met by a command or an eviction.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use tern_memcache_proto::CrawlerClasses;

use crate::cache::Cache;
use crate::settings::Settings;

/// The item classes tern's store has: 1, its small queue, and 2, its main one.
const CLASSES: [u8; 2] = [1, 2];
/// How often the background step runs.
const STEP: Duration = Duration::from_secs(1);
/// Segments a shard's background step goes through.
const STEP_SEGMENTS: usize = 4;
/// Items between two of the crawler's sleeps (memcached's `crawls_persleep`).
const ITEMS_PER_SLEEP: u64 = 1000;

/// The crawler's state, shared by the command handlers and the crawler thread.
pub(crate) struct Crawler {
    enabled: AtomicBool,
    /// memcached's LRU maintainer thread runs (fixed at start, as there).
    maintainer: bool,
    sleep_us: AtomicU32,
    tocrawl: AtomicU32,
    /// A crawl or a metadump is under way (`lru_crawler_running`).
    running: AtomicBool,
    starts: AtomicU64,
    work: Mutex<Work>,
    wake: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct Work {
    crawl: Option<CrawlerClasses>,
    stop: bool,
}

/// Why a crawl or a metadump did not start, with memcached's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    Disabled,
    BadClass,
    Busy,
    NotStarted,
    /// `crawl hash`: memcached walks its hash table only to dump it.
    HashCrawl,
}

impl Refused {
    pub(crate) fn reply(self) -> &'static [u8] {
        match self {
            Refused::Disabled => b"CLIENT_ERROR lru crawler disabled\r\n",
            Refused::BadClass => b"BADCLASS invalid class id\r\n",
            Refused::Busy => b"BUSY currently processing crawler request\r\n",
            Refused::NotStarted => b"NOTSTARTED no items to crawl\r\n",
            Refused::HashCrawl => b"ERROR an unknown error happened\r\n",
        }
    }
}

impl Crawler {
    pub(crate) fn new(settings: &Settings) -> Crawler {
        Crawler {
            enabled: AtomicBool::new(settings.lru_crawler),
            maintainer: settings.lru_maintainer,
            sleep_us: AtomicU32::new(settings.lru_crawler_sleep),
            tocrawl: AtomicU32::new(settings.lru_crawler_tocrawl),
            running: AtomicBool::new(false),
            starts: AtomicU64::new(0),
            work: Mutex::new(Work::default()),
            wake: Condvar::new(),
            thread: Mutex::new(None),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn maintainer(&self) -> bool {
        self.maintainer
    }

    pub(crate) fn sleep_us(&self) -> u32 {
        self.sleep_us.load(Ordering::Relaxed)
    }

    pub(crate) fn tocrawl(&self) -> u32 {
        self.tocrawl.load(Ordering::Relaxed)
    }

    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    pub(crate) fn set_sleep_us(&self, us: u32) {
        self.sleep_us.store(us, Ordering::Relaxed);
    }

    pub(crate) fn set_tocrawl(&self, items: u32) {
        self.tocrawl.store(items, Ordering::Relaxed);
    }

    /// `lru_crawler enable`: memcached refuses to start a crawler thread that runs.
    pub(crate) fn enable(&self) -> &'static [u8] {
        if self.enabled.swap(true, Ordering::Relaxed) {
            b"ERROR failed to start lru crawler thread\r\n"
        } else {
            b"OK\r\n"
        }
    }

    /// `lru_crawler disable`: a crawl under way stops after the segment it is in.
    pub(crate) fn disable(&self) -> &'static [u8] {
        self.enabled.store(false, Ordering::Relaxed);
        b"OK\r\n"
    }

    /// Makes the crawler busy (`lru_crawler_running` 1, other starts `BUSY`) for the classes `word` names,
    /// with memcached's checks in its order, until [`Crawler::finish`].
    pub(crate) fn start(&self, word: &[u8], dump: bool) -> Result<CrawlerClasses, Refused> {
        if !self.enabled() {
            return Err(Refused::Disabled);
        }
        let classes = CrawlerClasses::parse(word).ok_or(Refused::BadClass)?;
        if self.running() {
            return Err(Refused::Busy);
        }
        if classes == CrawlerClasses::Hash && !dump {
            return Err(Refused::HashCrawl);
        }
        if classes.is_empty() {
            return Err(Refused::NotStarted);
        }
        if self.running.swap(true, Ordering::AcqRel) {
            return Err(Refused::Busy);
        }
        self.starts.fetch_add(1, Ordering::Relaxed);
        Ok(classes)
    }

    /// The crawl or metadump [`Crawler::start`] began is over.
    pub(crate) fn finish(&self) {
        self.running.store(false, Ordering::Release);
    }

    /// `lru_crawler crawl <classes>`: hands the crawl to the crawler thread, which finishes it.
    pub(crate) fn crawl(&self, word: &[u8]) -> &'static [u8] {
        match self.start(word, false) {
            Ok(classes) => {
                self.work.lock().expect("crawler lock").crawl = Some(classes);
                self.wake.notify_one();
                b"OK\r\n"
            }
            Err(refused) => refused.reply(),
        }
    }
}

impl Crawler {
    /// Starts the crawler thread of `cache`; it ends with [`Crawler::stop_thread`], or by itself once the
    /// cache is gone (a server started in a test process is simply dropped).
    pub(crate) fn spawn_thread(cache: &Arc<Cache>) -> std::io::Result<()> {
        let weak = Arc::downgrade(cache);
        let thread = std::thread::Builder::new()
            .name("tern-cache-crawler".into())
            .spawn(move || run(weak))?;
        *cache.crawler.thread.lock().expect("crawler lock") = Some(thread);
        Ok(())
    }

    /// Stops the crawler thread (a crawl under way stops after its segment) and waits for it.
    pub(crate) fn stop_thread(&self) {
        self.work.lock().expect("crawler lock").stop = true;
        self.wake.notify_one();
        if let Some(thread) = self.thread.lock().expect("crawler lock").take() {
            let _ = thread.join();
        }
    }
}

fn run(cache: Weak<Cache>) {
    let mut next_step = Instant::now() + STEP;
    while let Some(cache) = cache.upgrade() {
        let crawler = &cache.crawler;
        let mut work = crawler.work.lock().expect("crawler lock");
        if work.stop {
            return;
        }
        if let Some(classes) = work.crawl.take() {
            drop(work);
            crawl(&cache, classes);
            crawler.finish();
            continue;
        }
        let now = Instant::now();
        if now >= next_step {
            drop(work);
            let expire = crawler.enabled() && crawler.maintainer;
            cache
                .store
                .maintain(cache.clock.now(), STEP_SEGMENTS, expire);
            next_step = now + STEP;
            continue;
        }
        // Wakes for a crawl or a stop, or for the next step; then lets go of the cache before looking again.
        drop(crawler.wake.wait_timeout(work, next_step - now));
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
                if !crawler.enabled() || crawler.work.lock().expect("crawler lock").stop {
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
