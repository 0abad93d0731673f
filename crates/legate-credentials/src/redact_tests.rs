//! Tests of redaction: every kind hidden by its marker, key blocks to their END line, a stream
//! cut anywhere (inside a secret too) never letting one through, and linear work on long and
//! hostile streams.

use super::*;
use crate::fakes::{ALNUM, B64, fakes, rnd};
use proptest::prelude::*;

/// A whole PEM private key: header, body lines, footer.
fn pem(seed: u64) -> String {
    let label = ["PRIVATE", "KEY"].join(" ");
    let body: Vec<String> = (0..6).map(|i| rnd(B64, 64, seed + i)).collect();
    format!(
        "-----BEGIN {label}-----\n{}\n{}==\n-----END {label}-----",
        body.join("\n"),
        rnd(B64, 22, seed + 9)
    )
}

/// An AWS key pair as the CLI's files and environments write it.
fn aws_pair() -> (String, String) {
    let id = format!(
        "{}{}",
        "AKIA",
        rnd("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16, 41)
    );
    let secret = rnd(B64, 40, 42);
    (id, secret)
}

/// Every run of 8 characters of `secret` with no separator in it (what must not survive).
fn windows(secret: &str) -> Vec<String> {
    let s: Vec<char> = secret.chars().collect();
    s.windows(8)
        .map(|w| w.iter().collect::<String>())
        .filter(|w| {
            w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "+/_".contains(c))
        })
        .collect()
}

fn leaked(out: &str, secret: &str) -> Option<String> {
    // The JWT fake carries the header that makes it one; the header is not the secret.
    windows(secret.trim_start_matches("Authorization: Bearer "))
        .into_iter()
        .find(|w| out.contains(w.as_str()))
}

/// Every fake of the input check, and a whole PEM key, a GitHub token and an AWS pair.
fn every_secret() -> Vec<(String, &'static str)> {
    let mut all = fakes();
    all.push((pem(100), "private-key-block"));
    all
}

#[test]
fn every_kind_is_replaced_by_its_marker_and_the_rest_is_kept() {
    for (secret, kind) in every_secret() {
        let text = format!("before: {secret}\nafter.");
        let out = redact(&text);
        assert!(out.contains(&marker(kind)), "{kind}: {out}");
        assert_eq!(leaked(&out, &secret), None, "{kind}");
        assert!(
            out.starts_with("before: ") && out.ends_with("\nafter."),
            "{out}"
        );
        assert_eq!(redact(&out), out, "{kind}: redacting twice changes nothing");
    }
    assert!(matches!(redact("nothing secret here"), Cow::Borrowed(_)));
}

#[test]
fn a_private_key_is_hidden_to_its_end_line_in_plain_and_escaped_text() {
    let key = pem(7);
    let out = redact(&format!("{key}\nDone reading the key.")).into_owned();
    assert!(out.contains(&marker("private-key-block")), "{out}");
    assert!(out.ends_with("Done reading the key."), "{out}");
    assert!(out.starts_with("-----BEGIN"), "{out}");
    assert!(!out.contains("-----END"), "{out}");
    assert_eq!(leaked(&out, &key), None);
    // Inside a JSON string, line breaks are escapes.
    let escaped = serde_like_escape(&key);
    let out = redact(&format!("{{\"key\": \"{escaped}\", \"next\": 1}}")).into_owned();
    assert_eq!(leaked(&out, &key), None, "{out}");
    assert!(out.contains("\"next\": 1"), "{out}");
}

fn serde_like_escape(text: &str) -> String {
    text.replace('\n', "\\n")
}

#[test]
fn an_aws_key_pair_is_hidden_both_halves() {
    let (id, secret) = aws_pair();
    let text = format!("aws_access_key_id = {id}\naws_secret_access_key = {secret}\n");
    let out = redact(&text);
    assert!(out.contains(&marker("aws-access-key-id")), "{out}");
    assert!(out.contains(&marker("aws-secret-access-key")), "{out}");
    assert!(!out.contains(&id) && !out.contains(&secret), "{out}");
    assert!(
        out.contains("aws_secret_access_key = "),
        "the keyword stays: {out}"
    );
}

