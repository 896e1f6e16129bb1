//! Names as they are shown in one line of a table: a benchmark's uri or a command line
//! may hold a newline, a tab or another control character, which would break the table
//! (a newline starts a new row) or the terminal (an escape sequence). They are shown
//! escaped; the record itself keeps the name as given.

use std::borrow::Cow;

/// `text` with every control character (Unicode category Cc: `\n`, `\t`, `\r`, ESC,
/// DEL, ...) and every backslash written as an escape: `\n`, `\t`, `\r`, `\\`, else
/// `\u{1b}` (the code point in hex). Unchanged, and not copied, when it holds none.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || c == '\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        assert!(matches!(escape_control("vec/grow_100 ü"), Cow::Borrowed(_)));
        assert_eq!(escape_control("a\nb"), "a\\nb");
        assert_eq!(escape_control("a\tb\r"), "a\\tb\\r");
        assert_eq!(escape_control("\u{1b}[31mred"), "\\u{1b}[31mred");
        assert_eq!(escape_control("del\u{7f}"), "del\\u{7f}");
        // A backslash is escaped too, so `a\nb` written out is told from a newline.
        assert_eq!(escape_control("a\\nb"), "a\\\\nb");
    }
}
