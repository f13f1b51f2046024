//! Certificates for TLS tests, made by the `openssl` command (a test CA, a server certificate for
//! `localhost`/127.0.0.1 and a client certificate it signs, and a second server certificate to swap in),
//! in a directory of their own.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files of one test PKI.
pub struct TlsFiles {
    pub dir: PathBuf,
    pub ca_cert: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Another certificate and key for the same names, with organizational unit `Rotated`: what a reload
    /// swaps in.
    pub rotated_cert: PathBuf,
    pub rotated_key: PathBuf,
    /// An X.509 v1 certificate (no extensions) for `localhost`, and its key.
    pub server_v1_cert: PathBuf,
    pub server_v1_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs (scripts/install-test-deps.sh installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A key and a certificate for `subject` signed by the CA in `dir`, with `ext` (an extensions section).
/// A key and a certificate for it signed by the test CA: X.509 v3 with the extensions `ext`, or v1 without
/// `ext` (OpenSSL serves v1 certificates, so memcached does).
fn signed(dir: &Path, name: &str, subject: &str, ext: Option<&str>) {
    let (key, csr, cert, extfile) = (
        format!("{name}_key.pem"),
        format!("{name}.csr"),
        format!("{name}_crt.pem"),
        format!("{name}.ext"),
    );
    if let Some(ext) = ext {
        std::fs::write(dir.join(&extfile), ext).unwrap();
    }
    openssl(
        dir,
        &[
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", &key, "-subj", subject, "-out", &csr,
        ],
    );
    let mut args = vec![
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca_crt.pem",
        "-CAkey",
        "ca_key.pem",
        "-CAcreateserial",
        "-days",
        "2",
        "-sha256",
        "-out",
        &cert,
    ];
    if ext.is_some() {
        args.extend(["-extfile", &extfile]);
    }
    openssl(dir, &args);
}

/// Makes a fresh test PKI in `dir` (created; an earlier one there is replaced).
pub fn make_certificates(dir: &Path) -> TlsFiles {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca_key.pem",
            "-subj",
            "/O=tern tests/CN=tern test CA",
            "-days",
            "2",
            "-sha256",
            "-out",
            "ca_crt.pem",
        ],
    );
    let server_ext = "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n\
                      extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n";
    signed(
        dir,
        "server",
        "/O=tern tests/OU=First/CN=localhost",
        Some(server_ext),
    );
    signed(
        dir,
        "rotated",
        "/O=tern tests/OU=Rotated/CN=localhost",
        Some(server_ext),
    );
    signed(dir, "server_v1", "/O=tern tests/OU=Old/CN=localhost", None);
    signed(
        dir,
        "client",
        "/O=tern tests/CN=tern test client",
        Some("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"),
    );
    TlsFiles {
        ca_cert: dir.join("ca_crt.pem"),
        server_cert: dir.join("server_crt.pem"),
        server_key: dir.join("server_key.pem"),
        rotated_cert: dir.join("rotated_crt.pem"),
        rotated_key: dir.join("rotated_key.pem"),
        server_v1_cert: dir.join("server_v1_crt.pem"),
        server_v1_key: dir.join("server_v1_key.pem"),
        client_cert: dir.join("client_crt.pem"),
        client_key: dir.join("client_key.pem"),
        dir: dir.to_owned(),
    }
}