/// Feeds `text` to a stream in the pieces `cuts` makes; the concatenated output.
fn streamed(text: &str, cuts: &[usize]) -> (String, usize) {
    let mut stream = StreamRedactor::new();
    let mut out = String::new();
    let mut at = 0;
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).collect();
    points.sort_unstable();
    for p in points.into_iter().chain([text.len()]) {
        let mut p = p.max(at);
        while !text.is_char_boundary(p) {
            p += 1;
        }
        out.push_str(&stream.push(&text[at..p]).concat());
        at = p;
    }
    let scanned = stream.scanned;
    out.push_str(&stream.finish().concat());
    (out, scanned)
}

#[test]
fn a_stream_cut_anywhere_inside_a_secret_never_lets_it_through() {
    let (id, key) = aws_pair();
    let pair = format!("aws_access_key_id = {id}\naws_secret_access_key = {key}");
    let mut all: Vec<(String, &str, Vec<String>)> = every_secret()
        .into_iter()
        .map(|(s, kind)| (s.clone(), kind, vec![s]))
        .collect();
    all.push((pair, "aws-secret-access-key", vec![id, key]));
    for (secret, kind, hidden) in all {
        let text = format!("Here it is:\n{secret}\nThat was the file.\n");
        for cut in 1..text.len() {
            for pieces in [vec![cut], vec![cut, cut + 3], vec![cut / 2, cut]] {
                let (out, _) = streamed(&text, &pieces);
                for h in &hidden {
                    assert_eq!(leaked(&out, h), None, "{kind} cut at {pieces:?}: {out}");
                }
                assert!(
                    out.contains(&marker(kind)),
                    "{kind} cut at {pieces:?}: {out}"
                );
                assert!(out.ends_with("That was the file.\n"), "{out}");
            }
        }
    }
}

#[test]
fn a_long_stream_relays_as_it_goes_and_stays_linear() {
    let line = "an ordinary line of an answer, with nothing secret in it at all\n";
    let text = line.repeat(20_000);
    let mut stream = StreamRedactor::new();
    let (mut relayed, mut pushes) = (0, 0);
    for piece in text.as_bytes().chunks(3) {
        let piece = std::str::from_utf8(piece).unwrap_or_default();
        pushes += 1;
        relayed += stream.push(piece).concat().len();
        // Never more than a line or so is held.
        assert!(
            stream.pending.len() <= 2 * line.len(),
            "{:?}",
            stream.pending
        );
    }
    assert_eq!(relayed, text.len());
    assert!(
        stream.scanned <= pushes * (CONTEXT + 3) + 2 * text.len(),
        "scanned {} for {} in {pushes} pieces",
        stream.scanned,
        text.len()
    );
    // A word with no blank at all is cut, not held whole, and not scanned per piece.
    let mut stream = StreamRedactor::new();
    let long = rnd(ALNUM, 1 << 20, 5);
    let mut relayed = 0;
    for piece in long.as_bytes().chunks(5) {
        relayed += stream
            .push(std::str::from_utf8(piece).unwrap_or_default())
            .concat()
            .len();
    }
    assert!(relayed >= long.len() - MAX_HOLD, "relayed {relayed}");
    assert!(
        stream.scanned <= 2 * long.len(),
        "scanned {}",
        stream.scanned
    );
}

