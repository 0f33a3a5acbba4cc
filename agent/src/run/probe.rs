//! The Python probe shipped inside the agent binary, written to a private folder for
//! each run and put first on the child's PYTHONPATH.
//!
//! `agent/python/gpumem_probe/__init__.py` is the probe; `agent/python/sitecustomize.py`
//! chains to the program's own sitecustomize and arms the probe, which stays idle
//! until `torch` is imported. Neither imports torch.
//!
//! Where the folder lives is a security boundary: every Python the command starts
//! imports whatever `sitecustomize.py` sits first on its PYTHONPATH, and a process that
//! outlives the run (a `nohup` job, a worker pool, a daemon) keeps that PYTHONPATH after
//! the folder is gone. So the folder must be a path that no other user can create,
//! replace or write into — before, during and after the run. It is made inside a
//! per-user base folder ([`crate::private::private_base`]): `$XDG_RUNTIME_DIR/gpumem` when the login
//! session has a private runtime folder, else `{temp}/gpumem-{uid}`; the base must be a
//! real folder (not a link) owned by the user with mode 0700, and every folder above it
//! must be owned by root or the user and writable by no one else unless sticky (as
//! `/tmp` is: others may add entries there but not rename or remove the user's). Only
//! the user can then recreate the run's folder once it is removed. Folders are made
//! 0700 and files 0600 explicitly, whatever the umask.
//!
//! Each run's folder is named `run-{agent pid}-{random}`; one left behind by an agent
//! that was killed (SIGKILL cannot be caught) is removed by the next run, once no
//! process of that pid is alive ([`crate::private::sweep_leftovers`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

use crate::private::{self, PrivateDir};

/// The probe package's source.
pub const PROBE_SOURCE: &str = include_str!("../../python/gpumem_probe/__init__.py");
/// The chaining sitecustomize.
pub const SITECUSTOMIZE_SOURCE: &str = include_str!("../../python/sitecustomize.py");

/// Environment variable naming the probe channel's socket.
pub const ENV_SOCKET: &str = "GPUMEM_PROBE_SOCKET";
/// Environment variable with the number of steps to instrument.
pub const ENV_STEPS: &str = "GPUMEM_PROBE_STEPS";

/// Mode of every file made here (the socket included).
pub const FILE_MODE: u32 = private::FILE_MODE;
/// Each run's folder inside the base: `run-{pid}-{random}`.
const RUN_KIND: &str = "run";
/// Longest socket path a unix socket accepts (`sun_path` is 108 bytes, NUL included).
const MAX_SOCKET_PATH: usize = 107;

/// The base folder for this process's environment (`XDG_RUNTIME_DIR`, `TMPDIR`).
pub fn base_from_env() -> Result<PathBuf> {
    private::base_from_env()
}

/// One run's private folder: the probe, the sitecustomize and the socket; removed on
/// drop.
#[derive(Debug)]
pub struct ProbeDir {
    dir: PrivateDir,
}

impl ProbeDir {
    /// A fresh folder in `base` (which [`private::private_base`] checked), the probe
    /// written in.
    pub fn create(base: &Path) -> Result<ProbeDir> {
        let dir = ProbeDir {
            dir: PrivateDir::create(base, RUN_KIND)?,
        };
        if dir.socket().as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "the probe's socket path {} is longer than a unix socket allows ({MAX_SOCKET_PATH} bytes): set XDG_RUNTIME_DIR or TMPDIR to a shorter folder",
                dir.socket().display()
            );
        }
        write_probe(dir.path())?;
        Ok(dir)
    }

    /// The folder (first on the child's PYTHONPATH).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Where the channel listens.
    pub fn socket(&self) -> PathBuf {
        self.path().join("probe.sock")
    }
}

/// Writes the probe under `dir` (which becomes the first PYTHONPATH entry): folders
/// 0700, files 0600.
pub fn write_probe(dir: &Path) -> Result<()> {
    let package = dir.join("gpumem_probe");
    private::make_subfolder(&package)?;
    private::write_new(&package.join("__init__.py"), PROBE_SOURCE.as_bytes())?;
    // The allocator history's converter (`run --memory-history`), the trace's own.
    private::write_new(
        &package.join("history.py"),
        crate::trace::python::HISTORY_SOURCE.as_bytes(),
    )?;
    private::write_new(
        &dir.join("sitecustomize.py"),
        SITECUSTOMIZE_SOURCE.as_bytes(),
    )?;
    Ok(())
}

/// `dir` followed by the existing PYTHONPATH, if any.
pub fn python_path(dir: &Path, existing: Option<OsString>) -> OsString {
    let mut value = dir.as_os_str().to_owned();
    if let Some(rest) = existing.filter(|r| !r.is_empty()) {
        value.push(":");
        value.push(rest);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::private::private_base;
    use std::fs::Permissions;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    #[test]
    fn the_probe_is_written_and_put_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_probe(dir.path()).expect("write");
        assert!(dir.path().join("gpumem_probe/__init__.py").is_file());
        assert!(dir.path().join("gpumem_probe/history.py").is_file());
        let sc = std::fs::read_to_string(dir.path().join("sitecustomize.py")).expect("read");
        assert!(sc.contains("_activate_from_env"));
        let p = python_path(dir.path(), Some("/a:/b".into()));
        assert_eq!(p, OsString::from(format!("{}:/a:/b", dir.path().display())));
        assert_eq!(
            python_path(dir.path(), Some("".into())),
            dir.path().as_os_str()
        );
        // The probe speaks the version this agent reads.
        assert!(PROBE_SOURCE.contains(&format!(
            "PROTOCOL_VERSION = {}",
            super::super::messages::PROTOCOL_VERSION
        )));
    }

    #[test]
    fn folders_are_0700_and_files_0600_whatever_the_base_mode() {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = private_base(None, temp.path()).expect("base");
        assert_eq!(mode(&base), 0o700);
        let dir = ProbeDir::create(&base).expect("probe dir");
        assert_eq!(mode(dir.path()), 0o700);
        assert_eq!(mode(&dir.path().join("gpumem_probe")), 0o700);
        assert_eq!(mode(&dir.path().join("sitecustomize.py")), 0o600);
        assert_eq!(mode(&dir.path().join("gpumem_probe/__init__.py")), 0o600);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists(), "removed on drop");
        // A base of ours left with a loose mode is tightened.
        std::fs::set_permissions(&base, Permissions::from_mode(0o777)).expect("chmod");
        assert_eq!(mode(&private_base(None, temp.path()).expect("base")), 0o700);
    }
}
