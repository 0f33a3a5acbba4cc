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
//! per-user base folder ([`private_base`]): `$XDG_RUNTIME_DIR/gpumem` when the login
//! session has a private runtime folder, else `{temp}/gpumem-{uid}`; the base must be a
//! real folder (not a link) owned by the user with mode 0700, and every folder above it
//! must be owned by root or the user and writable by no one else unless sticky (as
//! `/tmp` is: others may add entries there but not rename or remove the user's). Only
//! the user can then recreate the run's folder once it is removed. Folders are made
//! 0700 and files 0600 explicitly, whatever the umask.
//!
//! Each run's folder is named `run-{agent pid}-{random}`; one left behind by an agent
//! that was killed (SIGKILL cannot be caught) is removed by the next run, once no
//! process of that pid is alive ([`sweep_leftovers`]).

use std::ffi::OsString;
use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::child::{our_uid, pid_alive};

/// The probe package's source.
pub const PROBE_SOURCE: &str = include_str!("../../python/gpumem_probe/__init__.py");
/// The chaining sitecustomize.
pub const SITECUSTOMIZE_SOURCE: &str = include_str!("../../python/sitecustomize.py");

/// Environment variable naming the probe channel's socket.
pub const ENV_SOCKET: &str = "GPUMEM_PROBE_SOCKET";
/// Environment variable with the number of steps to instrument.
pub const ENV_STEPS: &str = "GPUMEM_PROBE_STEPS";

/// Mode of every folder made here.
const DIR_MODE: u32 = 0o700;
/// Mode of every file made here (the socket included).
pub const FILE_MODE: u32 = 0o600;
/// Prefix of each run's folder inside the base.
const RUN_PREFIX: &str = "run-";
/// Longest socket path a unix socket accepts (`sun_path` is 108 bytes, NUL included).
const MAX_SOCKET_PATH: usize = 107;

