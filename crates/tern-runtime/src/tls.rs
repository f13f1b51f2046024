//! TLS as a runtime capability: any service's TCP listeners can serve TLS (rustls, on the ring provider), with
//! a certificate chain and key, optional client-certificate verification against a CA file, a minimum
//! protocol version, a cipher-suite list, an optional session cache, and reloading of the certificate files
//! while serving (connections open keep the certificate they started with).
//!
//! A TLS connection is a `Stream` like a plain one (a `tern_tls::TlsSocket`), so the loop's data path is the
//! same: reads return plaintext, writes take plaintext. What differs is that a write may leave encrypted
//! bytes queued in the TLS session when the socket is full; the loop asks `has_pending_output` before it
//! calls a connection's output done, and flushes them when the socket is writable again.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use mio::net::TcpStream;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    ProducesTickets, ServerSessionMemoryCache, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::{RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite};
use tern_tls::TlsSocket;

/// Sessions the server-side cache holds when it is on.
const SESSION_CACHE_ENTRIES: usize = 1024;

/// How a private key file is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    #[default]
    Pem,
    Der,
}

/// Whether clients present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// None is asked for.
    #[default]
    None,
    /// One is asked for and verified if given; clients without one are served.
    Optional,
    /// Clients without a certificate that verifies are refused in the handshake.
    Required,
}

/// The oldest protocol version served. rustls implements TLS 1.2 and 1.3 only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsVersion {
    #[default]
    Tls12,
    Tls13,
}

/// What a TLS listener serves with.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// The server's certificate chain (PEM), leaf first.
    pub cert_chain: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    pub key_format: KeyFormat,
    /// CA certificates (PEM) client certificates are verified against.
    pub client_ca: Option<PathBuf>,
    pub client_auth: ClientAuth,
    pub min_version: TlsVersion,
    /// TLS 1.2 cipher suites allowed, by OpenSSL or IANA name, separated by `:` (OpenSSL's cipher-list
    /// syntax, without its keywords); `None` allows every suite rustls implements. TLS 1.3 suites are not
    /// affected, as in OpenSSL's cipher list.
    pub cipher_suites: Option<String>,
    /// Also keep sessions server-side (clients that do not take tickets resume too); resumption by
    /// stateless tickets is always on.
    pub session_cache: bool,
    /// Bytes of output (plaintext and records) one TLS connection may hold unsent; a write past it waits
    /// until the socket drains.
    pub write_buffer: usize,
}

