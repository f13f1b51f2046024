//! Apache Thrift's own implementation, as the other side of a wire-compatibility test: Python code generated
//! from one of the repository's IDL files by Debian's `thrift` compiler, run with Debian's Python and its
//! `python3-thrift` library.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The Python that has Debian's `thrift` package (a pyenv `python3` first on the PATH may not).
pub const PYTHON: &str = "/usr/bin/python3";

/// Python modules generated from an IDL file, ready to import.
pub struct GeneratedPython {
    pub dir: PathBuf,
}

/// The workspace's `idl/<name>` file.
pub fn idl(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../idl")
        .join(name)
}

/// Whether [`PYTHON`] can import Apache Thrift's library. A test that needs it says so and passes on a
/// developer's machine without it; under CI a missing one is a failure.
pub fn python_has_thrift() -> bool {
    if !crate::process::have(PYTHON) {
        return false;
    }
    let has_library = Command::new(PYTHON)
        .args(["-c", "import thrift"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_library {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3-thrift is missing in CI"
        );
        eprintln!("SKIPPED: Debian's python3-thrift is not installed (scripts/install-test-deps.sh installs it)");
    }
    has_library
}

/// Runs `script` with [`PYTHON`], `args` as `sys.argv[1:]` and `path` importable; panics with its standard
/// error when it fails.
pub fn run_python(script: &str, args: &[&str], path: Option<&Path>) -> Output {
    let mut command = Command::new(PYTHON);
    command
        .arg("-c")
        .arg(script)
        .args(args)
        .env("PYTHONIOENCODING", "utf-8");
    if let Some(path) = path {
        command.env("PYTHONPATH", path);
    }
    let output = command.output().expect("running python3");
    assert!(
        output.status.success(),
        "the Python script failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Generates Python for `idl` into a temporary directory. `None` (after saying so) when the compiler or
/// the Python library is missing on a developer's machine; under CI that is a failure.
pub fn generate_python(idl: &Path) -> Option<GeneratedPython> {
    if !crate::process::have("thrift") || !python_has_thrift() {
        return None;
    }
    let stem = idl.file_stem().and_then(|s| s.to_str()).unwrap_or("idl");
    let dir = crate::files::temp_dir(&format!("thrift-py-{stem}"));
    let status = Command::new("thrift")
        .args(["--gen", "py", "-out"])
        .arg(&dir)
        .arg(idl)
        .status()
        .expect("running thrift");
    assert!(status.success(), "thrift --gen py {} failed", idl.display());
    Some(GeneratedPython { dir })
}

impl GeneratedPython {
    /// Runs `script` with the generated modules importable and `args` as `sys.argv[1:]`; panics with its
    /// standard error when it fails.
    pub fn run(&self, script: &str, args: &[&str]) -> Output {
        run_python(script, args, Some(&self.dir))
    }
}
