//! Hostile text made fit to quote: someone else's words (a remote agent's, a judge's answer)
//! on one line, control characters escaped, bounded in characters; and the one table of the
//! characters a reader does not see as themselves ([`is_unseen`]: controls, bidirectional
//! overrides, zero-width and other format characters), which every front shows as a visible
//! `\u{…}` ([`visible`]) wherever a person reads agent text: the terminal and the dashboard.
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

/// Whether `c` reorders the text around it (a bidirectional mark, embedding, override or
/// isolate, or the Arabic letter mark): `\u{202e}` makes `txt.exe` read as `exe.txt`.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Whether a reader does not see `c` as itself: a control character (it acts on a terminal),
/// a bidirectional control (it reorders what is around it), or an invisible format character
/// (soft hyphen, zero-width spaces and joiners, word joiners, invisible operators, the byte
/// order mark, Hangul fillers, tag characters that smuggle ASCII, interlinear annotations,
/// line and paragraph separators). Variation selectors are not in it: they only choose a
/// glyph's look.
pub fn is_unseen(c: char) -> bool {
    c.is_control()
        || is_bidi_control(c)
        || matches!(
            c,
            '\u{ad}'
                | '\u{34f}'
                | '\u{115f}'
                | '\u{1160}'
                | '\u{17b4}'
                | '\u{17b5}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200d}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{2060}'..='\u{2064}'
                | '\u{206a}'..='\u{206f}'
                | '\u{3164}'
                | '\u{feff}'
                | '\u{ffa0}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// `s` with every [unseen](is_unseen) character but those in `keep` written as a visible
/// `\u{…}` (lowercase hex) instead: what it does or hides is shown, not done. Borrowed when
/// there is nothing to show.
pub fn visible<'a>(s: &'a str, keep: &[char]) -> std::borrow::Cow<'a, str> {
    let shown = |c: char| is_unseen(c) && !keep.contains(&c);
    if !s.chars().any(shown) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if shown(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::{excerpt, visible};

    #[test]
    fn unseen_characters_are_shown_and_the_rest_kept() {
        let hostile = "a\u{202e}txt.exe\u{200b}\u{e0041}\u{2066}b\n\t\u{1b}[2K\u{fe0f}é";
        assert_eq!(
            visible(hostile, &['\n', '\t']),
            "a\\u{202e}txt.exe\\u{200b}\\u{e0041}\\u{2066}b\n\t\\u{1b}[2K\u{fe0f}é"
        );
        assert!(matches!(
            visible("plain — text\n", &['\n']),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn control_characters_are_escaped_and_long_text_is_cut() {
        assert_eq!(excerpt("a\nb\u{7}", 10), "a\\nb\\u{7}");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }
}
