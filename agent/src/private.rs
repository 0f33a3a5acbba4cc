//! What the agent writes for itself, and how it reads what it is given: one place for
//! the rules that keep another local user out.
//!
//! - **Folders of its own** (the `run` probe's, the trace probe's, a live measurement's
//!   results) are made inside a per-user base ([`private_base`]): `$XDG_RUNTIME_DIR/gpumem`
//!   when the login session has a private runtime folder, else `{temp}/gpumem-{uid}`. The
//!   base must be a real folder (not a link) owned by the user with mode 0700, and every
//!   folder above it owned by root or the user and writable by no one else unless sticky
//!   (as `/tmp` is: others may add entries there but not rename or remove the user's).
//!   Each folder is [`PrivateDir`]: `{kind}-{agent pid}-{random}`, 0700 whatever the umask,
//!   removed on drop; one left behind by an agent killed by SIGKILL is removed by the next
//!   agent once no process of that pid is alive ([`sweep_leftovers`]).
//! - **Folders the user names** for output ([`output_dir`]): made 0700, or an existing
//!   empty one accepted only when it is the user's, writable by no one else, and no folder
//!   above it lets another user swap it.
//! - **Files** ([`write_atomically`]): a fresh temporary file of a random name beside the
//!   target, opened exclusively (`O_CREAT | O_EXCL`, which never follows a link), mode 0600,
//!   written and synced, then renamed over the target (a link at the target is replaced,
//!   never followed) or linked to it only when it does not exist yet.
//! - **Reads** ([`read_to_string_bounded`]): at most a stated number of bytes from any path
//!   the user gives (`/dev/zero` included), refused past it.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Mode of every folder the agent makes.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the agent makes (a socket included).
pub const FILE_MODE: u32 = 0o600;

/// This process's user id.
pub fn our_uid() -> u32 {
    crate::process::our_uid()
}

