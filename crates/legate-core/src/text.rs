//! Hostile text made fit to quote: someone else's words (a remote agent's, a judge's answer)
//! on one line, control characters escaped, bounded in characters.
//!
//! This module only shapes text for a message or a record; it never decides whether text may
//! be quoted at all, and never reads or logs anything.

/// `text` on one line, control characters escaped, cut after `max_chars` characters with `…`.
pub fn excerpt(text: &str, max_chars: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn control_characters_are_escaped_and_long_text_is_cut() {
        assert_eq!(excerpt("a\nb\u{7}", 10), "a\\nb\\u{7}");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }
}
