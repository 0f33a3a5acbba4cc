//! Terminal output that never kills the agent.
//!
//! `println!`/`eprintln!` panic when their stream is a closed pipe (`… | head`, or a
//! service manager that closed the log), and the release profile turns that panic
//! into an abort. Every line the agent prints goes through these macros instead:
//! a write error is dropped, because losing a log line is better than losing the
//! server or the measurement that produced it. `agent/clippy.toml` bans the std
//! macros so a new call site cannot slip back.
//!
//! Everything the agent writes to stdout and stderr — tables, messages, errors, `run`'s
//! report — passes through [`terminal_safe`] first: much of it is text from elsewhere
//! (a Hub's listing paths and `config.json` fields, a probe's phase names and exception
//! texts), and a terminal obeys escape sequences in what it prints (OSC title and
//! clipboard writes, screen clearing) and reorders text around bidirectional controls.
//! The escape is JSON's own `\uXXXX`, so a `--json` document that holds such a
//! character (serde_json writes C1 and bidirectional controls raw) stays the same
//! JSON, and a human line shows the code. (A command's own output under `run` does not
//! pass through the agent.)

use std::borrow::Cow;
use std::fmt::Arguments;
use std::io::Write;

/// Whether a terminal would act on `c` rather than show it: C0 controls but newline
/// and tab, DEL, C1 controls (U+0080–U+009F, 8-bit CSI/OSC), and the invisible
/// formatting and bidirectional controls (U+061C, U+200B–U+200F, U+202A–U+202E,
/// U+2060–U+2069, U+FEFF; Unicode's `Bidi_Control` and zero-width characters).
pub fn acts_on_terminal(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// `text` as a terminal may print it: every character a terminal would act on
/// ([`acts_on_terminal`]) written `\uXXXX` (all are in the Basic Multilingual Plane);
/// newlines, tabs and printable text (any script) kept. The one helper for any text
/// that reaches the terminal.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len().saturating_add(16));
    for c in text.chars() {
        if acts_on_terminal(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes formatted text to stdout, escaped by [`terminal_safe`], ignoring a closed or
/// failing stream.
pub fn stdout(args: Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    let mut lock = std::io::stdout().lock();
    let _ = lock.write_all(terminal_safe(&text).as_bytes());
    let _ = lock.flush();
}

/// Writes formatted text to stderr, escaped by [`terminal_safe`], ignoring a closed
/// or failing stream.
pub fn stderr(args: Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    let _ = std::io::stderr()
        .lock()
        .write_all(terminal_safe(&text).as_bytes());
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

#[cfg(test)]
mod tests {
    use super::terminal_safe;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        // OSC 0 (title), OSC 52 (clipboard), CSI clear screen, 8-bit CSI, bidi override.
        let hostile =
            "a\u{1b}]0;pwned\u{7}b\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}[2J\u{9b}31m\u{202e}gpj.exe";
        let safe = terminal_safe(hostile);
        assert!(!safe.chars().any(|c| c.is_control()), "{safe}");
        assert_eq!(
            safe,
            "a\\u001b]0;pwned\\u0007b\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\\u009b31m\\u202egpj.exe"
        );
        // In a JSON document (serde_json leaves C1 and bidi controls raw) the escape is
        // JSON's own: the same document.
        let json = serde_json::to_string(&serde_json::json!({"p": "x\u{9b}\u{202e}y"})).unwrap();
        let back: serde_json::Value = serde_json::from_str(&terminal_safe(&json)).unwrap();
        assert_eq!(back["p"], "x\u{9b}\u{202e}y");
        // Text as people write it is kept: lines, tabs, any script.
        let plain = "model: Qwen3 · 9 GB\n\tgrüße 模型 ✓";
        assert!(matches!(
            terminal_safe(plain),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
