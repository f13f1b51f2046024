//! memcached's LRU crawler on tern's store: the `lru_crawler` commands and the crawler's state, which its
//! thread (`background.rs`: the crawls, and the store's background step) takes its work from.
//!
//! As in memcached 1.6.18: the crawler is on unless `-o no_lru_crawler` (or `no_modern`), and `lru_crawler
//! enable|disable` turns it on and off at run time; `lru_crawler crawl <classes>` checks every item of the
//! classes named and reclaims the expired and flushed ones, one crawl at a time (`lru_crawler_running`,
//! `BUSY` to a second), `lru_crawler sleep` microseconds every 1,000 items, at most `lru_crawler tocrawl`
//! items a class. Expired items are also looked for once a second while the crawler is on and memcached's
//! LRU maintainer would be running (`-o no_lru_maintainer` and `no_modern` stop it), as memcached's
//! maintainer schedules its own crawls; otherwise they wait to be met by a command or an eviction.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Instant;

use tern_memcache_proto::CrawlerClasses;

use crate::settings::Settings;

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

/// What the crawler thread is to do next ([`Crawler::next_job`]).
pub(crate) enum Job {
    Stop,
    Crawl(CrawlerClasses),
    /// The background step is due.
    Step,
    /// Woken with nothing to do: look again.
    Nothing,
}

impl Crawler {
    /// The crawler thread's next job: a stop or a crawl asked for, else the background step once
    /// `step_due` has come (waiting for it, or for a command, until then).
    pub(crate) fn next_job(&self, step_due: Instant) -> Job {
        let mut work = self.work.lock().expect("crawler lock");
        for waited in [false, true] {
            if work.stop {
                return Job::Stop;
            }
            if let Some(classes) = work.crawl.take() {
                return Job::Crawl(classes);
            }
            let now = Instant::now();
            if now >= step_due {
                return Job::Step;
            }
            if !waited {
                work = self
                    .wake
                    .wait_timeout(work, step_due - now)
                    .expect("crawler lock")
                    .0;
            }
        }
        Job::Nothing
    }

    /// Whether a crawl under way is to stop (the crawler turned off, or the thread stopping).
    pub(crate) fn interrupted(&self) -> bool {
        !self.enabled() || self.work.lock().expect("crawler lock").stop
    }

    /// The crawler thread, for [`Crawler::stop_thread`].
    pub(crate) fn set_thread(&self, thread: std::thread::JoinHandle<()>) {
        *self.thread.lock().expect("crawler lock") = Some(thread);
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
