//! memcached's ASCII authentication file (`-Y`, `authfile.c`): `user:password` lines, at most eight of them,
//! read when the server starts and again on SIGHUP (a file that cannot be read then leaves the users as they
//! were, as in memcached). A password is compared in constant time and never logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;

/// memcached keeps at most this many entries and ignores the rest.
const MAX_ENTRIES: usize = 8;
/// memcached reads a line in pieces of at most this many bytes (`fgets` with `MAX_ENTRY_LEN`).
const MAX_ENTRY_LEN: usize = 256;

/// A user and password of the file.
type Entry = (Vec<u8>, Vec<u8>);

/// The users and passwords of an authentication file, shared (settings are cloned) and swapped whole on a
/// reload.
#[derive(Clone)]
pub struct AuthFile {
    pub path: PathBuf,
    entries: Arc<ArcSwap<Vec<Entry>>>,
}

impl std::fmt::Debug for AuthFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the passwords.
        f.debug_struct("AuthFile")
            .field("path", &self.path)
            .field("users", &self.entries.load().len())
            .finish()
    }
}

impl AuthFile {
    /// Reads the file as memcached does; the error is memcached's message for why it would not start.
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        Ok(AuthFile {
            path: path.to_path_buf(),
            entries: Arc::new(ArcSwap::from_pointee(read(path)?)),
        })
    }

    /// Reads the file again (memcached does on SIGHUP); on an error the users stay as they were.
    pub fn reload(&self) -> Result<(), String> {
        self.entries.store(Arc::new(read(&self.path)?));
        Ok(())
    }

    /// Whether a user of the file has this password (`authfile_check`).
    pub fn check(&self, user: &[u8], password: &[u8]) -> bool {
        self.entries
            .load()
            .iter()
            .any(|(u, p)| bool::from(u.ct_eq(user) & p.ct_eq(password)))
    }
}

/// The entries of the file at `path`, read as memcached reads them.
fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let data = std::fs::read(path).map_err(|e| {
        format!(
            "Could not open authfile [{}] for reading, error {e}",
            path.display()
        )
    })?;
    let mut entries = Vec::new();
    for line in data.split_inclusive(|&b| b == b'\n') {
        if entries.len() == MAX_ENTRIES {
            break;
        }
        let line = &line[..line.len().min(MAX_ENTRY_LEN - 1)];
        let line = line.split(|&b| b == 0).next().unwrap_or_default();
        if line.is_empty() {
            break;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(format!(
                "Authfile [{}] has a malformed entry. Should be 'user:password'",
                path.display()
            ));
        };
        let password = &line[colon + 1..];
        let end = password
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(password.len());
        entries.push((line[..colon].to_vec(), password[..end].to_vec()));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_memcacheds_format() {
        let dir = std::env::temp_dir().join(format!("tern-authfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("authfile");
        std::fs::write(&path, b"foo:bar\nbaaaz:quux\r\n").unwrap();
        let file = AuthFile::load(&path).unwrap();
        assert!(file.check(b"foo", b"bar"));
        assert!(file.check(b"baaaz", b"quux"));
        assert!(!file.check(b"foo", b"bab"));
        assert!(!file.check(b"foo", b"ba"));
        assert!(!file.check(b"fo", b"bar"));
        // A reload takes the new users; a broken file leaves them as they were.
        std::fs::write(&path, b"new:user\n").unwrap();
        file.reload().unwrap();
        assert!(file.check(b"new", b"user") && !file.check(b"foo", b"bar"));
        std::fs::write(&path, b"nocolon\n").unwrap();
        assert!(AuthFile::load(&path).unwrap_err().contains("malformed"));
        assert!(file.reload().unwrap_err().contains("malformed"));
        assert!(file.check(b"new", b"user"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