/// Why certificates could not be (re)loaded or the settings used. The messages follow memcached's.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("Error loading the certificate chain: {path} : {reason}")]
    CertChain { path: String, reason: String },
    #[error("Error loading the key: {path} : {reason}")]
    Key { path: String, reason: String },
    #[error("Error loading the CA certificate: {path} : {reason}")]
    ClientCa { path: String, reason: String },
    #[error("Error setting the provided cipher(s): {0} (supported: {1})")]
    Ciphers(String, String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// Counters every connection of one [`Tls`] updates.
#[derive(Debug, Default)]
struct Counters {
    handshake_errors: Arc<AtomicU64>,
    new_sessions: AtomicU64,
}

/// A TLS server configuration shared by listeners and connections, cheap to clone. [`Tls::reload`] swaps in
/// the certificate files' current contents for connections accepted afterwards.
#[derive(Clone)]
pub struct Tls {
    inner: Arc<Inner>,
}

struct Inner {
    settings: TlsSettings,
    config: ArcSwap<ServerConfig>,
    /// Both kept across reloads, so clients resume their sessions after a certificate change.
    sessions: Option<Arc<CountedSessions>>,
    ticketer: Arc<dyn ProducesTickets>,
    counters: Arc<Counters>,
    reloaded_at: Mutex<Instant>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl Tls {
    /// Loads the certificate, key and CA files and checks the settings.
    pub fn new(settings: TlsSettings) -> Result<Tls, TlsError> {
        let counters = Arc::new(Counters::default());
        let sessions = settings.session_cache.then(|| {
            Arc::new(CountedSessions {
                cache: ServerSessionMemoryCache::new(SESSION_CACHE_ENTRIES),
                counters: counters.clone(),
            })
        });
        let ticketer =
            rustls::crypto::ring::Ticketer::new().map_err(|e| TlsError::Config(e.to_string()))?;
        let config = build_config(&settings, sessions.as_ref(), &ticketer)?;
        Ok(Tls {
            inner: Arc::new(Inner {
                settings,
                config: ArcSwap::from_pointee(config),
                sessions,
                ticketer,
                counters,
                reloaded_at: Mutex::new(Instant::now()),
            }),
        })
    }

    /// Reads the certificate, key and CA files again; connections accepted from now on use them. On an error
    /// nothing changes.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = build_config(
            &self.inner.settings,
            self.inner.sessions.as_ref(),
            &self.inner.ticketer,
        )?;
        self.inner.config.store(Arc::new(config));
        *self
            .inner
            .reloaded_at
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
        tracing::info!(
            "TLS: reloaded {} and {}",
            self.inner.settings.cert_chain.display(),
            self.inner.settings.key.display()
        );
        Ok(())
    }

    pub fn settings(&self) -> &TlsSettings {
        &self.inner.settings
    }

    /// Handshakes that failed on a protocol error (a client speaking plain text to a TLS port, a refused
    /// client certificate, no common version or cipher).
    pub fn handshake_errors(&self) -> u64 {
        self.inner.counters.handshake_errors.load(Ordering::Relaxed)
    }

    /// Sessions stored by the session cache (when it is on).
    pub fn new_sessions(&self) -> u64 {
        self.inner.counters.new_sessions.load(Ordering::Relaxed)
    }

    /// Time since the certificates were last loaded.
    pub fn since_reload(&self) -> Duration {
        self.inner
            .reloaded_at
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// Reloads whenever the certificate, key or CA file changes (their modification times, checked every
    /// `every`), until the returned handle is dropped. A reload that fails is logged and the certificates in
    /// use stay; it is tried again at the next change.
    pub fn watch(&self, every: Duration) -> io::Result<crate::background::Background> {
        let tls = self.clone();
        let stamps = move || {
            let s = &tls.inner.settings;
            [Some(&s.cert_chain), Some(&s.key), s.client_ca.as_ref()]
                .into_iter()
                .flatten()
                .map(|path| std::fs::metadata(path).and_then(|m| m.modified()).ok())
                .collect::<Vec<_>>()
        };
        let tls = self.clone();
        crate::background::Background::spawn("tern-tls-watch", true, move |stop| {
            let mut seen = stamps();
            while !crate::background::Background::stopping(stop) {
                std::thread::park_timeout(every);
                let now = stamps();
                if now != seen {
                    seen = now;
                    if let Err(e) = tls.reload() {
                        tracing::warn!(
                            "TLS: the certificate files changed but cannot be used ({e}); serving \
                             with the previous ones"
                        );
                    }
                }
            }
        })
    }

    /// Starts the server side of a TLS session on an accepted socket.
    pub(crate) fn accept(&self, sock: TcpStream) -> io::Result<TlsStream> {
        let mut session =
            ServerConnection::new(self.inner.config.load_full()).map_err(io::Error::other)?;
        session.set_buffer_limit(Some(self.inner.settings.write_buffer.max(1)));
        Ok(TlsSocket::new(
            sock,
            session,
            Some(self.inner.counters.handshake_errors.clone()),
        ))
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn build_config(
    settings: &TlsSettings,
    sessions: Option<&Arc<CountedSessions>>,
    ticketer: &Arc<dyn ProducesTickets>,
) -> Result<ServerConfig, TlsError> {
    let chain_error = |reason: String| TlsError::CertChain {
        path: display(&settings.cert_chain),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(&settings.cert_chain)
        .map_err(|e| chain_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| chain_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(chain_error("no certificate in the file".into()));
    }
    let key_error = |reason: String| TlsError::Key {
        path: display(&settings.key),
        reason,
    };
    let key = match settings.key_format {
        KeyFormat::Pem => {
            PrivateKeyDer::from_pem_file(&settings.key).map_err(|e| key_error(e.to_string()))?
        }
        KeyFormat::Der => {
            let der = std::fs::read(&settings.key).map_err(|e| key_error(e.to_string()))?;
            PrivateKeyDer::try_from(der).map_err(|e| key_error(e.to_string()))?
        }
    };

    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(list) = &settings.cipher_suites {
        provider.cipher_suites = choose_suites(&provider, list)?;
    }
    let provider = Arc::new(provider);
    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match (settings.client_auth, &settings.client_ca) {
        (ClientAuth::None, _) => builder.with_no_client_auth(),
        // No CA: as OpenSSL verifying against an empty trust store, a certificate is asked for and none
        // can verify (memcached starts so; with `ssl_verify_mode=1` clients without one are served).
        (auth, None) => builder.with_client_cert_verifier(Arc::new(NoTrustedIssuer {
            mandatory: auth == ClientAuth::Required,
            provider: provider.clone(),
        })),
        (auth, Some(path)) => {
            let ca_error = |reason: String| TlsError::ClientCa {
                path: display(path),
                reason,
            };
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(path).map_err(|e| ca_error(e.to_string()))? {
                roots
                    .add(cert.map_err(|e| ca_error(e.to_string()))?)
                    .map_err(|e| ca_error(e.to_string()))?;
            }
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let verifier = match auth {
                ClientAuth::Optional => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder
                .with_client_cert_verifier(verifier.build().map_err(|e| ca_error(e.to_string()))?)
        }
    };
    // Not `with_single_cert`: its key check parses the certificate with webpki, which refuses X.509 v1
    // certificates that OpenSSL, and so memcached, serves. The key is checked against the certificate's
    // public key here instead.
    let signing_key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_error(e.to_string()))?;
    let public_key = signing_key.public_key();
    match (subject_public_key_info(&certs[0]), &public_key) {
        (Some(in_cert), Some(of_key)) if in_cert == of_key.as_ref() => {}
        (None, _) => return Err(chain_error("not an X.509 certificate".into())),
        // OpenSSL's words, where memcached loads the key.
        _ => return Err(key_error("key values mismatch".into())),
    }
    let certified = Arc::new(rustls::sign::CertifiedKey::new(certs, signing_key));
    let mut config = builder.with_cert_resolver(Arc::new(OneCertificate(certified)));
    // Stateless resumption tickets, always (OpenSSL's default, and so memcached's): a returning client skips
    // the full handshake whether or not the server-side cache is on.
    config.ticketer = ticketer.clone();
    config.session_storage = match sessions {
        Some(sessions) => sessions.clone(),
        None => Arc::new(rustls::server::NoServerSessionStorage {}),
    };
    Ok(config)
}

/// The server's one certificate and key, for every client.
#[derive(Debug)]
struct OneCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCertificate {
    fn resolve(
        &self,
        _hello: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The DER of an X.509 certificate's `subjectPublicKeyInfo`, of any version (v1 has no `[0]` version
/// field). Written here because webpki, the parser rustls has, takes v3 certificates only; this walks
/// the few DER elements before the key.
fn subject_public_key_info(cert: &[u8]) -> Option<&[u8]> {
    /// One DER element at the start of `input`: its tag, its contents, and the whole element.
    fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (usize::from(first), rest)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || rest.len() < count {
                return None;
            }
            let len = rest[..count]
                .iter()
                .fold(0usize, |n, &b| (n << 8) | usize::from(b));
            (len, &rest[count..])
        };
        let header = input.len() - rest.len();
        let contents = rest.get(..len)?;
        Some((tag, contents, &input[..header + len]))
    }
    const SEQUENCE: u8 = 0x30;
    let (SEQUENCE, certificate, _) = element(cert)? else {
        return None;
    };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else {
        return None;
    };
    // [0] version (absent in v1), then serialNumber, signature, issuer, validity, subject.
    if tbs.first() == Some(&0xa0) {
        tbs = &tbs[element(tbs)?.2.len()..];
    }
    for _ in 0..5 {
        tbs = &tbs[element(tbs)?.2.len()..];
    }
    match element(tbs)? {
        (SEQUENCE, _, whole) => Some(whole),
        _ => None,
    }
}

/// Client certificates verified against no trusted issuer: asked for (required or not), never accepted.
/// rustls's own verifier needs at least one root; OpenSSL, and so memcached, starts without any.
#[derive(Debug)]
struct NoTrustedIssuer {
    mandatory: bool,
    provider: Arc<CryptoProvider>,
}

impl rustls::server::danger::ClientCertVerifier for NoTrustedIssuer {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[rustls::DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::server::danger::ClientCertVerified, rustls::Error> {
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        ))
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// OpenSSL's names of the TLS 1.2 suites rustls implements, with the IANA names rustls uses.
const OPENSSL_NAMES: [(&str, &str); 6] = [
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// The provider's TLS 1.3 suites and the TLS 1.2 ones `list` names, in the list's order of preference.
/// Why not OpenSSL's full cipher-string language (`HIGH:!aNULL`...): its keywords select among suites rustls
/// does not have; a name tern cannot honour is refused rather than ignored.
fn choose_suites(
    provider: &CryptoProvider,
    list: &str,
) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let iana = |suite: &SupportedCipherSuite| suite.suite().as_str().unwrap_or("").to_owned();
    let mut chosen: Vec<SupportedCipherSuite> = provider
        .cipher_suites
        .iter()
        .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
        .copied()
        .collect();
    let supported = || {
        OPENSSL_NAMES
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(":")
    };
    for name in list
        .split([':', ',', ' '])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let wanted = OPENSSL_NAMES
            .iter()
            .find(|(openssl, _)| openssl.eq_ignore_ascii_case(name))
            .map_or(name, |(_, iana)| iana);
        let suite = provider
            .cipher_suites
            .iter()
            .find(|s| {
                matches!(s, SupportedCipherSuite::Tls12(_)) && iana(s).eq_ignore_ascii_case(wanted)
            })
            .ok_or_else(|| TlsError::Ciphers(name.to_owned(), supported()))?;
        if !chosen.contains(suite) {
            chosen.push(*suite);
        }
    }
    Ok(chosen)
}

/// The session cache, counting the sessions it stores (memcached's `ssl_new_sessions`).
#[derive(Debug)]
struct CountedSessions {
    cache: Arc<ServerSessionMemoryCache>,
    counters: Arc<Counters>,
}

impl StoresServerSessions for CountedSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let stored = self.cache.put(key, value);
        if stored {
            self.counters.new_sessions.fetch_add(1, Ordering::Relaxed);
        }
        stored
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.cache.take(key)
    }
    fn can_cache(&self) -> bool {
        true
    }
}

/// A server-side TLS session over an accepted socket.
pub(crate) type TlsStream = TlsSocket<TcpStream, ServerConnection>;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One P-256 key in an X.509 v1 certificate and in a v3 one, and alone (made with `openssl x509 -req
    /// -signkey` and `openssl req -x509`).
    const V1: &str = "-----BEGIN CERTIFICATE-----
MIIBFDCBuwIUVZ8iUicEXJI9WdTfnreJMd1zL1gwCgYIKoZIzj0EAwIwDTELMAkG
A1UEAwwCdjEwHhcNMjYxMTI3MTQyNTU3WhcNMzYxMTI0MTQyNTU3WjANMQswCQYD
VQQDDAJ2MTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABC5k4eXRQeZ6a2BSkCHr
2POapRFZSOxy7f83NIjZhGcfjIyqu19KpJv3JSbIbJIuPKfegg1U3ZcxyNyW14Ij
dUAwCgYIKoZIzj0EAwIDSAAwRQIgXl8iIY9uo6Nh1UDhDCRW+vwUPlaz8JC6UW68
21ZhAjUCIQCWS7ckcxJ7pcb+2wG0e6i8FpwehnjBOeE69egGwe6vJA==
-----END CERTIFICATE-----";
    const V3: &str = "-----BEGIN CERTIFICATE-----
MIIBbzCCARWgAwIBAgIURJ91Qg9TYpeLTiNHUvd5UN8X8+4wCgYIKoZIzj0EAwIw
DTELMAkGA1UEAwwCdjMwHhcNMjYxMTI3MTQyNTU3WhcNMzYxMTI0MTQyNTU3WjAN
MQswCQYDVQQDDAJ2MzBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABC5k4eXRQeZ6
a2BSkCHr2POapRFZSOxy7f83NIjZhGcfjIyqu19KpJv3JSbIbJIuPKfegg1U3Zcx
yNyW14IjdUCjUzBRMB0GA1UdDgQWBBRFDi7CvFrAZj8nRxlzlEAb0eG8CjAfBgNV
HSMEGDAWgBRFDi7CvFrAZj8nRxlzlEAb0eG8CjAPBgNVHRMBAf8EBTADAQH/MAoG
CCqGSM49BAMCA0gAMEUCIQDw6pZHLJcs4Wg4mNCK68rf0UwixvZEAcQcT6/JWDDg
6AIgQ2l9Qxkp1UCByHPVPMUStzE715ixbYvTfQT2LKqB5/M=
-----END CERTIFICATE-----";
    const KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAELmTh5dFB5nprYFKQIevY85qlEVlI
7HLt/zc0iNmEZx+MjKq7X0qkm/clJshski48p96CDVTdlzHI3JbXgiN1QA==
-----END PUBLIC KEY-----";

    #[test]
    fn the_public_key_is_found_in_v1_and_v3_certificates() {
        let key =
            rustls::pki_types::SubjectPublicKeyInfoDer::from_pem_slice(KEY.as_bytes()).unwrap();
        for pem in [V1, V3] {
            let cert = CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
            assert_eq!(subject_public_key_info(&cert), Some(key.as_ref()));
            // Cut anywhere, the certificate yields nothing (and no panic).
            for end in 0..cert.len() - 1 {
                assert_eq!(subject_public_key_info(&cert[..end]), None, "{end}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_without_panicking(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = subject_public_key_info(&bytes);
        }
    }
}
