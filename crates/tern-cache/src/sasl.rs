//! SASL for the binary protocol (`-S`) as memcached 1.6.18 does it with Cyrus SASL. The configuration is
//! what memcached points Cyrus at: `memcached.conf` in `SASL_CONF_PATH`, or else in `/etc/sasl` or
//! `/etc/sasl2` (its `mech_list` chooses and orders the mechanisms offered, its `sasldb_path` names the
//! user database, `/etc/sasldb2` by default). Passwords come from that database, the Berkeley DB file
//! `saslpasswd2` writes (users in the host's realm unless they name one, `user@realm`), or, when
//! `MEMCACHED_SASL_PWDB` is set, from the `user:password` file memcached built with `--enable-sasl-pwdb`
//! reads. Either is read again at each authentication, so a changed password takes effect at once.
//! Mechanisms: PLAIN and CRAM-MD5 (Cyrus offers more through its plugins; a `mech_list` naming others
//! offers only these two of them). Passwords are compared in constant time and never logged.

use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use subtle::ConstantTimeEq;
use tern_memcache_proto::sasl::{self as proto, Mechanism};

/// memcached's `MAX_ENTRY_LEN`: a line of its password file holds at most this many bytes, and a user and
/// password longer together than it allows (less 4) are refused without reading the file.
const MAX_ENTRY_LEN: usize = 256;

/// Where the passwords are.
#[derive(Clone, Debug)]
enum Passwords {
    /// `MEMCACHED_SASL_PWDB`: `user:password` lines.
    File(PathBuf),
    /// Cyrus's user database.
    Sasldb(PathBuf),
}

/// SASL as configured when the server started.
#[derive(Clone, Debug)]
pub struct Sasl {
    /// The mechanisms offered, in the order listed. Empty when `mech_list` names none tern implements:
    /// Cyrus then cannot make a connection's SASL context, and every SASL command fails.
    mechanisms: Vec<Mechanism>,
    passwords: Passwords,
    /// The realm of a user who names none, and the host in CRAM-MD5's challenge: the host's name, as
    /// memcached gives Cyrus.
    host: String,
}

/// The directories memcached has Cyrus look in for `memcached.conf`: `SASL_CONF_PATH` (directories
/// separated by `:`), or else the first of `/etc/sasl` and `/etc/sasl2` that holds one (a directory of
/// that name included), or else Cyrus's own default.
fn config_dirs(conf_path: Option<&str>) -> Vec<PathBuf> {
    if let Some(path) = conf_path {
        return path.split(':').map(PathBuf::from).collect();
    }
    for dir in ["/etc/sasl", "/etc/sasl2"] {
        let file = Path::new(dir).join("memcached.conf");
        if file.join("memcached.conf").exists() {
            return vec![file];
        }
        if file.exists() {
            return vec![dir.into()];
        }
    }
    vec!["/etc/sasl2".into(), "/usr/lib/sasl2".into()]
}

impl Sasl {
    /// SASL from the environment (`SASL_CONF_PATH`, `MEMCACHED_SASL_PWDB`) and the configuration file.
    pub fn from_environment() -> anyhow::Result<Sasl> {
        Sasl::new(
            std::env::var("SASL_CONF_PATH").ok().as_deref(),
            std::env::var_os("MEMCACHED_SASL_PWDB").map(Into::into),
        )
    }

