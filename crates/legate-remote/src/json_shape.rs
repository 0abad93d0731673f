//! A bound on how many JSON values a remote's answer or event holds, checked on its bytes
//! before it is parsed.
//!
//! The bodies are bounded in bytes, but parsed whole into `serde_json::Value`, where every
//! small object is a map of a few hundred bytes: 15 MiB of `{"a":0},` took 2.8 GB. A
//! legitimate answer is a few values around long strings (a patch is one string), so a
//! bound on the values costs it nothing.
//!
//! It owns that count only: one pass over the bytes, strings skipped; it never parses.

use a2a::A2AError;

/// Objects and arrays one answer or event may hold.
pub const MAX_CONTAINERS: usize = 100_000;
/// Values in arrays and members of objects one answer or event may hold (its commas).
pub const MAX_ELEMENTS: usize = 1_000_000;

/// Refuses `body` (`what`, for the message) when it holds more objects and arrays than
/// [`MAX_CONTAINERS`] or more elements than [`MAX_ELEMENTS`], before anything parses it.
pub fn check(body: &[u8], what: &str) -> Result<(), A2AError> {
    let (mut containers, mut elements) = (0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => containers += 1,
            b',' => elements += 1,
            _ => {}
        }
        if containers > MAX_CONTAINERS || elements > MAX_ELEMENTS {
            return Err(A2AError::internal(format!(
                "{what} holds more than {MAX_CONTAINERS} JSON objects and arrays or {MAX_ELEMENTS} values; it was refused before it was parsed"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_outside_strings_only() {
        let patch = format!("{{\"patch\":\"{}\"}}", "{[,".repeat(2_000_000));
        assert!(check(patch.as_bytes(), "an answer").is_ok());
        let escaped = format!("{{\"s\":\"\\\"{}\"}}", "{".repeat(200_000));
        assert!(check(escaped.as_bytes(), "an answer").is_ok());
        let bloat = format!("[{}]", "{\"a\":0},".repeat(MAX_CONTAINERS));
        let e = check(bloat.as_bytes(), "the remote's answer").unwrap_err();
        assert!(
            e.message.contains("the remote's answer holds more than"),
            "{e:?}"
        );
        let numbers = format!("[{}0]", "0,".repeat(MAX_ELEMENTS + 1));
        assert!(check(numbers.as_bytes(), "an event").is_err());
    }
}
