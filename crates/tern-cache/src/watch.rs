//! memcached's `watch`: a connection that sends `watch fetchers mutations ...` becomes a log stream of what
//! the cache does (`ts=... gid=... type=item_get key=...` lines, memcached 1.6.18's formats). Lines are
//! written on the I/O thread that saw the event, into each interested watcher's own bounded buffer
//! (`-o watcher_logbuf_size`); a watcher that reads too slowly loses lines, counted and reported to it as
//! `skipped=N` once it has room again, so a slow watcher never holds up the cache or grows its memory.
//! With no watcher of a kind, an event costs one relaxed atomic load.
//!
//! Why not memcached's per-worker buffers and logger thread: those let its workers copy a raw entry and leave
//! the formatting to another thread; here a line is formatted only while someone watches its kind, and the
//! watcher's connection stays on its I/O loop (a runtime feed), so no extra thread is needed.

use std::io::Write as _;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use tern_runtime::{Feed, FeedStep};

/// memcached's log kinds (`LOG_*` flags), the words `watch` takes.
pub(crate) const FETCHERS: u32 = 1 << 0;
pub(crate) const MUTATIONS: u32 = 1 << 1;
pub(crate) const EVICTIONS: u32 = 1 << 2;
pub(crate) const CONNEVENTS: u32 = 1 << 3;

/// Every word memcached 1.6.18's `watch` accepts. tern emits the first four kinds; the others (the raw
/// commands of its proxy, LRU crawler and slab mover events, proxy logs) describe parts tern does not have,
/// so a watcher of them is accepted and hears nothing of them.
const KINDS: [(&str, u32); 9] = [
    ("fetchers", FETCHERS),
    ("mutations", MUTATIONS),
    ("evictions", EVICTIONS),
    ("connevents", CONNEVENTS),
    ("rawcmds", 1 << 4),
    ("sysevents", 1 << 5),
    ("proxyreqs", 1 << 6),
    ("proxyevents", 1 << 7),
    ("proxyuser", 1 << 8),
];

/// memcached's limit on watchers at once (`WATCHER_LIMIT`).
pub(crate) const MAX_WATCHERS: usize = 20;

/// Room a line needs besides itself: memcached asks its buffer for the line plus 128 bytes, which leaves
/// room for a `skipped=N` line before it.
const SKIP_LINE_ROOM: usize = 128;

/// The kinds a `watch` command's words name: fetchers alone when it names none; `None` for an unknown word.
pub(crate) fn parse_kinds<'a>(words: impl Iterator<Item = &'a [u8]>) -> Option<u32> {
    let mut kinds = 0;
    let mut any = false;
    for word in words {
        any = true;
        kinds |= KINDS
            .iter()
            .find(|(name, _)| name.as_bytes() == word)
            .map(|&(_, kind)| kind)?;
    }
    Some(if any { kinds } else { FETCHERS })
}

/// Why `watch` was refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    TooMany,
}

/// The watchers of one cache, and the counters `stats` reports.
pub(crate) struct Watchers {
    /// The kinds someone watches: what an event checks before doing anything.
    active: AtomicU32,
    list: Mutex<Vec<Arc<Watcher>>>,
    /// Each watcher's buffer, in bytes (`-o watcher_logbuf_size`, in KB).
    buffer_bytes: usize,
    gid: AtomicU64,
    /// Lines written to watchers' buffers (`log_watcher_sent`).
    sent: AtomicU64,
    /// Lines a watcher had no room for (`log_watcher_skipped`).
    skipped: AtomicU64,
    /// Events logged (`log_worker_written`; tern drops none before the watchers' buffers).
    written: AtomicU64,
}

struct Watcher {
    kinds: u32,
    buffer: Mutex<WatchBuffer>,
}

#[derive(Default)]
struct WatchBuffer {
    bytes: Vec<u8>,
    /// Lines lost since the last one written.
    skipped: u64,
    /// The feed's waker while it waits for lines.
    waker: Option<Waker>,
}

impl Watchers {
    pub(crate) fn new(buffer_bytes: usize) -> Watchers {
        Watchers {
            active: AtomicU32::new(0),
            list: Mutex::new(Vec::new()),
            buffer_bytes: buffer_bytes.max(SKIP_LINE_ROOM * 2),
            gid: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            written: AtomicU64::new(0),
        }
    }

    /// Someone watches `kind`.
    #[inline]
    pub(crate) fn wants(&self, kind: u32) -> bool {
        self.active.load(Relaxed) & kind != 0
    }

    /// A new watcher of `kinds`: the feed its connection becomes. It stops watching when the feed is dropped
    /// (its connection closed).
    pub(crate) fn watch(self: &Arc<Self>, kinds: u32) -> Result<Feed, Refused> {
        let watcher = Arc::new(Watcher {
            kinds,
            buffer: Mutex::new(WatchBuffer::default()),
        });
        {
            let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
            if list.len() >= MAX_WATCHERS {
                return Err(Refused::TooMany);
            }
            list.push(watcher.clone());
            self.update_active(&list);
        }
        let stop = Unwatch {
            watchers: self.clone(),
            watcher: watcher.clone(),
        };
        let mut taken = Vec::new();
        Ok(Feed::new(move |out, waker| {
            let _keep = &stop;
            let mut buffer = watcher.buffer.lock().unwrap_or_else(|e| e.into_inner());
            if buffer.bytes.is_empty() {
                buffer.waker = Some(waker.clone());
                return FeedStep::Idle;
            }
            // Swapped out, so the buffer keeps its capacity and the lock is held for no copy.
            std::mem::swap(&mut buffer.bytes, &mut taken);
            drop(buffer);
            out.extend_from_slice(&taken);
            taken.clear();
            FeedStep::Wrote
        }))
    }

