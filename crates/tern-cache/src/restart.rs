//! memcached's restartable cache (`-e FILE`). A graceful stop (SIGUSR1, `shutdown graceful`) writes every live
//! item to FILE, then the settings they were stored under to FILE.meta (renamed into place last: a stop cut
//! short leaves no metadata, so the next start is clean). The next start with `-e FILE` reads FILE.meta and
//! removes it, as memcached does (a crash later must not bring back items changed since), checks that the
//! settings match, sizes the index as it was (memcached's `hashpower` line), and stores the items back before
//! it accepts a connection; items that expired while it was stopped stay out.
//!
//! memcached keeps its items in FILE itself (mmap'd) and only fixes its pointers up at start; the store's
//! memory is anonymous, so tern copies the items out and back in a pass over them, and removes FILE once it
//! has read it (a copy left on a RAM disk would hold the cache's size twice). The metadata is memcached's
//! format (a `T` tag line, then `K<key> <value>` lines) with tern's own keys, and is judged with memcached's
//! rules and words: no file is a clean start, a file without its tag line is fatal, settings that differ
//! or missing lines are a clean start.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use tern_cache_storage::{Store, StoreMode, StoreOutcome, StoreRequest};

use crate::clock::Clock;
use crate::settings::Settings;

/// The metadata's one tag (memcached registers its own under this name).
const TAG: &str = "main";
/// The first bytes of an items file this code wrote.
const MAGIC: &[u8] = b"tern cache items 1\n";
/// The metadata lines a start needs (besides the tag).
const REQUIRED: [&str; 8] = [
    "maxbytes",
    "item_size_max",
    "use_cas",
    "hashpower",
    "stop_time",
    "items",
    "data_bytes",
    "data_crc32",
];
/// The fixed part of a record: key length (1), flags (4), expiry as a unix time or 0 (8), binary-key mark
/// (1), value length (4).
const RECORD_HEADER: usize = 18;

/// What a start found to restore: the items file and what its metadata says of it.
#[derive(Debug)]
pub struct Saved {
    path: PathBuf,
    items: u64,
    bytes: u64,
    crc32: u32,
}

fn meta_path(path: &Path) -> PathBuf {
    let mut meta = path.as_os_str().to_owned();
    meta.push(".meta");
    PathBuf::from(meta)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Reads and removes `FILE.meta` before the store is built. `Ok(None)`: a clean start (no metadata, or
/// metadata that does not fit these settings, said on standard error in memcached's words). `Ok(Some)`: the
/// items to [`restore`], with `settings.hashpower_init` set to the index size they were stored in. An error:
/// metadata without its tag line, on which memcached aborts; the file is left for the operator to look at.
pub fn check(settings: &mut Settings) -> anyhow::Result<Option<Saved>> {
    let Some(path) = settings.memory_file.clone() else {
        return Ok(None);
    };
    let meta = meta_path(&path);
    let text = match std::fs::read(&meta) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => {
            eprintln!("[restart] no metadata save file, starting with a clean cache");
            return Ok(None);
        }
    };
    let mut lines = text.lines();
    let corrupt = || {
        eprintln!("[restart] corrupt metadata file");
        anyhow::anyhow!(
            "the restart metadata {} is corrupt; remove it to start with a clean cache",
            meta.display()
        )
    };
    match lines.next() {
        None => {
            eprintln!("[restart] Failed to read a tag from metadata file");
            return Err(anyhow::anyhow!(
                "the restart metadata {} is empty; remove it to start with a clean cache",
                meta.display()
            ));
        }
        Some(line) if line.starts_with('T') && &line[1..] == TAG => {}
        Some(line) if line.starts_with('T') => {
            eprintln!(
                "[restart] internal handler for metadata tag not found: {}:",
                &line[1..]
            );
            return Err(corrupt());
        }
        Some(line) if line.starts_with('K') => return Err(corrupt()),
        Some(line) => {
            eprintln!("[restart] invalid metadata line:\n\n{line}\n");
            return Err(corrupt());
        }
    }
    let _ = std::fs::remove_file(&meta);
    match judge(lines, settings) {
        Some((saved, hashpower)) => {
            settings.hashpower_init = hashpower;
            Ok(Some(Saved { path, ..saved }))
        }
        None => {
            eprintln!("[restart] failed to validate metadata, starting with a clean cache");
            discard(&path);
            Ok(None)
        }
    }
}

/// The metadata's `K` lines against these settings: what to restore and the index size, or `None` (and
/// memcached's line saying why) for a clean start.
fn judge<'a>(lines: impl Iterator<Item = &'a str>, settings: &Settings) -> Option<(Saved, u32)> {
    let mut seen = Vec::new();
    let mut saved = Saved {
        path: PathBuf::new(),
        items: 0,
        bytes: 0,
        crc32: 0,
    };
    let mut hashpower = 0;
    for line in lines {
        let Some((key, value)) = line
            .strip_prefix('K')
            .map(|kv| kv.split_once(' ').unwrap_or((kv, "")))
        else {
            eprintln!("[restart] invalid metadata line:\n\n{line}\n");
            return None;
        };
        let number = value.parse::<u64>().ok();
        let fits = match key {
            "maxbytes" => number == Some(settings.memory_limit as u64),
            "item_size_max" => number == Some(settings.item_size_max as u64),
            "use_cas" => {
                value
                    == if settings.cas_enabled {
                        "true"
                    } else {
                        "false"
                    }
            }
            "hashpower" => number
                .filter(|p| (12..=32).contains(p))
                .map(|p| hashpower = p as u32)
                .is_some(),
            // A clock that went back past the stop cannot tell what expired meanwhile.
            "stop_time" => number.is_some_and(|t| t as i64 <= unix_now()),
            "items" => number.map(|n| saved.items = n).is_some(),
            "data_bytes" => number.map(|n| saved.bytes = n).is_some(),
            "data_crc32" => value.parse::<u32>().ok().map(|c| saved.crc32 = c).is_some(),
            _ => {
                eprintln!("[restart] unknown/unhandled key: {key}");
                continue;
            }
        };
        if !fits {
            eprintln!(
                "[restart] restart incompatible due to setting for [{key}] [old value: {value}]"
            );
            return None;
        }
        seen.push(key);
    }
    if REQUIRED.iter().any(|k| !seen.contains(k)) {
        eprintln!("[restart] missing some metadata lines");
        return None;
    }
    Some((saved, hashpower))
}