/// Refuses `dir` unless it is a real folder (not a link) owned by us, with no access
/// for group or others.
pub fn check_private(dir: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.file_type().is_dir() {
        bail!(
            "{} is not a folder (a link or a file): refusing to use it",
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

/// Refuses `path` when a user other than root or us could rename or replace it: every
/// folder from its parent up must be owned by root or us and writable by no one else,
/// unless sticky.
pub fn check_ancestors(path: &Path) -> Result<()> {
    let me = our_uid();
    for ancestor in path.ancestors().skip(1) {
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

/// Refuses a file or folder that is not ours or that group or others can write (what
/// the agent reads back and acts on: a bisect plan).
pub fn check_owned_unwritable(path: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(path).with_context(|| format!("reading {}", path.display()))?;
    if meta.file_type().is_symlink() {
        bail!("{} is a link: refusing to follow it", path.display());
    }
    if meta.uid() != our_uid() {
        bail!(
            "{} belongs to uid {}, not to you (uid {}): another user may have written it",
            path.display(),
            meta.uid(),
            our_uid()
        );
    }
    if meta.mode() & 0o022 != 0 {
        bail!(
            "{} has mode {:o}: others may have changed it",
            path.display(),
            meta.mode() & 0o7777
        );
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

/// The per-user base folder the agent's own folders are made in (see the module's
/// words): `runtime` (`$XDG_RUNTIME_DIR`) when it is a private folder of ours, else
/// `temp`.
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
        .context("finding a private folder for the agent's files")
}

/// The agent pid in a [`PrivateDir`]'s name `{kind}-{pid}-{random}`.
fn pid_of(name: &str) -> Option<i32> {
    let (_, rest) = name.split_once('-')?;
    rest.split('-').next()?.parse().ok()
}

/// Removes folders of `base` whose agent is no longer alive (one killed by SIGKILL left
/// its folder behind). Returns how many were removed; errors are skipped.
pub fn sweep_leftovers(base: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(pid_of) else {
            continue;
        };
        if i32::try_from(std::process::id()).is_ok_and(|me| me == pid)
            || crate::process::pid_alive(pid)
        {
            continue;
        }
        if std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// One private folder of the agent's, in a checked base; removed on drop.
#[derive(Debug)]
pub struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    /// A fresh folder `{kind}-{pid}-{random}` in `base` (which [`private_base`]
    /// checked), mode 0700.
    pub fn create(base: &Path, kind: &str) -> Result<PrivateDir> {
        sweep_leftovers(base);
        let pid = std::process::id();
        let made = tempfile::Builder::new()
            .prefix(&format!("{kind}-{pid}-"))
            .permissions(Permissions::from_mode(DIR_MODE))
            .tempdir_in(base)
            .with_context(|| format!("creating a private folder in {}", base.display()))?;
        // Ours from here on: removed by our Drop, not tempfile's.
        let dir = PrivateDir { path: made.keep() };
        std::fs::set_permissions(&dir.path, Permissions::from_mode(DIR_MODE))
            .with_context(|| format!("setting the mode of {}", dir.path.display()))?;
        check_private(&dir.path)?;
        Ok(dir)
    }

    /// A fresh folder in the base of this process's environment.
    pub fn in_env_base(kind: &str) -> Result<PrivateDir> {
        PrivateDir::create(&base_from_env()?, kind)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Makes a folder inside a private one (0700 whatever the umask); refuses an existing one.
pub fn make_subfolder(path: &Path) -> Result<()> {
    DirBuilder::new()
        .mode(DIR_MODE)
        .create(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::fs::set_permissions(path, Permissions::from_mode(DIR_MODE))
        .with_context(|| format!("setting the mode of {}", path.display()))
}

/// Writes a new file with mode 0600 (whatever the umask); refuses an existing one or a
/// link in its place.
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.set_permissions(Permissions::from_mode(FILE_MODE))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// How [`write_atomically`] treats an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Replace it (a link there is replaced, not followed).
    Replace,
    /// Refuse: the file must be new.
    Refuse,
}

/// Writes `bytes` to `path` atomically, mode 0600: a temporary file of a random name
/// beside it (created exclusively, so a planted link is never followed and a name
/// is never reused), synced, then renamed over `path` ([`Existing::Replace`]) or
/// linked to it only if nothing is there ([`Existing::Refuse`]). On error nothing is
/// left behind and an existing file is untouched.
pub fn write_atomically(path: &Path, bytes: &[u8], existing: Existing) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .with_context(|| format!("{} names no file", path.display()))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .permissions(Permissions::from_mode(FILE_MODE))
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    tmp.as_file()
        .set_permissions(Permissions::from_mode(FILE_MODE))
        .with_context(|| format!("setting the mode of {}", tmp.path().display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", tmp.path().display()))?;
    match existing {
        Existing::Replace => tmp
            .persist(path)
            .map(drop)
            .map_err(|e| e.error)
            .with_context(|| format!("renaming into {}", path.display())),
        Existing::Refuse => match tmp.persist_noclobber(path) {
            Ok(_) => Ok(()),
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                bail!("refusing to overwrite {}: it exists", path.display())
            }
            Err(e) => Err(e.error).with_context(|| format!("writing {}", path.display())),
        },
    }
}

/// Makes the output folder `dir` the user named (its parents as `mkdir -p` would, the
/// folder itself 0700), or accepts an existing empty folder that is the user's, that
/// no one else can write and that no folder above lets another user replace. Returns
/// its absolute, resolved path.
pub fn output_dir(dir: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) => {
            if !meta.file_type().is_dir() {
                bail!(
                    "refusing to use {}: it is not a folder (a link or a file)",
                    dir.display()
                );
            }
            let mut entries =
                std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
            if entries.next().is_some() {
                bail!(
                    "refusing to use {}: it is not empty (each series gets a new folder)",
                    dir.display()
                );
            }
            check_owned_unwritable(dir)
                .with_context(|| format!("refusing to use {}", dir.display()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            make_subfolder(dir)?;
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    let resolved =
        std::fs::canonicalize(dir).with_context(|| format!("resolving {}", dir.display()))?;
    check_ancestors(&resolved).with_context(|| format!("refusing to use {}", dir.display()))?;
    Ok(resolved)
}

/// Reads at most `limit` bytes of `path` as UTF-8 text; a longer file (or an endless
/// one such as `/dev/zero`) is refused, naming the limit.
pub fn read_to_string_bounded(path: &Path, limit: u64) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut buf = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .with_context(|| format!("reading {}", path.display()))?;
    if u64::try_from(buf.len()).unwrap_or(u64::MAX) > limit {
        bail!(
            "{} is larger than {} bytes, more than this input can be",
            path.display(),
            gpumem_core::units::group_digits(limit)
        );
    }
    String::from_utf8(buf).with_context(|| format!("{} is not UTF-8 text", path.display()))
}

/// Reads a file a child wrote into one of the agent's private folders (the `run`
/// probe's allocator history): never through a link (`O_NOFOLLOW`), only a regular file
/// of ours, and at most `limit` bytes — a larger one is refused, naming the limit.
pub fn read_child_file(path: &Path, limit: u64) -> Result<Vec<u8>> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let meta = f
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !meta.file_type().is_file() || meta.uid() != our_uid() {
        bail!(
            "{} is not a regular file of yours: refusing to read it",
            path.display()
        );
    }
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > limit {
        bail!("{} is larger than {limit} bytes", path.display());
    }
    Ok(bytes)
}

/// Refuses a path with a control character (a line break would end a line of a
/// generated script or manifest) or that is not UTF-8.
pub fn check_printable(path: &Path) -> Result<&str> {
    let Some(text) = path.to_str() else {
        bail!(
            "{} is not UTF-8: refusing to write it into a script",
            path.display()
        );
    };
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        bail!("{text:?} holds the control character {c:?}: refusing to write it into a script");
    }
    Ok(text)
}

/// Refuses a path that exists (file, folder or dangling link) or whose folder does not:
/// the check every command's `--output` gets before anything runs. A result is then
/// written by [`write_new_atomically`]: to a temporary file of a random name in the
/// target's folder (created exclusively, mode 0600), flushed, and moved to the target
/// name only if nothing is there, so a result that appeared meanwhile is never replaced
/// and readers see either no file or the complete file.
pub fn check_new_path(path: &Path) -> Result<()> {
    if path.symlink_metadata().is_ok() {
        bail!(
            "refusing to overwrite {}: it exists; choose a new file name for each series",
            path.display()
        );
    }
    let parent = parent_dir(path);
    if !parent.is_dir() {
        bail!(
            "cannot write {}: folder {} does not exist",
            path.display(),
            parent.display()
        );
    }
    Ok(())
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `bytes` to `path` atomically, mode 0600; fails, leaving any existing file
/// untouched, if `path` exists ([`write_atomically`]).
pub fn write_new_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    check_new_path(path)?;
    write_atomically(path, bytes, Existing::Refuse)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).expect("stat").mode() & 0o7777
    }

    #[test]
    fn folders_are_0700_and_files_0600() {
        // The umask itself is changed in the CLI tests (a process-wide setting: the
        // unit tests of one binary run side by side).
        let temp = tempfile::tempdir().expect("tempdir");
        {
            let base = private_base(None, temp.path()).expect("base");
            assert_eq!(mode(&base), 0o700);
            let dir = PrivateDir::create(&base, "trace").expect("dir");
            assert_eq!(mode(dir.path()), 0o700);
            let f = dir.path().join("a.json");
            write_atomically(&f, b"{}", Existing::Refuse).expect("write");
            assert_eq!(mode(&f), 0o600);
            write_new(&dir.path().join("b.py"), b"x").expect("write");
            assert_eq!(mode(&dir.path().join("b.py")), 0o600);
            let out = output_dir(&temp.path().join("made/here")).expect("made");
            assert_eq!(mode(&out), 0o700);
            let path = dir.path().to_path_buf();
            drop(dir);
            assert!(!path.exists(), "removed on drop");
        }
    }

    #[test]
    fn the_atomic_writer_never_follows_a_link_nor_reuses_a_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine").expect("write");
        // Links planted at every name the old writer would have used, and at the target.
        let target = dir.path().join("gpumem_x.prom");
        for n in 0..4 {
            let name = format!(".gpumem_x.prom.{}.{n}.tmp", std::process::id());
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).expect("link");
        }
        std::os::unix::fs::symlink(&victim, &target).expect("link");
        write_atomically(&target, b"metrics", Existing::Replace).expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "mine");
        let meta = std::fs::symlink_metadata(&target).expect("stat");
        assert!(
            meta.file_type().is_file(),
            "the link was replaced, not followed"
        );
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "metrics");
        // A new file refuses an existing target, and leaves no temporary behind.
        let e = write_atomically(&target, b"again", Existing::Refuse).expect_err("refused");
        assert!(format!("{e:#}").contains("refusing to overwrite"), "{e:#}");
        let left = std::fs::read_dir(dir.path())
            .expect("list")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            })
            .count();
        assert_eq!(left, 4, "only the planted links remain");
    }

    #[test]
    fn an_output_folder_someone_else_can_write_is_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        let open = temp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, Permissions::from_mode(0o777)).expect("chmod");
        let e = output_dir(&open).expect_err("refused");
        assert!(format!("{e:#}").contains("mode 777"), "{e:#}");
        // Made under a folder others can write (not sticky): refused too.
        let e = output_dir(&open.join("mine")).expect_err("refused");
        assert!(format!("{e:#}").contains("writable by others"), "{e:#}");
        let link = temp.path().join("link");
        std::os::unix::fs::symlink(temp.path(), &link).expect("link");
        let e = output_dir(&link).expect_err("refused");
        assert!(format!("{e:#}").contains("not a folder"), "{e:#}");
        let full = temp.path().join("full");
        std::fs::create_dir(&full).expect("mkdir");
        std::fs::write(full.join("x"), "").expect("write");
        assert!(output_dir(&full).is_err());
    }

    #[test]
    fn reads_are_bounded_even_on_an_endless_file() {
        let e = read_to_string_bounded(Path::new("/dev/zero"), 1 << 20).expect_err("refused");
        assert!(
            format!("{e:#}").contains("larger than 1 048 576 bytes"),
            "{e:#}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("c.json");
        std::fs::write(&f, "{}").expect("write");
        assert_eq!(read_to_string_bounded(&f, 2).expect("read"), "{}");
        assert!(read_to_string_bounded(&f, 1).is_err());
    }

    #[test]
    fn control_characters_are_refused_in_script_paths() {
        assert!(check_printable(Path::new("/scratch/a b/c")).is_ok());
        let e = check_printable(Path::new("/scratch/x\nrm -rf ~")).expect_err("refused");
        assert!(format!("{e:#}").contains("control character"), "{e:#}");
    }

    #[test]
    fn leftover_names_carry_their_pid() {
        assert_eq!(pid_of("run-123-abc"), Some(123));
        assert_eq!(pid_of("trace-77-x"), Some(77));
        assert_eq!(pid_of("not-a-run"), None);
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
        let dead_trace = base.join("trace-99999998-abc");
        let live = base.join(format!("run-{}-xyz", std::process::id()));
        let other = base.join("not-a-run");
        for d in [&dead, &dead_trace, &live, &other] {
            std::fs::create_dir(d).expect("mkdir");
        }
        assert_eq!(sweep_leftovers(&base), 2);
        assert!(!dead.exists() && !dead_trace.exists() && live.exists() && other.exists());
    }

    #[test]
    fn refuses_an_existing_file_and_leaves_it_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(&path, "precious").unwrap();
        let err = write_new_atomically(&path, b"new").unwrap_err().to_string();
        assert!(err.contains("refusing to overwrite"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn writes_a_new_file_completely_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        write_new_atomically(&path, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("r.json")]);
    }

    #[test]
    fn refuses_a_missing_folder() {
        let dir = tempfile::tempdir().unwrap();
        let err = check_new_path(&dir.path().join("no/such/r.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("does not exist"), "{err}");
    }
}