    /// SASL with the configuration found as memcached finds it given `SASL_CONF_PATH` (`conf_path`), and
    /// the passwords in `password_file` (`MEMCACHED_SASL_PWDB`) if given, else in the configuration's user
    /// database. A file Cyrus would refuse stops the server, as memcached's "Error initializing sasl."
    pub fn new(conf_path: Option<&str>, password_file: Option<PathBuf>) -> anyhow::Result<Sasl> {
        let config = config_dirs(conf_path)
            .into_iter()
            .map(|dir| dir.join("memcached.conf"))
            .find(|file| file.is_file());
        let entries = match &config {
            Some(file) => {
                let text = std::fs::read_to_string(file).map_err(|e| {
                    anyhow::anyhow!("Error initializing sasl: {}: {e}", file.display())
                })?;
                proto::parse_config(&text).map_err(|e| {
                    anyhow::anyhow!("Error initializing sasl: {}: {e}", file.display())
                })?
            }
            None => Vec::new(),
        };
        let value = |key: &str| {
            entries
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let mechanisms = match value("mech_list") {
            Some(list) => {
                let (known, unknown) = proto::mech_list(list);
                if !unknown.is_empty() {
                    tracing::warn!(
                        "mech_list names {}: tern offers PLAIN and CRAM-MD5 only",
                        unknown.join(" ")
                    );
                }
                known
            }
            None => Mechanism::ALL.to_vec(),
        };
        for (key, default) in [("pwcheck_method", "auxprop"), ("auxprop_plugin", "sasldb")] {
            if let Some(other) = value(key).filter(|v| !v.eq_ignore_ascii_case(default)) {
                tracing::warn!("{key}: {other}: tern checks passwords against sasldb_path only");
            }
        }
        let passwords = match password_file {
            Some(file) => Passwords::File(file),
            None => Passwords::Sasldb(value("sasldb_path").unwrap_or("/etc/sasldb2").into()),
        };
        Ok(Sasl {
            mechanisms,
            passwords,
            host: host_name(),
        })
    }

    /// `SASL_LIST_MECHS`'s answer, `None` where Cyrus has no context to list them with.
    pub(crate) fn listed(&self) -> Option<Vec<u8>> {
        (!self.mechanisms.is_empty()).then(|| {
            let names: Vec<&str> = self.mechanisms.iter().map(|m| m.name()).collect();
            names.join(" ").into_bytes()
        })
    }

    /// The offered mechanism a client names.
    pub(crate) fn offered(&self, name: &[u8]) -> Option<Mechanism> {
        Mechanism::from_name(name).filter(|m| self.mechanisms.contains(m))
    }

    /// The password of an authentication id, if the user is known.
    fn password(&self, authid: &[u8]) -> Option<Vec<u8>> {
        match &self.passwords {
            Passwords::File(path) => {
                let file = std::fs::read(path).ok()?;
                password_file_entry(&file, authid).map(<[u8]>::to_vec)
            }
            Passwords::Sasldb(path) => {
                let file = std::fs::read(path).ok()?;
                let (user, realm) = proto::split_realm(authid, self.host.as_bytes());
                match proto::sasldb_get(&file, &proto::sasldb_key(user, realm)) {
                    Ok(password) => password,
                    Err(e) => {
                        tracing::warn!("{}: {e}", path.display());
                        None
                    }
                }
            }
        }
    }

    /// Whether PLAIN's message authenticates: the authorization id is empty or the user's own, and the
    /// password is the user's.
    pub(crate) fn plain(&self, message: &[u8]) -> bool {
        let Some(m) = proto::parse_plain(message) else {
            return false;
        };
        if m.authcid.is_empty() || (!m.authzid.is_empty() && m.authzid != m.authcid) {
            return false;
        }
        if matches!(self.passwords, Passwords::File(_))
            && m.authcid.len() + m.password.len() > MAX_ENTRY_LEN - 4
        {
            return false;
        }
        self.password(m.authcid)
            .is_some_and(|password| bool::from(password.ct_eq(m.password)))
    }

    /// A fresh CRAM-MD5 challenge.
    pub(crate) fn challenge(&self) -> Vec<u8> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        proto::cram_challenge(rand::random(), now, &self.host)
    }

    /// Whether CRAM-MD5's answer to `challenge` authenticates: what follows the user starts with the
    /// lowercase hex of HMAC-MD5 keyed with the user's password over the challenge (Cyrus compares 32
    /// bytes and ignores the rest).
    pub(crate) fn cram_md5(&self, challenge: &[u8], answer: &[u8]) -> bool {
        let Some((user, digest)) = proto::parse_cram_answer(answer) else {
            return false;
        };
        let Some(password) = self.password(user) else {
            return false;
        };
        let mut mac = Hmac::<md5::Md5>::new_from_slice(&password).expect("HMAC takes any key");
        mac.update(challenge);
        let expected = hex(&mac.finalize().into_bytes());
        digest.len() >= expected.len() && bool::from(digest[..expected.len()].ct_eq(&expected))
    }
}

