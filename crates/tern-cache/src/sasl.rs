//! SASL for the binary protocol (`-S`), as memcached 1.6.18 does it with its own password file
//! (`MEMCACHED_SASL_PWDB`, Cyrus SASL's user-database callback in memcached's `sasl_defs.c`): the PLAIN
//! mechanism, checked against the file's `user:password` lines, read again at each authentication so an
//! edited file takes effect at once. Passwords are compared in constant time and never logged.

use std::path::Path;

use subtle::ConstantTimeEq;

/// The mechanisms `SASL_LIST_MECHS` names (memcached lists what its Cyrus plugins offer; a password file
/// can only check a password sent in the clear, so PLAIN).
pub(crate) const MECHANISMS: &[u8] = b"PLAIN";

/// memcached's `MAX_ENTRY_LEN`: a line of the file holds at most this many bytes, and a user and password
/// longer together than it allows (less 4) are refused without reading the file.
const MAX_ENTRY_LEN: usize = 256;

/// Whether a client asks for PLAIN (Cyrus compares mechanism names without regard to case).
pub(crate) fn is_plain(mechanism: &[u8]) -> bool {
    mechanism.eq_ignore_ascii_case(MECHANISMS)
}

/// Whether PLAIN's message authenticates: `authzid NUL authcid NUL password`, where the authorization id
/// is empty or the user's own, and the file has the user with that password. The first line naming the
/// user decides, as in memcached.
pub(crate) fn authenticates(pwdb: Option<&Path>, message: &[u8]) -> bool {
    let mut parts = message.splitn(3, |&b| b == 0);
    let (Some(authzid), Some(user), Some(password)) = (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    if user.is_empty() || (!authzid.is_empty() && authzid != user) {
        return false;
    }
    if user.len() + password.len() > MAX_ENTRY_LEN - 4 {
        return false;
    }
    let Some(file) = pwdb.and_then(|path| std::fs::read(path).ok()) else {
        return false;
    };
    for line in file.split(|&b| b == b'\n') {
        let line = &line[..line.len().min(MAX_ENTRY_LEN - 1)];
        let Some(rest) = line.strip_prefix(user).and_then(|r| r.strip_prefix(b":")) else {
            continue;
        };
        // The password ends at the next field, the line's end or a NUL.
        let end = rest
            .iter()
            .position(|&b| matches!(b, b':' | b'\r' | b'\0'))
            .unwrap_or(rest.len());
        return bool::from(rest[..end].ct_eq(password));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_is_checked_against_the_password_file() {
        let dir = std::env::temp_dir().join(format!("tern-sasl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pwdb = dir.join("pwdb");
        std::fs::write(&pwdb, b"alice:secret\nbob:pw:extra\r\ncarol:\n").unwrap();
        let ok = |message: &[u8]| authenticates(Some(&pwdb), message);
        assert!(ok(b"\0alice\0secret"));
        assert!(ok(b"alice\0alice\0secret"));
        assert!(ok(b"\0bob\0pw"));
        assert!(ok(b"\0carol\0"));
        assert!(!ok(b"\0alice\0secre"));
        assert!(!ok(b"\0alice\0secrets"));
        assert!(!ok(b"bob\0alice\0secret"), "another's authorization id");
        assert!(!ok(b"\0mallory\0secret"));
        assert!(!ok(b"\0alice"));
        assert!(!authenticates(None, b"\0alice\0secret"));
        assert!(is_plain(b"PLAIN") && is_plain(b"plain") && !is_plain(b"CRAM-MD5"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
