//! Terminal output that never kills the agent.
//!
//! `println!`/`eprintln!` panic when their stream is a closed pipe (`… | head`, or a
//! service manager that closed the log), and the release profile turns that panic
//! into an abort. Every line the agent prints goes through these macros instead:
//! a write error is dropped, because losing a log line is better than losing the
//! server or the measurement that produced it. `agent/clippy.toml` bans the std
//! macros so a new call site cannot slip back.

use std::fmt::Arguments;
use std::io::Write;

/// Writes formatted text to stdout, ignoring a closed or failing stream.
pub fn stdout(args: Arguments<'_>) {
    let mut lock = std::io::stdout().lock();
    let _ = lock.write_fmt(args);
    let _ = lock.flush();
}

/// Writes formatted text to stderr, ignoring a closed or failing stream.
pub fn stderr(args: Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `print!` that survives a closed stdout.
macro_rules! out {
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*)) };
}

/// `println!` that survives a closed stdout.
macro_rules! outln {
    () => { $crate::out::stdout(format_args!("\n")) };
    ($($t:tt)*) => { $crate::out::stdout(format_args!("{}\n", format_args!($($t)*))) };
}

/// `eprint!` that survives a closed stderr.
macro_rules! err {
    ($($t:tt)*) => { $crate::out::stderr(format_args!($($t)*)) };
}

/// `eprintln!` that survives a closed stderr.
macro_rules! errln {
    ($($t:tt)*) => { $crate::out::stderr(format_args!("{}\n", format_args!($($t)*))) };
}

pub(crate) use {err, errln, out, outln};
