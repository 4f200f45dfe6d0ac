//! Printing strings that came from users, files or the system (paths, host names,
//! CPU model strings, CSV cells) without letting control characters reach the
//! terminal: a carriage return could overwrite a line, an ANSI escape recolor or
//! clear the screen. Every smelt command passes its human-readable output and its
//! error lines through [`escape_text`] / [`escape_line`].

use std::borrow::Cow;
use std::fmt::Write as _;

fn escape(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let bad = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !s.chars().any(bad) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if !bad(c) {
            out.push(c);
            continue;
        }
        match c {
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

/// `s` with every control character (C0, DEL, C1) written as an escape (`\r`,
/// `\x1b`, ...), newlines included: for one-line messages.
pub fn escape_line(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` with every control character but the newline escaped: for multi-line
/// human-readable output (tables, summaries).
pub fn escape_text(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_control_characters() {
        assert_eq!(escape_line("plain ü"), "plain ü");
        assert!(matches!(escape_line("plain"), Cow::Borrowed(_)));
        assert_eq!(escape_line("a\rb\x1b[2Jc\n"), "a\\rb\\x1b[2Jc\\n");
        assert_eq!(escape_text("a\r\nb\x7f\u{9b}"), "a\\r\nb\\x7f\\x9b");
    }
}
