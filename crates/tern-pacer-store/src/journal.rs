//! The crash journal: what each loop's ledger settled and reserved, written so that after a `kill -9` and a
//! restart on the same directory no settled spend is lost or counted twice and every reservation whose bid
//! left the process is still held.
//!
//! Each I/O loop appends to its own segment file through a shared memory mapping (memmap2): writing a
//! record is a copy into the mapping, no system call, and the page cache keeps it when the process dies.
//! The ledger writes the record before it changes its state, inside `handle`, so a bid's reservation is in
//! the mapping before the reply carrying the bid is handed to the kernel. A background thread `msync`s the
//! written part every `sync_interval` (the power-loss guarantee: at most that interval is lost), prepares
//! each loop's next segment (created, preallocated with `posix_fallocate` so a full disk is an error there,
//! not a SIGBUS on a store, and mapped) so a loop rotating at `segment_bytes` only swaps pointers, and
//! compacts a loop's closed segments into a checkpoint ([`Replay`]) to bound disk use and recovery time.
//! A `write(2)` per batch was the alternative; it puts a system call, and the file system's locks and
//! journal (see the seed on blocking writes in I/O threads), on the hot path.
//!
//! A record holds an impression's whole state after an operation (reserve, win, loss, billing; TTL
//! releases and forgetting are derived from the times it carries), so replay is a fold that does not depend
//! on the order the loops' streams are read in. Records carry a length and a CRC-32: a record torn by the
//! kill is detected and ignored with everything after it in its segment (nothing after it was
//! acknowledged: a loop writes its segment in order and replies after writing).
//!
//! Files, in one directory: `g<gen>-base.ckpt`, the whole state recovered at the start of generation `gen`
//! (each start is a new generation); `g<gen>-l<loop>-s<seq>.seg`, loop `loop`'s segments; and
//! `g<gen>-l<loop>-c<seq>.ckpt`, a loop's compacted segments up to `seq`. Checkpoints are written to a
//! `.tmp` file, synced, then renamed, so a crash leaves either the old files or the new one. Recovery reads
//! the newest generation with a base checkpoint, writes the next generation's base checkpoint, then deletes
//! the older files.

mod replay;

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memmap2::{MmapOptions, MmapRaw};
use parking_lot::Mutex;
use tern_metrics::{Counter, Gauge};

use tern_pacer_core::coordinator::Coordinator;
use tern_pacer_core::ledger::{FastMap, Ledger};
use tern_pacer_core::money::Micros;
use tern_pacer_core::proto::{CampaignId, ImpKey};

pub use replay::Replay;
pub use tern_pacer_core::record::{
    decode, decode_all, encode, encode_to_vec, Decoded, ForwardedNotice, ImpRecord, ImpState,
    Record, Spend, MAX_RECORD,
};

/// Every segment and checkpoint starts with this.
const MAGIC: [u8; 16] = *b"tern-pacer-jnl1\n";

/// Where and how the journal is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalConfig {
    pub dir: PathBuf,
    /// A loop starts a new segment when this many bytes are written (at least 64 KiB).
    pub segment_bytes: usize,
    /// How often written records are `msync`ed: what a power loss can cost.
    pub sync_interval: Duration,
    /// A loop's closed segments are compacted into its checkpoint when this many have piled up.
    pub compact_after_segments: usize,
    /// How long a ledger remembers an impression (its `forget_after_ms`): replay forgets the same ones.
    pub forget_after_ms: u64,
}

impl JournalConfig {
    pub fn new(dir: PathBuf) -> Self {
        JournalConfig {
            dir,
            segment_bytes: 64 << 20,
            sync_interval: Duration::from_millis(100),
            compact_after_segments: 4,
            forget_after_ms: tern_pacer_core::ledger::LedgerConfig::default().forget_after_ms,
        }
    }
}