fn hex(bytes: &[u8]) -> Vec<u8> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
        .collect()
}

/// The host's name (memcached's `my_sasl_hostname`), empty if the system will not say.
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let status = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if status != 0 {
        return String::new();
    }
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// A user's password in memcached's password file: the first line naming the user decides (at most
/// `MAX_ENTRY_LEN - 1` bytes of it are read, as memcached's `fgets`), and the password ends at the next
/// field, the line's end or a NUL.
fn password_file_entry<'f>(file: &'f [u8], user: &[u8]) -> Option<&'f [u8]> {
    for line in file.split(|&b| b == b'\n') {
        let line = &line[..line.len().min(MAX_ENTRY_LEN - 1)];
        let Some(rest) = line.strip_prefix(user).and_then(|r| r.strip_prefix(b":")) else {
            continue;
        };
        let end = rest
            .iter()
            .position(|&b| matches!(b, b':' | b'\r' | b'\0'))
            .unwrap_or(rest.len());
        return Some(&rest[..end]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sasl(passwords: Passwords, mechanisms: &[Mechanism]) -> Sasl {
        Sasl {
            mechanisms: mechanisms.to_vec(),
            passwords,
            host: "vm".into(),
        }
    }

    #[test]
    fn plain_and_cram_md5_are_checked_against_the_password_file() {
        let dir = tern_testkit::files::temp_dir("sasl-pwdb");
        let pwdb = dir.join("pwdb");
        std::fs::write(&pwdb, b"alice:secret\nbob:pw:extra\r\ncarol:\n").unwrap();
        let sasl = sasl(Passwords::File(pwdb), &Mechanism::ALL);
        let ok = |message: &[u8]| sasl.plain(message);
        assert!(ok(b"\0alice\0secret"));
        assert!(ok(b"alice\0alice\0secret"));
        assert!(ok(b"\0bob\0pw"));
        assert!(ok(b"\0carol\0"));
        assert!(!ok(b"\0alice\0secre"));
        assert!(!ok(b"\0alice\0secrets"));
        assert!(!ok(b"bob\0alice\0secret"), "another's authorization id");
        assert!(!ok(b"\0mallory\0secret"));
        assert!(!ok(b"\0alice"));
        // RFC 2195's example: the digest of this challenge keyed with "tanstaaftanstaaf".
        std::fs::write(dir.join("pwdb"), b"tim:tanstaaftanstaaf\n").unwrap();
        let challenge = b"<1896.697170952@postoffice.reston.mci.net>";
        assert!(sasl.cram_md5(challenge, b"tim b913a602c7eda7a495b4e6e7334d3890"));
        assert!(sasl.cram_md5(challenge, b"tim b913a602c7eda7a495b4e6e7334d3890zz"));
        assert!(!sasl.cram_md5(challenge, b"tim B913A602C7EDA7A495B4E6E7334D3890"));
        assert!(!sasl.cram_md5(challenge, b"tim b913a602c7eda7a495b4e6e7334d389"));
        assert!(!sasl.cram_md5(b"<other>", b"tim b913a602c7eda7a495b4e6e7334d3890"));
        assert!(!sasl.cram_md5(challenge, b"tom b913a602c7eda7a495b4e6e7334d3890"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_mechanisms_follow_the_configuration() {
        let none = Passwords::Sasldb("/nonexistent".into());
        let both = sasl(none.clone(), &[Mechanism::Plain, Mechanism::CramMd5]);
        assert_eq!(both.listed().as_deref(), Some(&b"PLAIN CRAM-MD5"[..]));
        assert_eq!(both.offered(b"cram-md5"), Some(Mechanism::CramMd5));
        let plain = sasl(none.clone(), &[Mechanism::Plain]);
        assert_eq!(plain.offered(b"CRAM-MD5"), None);
        assert_eq!(sasl(none, &[]).listed(), None);
        assert!(!plain.plain(b"\0alice\0secret"), "no database, no users");
    }
}