/// Removes an items file this code wrote (never another program's file of that name).
fn discard(path: &Path) {
    let mut head = [0u8; MAGIC.len()];
    let ours = File::open(path)
        .and_then(|mut f| f.read_exact(&mut head))
        .is_ok_and(|()| head == MAGIC);
    if ours {
        let _ = std::fs::remove_file(path);
    }
}

/// Stores the saved items back (before the server accepts connections), reading the file as a stream, then
/// removes it. Items past their expiry stay out. A file that turns out not to be what its metadata says (its
/// length, its checksum, a record cut short) is a clean start: what was stored from it is flushed, and
/// standard error says so.
pub fn restore(saved: &Saved, store: &Store, clock: &Clock) {
    let started = Instant::now();
    let read = read_items(saved, store, clock);
    let _ = std::fs::remove_file(&saved.path);
    match read {
        Ok((stored, expired, refused)) => eprintln!(
            "[restart] {stored} items restored in {:.0?} ({expired} expired while stopped, {refused} did not fit)",
            started.elapsed()
        ),
        Err(why) => {
            store.flush_all(clock.now(), None);
            eprintln!(
                "[restart] {}: {why}; starting with a clean cache",
                saved.path.display()
            );
        }
    }
}

/// Stores the records of the items file: how many were stored, had expired, did not fit.
fn read_items(saved: &Saved, store: &Store, clock: &Clock) -> Result<(u64, u64, u64), String> {
    let file = File::open(&saved.path).map_err(|e| format!("cannot read it: {e}"))?;
    let length = file.metadata().map_err(|e| e.to_string())?.len();
    if length != saved.bytes {
        return Err(format!(
            "{length} bytes where its metadata says {}",
            saved.bytes
        ));
    }
    let mut input = Checked {
        input: std::io::BufReader::with_capacity(1 << 20, file),
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    let cut_short = |e: std::io::Error| format!("a record is cut short ({e})");
    let mut magic = [0u8; MAGIC.len()];
    input.take(&mut magic).map_err(cut_short)?;
    if magic != MAGIC {
        return Err("not an items file of tern cache".into());
    }
    let now = clock.now();
    let (mut stored, mut expired, mut refused) = (0u64, 0u64, 0u64);
    let mut header = [0u8; RECORD_HEADER];
    let mut body = Vec::new();
    while input.bytes < length {
        input.take(&mut header).map_err(cut_short)?;
        let key_len = usize::from(header[0]);
        let flags = u32::from_le_bytes([header[1], header[2], header[3], header[4]]);
        let mut expires = [0u8; 8];
        expires.copy_from_slice(&header[5..13]);
        let expires = i64::from_le_bytes(expires);
        let value_len =
            u32::from_le_bytes([header[14], header[15], header[16], header[17]]) as usize;
        if (key_len + value_len) as u64 > length - input.bytes {
            return Err("a record is longer than what is left of the file".into());
        }
        body.resize(key_len + value_len, 0);
        input.take(&mut body).map_err(cut_short)?;
        let exptime = match expires {
            0 => 0,
            unix => clock.expiry(unix, now),
        };
        if exptime != 0 && exptime <= now {
            expired += 1;
            continue;
        }
        let (key, value) = body.split_at(key_len);
        let request = StoreRequest {
            mode: StoreMode::Set,
            flags,
            exptime,
            key_binary: header[13] != 0,
            ..StoreRequest::set(key, value)
        };
        match store.store(&request, now) {
            StoreOutcome::Stored { .. } => stored += 1,
            _ => refused += 1,
        }
    }
    if input.crc.finalize() != saved.crc32 {
        return Err("its checksum is not the one its metadata holds".into());
    }
    if stored + expired + refused != saved.items {
        return Err(format!(
            "{} records where its metadata says {}",
            stored + expired + refused,
            saved.items
        ));
    }
    Ok((stored, expired, refused))
}

/// A reader that keeps the CRC-32 and the count of what it read.
struct Checked<R> {
    input: R,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<R: Read> Checked<R> {
    /// Fills `buf` whole.
    fn take(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.input.read_exact(buf)?;
        self.crc.update(buf);
        self.bytes += buf.len() as u64;
        Ok(())
    }
}

/// Writes every live item to `-e`'s file, then its metadata, after a graceful stop (no connection is served
/// any more). Says on standard error how many and how long it took.
pub fn save(settings: &Settings, store: &Store, clock: &Clock) -> anyhow::Result<()> {
    let Some(path) = &settings.memory_file else {
        return Ok(());
    };
    let started = Instant::now();
    let now = clock.now();
    let file = private_file(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = Summed {
        out: BufWriter::new(file),
        crc: crc32fast::Hasher::new(),
        bytes: 0,
    };
    out.write_all(MAGIC)?;
    let mut items = 0u64;
    let mut record = Vec::new();
    for shard in 0..store.shard_count() {
        let mut keys = Vec::new();
        store.dump_shard(shard, now, |entry| keys.push(entry.key.to_vec()));
        for key in keys {
            record.clear();
            let found = store.peek(&key, now, |item| {
                record.push(item.key.len() as u8);
                record.extend_from_slice(&item.flags.to_le_bytes());
                let expires = if item.exptime == 0 {
                    0
                } else {
                    clock.unix(item.exptime)
                };
                record.extend_from_slice(&expires.to_le_bytes());
                record.push(u8::from(item.key_binary));
                record.extend_from_slice(&(item.value.len() as u32).to_le_bytes());
                record.extend_from_slice(item.key);
                record.extend_from_slice(item.value);
            });
            if found.is_some() {
                out.write_all(&record)?;
                items += 1;
            }
        }
    }
    let Summed { out, crc, bytes } = out;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    let stats = store.stats();
    let meta = [
        ("maxbytes", settings.memory_limit.to_string()),
        ("item_size_max", settings.item_size_max.to_string()),
        ("use_cas", settings.cas_enabled.to_string()),
        ("hashpower", stats.hash_slots.max(1).ilog2().to_string()),
        ("stop_time", unix_now().to_string()),
        ("items", items.to_string()),
        ("data_bytes", bytes.to_string()),
        ("data_crc32", crc.finalize().to_string()),
    ];
    let mut text = format!("T{TAG}\n");
    for (key, value) in meta {
        text.push_str(&format!("K{key} {value}\n"));
    }
    let meta = meta_path(path);
    let mut partial = meta.clone().into_os_string();
    partial.push(".part");
    private_file(Path::new(&partial))
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", meta.display()))?;
    std::fs::rename(&partial, &meta).with_context(|| format!("writing {}", meta.display()))?;
    eprintln!(
        "[restart] {items} items ({bytes} bytes) saved to {} in {:.0?}",
        path.display(),
        started.elapsed()
    );
    Ok(())
}

/// A new file only its owner may read, as memcached writes its metadata (the items are the cache's data).
fn private_file(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// A writer that keeps the CRC-32 and the count of what went through it.
struct Summed<W> {
    out: W,
    crc: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.crc.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
