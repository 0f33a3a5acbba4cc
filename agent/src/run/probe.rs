//! The Python probe shipped inside the agent binary, written to a private folder for
//! each run and put first on the child's PYTHONPATH.
//!
//! `agent/python/gpumem_probe/__init__.py` is the probe; `agent/python/sitecustomize.py`
//! chains to the program's own sitecustomize and arms the probe, which stays idle
//! until `torch` is imported. Neither imports torch.

use std::ffi::OsString;
use std::path::Path;

use anyhow::{Context, Result};

/// The probe package's source.
pub const PROBE_SOURCE: &str = include_str!("../../python/gpumem_probe/__init__.py");
/// The chaining sitecustomize.
pub const SITECUSTOMIZE_SOURCE: &str = include_str!("../../python/sitecustomize.py");

/// Environment variable naming the probe channel's socket.
pub const ENV_SOCKET: &str = "GPUMEM_PROBE_SOCKET";
/// Environment variable with the number of steps to instrument.
pub const ENV_STEPS: &str = "GPUMEM_PROBE_STEPS";

/// Writes the probe under `dir` (which becomes the first PYTHONPATH entry).
pub fn write_probe(dir: &Path) -> Result<()> {
    let package = dir.join("gpumem_probe");
    std::fs::create_dir_all(&package).context("creating the probe folder")?;
    std::fs::write(package.join("__init__.py"), PROBE_SOURCE).context("writing the probe")?;
    std::fs::write(dir.join("sitecustomize.py"), SITECUSTOMIZE_SOURCE)
        .context("writing sitecustomize.py")?;
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
}