/// Records the loops wrote, each counted by its loop's thread in its own slot (no shared counter on the
/// hot path; `thread="io-N"` per loop on `/metrics?per_thread=1`).
pub static RECORDS: Counter = Counter::new(
    "tern_pacer_journal_records_total",
    "Records the I/O loops wrote to the crash journal",
);
/// Bytes of those records (headers included).
pub static BYTES: Counter = Counter::new(
    "tern_pacer_journal_bytes_total",
    "Bytes of records the I/O loops wrote to the crash journal",
);
/// `msync` calls that flushed something, by the journal's thread.
pub static MSYNCS: Counter = Counter::new(
    "tern_pacer_journal_msyncs_total",
    "msync calls of the crash journal's thread that flushed written records",
);
pub static SYNCED_BYTES: Counter = Counter::new(
    "tern_pacer_journal_synced_bytes_total",
    "Bytes of crash journal records flushed to disk by msync",
);
pub static SEGMENTS: Counter = Counter::new(
    "tern_pacer_journal_segments_total",
    "Crash journal segment files created",
);
pub static INLINE_ROTATIONS: Counter = Counter::new(
    "tern_pacer_journal_inline_rotations_total",
    "Segment rotations that found no prepared segment and created one on the I/O loop",
);
pub static COMPACTIONS: Counter = Counter::new(
    "tern_pacer_journal_compactions_total",
    "Compactions of a loop's closed segments into its checkpoint",
);
pub static ERRORS: Counter = Counter::new(
    "tern_pacer_journal_errors_total",
    "Crash journal failures to create, sync, compact or delete files",
);
/// What recovery read when the journal opened ([`RecoveryStats`]).
pub static RECOVERED_FILES: Counter = Counter::new(
    "tern_pacer_journal_recovered_files_total",
    "Journal files (checkpoints and segments) read by recovery",
);
pub static RECOVERED_RECORDS: Counter = Counter::new(
    "tern_pacer_journal_recovered_records_total",
    "Journal records replayed by recovery",
);
pub static TORN_FILES: Counter = Counter::new(
    "tern_pacer_journal_torn_files_total",
    "Journal files whose reading stopped at a torn or damaged record",
);
pub static RECOVERED_IMPS: Counter = Counter::new(
    "tern_pacer_journal_recovered_imps_total",
    "Impressions restored by recovery (reserved, released or billed and still remembered)",
);
/// The generation of the open journal (0 when none is open).
pub static GENERATION: Gauge = Gauge::new(
    "tern_pacer_journal_generation",
    "Generation of the open crash journal (each start is a new one)",
);

/// Exports every journal metric (as zero until something is counted).
fn register_metrics() {
    for counter in [
        &RECORDS,
        &BYTES,
        &MSYNCS,
        &SYNCED_BYTES,
        &SEGMENTS,
        &INLINE_ROTATIONS,
        &COMPACTIONS,
        &ERRORS,
        &RECOVERED_FILES,
        &RECOVERED_RECORDS,
        &TORN_FILES,
        &RECOVERED_IMPS,
    ] {
        counter.register();
    }
    GENERATION.register();
}

/// Counts `n` in one journal's `stat` and in the process's `metric`.
fn count(stat: &AtomicU64, metric: &Counter, n: u64) {
    stat.fetch_add(n, Ordering::Relaxed);
    metric.add(n);
}

/// One journal's counters, for tests and `/stats` (the process's are the metrics above). Written by the
/// journal's thread, and by a loop only when it has to rotate or fails.
#[derive(Debug, Default)]
pub struct JournalStats {
    /// Bytes `msync`ed (counted by the journal's thread: the loops count nothing shared).
    pub synced_bytes: AtomicU64,
    pub segments: AtomicU64,
    /// Rotations that found no prepared segment and created one on the loop's thread.
    pub inline_rotations: AtomicU64,
    pub msyncs: AtomicU64,
    pub compactions: AtomicU64,
    /// Failures to create, sync, compact or delete files.
    pub errors: AtomicU64,
    /// Runs of failures of one kind that were logged as a warning (one per run: [`Trouble`]).
    pub troubles: AtomicU64,
    /// Runs of failures that ended, logged as an info line when the operation worked again.
    pub recoveries: AtomicU64,
}

/// What failed in the journal: the warning names it, says what it costs, and says what to check; a run of
/// failures of one kind is logged once, and its end once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// `msync` of written records (the journal's thread).
    Sync,
    /// Creating the next spare segment ahead of a loop (the journal's thread).
    Prepare,
    /// A loop creating a segment itself (its first, or at a rotation that found no spare).
    Rotate,
    /// Folding closed segments into a loop's checkpoint.
    Compact,
    /// Deleting a file compaction made useless.
    Remove,
}

impl Trouble {
    const ALL: [Trouble; 5] = [
        Trouble::Sync,
        Trouble::Prepare,
        Trouble::Rotate,
        Trouble::Compact,
        Trouble::Remove,
    ];

    fn doing(self) -> &'static str {
        match self {
            Trouble::Sync => "flushing written records to disk (msync)",
            Trouble::Prepare => "preparing the next segment",
            Trouble::Rotate => "creating a segment for an I/O loop",
            Trouble::Compact => "compacting closed segments into a checkpoint",
            Trouble::Remove => "removing a compacted file",
        }
    }

    fn consequence(self) -> &'static str {
        match self {
            Trouble::Sync => {
                "the records written since the last flush (settled spend, reservations) are in memory \
                 only: the pacer's own crash keeps them, but a power loss or an OS crash would lose them"
            }
            Trouble::Prepare => {
                "each loop creates its next segment itself when it fills the current one, and refuses \
                 bids and notices if that fails too"
            }
            Trouble::Rotate => {
                "the loop refuses bids and notices (nothing it cannot journal is accepted) until a \
                 segment can be created"
            }
            Trouble::Compact => {
                "closed segments are kept instead: disk use and recovery time grow until it works"
            }
            Trouble::Remove => "the file stays on disk, taking space",
        }
    }
}

