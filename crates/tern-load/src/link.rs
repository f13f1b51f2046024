//! A load connection's byte stream: plain TCP, or TLS over it (`--tls`, rustls), with the handshake done
//! while connecting so that a run measures requests, not handshakes.

use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tern_tls::TlsSocket;

use crate::config::TlsOptions;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What every TLS connection of a thread is made with.
pub(crate) struct TlsConnector {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
}

impl TlsConnector {
    pub(crate) fn new(options: &TlsOptions, server: SocketAddr) -> anyhow::Result<TlsConnector> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .context("TLS versions")?;
        let config = match &options.ca {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_file_iter(path)
                    .with_context(|| format!("--tls-ca {}", path.display()))?
                {
                    roots
                        .add(cert.with_context(|| format!("--tls-ca {}", path.display()))?)
                        .with_context(|| format!("--tls-ca {}", path.display()))?;
                }
                builder.with_root_certificates(roots).with_no_client_auth()
            }
            // As wrk and memtier do by default: the handshake is real, the certificate chain is not checked.
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth(),
        };
        let name = match &options.server_name {
            Some(name) => ServerName::try_from(name.clone())
                .with_context(|| format!("--tls-server-name {name}"))?,
            None => ServerName::IpAddress(server.ip().into()),
        };
        Ok(TlsConnector {
            config: Arc::new(config),
            name,
        })
    }
}

/// A connection's stream.
pub(crate) enum Link {
    Plain(TcpStream),
    Tls(Box<TlsSocket<TcpStream, ClientConnection>>),
}

/// Connects (and, with `tls`, shakes hands) within a bounded time; the stream is non-blocking after.
pub(crate) fn connect(addr: SocketAddr, tls: Option<&TlsConnector>) -> io::Result<Link> {
    let mut stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
    stream.set_nodelay(true)?;
    let link = match tls {
        None => Link::Plain(stream),
        Some(tls) => {
            let mut session = ClientConnection::new(tls.config.clone(), tls.name.clone())
                .map_err(io::Error::other)?;
            stream.set_read_timeout(Some(CONNECT_TIMEOUT))?;
            stream.set_write_timeout(Some(CONNECT_TIMEOUT))?;
            while session.is_handshaking() {
                session.complete_io(&mut stream)?;
            }
            stream.set_read_timeout(None)?;
            stream.set_write_timeout(None)?;
            Link::Tls(Box::new(TlsSocket::new(stream, session, None)))
        }
    };
    match &link {
        Link::Plain(s) => s.set_nonblocking(true)?,
        Link::Tls(s) => s.sock.set_nonblocking(true)?,
    }
    Ok(link)
}

impl Link {
    pub(crate) fn as_raw_fd(&self) -> RawFd {
        match self {
            Link::Plain(s) => s.as_raw_fd(),
            Link::Tls(s) => s.sock.as_raw_fd(),
        }
    }

    /// Sends records a TLS session still holds; Ok(true) when some remain (the socket is full).
    pub(crate) fn flush_pending(&mut self) -> io::Result<bool> {
        match self {
            Link::Plain(_) => Ok(false),
            Link::Tls(s) => match s.flush_records() {
                Ok(()) => Ok(false),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
                Err(e) => Err(e),
            },
        }
    }

    /// Whether a read that filled its buffer may have left plaintext inside the stream, where socket
    /// readiness will not announce it (TLS decrypts whole records).
    pub(crate) fn holds_input(&self) -> bool {
        matches!(self, Link::Tls(_))
    }
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(buf),
            Link::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(buf),
            Link::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write_vectored(bufs),
            Link::Tls(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Accepts any server certificate, still checking the handshake's signatures with it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