#[test]
fn a_hostile_text_full_of_keywords_is_judged_in_linear_time() {
    // Every rule woken at once, over and over: the work must stay proportional to the text.
    let keywords = "PuTTY-User-Key-File-2: \"type\": \"service_account\" \"auths\": { -----BEGIN PRIVATE KEY----- ghp_ AKIA eyJ sig= ";
    let text = keywords.repeat(4_000);
    let started = std::time::Instant::now();
    let out = redact(&text);
    assert_eq!(out, text);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

proptest! {
    #[test]
    fn any_split_of_any_text_around_a_secret_hides_it(
        before in "[ -~\n]{0,300}",
        after in "[ -~\n]{0,300}",
        which in 0usize..13,
        cuts in proptest::collection::vec(0usize..2000, 0..12),
    ) {
        let (secret, kind) = every_secret().swap_remove(which);
        let text = format!("{before}\n{secret}\n{after}");
        let (out, _) = streamed(&text, &cuts);
        prop_assert_eq!(leaked(&out, &secret), None, "{} in {:?}", kind, out);
        prop_assert!(out.contains(&marker(kind)) || out.contains("[REDACTED:"));
    }

    #[test]
    fn a_stream_of_clean_text_comes_out_unchanged(
        text in "[ -~\n\u{e9}\u{4e2d}]{0,3000}",
        cuts in proptest::collection::vec(0usize..3000, 0..20),
    ) {
        let expected = redact(&text).into_owned();
        let (out, _) = streamed(&text, &cuts);
        prop_assert_eq!(out, expected);
    }
}

#[test]
fn a_chunk_ending_outside_a_word_goes_out_whole() {
    let mut stream = StreamRedactor::new();
    let whole = "write-outside /x: Permission denied (os error 13)";
    assert_eq!(stream.push(whole), vec![whole]);
    assert!(stream.push("Hello wor").is_empty());
    assert!(stream.push("ld").is_empty());
    // Held pieces come out as they came, once no credential joins them.
    assert_eq!(stream.push("! "), vec!["Hello wor", "ld", "! "]);
    assert!(stream.push("echo: ghp_").is_empty());
    assert_eq!(stream.finish(), vec!["echo: ghp_"]);
    let token = format!("{}{}", "ghp_", rnd(ALNUM, 36, 78));
    stream.push("key ");
    assert!(stream.push(&token[..10]).is_empty());
    assert!(stream.push(&token[10..]).is_empty());
    assert_eq!(stream.push("!"), vec![marker("github-token"), "!".into()]);
}

#[test]
fn look_alikes_are_out_of_reach_and_real_tokens_beside_unicode_are_not() {
    let token = format!("{}{}", "ghp_", rnd(ALNUM, 36, 77));
    // A Cyrillic `р` for the `p`: not a GitHub token to the rules (documented as out of reach).
    let look_alike = token.replacen('p', "\u{440}", 1);
    assert_eq!(redact(&look_alike), look_alike);
    // A real one between non-ASCII words is found, and the words are kept whole.
    let text = format!("clé\u{a0}{token}\u{a0}中文");
    let out = redact(&text);
    assert_eq!(
        out,
        format!("clé\u{a0}{}\u{a0}中文", marker("github-token"))
    );
    let (streamed, _) = streamed(&text, &[4, 5, 9, 30]);
    assert_eq!(streamed, out);
}

/// A credential after an escape, once or twice escaped (a JSON log line quoting an ACP
/// frame), is found; the rest of the text is kept byte for byte.
#[test]
fn escaped_text_hides_what_follows_an_escape() {
    let token = format!("{}{}", "ghp_", rnd(ALNUM, 36, 91));
    for text in [
        format!("{{\"text\":\"exit 0\\n{token}\\n\"}}"),
        format!("{{\"message\":\"frame {{\\\"text\\\":\\\"exit 0\\\\n{token}\\\\n\\\"}}\"}}"),
        format!("\\u000a{token}"),
        format!("plain {token} text"),
    ] {
        assert!(
            !redact(&text).contains(&token) || text.contains('\\'),
            "{text}"
        );
        let shown = redact_escaped(&text);
        assert!(!shown.contains(&token), "{text} -> {shown}");
        assert!(shown.contains("[REDACTED:github-token]"), "{shown}");
        let kept = text.replacen(&token, "[REDACTED:github-token]", 1);
        assert_eq!(shown, kept);
    }
    let clean = "{\"a\":\"x\\ny\\\\z\\u0041\"}";
    assert!(matches!(redact_escaped(clean), Cow::Borrowed(_)));
}

proptest! {
    /// The scanning view has the text's length and character boundaries, whatever it holds.
    #[test]
    fn the_unescaped_view_keeps_every_offset(text in "(\\\\{0,3}[nrtu\"a0-9é]|[a-z €]){0,60}") {
        let view = unescaped_view(&text);
        prop_assert_eq!(view.len(), text.len());
        for i in 0..=text.len() {
            prop_assert_eq!(view.is_char_boundary(i), text.is_char_boundary(i));
        }
    }
}
