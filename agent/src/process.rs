//! Running the user's command as a child: stdin/stdout/stderr inherited, its own
//! process group (so a torchrun job and all its ranks get the same signal), the
//! terminal handed to it while it runs, and SIGINT/SIGTERM/SIGHUP/SIGQUIT received by
//! the agent forwarded to that group. The exit code or ending signal is returned.
//!
//! The raw `libc` calls are `unsafe` only because they are FFI; each is documented. The
//! signal handler does nothing but async-signal-safe work: an atomic load, `killpg`
//! and atomic stores.
#![allow(unsafe_code)]

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use anyhow::{Context, Result};

/// The child's process group, once started (0 before).
static CHILD_PGID: AtomicI32 = AtomicI32::new(0);
/// Bit `n` set: signal `n` arrived and was forwarded (or is pending until the child runs).
static RECEIVED: AtomicU64 = AtomicU64::new(0);

/// The signals forwarded to the child's process group.
pub const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

extern "C" fn forward(sig: libc::c_int) {
    if (0..64).contains(&sig) {
        RECEIVED.fetch_or(1 << sig, Ordering::SeqCst);
    }
    let pgid = CHILD_PGID.load(Ordering::SeqCst);
    if pgid > 0 {
        // SAFETY: killpg is async-signal-safe; pgid is the child's own group.
        unsafe {
            libc::killpg(pgid, sig);
        }
    }
}

/// How the child ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Signals the agent received and forwarded while it ran.
    pub forwarded: Vec<i32>,
}

/// A started child.
pub struct Running {
    child: Child,
    previous: Vec<(i32, libc::sighandler_t)>,
    gave_terminal: bool,
}

fn stdin_is_our_foreground_terminal() -> bool {
    // SAFETY: isatty/tcgetpgrp/getpgrp only read process and terminal state.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Makes `pgid` the terminal's foreground group without being stopped by SIGTTOU.
fn give_terminal(pgid: libc::pid_t) {
    // SAFETY: sigprocmask/tcsetpgrp on valid arguments; the mask is restored. Blocking
    // SIGTTOU is the documented way for a background group to call tcsetpgrp.
    unsafe {
        let mut block: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut block);
        libc::sigaddset(&mut block, libc::SIGTTOU);
        libc::sigprocmask(libc::SIG_BLOCK, &block, &mut old);
        libc::tcsetpgrp(0, pgid);
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}

/// Starts `command` (with its environment already set) in a process group of its own
/// and installs the forwarding handlers.
pub fn spawn(mut command: Command) -> Result<Running> {
    RECEIVED.store(0, Ordering::SeqCst);
    let take_terminal = stdin_is_our_foreground_terminal();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (setpgid, getpid, sigprocmask, tcsetpgrp).
    unsafe {
        command.pre_exec(move || {
            libc::setpgid(0, 0);
            if take_terminal {
                give_terminal(libc::getpid());
            }
            Ok(())
        });
    }
    let mut previous = Vec::new();
    for sig in FORWARDED {
        // SAFETY: installs a handler that only does async-signal-safe work.
        let old = unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
        previous.push((sig, old));
    }
    let child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            restore(&previous);
            return Err(e).context("starting the command");
        }
    };
    let pid = i32::try_from(child.id()).unwrap_or(0);
    CHILD_PGID.store(pid, Ordering::SeqCst);
    if take_terminal {
        // Also from the parent: whichever runs first, the child's group gets the terminal
        // before the child reads from it.
        give_terminal(pid);
    }
    // A signal that arrived between the handlers' installation and now.
    let pending = RECEIVED.load(Ordering::SeqCst);
    for sig in FORWARDED {
        if pending & (1 << sig) != 0 && pid > 0 {
            // SAFETY: plain syscall on the child's group.
            unsafe {
                libc::killpg(pid, sig);
            }
        }
    }
    Ok(Running {
        child,
        previous,
        gave_terminal: take_terminal,
    })
}

fn restore(previous: &[(i32, libc::sighandler_t)]) {
    for (sig, old) in previous {
        // SAFETY: puts back the handler that was there before.
        unsafe {
            libc::signal(*sig, *old);
        }
    }
}

impl Running {
    /// The child's process id (also its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the child, then takes the terminal back and restores the handlers.
    pub fn wait(mut self) -> Result<Ended> {
        let status = self.child.wait().context("waiting for the command");
        CHILD_PGID.store(0, Ordering::SeqCst);
        if self.gave_terminal {
            // SAFETY: getpgrp only reads our own group.
            give_terminal(unsafe { libc::getpgrp() });
        }
        restore(&self.previous);
        let status = status?;
        let received = RECEIVED.load(Ordering::SeqCst);
        Ok(Ended {
            code: status.code(),
            signal: status.signal(),
            forwarded: FORWARDED
                .iter()
                .copied()
                .filter(|s| received & (1 << s) != 0)
                .collect(),
        })
    }
}

/// The calling user's id.
pub fn our_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Makes `cmd`'s child receive SIGKILL when the thread that starts it ends (the agent
/// exiting, killed or not): a helper process of the agent's never outlives it. Linux's
/// `PR_SET_PDEATHSIG`; elsewhere the child's own deadline is the bound.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // getpid before the fork: the child compares its parent with it.
        // SAFETY: getpid has no preconditions.
        let parent = unsafe { libc::getpid() };
        // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
        // functions (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before prctl took effect.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Whether a process with this pid exists (any user's; a zombie counts).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether `pid` is a running process (alive and not a zombie waiting to be reaped).
pub fn still_running(pid: u32) -> bool {
    let Ok(signed) = i32::try_from(pid) else {
        return false;
    };
    if !pid_alive(signed) {
        return false;
    }
    // "pid (comm) STATE …": Z is a zombie, X dead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat.get(i + 1..))
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// Every process whose parent chain leads to `root` (root included), read from /proc.
/// Used to attribute NVML's per-process figures to the command's whole tree.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(ppid) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| parent_of(&s))
            {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() && tree.len() < 100_000 {
        let p = tree[i];
        tree.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    tree
}

/// The parent pid from a /proc/PID/stat line ("pid (comm) state ppid …"); the command
/// name may hold spaces and parentheses, so the fields are read after the last ')'.
fn parent_of(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_is_read_after_the_command_name() {
        assert_eq!(parent_of("12 (a (b) c) S 7 12 12 0"), Some(7));
        assert_eq!(parent_of("garbage"), None);
    }

    #[test]
    fn the_tree_holds_grandchildren() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "sleep 5 & sleep 5 & wait"]);
        let mut child = sh.spawn().expect("sh");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let tree = process_tree(child.id());
        for pid in tree.iter().rev() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let _ = child.wait();
        assert!(tree.len() >= 3, "{tree:?}");
        assert_eq!(tree[0], child.id());
    }
}