/// What recovery found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryStats {
    pub generation: u64,
    pub files: usize,
    pub records: usize,
    /// Files whose reading stopped at a torn or damaged record.
    pub torn: usize,
    /// Impressions restored (reserved, released or billed and still remembered).
    pub imps: usize,
}

/// One line for a log: `generation 3: 2 files, 120 records (1 torn file), 40 impressions restored`.
impl std::fmt::Display for RecoveryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        write!(
            f,
            "generation {}: {} file{}, {} record{}",
            self.generation,
            self.files,
            plural(self.files),
            self.records,
            plural(self.records)
        )?;
        if self.torn > 0 {
            write!(
                f,
                " ({} file{} cut short by a torn or damaged record)",
                self.torn,
                plural(self.torn)
            )?;
        }
        write!(
            f,
            ", {} impression{} restored",
            self.imps,
            plural(self.imps)
        )
    }
}

/// The state rebuilt at startup, for the coordinator and the loops to start from.
pub struct Recovered {
    pub replay: Replay,
    pub stats: RecoveryStats,
}

/// A segment file mapped for writing by its loop, and for `msync` and compaction by the journal's thread.
struct Segment {
    path: PathBuf,
    seq: u64,
    map: MmapRaw,
    /// Bytes written (published by the loop after each record).
    written: AtomicUsize,
    /// Bytes `msync`ed (the journal thread's).
    synced: AtomicUsize,
}

impl Segment {
    fn create(path: PathBuf, seq: u64, len: usize) -> io::Result<Segment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        // Blocks reserved now, so a store into the mapping cannot fail later for want of disk.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
        if rc != 0 {
            let _ = fs::remove_file(&path);
            return Err(io::Error::from_raw_os_error(rc));
        }
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        // SAFETY: the mapping is `len >= MAGIC.len()` bytes and nothing else writes it yet.
        unsafe { std::ptr::copy_nonoverlapping(MAGIC.as_ptr(), map.as_mut_ptr(), MAGIC.len()) };
        Ok(Segment {
            path,
            seq,
            map,
            written: AtomicUsize::new(MAGIC.len()),
            synced: AtomicUsize::new(0),
        })
    }

    /// What the loop has published as written.
    fn written_bytes(&self) -> &[u8] {
        let len = self.written.load(Ordering::Acquire);
        // SAFETY: bytes below `written` are never written again (the loop only appends past it).
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), len) }
    }

    /// `msync`s what was written since the last call; returns how many bytes that was.
    fn sync(&self) -> io::Result<usize> {
        let written = self.written.load(Ordering::Acquire);
        let synced = self.synced.load(Ordering::Relaxed);
        if written == synced {
            return Ok(0);
        }
        self.map.flush_range(synced, written - synced)?;
        self.synced.store(written, Ordering::Relaxed);
        Ok(written - synced)
    }

    /// Takes the page faults of the first write to each page now, on the journal's thread, rather than on
    /// the loop's: a store into a page of a shared file mapping not yet written faults into the file
    /// system (a fault per 4 KiB, some microseconds each). The pages hold zeros already (preallocated),
    /// so writing a zero changes nothing in the file.
    fn prefault(&self) {
        let len = self.map.len();
        for offset in (MAGIC.len()..len).step_by(4096) {
            // SAFETY: inside the mapping; nothing reads or writes this segment yet (it is not handed out).
            unsafe { self.map.as_mut_ptr().add(offset).write_volatile(0) };
        }
    }
}

/// A loop's files, shared between the loop (which rotates) and the journal thread.
#[derive(Default)]
struct LoopFiles {
    active: Option<Arc<Segment>>,
    spare: Option<Segment>,
    closed: Vec<Arc<Segment>>,
    checkpoint: Option<LoopCheckpoint>,
}

/// A loop's compacted checkpoint: the last segment it covers, and its path.
type LoopCheckpoint = (u64, PathBuf);

struct Shared {
    config: JournalConfig,
    generation: u64,
    loops: Mutex<Vec<LoopFiles>>,
    stats: JournalStats,
    stop: AtomicBool,
    /// Since when each kind of [`Trouble`] (in `Trouble::ALL`'s order) has been failing, while it is.
    troubles: Mutex<[Option<std::time::Instant>; Trouble::ALL.len()]>,
    /// Some kind is failing: the loops' successes look at `troubles` only then.
    troubled: AtomicBool,
}

impl Shared {
    fn segment_path(&self, loop_id: usize, seq: u64) -> PathBuf {
        self.config.dir.join(format!(
            "g{:010}-l{loop_id:04}-s{seq:010}.seg",
            self.generation
        ))
    }

    fn checkpoint_path(&self, loop_id: usize, seq: u64) -> PathBuf {
        self.config.dir.join(format!(
            "g{:010}-l{loop_id:04}-c{seq:010}.ckpt",
            self.generation
        ))
    }