/// Refuses `dir` unless it is a real folder (not a link) owned by us, with no access
/// for group or others.
fn check_private(dir: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.file_type().is_dir() {
        bail!(
            "{} is not a folder (a link or a file): refusing to put the probe there",
            dir.display()
        );
    }
    if meta.uid() != our_uid() {
        bail!(
            "{} belongs to uid {}, not to you (uid {}): another user may have made it; remove it, or set XDG_RUNTIME_DIR to a private folder",
            dir.display(),
            meta.uid(),
            our_uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        bail!(
            "{} has mode {:o}: others may use it",
            dir.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Refuses `dir` when a user other than root or us could rename or replace it: every
/// folder from its parent up must be owned by root or us and writable by no one else,
/// unless sticky.
fn check_ancestors(dir: &Path) -> Result<()> {
    let me = our_uid();
    for ancestor in dir.ancestors().skip(1) {
        if ancestor.as_os_str().is_empty() {
            continue;
        }
        let meta = std::fs::metadata(ancestor)
            .with_context(|| format!("reading {}", ancestor.display()))?;
        let sticky = meta.mode() & 0o1000 != 0;
        if meta.uid() != 0 && meta.uid() != me {
            bail!(
                "{} belongs to uid {}: another user could replace what is inside",
                ancestor.display(),
                meta.uid()
            );
        }
        if meta.mode() & 0o022 != 0 && !sticky {
            bail!(
                "{} is writable by others (mode {:o}) and not sticky: another user could replace what is inside",
                ancestor.display(),
                meta.mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// Makes `dir` (mode 0700 whatever the umask) unless it exists, then checks it is ours
/// and private; a folder of ours with a looser mode is tightened first.
fn private_folder(dir: &Path) -> Result<()> {
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
            .with_context(|| format!("setting the mode of {}", dir.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)
                .with_context(|| format!("reading {}", dir.display()))?;
            if meta.file_type().is_dir() && meta.uid() == our_uid() && meta.mode() & 0o077 != 0 {
                std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
                    .with_context(|| format!("setting the mode of {}", dir.display()))?;
            }
        }
        Err(e) => return Err(e).with_context(|| format!("creating {}", dir.display())),
    }
    check_private(dir)
}

/// The per-user base folder the run folders are made in (see the module's words):
/// `runtime` (`$XDG_RUNTIME_DIR`) when it is a private folder of ours, else `temp`.
pub fn private_base(runtime: Option<&Path>, temp: &Path) -> Result<PathBuf> {
    if let Some(rt) = runtime.filter(|p| p.is_absolute())
        && check_private(rt).is_ok()
        && check_ancestors(rt).is_ok()
    {
        let base = rt.join("gpumem");
        private_folder(&base)?;
        return Ok(base);
    }
    let temp = temp
        .canonicalize()
        .with_context(|| format!("reading the temporary folder {}", temp.display()))?;
    let base = temp.join(format!("gpumem-{}", our_uid()));
    check_ancestors(&base)?;
    private_folder(&base)?;
    Ok(base)
}

/// The base folder for this process's environment (`XDG_RUNTIME_DIR`, `TMPDIR`).
pub fn base_from_env() -> Result<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    private_base(runtime.as_deref(), &std::env::temp_dir())
        .context("finding a private folder for the probe")
}

/// Removes run folders of `base` whose agent is no longer alive (one killed by SIGKILL
/// left its folder behind). Returns how many were removed; errors are skipped.
pub fn sweep_leftovers(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUN_PREFIX))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if i32::try_from(std::process::id()).is_ok_and(|me| me == pid) || pid_alive(pid) {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// One run's private folder: the probe, the sitecustomize and the socket; removed on
/// drop.
#[derive(Debug)]
pub struct ProbeDir {
    path: PathBuf,
}

impl ProbeDir {
    /// A fresh folder in `base` (which [`private_base`] checked), the probe written in.
    pub fn create(base: &Path) -> Result<ProbeDir> {
        sweep_leftovers(base);
        let pid = std::process::id();
        let made = tempfile::Builder::new()
            .prefix(&format!("{RUN_PREFIX}{pid}-"))
            .permissions(Permissions::from_mode(DIR_MODE))
            .tempdir_in(base)
            .context("creating the probe folder")?;
        // Ours from here on: removed by our Drop, not tempfile's.
        let dir = ProbeDir { path: made.keep() };
        std::fs::set_permissions(&dir.path, Permissions::from_mode(DIR_MODE))
            .context("setting the probe folder's mode")?;
        check_private(&dir.path)?;
        if dir.socket().as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "the probe's socket path {} is longer than a unix socket allows ({MAX_SOCKET_PATH} bytes): set XDG_RUNTIME_DIR or TMPDIR to a shorter folder",
                dir.socket().display()
            );
        }
        write_probe(&dir.path)?;
        Ok(dir)
    }

    /// The folder (first on the child's PYTHONPATH).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the channel listens.
    pub fn socket(&self) -> PathBuf {
        self.path.join("probe.sock")
    }
}

impl Drop for ProbeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Writes a new file with mode 0600 (whatever the umask); refuses an existing one.
fn write_private(path: &Path, text: &str) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.set_permissions(Permissions::from_mode(FILE_MODE))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes the probe under `dir` (which becomes the first PYTHONPATH entry): folders
/// 0700, files 0600.
pub fn write_probe(dir: &Path) -> Result<()> {
    let package = dir.join("gpumem_probe");
    DirBuilder::new()
        .mode(DIR_MODE)
        .create(&package)
        .context("creating the probe folder")?;
    std::fs::set_permissions(&package, Permissions::from_mode(DIR_MODE))
        .context("setting the probe folder's mode")?;
    write_private(&package.join("__init__.py"), PROBE_SOURCE)?;
    write_private(&dir.join("sitecustomize.py"), SITECUSTOMIZE_SOURCE)?;
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

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    #[test]
    fn the_probe_is_written_and_put_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_probe(dir.path()).expect("write");
        assert!(dir.path().join("gpumem_probe/__init__.py").is_file());
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

    #[test]
    fn a_base_that_is_a_link_or_under_a_writable_folder_is_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let link = temp.path().join(format!("gpumem-{}", our_uid()));
        std::os::unix::fs::symlink(elsewhere.path(), &link).expect("symlink");
        let e = private_base(None, temp.path()).expect_err("a link is refused");
        assert!(format!("{e:#}").contains("not a folder"), "{e:#}");

        // A world-writable, non-sticky folder above: anyone could swap the base.
        let open = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(open.path(), Permissions::from_mode(0o777)).expect("chmod");
        let e = private_base(None, open.path()).expect_err("refused");
        assert!(format!("{e:#}").contains("writable by others"), "{e:#}");
        // Sticky (as /tmp): others cannot rename what is ours.
        std::fs::set_permissions(open.path(), Permissions::from_mode(0o1777)).expect("chmod");
        private_base(None, open.path()).expect("sticky is fine");
    }

    #[test]
    fn the_runtime_folder_is_preferred_when_private() {
        let runtime = tempfile::tempdir().expect("tempdir");
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(runtime.path(), Permissions::from_mode(0o700)).expect("chmod");
        let base = private_base(Some(runtime.path()), temp.path()).expect("base");
        assert_eq!(base, runtime.path().join("gpumem"));
        // Not private: the temporary folder's per-user base instead.
        std::fs::set_permissions(runtime.path(), Permissions::from_mode(0o755)).expect("chmod");
        let base = private_base(Some(runtime.path()), temp.path()).expect("base");
        assert!(base.starts_with(temp.path().canonicalize().expect("canon")));
    }

    #[test]
    fn a_killed_agents_folder_is_swept_and_a_live_ones_kept() {
        let temp = tempfile::tempdir().expect("tempdir");
        let base = private_base(None, temp.path()).expect("base");
        // A pid that cannot be alive (above the kernel's pid_max of 2^22).
        let dead = base.join("run-99999999-abc");
        let live = base.join(format!("run-{}-xyz", std::process::id()));
        let other = base.join("not-a-run");
        for d in [&dead, &live, &other] {
            std::fs::create_dir(d).expect("mkdir");
        }
        assert_eq!(sweep_leftovers(&base), 1);
        assert!(!dead.exists() && live.exists() && other.exists());
    }
}
