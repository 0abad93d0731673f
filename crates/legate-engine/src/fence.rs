//! The one escape of JSON that Legate puts inside a fence of an agent's prompt (the memory,
//! workflow context, handoff context and peer message blocks).
//!
//! This module owns which characters are escaped. It never frames a block or decides what
//! goes in one: each block's module does.

/// `json` with every character that could open or close a tag (`<`, `>`, `&`), that a reader
/// might take for a line break (DEL and the C1 controls, NEL among them; U+2028; U+2029) or
/// that a reader does not see as itself (bidirectional controls, zero-width and tag
/// characters) written as its `\uXXXX` escape (a surrogate pair past U+FFFF): the same JSON,
/// its own line breaks kept, that no fence text can end.
pub(crate) fn fenced_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        // Every character a reader does not see as itself (`legate_core::text::is_unseen`:
        // C1 controls, line separators, bidirectional controls, zero-width and tag
        // characters that carry hidden ASCII) but the JSON's own line breaks.
        if matches!(c, '<' | '>' | '&') || (c != '\n' && legate_core::text::is_unseen(c)) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}