    fn new_segment(&self, loop_id: usize, seq: u64) -> io::Result<Segment> {
        let segment = Segment::create(
            self.segment_path(loop_id, seq),
            seq,
            self.config.segment_bytes,
        )?;
        count(&self.stats.segments, &SEGMENTS, 1);
        Ok(segment)
    }

    /// Counts a failure of `trouble` (on `what`, a file or the directory); the first of a run is logged
    /// with its cause, what it costs and what to check.
    fn failed(&self, trouble: Trouble, what: &Path, e: &io::Error) {
        count(&self.stats.errors, &ERRORS, 1);
        let mut troubles = self.troubles.lock();
        let since = &mut troubles[trouble as usize];
        if since.is_some() {
            return;
        }
        *since = Some(std::time::Instant::now());
        self.troubled.store(true, Ordering::Release);
        self.stats.troubles.fetch_add(1, Ordering::Relaxed);
        let dir = self.config.dir.display();
        tracing::warn!(
            "pacer journal: {} failed ({}): {e}; {}; check the free space and the permissions of {dir}",
            trouble.doing(),
            what.display(),
            trouble.consequence()
        );
    }

    /// `trouble`'s operation worked: if it was failing, an info line says it works again.
    fn worked(&self, trouble: Trouble) {
        if !self.troubled.load(Ordering::Acquire) {
            return;
        }
        let mut troubles = self.troubles.lock();
        let Some(since) = troubles[trouble as usize].take() else {
            return;
        };
        if troubles.iter().all(Option::is_none) {
            self.troubled.store(false, Ordering::Release);
        }
        self.stats.recoveries.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "pacer journal in {}: {} works again, after {:.1} s of failures",
            self.config.dir.display(),
            trouble.doing(),
            since.elapsed().as_secs_f64()
        );
    }
}

/// The journal of one node: recovery, the loops' writers and the thread that syncs and compacts.
pub struct Journal {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// Holds an exclusive `flock` on `DIR/lock` while the journal is open; the kernel drops it when the
    /// process dies, however it dies.
    _lock: File,
}

/// How long a restart waits for the kernel to release the lock of a process that is dead or dying.
const DEAD_HOLDER_WAIT: Duration = Duration::from_secs(5);

/// Takes the directory's lock: two processes writing one journal would corrupt it.
///
/// The lock is an exclusive `flock`, which the kernel drops when its holder's descriptors close, however it
/// dies. But `kill -9` returns before the killed process has finished exiting (its descriptors close at
/// the end of exit, after its memory, the journal's mappings included, is torn down), so a restart right
/// after it can find the lock still held by a process that is dead for every purpose. The holder writes
/// its pid and start time into the lock file; a busy lock whose holder is gone, a zombie or has SIGKILL
/// pending is waited for (up to [`DEAD_HOLDER_WAIT`]); a live holder is refused at once.
fn lock_dir(dir: &Path) -> io::Result<File> {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(dir.join("lock"))?;
    let deadline = std::time::Instant::now() + DEAD_HOLDER_WAIT;
    loop {
        // SAFETY: a valid descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(e);
        }
        let holder = fs::read_to_string(dir.join("lock")).unwrap_or_default();
        let mut words = holder.split_whitespace();
        let pid: Option<u32> = words.next().and_then(|w| w.parse().ok());
        let started: Option<u64> = words.next().and_then(|w| w.parse().ok());
        let alive = pid.is_some_and(|pid| process_alive(pid, started));
        if alive || std::time::Instant::now() >= deadline {
            let who = pid.map_or("another pacer".to_string(), |p| format!("pacer pid {p}"));
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{} is in use by {who}: {e}", dir.display()),
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let me = std::process::id();
    let started = process_start_time(me).unwrap_or(0);
    file.set_len(0)?;
    file.write_all(format!("{me} {started}\n").as_bytes())?;
    Ok(file)
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks since boot (tells a reused pid
/// from the process that wrote it).
fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `pid` is the process that started at `started` and is neither a zombie nor dying (SIGKILL
/// pending).
fn process_alive(pid: u32, started: Option<u64>) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    if matches!(state, Some("Z" | "X" | "x")) {
        return false;
    }
    if started.is_some() && process_start_time(pid) != started {
        return false;
    }
    // A SIGKILL pending, to the thread group or to the main thread, means it is exiting.
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    !status.lines().any(|line| {
        ["ShdPnd:", "SigPnd:"].iter().any(|field| {
            line.strip_prefix(field)
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .is_some_and(|mask| mask & sigkill != 0)
        })
    })
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A journal file name's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FileName {
    Base {
        generation: u64,
    },
    Segment {
        generation: u64,
        loop_id: usize,
        seq: u64,
    },
    LoopCheckpoint {
        generation: u64,
        loop_id: usize,
        seq: u64,
    },
}

fn parse_name(name: &str) -> Option<FileName> {
    let number = |s: &str, prefix: char| s.strip_prefix(prefix)?.parse::<u64>().ok();
    if let Some(rest) = name.strip_suffix("-base.ckpt") {
        return Some(FileName::Base {
            generation: number(rest, 'g')?,
        });
    }
    let (stem, is_segment) = match name.strip_suffix(".seg") {
        Some(stem) => (stem, true),
        None => (name.strip_suffix(".ckpt")?, false),
    };
    let mut parts = stem.split('-');
    let generation = number(parts.next()?, 'g')?;
    let loop_id = usize::try_from(number(parts.next()?, 'l')?).ok()?;
    let last = parts.next()?;
    if parts.next().is_some() {
        return None;
    }
    Some(if is_segment {
        FileName::Segment {
            generation,
            loop_id,
            seq: number(last, 's')?,
        }
    } else {
        FileName::LoopCheckpoint {
            generation,
            loop_id,
            seq: number(last, 'c')?,
        }
    })
}

/// Reads a journal file's records into `replay`; returns the count and whether the file was torn.
fn read_file(path: &Path, replay: &mut Replay) -> io::Result<(usize, bool)> {
    let bytes = fs::read(path)?;
    if bytes.iter().take(MAGIC.len()).all(|b| *b == 0) {
        // Created (and perhaps preallocated) by a process that died before it wrote the magic: empty.
        return Ok((0, false));
    }
    let Some(body) = bytes.strip_prefix(&MAGIC[..]) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a pacer journal file", path.display()),
        ));
    };
    let (records, torn) = decode_all(body);
    let count = records.len();
    for record in records {
        replay.apply(record);
    }
    Ok((count, torn))
}