    fn update_active(&self, list: &[Arc<Watcher>]) {
        self.active
            .store(list.iter().fold(0, |k, w| k | w.kinds), Relaxed);
    }

    /// Logs an event of `kind`: `body` writes the line after memcached's `ts=... gid=... ` prefix, without its
    /// newline. Each watcher of the kind gets it if its buffer has room.
    pub(crate) fn log(&self, kind: u32, body: impl FnOnce(&mut Vec<u8>)) {
        if !self.wants(kind) {
            return;
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let gid = self.gid.fetch_add(1, Relaxed) + 1;
        let mut line = Vec::with_capacity(160);
        // memcached prints the microseconds without padding (`%lld.%d`).
        let _ = write!(
            line,
            "ts={}.{} gid={gid} ",
            now.as_secs(),
            now.subsec_micros()
        );
        body(&mut line);
        line.push(b'\n');
        self.written.fetch_add(1, Relaxed);
        let list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        for watcher in list.iter().filter(|w| w.kinds & kind != 0) {
            let mut buffer = watcher.buffer.lock().unwrap_or_else(|e| e.into_inner());
            if buffer.bytes.len() + line.len() + SKIP_LINE_ROOM > self.buffer_bytes {
                buffer.skipped += 1;
                self.skipped.fetch_add(1, Relaxed);
                continue;
            }
            if buffer.skipped > 0 {
                let skipped = std::mem::take(&mut buffer.skipped);
                let _ = writeln!(buffer.bytes, "skipped={skipped}");
            }
            buffer.bytes.extend_from_slice(&line);
            self.sent.fetch_add(1, Relaxed);
            let idle = buffer.waker.take();
            // Woken after the buffer's lock is let go: the watcher's loop takes it to read the lines.
            drop(buffer);
            if let Some(waker) = idle {
                waker.wake();
            }
        }
    }

    /// `log_watchers`.
    pub(crate) fn count(&self) -> usize {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// `log_worker_written`, `log_watcher_skipped`, `log_watcher_sent`.
    pub(crate) fn counters(&self) -> (u64, u64, u64) {
        (
            self.written.load(Relaxed),
            self.skipped.load(Relaxed),
            self.sent.load(Relaxed),
        )
    }
}

/// Removes its watcher when the feed (and so the connection) goes.
struct Unwatch {
    watchers: Arc<Watchers>,
    watcher: Arc<Watcher>,
}

impl Drop for Unwatch {
    fn drop(&mut self) {
        let mut list = self.watchers.list.lock().unwrap_or_else(|e| e.into_inner());
        list.retain(|w| !Arc::ptr_eq(w, &self.watcher));
        self.watchers.update_active(&list);
    }
}

/// A key as memcached's logs print it: URI-encoded (`n,foo` is `n%2Cfoo`), every byte but letters, digits
/// and `-._~` as `%XX`.
pub(crate) fn uri_encode(out: &mut Vec<u8>, key: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_as_memcached_reads_them() {
        let words = |s: &'static str| s.split(' ').filter(|w| !w.is_empty()).map(str::as_bytes);
        assert_eq!(parse_kinds(words("")), Some(FETCHERS));
        assert_eq!(
            parse_kinds(words("mutations evictions")),
            Some(MUTATIONS | EVICTIONS)
        );
        assert_eq!(parse_kinds(words("fetchers bogus")), None);
    }

    #[test]
    fn keys_are_uri_encoded() {
        let mut out = Vec::new();
        uri_encode(&mut out, b"n,foo #~a");
        assert_eq!(out, b"n%2Cfoo%20%23~a");
    }

    #[test]
    fn a_full_buffer_skips_lines_and_says_so_once_it_has_room() {
        let watchers = Arc::new(Watchers::new(1024));
        let mut feed = watchers.watch(FETCHERS).unwrap();
        let waker = Waker::noop();
        for i in 0..40 {
            watchers.log(FETCHERS, |l| {
                l.extend_from_slice(format!("n={i}").as_bytes())
            });
        }
        watchers.log(MUTATIONS, |l| l.extend_from_slice(b"unwatched"));
        let mut out = tern_runtime::Output::with_capacity(4096);
        assert_eq!(feed.step(&mut out, waker), FeedStep::Wrote);
        let (written, skipped, sent) = watchers.counters();
        assert_eq!(written, 40);
        assert!(skipped > 0 && sent + skipped == 40, "{skipped} {sent}");
        watchers.log(FETCHERS, |l| l.extend_from_slice(b"after"));
        assert_eq!(feed.step(&mut out, waker), FeedStep::Wrote);
        let text = String::from_utf8(out.to_vec()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len() as u64, sent + 2);
        assert_eq!(lines[lines.len() - 2], format!("skipped={skipped}"));
        assert!(lines[lines.len() - 1].ends_with(" gid=41 after"));
        assert!(lines[0].starts_with("ts=") && lines[0].ends_with(" gid=1 n=0"));
        assert_eq!(feed.step(&mut out, waker), FeedStep::Idle);
        assert_eq!(watchers.count(), 1);
        drop(feed);
        assert_eq!(watchers.count(), 0);
        assert!(!watchers.wants(FETCHERS));
    }
}