/// Writes `replay`'s checkpoint to `path` durably: a temporary file, synced, renamed, directory synced.
fn write_checkpoint(path: &Path, replay: &Replay) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut body = MAGIC.to_vec();
    for record in replay.checkpoint_records() {
        encode_to_vec(&record, &mut body);
    }
    let mut file = File::create(&tmp)?;
    file.write_all(&body)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Journal {
    /// Recovers the state in `config.dir` (created if missing) as of `now_ms`, and starts a new generation
    /// whose base checkpoint holds it.
    pub fn open(config: JournalConfig, now_ms: u64) -> io::Result<(Journal, Recovered)> {
        let config = JournalConfig {
            segment_bytes: config.segment_bytes.max(64 << 10),
            compact_after_segments: config.compact_after_segments.max(1),
            ..config
        };
        fs::create_dir_all(&config.dir)?;
        let lock = lock_dir(&config.dir)?;
        let mut files = Vec::new();
        for entry in fs::read_dir(&config.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(".tmp") {
                // A checkpoint that was never renamed into place: the files it would replace still exist.
                fs::remove_file(entry.path())?;
            } else if let Some(parsed) = parse_name(name) {
                files.push((parsed, entry.path()));
            }
        }
        let current = files
            .iter()
            .filter_map(|(f, _)| match f {
                FileName::Base { generation } => Some(*generation),
                _ => None,
            })
            .max();
        let mut replay = Replay::default();
        let mut stats = RecoveryStats::default();
        if let Some(generation) = current {
            // The base first, then each loop's checkpoint, then its segments after it.
            let mut wanted: Vec<(FileName, &PathBuf)> = Vec::new();
            let mut covered: Vec<(usize, u64)> = Vec::new();
            for (f, path) in &files {
                match *f {
                    FileName::Base { generation: g } if g == generation => wanted.push((*f, path)),
                    FileName::LoopCheckpoint {
                        generation: g,
                        loop_id,
                        seq,
                    } if g == generation => match covered.iter_mut().find(|(l, _)| *l == loop_id) {
                        Some(c) => c.1 = c.1.max(seq),
                        None => covered.push((loop_id, seq)),
                    },
                    _ => {}
                }
            }
            let covered_up_to = |loop_id: usize| {
                covered
                    .iter()
                    .find(|(l, _)| *l == loop_id)
                    .map_or(0, |c| c.1)
            };
            for (f, path) in &files {
                match *f {
                    FileName::LoopCheckpoint {
                        generation: g,
                        loop_id,
                        seq,
                    } if g == generation && seq == covered_up_to(loop_id) => {
                        wanted.push((*f, path))
                    }
                    FileName::Segment {
                        generation: g,
                        loop_id,
                        seq,
                    } if g == generation && seq > covered_up_to(loop_id) => wanted.push((*f, path)),
                    _ => {}
                }
            }
            // Checkpoints before segments: a checkpoint's billed impressions carry no amount (its totals do),
            // so it must be read before any segment that might repeat them.
            wanted.sort_by_key(|(f, _)| match f {
                FileName::Base { .. } => (0, 0, 0),
                FileName::LoopCheckpoint { loop_id, seq, .. } => (1, *loop_id, *seq),
                FileName::Segment { loop_id, seq, .. } => (2, *loop_id, *seq),
            });
            for (_, path) in &wanted {
                let (records, torn) = read_file(path, &mut replay)?;
                stats.files += 1;
                stats.records += records;
                if torn {
                    stats.torn += 1;
                    tracing::warn!(
                        "pacer journal: {} ends in a torn record, ignored",
                        path.display()
                    );
                }
            }
            stats.generation = generation;
        }
        replay.resolve_forwarded(true, config.forget_after_ms);
        replay.forget(now_ms, config.forget_after_ms);
        stats.imps = replay.imps().count();
        let generation = current.map_or(1, |g| g + 1);
        write_checkpoint(
            &config.dir.join(format!("g{generation:010}-base.ckpt")),
            &replay,
        )?;
        // Everything listed is now in the new base checkpoint, or was never part of a generation (a file of
        // a generation whose base checkpoint was never written).
        for (_, path) in &files {
            fs::remove_file(path)?;
        }
        sync_dir(&config.dir)?;
        let shared = Arc::new(Shared {
            config,
            generation,
            loops: Mutex::new(Vec::new()),
            stats: JournalStats::default(),
            stop: AtomicBool::new(false),
            troubles: Mutex::new([None; Trouble::ALL.len()]),
            troubled: AtomicBool::new(false),
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pacer-journal".into())
                .spawn(move || background(&shared))?
        };
        register_metrics();
        RECOVERED_FILES.add(stats.files as u64);
        RECOVERED_RECORDS.add(stats.records as u64);
        TORN_FILES.add(stats.torn as u64);
        RECOVERED_IMPS.add(stats.imps as u64);
        GENERATION.add(generation as i64);
        Ok((
            Journal {
                shared,
                thread: Some(thread),
                _lock: lock,
            },
            Recovered { replay, stats },
        ))
    }

    /// Loop `loop_id`'s writer. Its first segment is created here (off the hot path); if that fails, the
    /// loop retries when it next writes and refuses bids and notices until a segment exists.
    pub fn open_loop(&self, loop_id: usize) -> LoopJournal {
        {
            let mut loops = self.shared.loops.lock();
            if loops.len() <= loop_id {
                loops.resize_with(loop_id + 1, LoopFiles::default);
            }
        }
        let mut journal = LoopJournal {
            shared: Arc::clone(&self.shared),
            loop_id,
            active: None,
            offset: 0,
        };
        // Off the hot path; a failure is logged, and retried by the loop's next operation.
        let _ = journal.ensure_room();
        journal
    }

    pub fn stats(&self) -> &JournalStats {
        &self.shared.stats
    }

    pub fn generation(&self) -> u64 {
        self.shared.generation
    }

    pub fn config(&self) -> &JournalConfig {
        &self.shared.config
    }
}

impl Drop for Journal {
    fn drop(&mut self) {
        GENERATION.add(-(self.shared.generation as i64));
        self.shared.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

/// One loop's writer: appends records to the loop's active segment.
pub struct LoopJournal {
    shared: Arc<Shared>,
    loop_id: usize,
    active: Option<Arc<Segment>>,
    /// Where the next record goes in `active`.
    offset: usize,
}

impl LoopJournal {
    /// Makes sure one more record fits, rotating to the next segment if needed. Call it before changing
    /// anything that [`LoopJournal::write`] will record: when it fails, refuse the operation.
    pub fn ensure_room(&mut self) -> io::Result<()> {
        if let Some(active) = &self.active {
            if self.offset + MAX_RECORD <= active.map.len() {
                return Ok(());
            }
        }
        let rotated = self.rotate();
        match &rotated {
            // Logged once per run of failures: every operation retries while the disk stays full.
            Err(e) => {
                let seq = self.active.as_ref().map_or(1, |a| a.seq + 1);
                let path = self.shared.segment_path(self.loop_id, seq);
                self.shared.failed(Trouble::Rotate, &path, e)
            }
            Ok(()) => self.shared.worked(Trouble::Rotate),
        }
        rotated
    }

    fn rotate(&mut self) -> io::Result<()> {
        let seq = self.active.as_ref().map_or(1, |a| a.seq + 1);
        let prepared = {
            let mut loops = self.shared.loops.lock();
            loops[self.loop_id].spare.take_if(|s| s.seq == seq)
        };
        let next = match prepared {
            Some(segment) => segment,
            None => match self.shared.new_segment(self.loop_id, seq) {
                Ok(segment) => {
                    if seq == 1 {
                        // The first segment, made by `Journal::open_loop` before the loop serves.
                        segment.prefault();
                    } else {
                        count(&self.shared.stats.inline_rotations, &INLINE_ROTATIONS, 1);
                    }
                    segment
                }
                // The journal's thread created it a moment ago and hands it over once it is prefaulted
                // (`prepare_spares`): wait for that rather than refuse bids.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    self.await_spare(seq).ok_or(e)?
                }
                Err(e) => return Err(e),
            },
        };
        let next = Arc::new(next);
        self.offset = next.written.load(Ordering::Relaxed);
        let mut loops = self.shared.loops.lock();
        let files = &mut loops[self.loop_id];
        if let Some(old) = files.active.replace(Arc::clone(&next)) {
            files.closed.push(old);
        }
        self.active = Some(next);
        Ok(())
    }

    /// The spare segment `seq` the journal's thread is about to hand over, waited for at most 100 ms (the
    /// thread holds it only while it prefaults it).
    fn await_spare(&self, seq: u64) -> Option<Segment> {
        let deadline = std::time::Instant::now() + Duration::from_millis(100);
        while std::time::Instant::now() < deadline {
            if let Some(spare) = self.shared.loops.lock()[self.loop_id]
                .spare
                .take_if(|s| s.seq == seq)
            {
                return Some(spare);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        None
    }

    /// Appends `record`. Room must have been made by [`LoopJournal::ensure_room`] since the last write; if
    /// not (a bug), it is made here, and a failure is counted and logged.
    pub fn write(&mut self, record: &Record) {
        if self.ensure_room().is_err() {
            return;
        }
        let Some(active) = &self.active else { return };
        // SAFETY: `ensure_room` left `MAX_RECORD` bytes from `offset` inside the mapping, and only this
        // loop writes at or past `written`.
        let out = unsafe {
            std::slice::from_raw_parts_mut(active.map.as_mut_ptr().add(self.offset), MAX_RECORD)
        };
        let len = encode(record, out);
        self.offset += len;
        active.written.store(self.offset, Ordering::Release);
        // This thread's own slots: a plain load and store each, no shared cache line.
        RECORDS.incr();
        BYTES.add(len as u64);
    }
}

/// The ledger records its changes here ([`tern_pacer_core::ledger::RecordSink`]).
impl tern_pacer_core::ledger::RecordSink for LoopJournal {
    fn ensure_room(&mut self) -> io::Result<()> {
        LoopJournal::ensure_room(self)
    }

    fn write(&mut self, record: &Record) {
        LoopJournal::write(self, record)
    }
}

/// A service's journal and the state it recovered, which the coordinator and the loops start from.
pub struct Durable {
    journal: Journal,
    /// The recovered state until every loop has taken its share, and how many have.
    recovered: Mutex<Option<(Replay, usize)>>,
    recovery: RecoveryStats,
}

/// The loop that holds a recovered impression: any loop can, the number of loops may have changed, and a
/// notice that lands elsewhere is forwarded to it.
fn owner(key: ImpKey, loops: usize) -> usize {
    (key.auction_id ^ u64::from(key.imp_id)) as usize % loops.max(1)
}

impl Durable {
    /// Recovers `config.dir` as of `now_ms` and starts journaling there.
    pub fn open(config: JournalConfig, now_ms: u64) -> io::Result<Durable> {
        let (journal, recovered) = Journal::open(config, now_ms)?;
        if recovered.stats.files > 0 {
            tracing::info!("pacer journal: recovered {}", recovered.stats);
        }
        Ok(Durable {
            journal,
            recovered: Mutex::new(Some((recovered.replay, 0))),
            recovery: recovered.stats,
        })
    }

    /// Counts the recovered spend and reservations as granted, before any loop syncs.
    pub fn restore_granted<C>(&self, coordinator: &mut Coordinator<C>) {
        let recovered = self.recovered.lock();
        let Some((replay, _)) = recovered.as_ref() else {
            return;
        };
        let mut held: FastMap<CampaignId, u64> = FastMap::default();
        for (campaign, spend) in replay.spend() {
            *held.entry(campaign).or_default() += spend.spent;
        }
        for imp in replay.imps() {
            let amount = match imp.state {
                ImpState::Reserved => imp.max,
                ImpState::Won { held } => held,
                ImpState::Released | ImpState::Billed { .. } => 0,
            };
            let total = held.entry(imp.campaign).or_default();
            *total = total.saturating_add(amount);
        }
        for (campaign, amount) in held {
            coordinator.restore_granted(campaign, Micros::from_micros(amount));
        }
    }

    /// Gives loop `loop_id` of `loops` its writer and its share of the recovered state: the impressions
    /// `owner` assigns it, and (loop 0) the settled spend. Call it on the new ledger, before its first sync.
    pub fn attach<C>(&self, ledger: &mut Ledger<C>, loop_id: usize, loops: usize, now_ms: u64) {
        ledger.set_journal(self.journal.open_loop(loop_id));
        let mut recovered = self.recovered.lock();
        let Some((replay, attached)) = recovered.as_mut() else {
            return;
        };
        let spend = replay.spend().filter(|_| loop_id == 0);
        let imps = replay.imps().filter(|imp| owner(imp.key, loops) == loop_id);
        ledger.restore(spend, imps, now_ms);
        *attached += 1;
        if *attached >= loops {
            // Every loop has its share: the copy is no longer needed.
            *recovered = None;
        }
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    pub fn recovery(&self) -> RecoveryStats {
        self.recovery
    }
}

/// The journal's thread: syncs, prepares spare segments, compacts, until the journal is dropped.
fn background(shared: &Shared) {
    tern_metrics::set_thread_name("pacer-journal");
    loop {
        let stopping = shared.stop.load(Ordering::Acquire);
        sync_all(shared);
        if stopping {
            return;
        }
        prepare_spares(shared);
        compact(shared);
        std::thread::park_timeout(shared.config.sync_interval);
    }
}

fn sync_all(shared: &Shared) {
    let segments: Vec<Arc<Segment>> = {
        let loops = shared.loops.lock();
        loops
            .iter()
            .flat_map(|l| l.active.iter().chain(&l.closed))
            .cloned()
            .collect()
    };
    // One verdict per pass, so that one bad segment among good ones is not a warning and a recovery a tick.
    let mut failed = false;
    let mut flushed = false;
    for segment in segments {
        match segment.sync() {
            Ok(0) => {}
            Ok(bytes) => {
                flushed = true;
                count(&shared.stats.msyncs, &MSYNCS, 1);
                count(&shared.stats.synced_bytes, &SYNCED_BYTES, bytes as u64);
            }
            Err(e) => {
                failed = true;
                shared.failed(Trouble::Sync, &segment.path, &e);
            }
        }
    }
    if flushed && !failed {
        shared.worked(Trouble::Sync);
    }
}

fn prepare_spares(shared: &Shared) {
    let wanted: Vec<(usize, u64)> = {
        let loops = shared.loops.lock();
        loops
            .iter()
            .enumerate()
            .filter_map(|(id, l)| match (&l.active, &l.spare) {
                (Some(active), None) => Some((id, active.seq + 1)),
                _ => None,
            })
            .collect()
    };
    for (loop_id, seq) in wanted {
        match shared.new_segment(loop_id, seq) {
            Ok(segment) => {
                shared.worked(Trouble::Prepare);
                segment.prefault();
                let mut loops = shared.loops.lock();
                let files = &mut loops[loop_id];
                // The loop may have rotated meanwhile, creating this segment itself.
                if files.active.as_ref().is_some_and(|a| a.seq + 1 == seq) {
                    files.spare = Some(segment);
                    continue;
                }
                drop(loops);
                remove(shared, &segment.path);
            }
            // Created by the loop's own rotation meanwhile: nothing to do.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => shared.failed(Trouble::Prepare, &shared.segment_path(loop_id, seq), &e),
        }
    }
}

fn remove(shared: &Shared, path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => shared.worked(Trouble::Remove),
        Err(e) => shared.failed(Trouble::Remove, path, &e),
    }
}

/// Folds each loop's closed segments (all synced by now) into the loop's checkpoint, then deletes them.
fn compact(shared: &Shared) {
    let work: Vec<(usize, Vec<Arc<Segment>>, Option<LoopCheckpoint>)> = {
        let loops = shared.loops.lock();
        loops
            .iter()
            .enumerate()
            .filter(|(_, l)| l.closed.len() >= shared.config.compact_after_segments)
            .map(|(id, l)| (id, l.closed.clone(), l.checkpoint.clone()))
            .collect()
    };
    for (loop_id, closed, previous) in work {
        let mut replay = Replay::default();
        if let Some((_, path)) = &previous {
            if let Err(e) = read_file(path, &mut replay) {
                shared.failed(Trouble::Compact, path, &e);
                continue;
            }
        }
        for segment in &closed {
            let body = &segment.written_bytes()[MAGIC.len()..];
            for record in decode_all(body).0 {
                replay.apply(record);
            }
        }
        replay.resolve_forwarded(false, shared.config.forget_after_ms);
        replay.forget(unix_ms(), shared.config.forget_after_ms);
        let last = closed.last().map_or(0, |s| s.seq);
        let path = shared.checkpoint_path(loop_id, last);
        if let Err(e) = write_checkpoint(&path, &replay) {
            shared.failed(Trouble::Compact, &path, &e);
            continue;
        }
        shared.worked(Trouble::Compact);
        {
            let mut loops = shared.loops.lock();
            let files = &mut loops[loop_id];
            files.closed.retain(|s| s.seq > last);
            files.checkpoint = Some((last, path));
        }
        if let Some((_, old)) = previous {
            remove(shared, &old);
        }
        for segment in closed {
            remove(shared, &segment.path);
        }
        count(&shared.stats.compactions, &COMPACTIONS, 1);
    }
}

#[cfg(test)]
mod tests;
