//! The content scanner: one keyword pass, then only the rules it woke.
//!
//! This module owns how bytes are judged: one `RegexSet` pass over every content pattern
//! (and a pass of its own for each rule marked `alone`, whose pattern would slow the combined
//! one) clears a file that none of them matches (most files); otherwise one Aho-Corasick pass finds
//! every rule keyword it holds (so 60 rules do not mean 60 passes), then each woken rule's
//! pattern runs (and the few `always` rules, whose own literal prefix is their filter), and each candidate must clear the filters: a minimum length and entropy,
//! not a documented example (`allow`), not a placeholder (`xxxx`, `<your-token>`, `${VAR}`:
//! filler that stands apart, not the same letters wedged by chance in a random body), not
//! inside a lockfile or integrity hash (`sha512-…`, `h1:…`), and the rule's `requires`
//! context. The first rule, in table order, with a candidate that clears them decides.
//!
//! It must never return, log or keep any matched byte: only a rule id. It scans the whole
//! file (no truncation: a secret after the first megabyte is still found); the work is linear
//! in the file's size, and each filter reads at most `HASH_LOOKBACK` bytes around a match.

use super::rules::{ContentRule, NameRule, Ruleset, UnlessContent};
use std::ops::Range;

/// One credential found in a text: the bytes to hide and the rule that found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found<'a> {
    /// The bytes to hide.
    pub(crate) span: Range<usize>,
    /// The rule's id (the kind of credential).
    pub(crate) rule: &'a str,
    /// Whether it is a block (a private key) that may go on past the text seen so far.
    pub(crate) block: bool,
}

/// How far back from a match the lockfile-hash check looks for the token's start.
pub(crate) const HASH_LOOKBACK: usize = 256;

/// The most bytes of one secret the filters judge.
const MAX_SECRET: usize = 4096;

/// The most candidates one rule validates in one file before it gives up on that file (a
/// file of ten thousand placeholders is not worth more).
const MAX_CANDIDATES: usize = 10_000;

/// Shannon entropy of `bytes`, in bits per byte.
pub(crate) fn entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in bytes {
        counts[b as usize] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// Where `needle` starts in `hay`, overlapping occurrences included.
fn occurrences<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    hay.windows(needle.len().max(1))
        .enumerate()
        .filter(move |(_, w)| !needle.is_empty() && *w == needle)
        .map(|(i, _)| i)
}

/// Whether `placeholder`, found at `at` in `secret`, stands apart from the secret's other
/// letters and digits: on each side, the secret's edge, a byte that is not a letter or
/// digit, or, for a placeholder that is one byte repeated (`xxxx`), more of that byte.
fn stands_apart(secret: &[u8], at: usize, placeholder: &[u8]) -> bool {
    let run = placeholder
        .first()
        .filter(|b| placeholder.iter().all(|c| c == *b));
    let apart = |neighbour: Option<&u8>| match neighbour {
        None => true,
        Some(n) => !n.is_ascii_alphanumeric() || Some(n) == run,
    };
    apart(at.checked_sub(1).and_then(|i| secret.get(i)))
        && apart(secret.get(at + placeholder.len()))
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=' | b'_' | b'-' | b'.' | b':' | b'~')
}

impl Ruleset {
    /// Whether the token around `start` begins with a hash label (`sha512-`, `h1:`, …).
    fn inside_hash(&self, bytes: &[u8], start: usize) -> bool {
        let floor = start.saturating_sub(HASH_LOOKBACK);
        let mut s = start;
        while s > floor && is_token_byte(bytes[s - 1]) {
            s -= 1;
        }
        let token = &bytes[s..start.min(bytes.len())];
        let head = &bytes[s..bytes.len().min(s + 16)];
        let lower: Vec<u8> = head.to_ascii_lowercase();
        // The label must start the token and precede the match (not be the match itself).
        self.hash_labels
            .iter()
            .any(|l| lower.starts_with(l) && token.len() >= l.len())
    }

    /// Whether `secret`, a candidate of `rule`, is a placeholder: it holds one of the
    /// placeholders as filler written in place of (part of) the secret.
    ///
    /// Changed: a placeholder used to count wherever it occurred in the secret, so a real
    /// token whose random body holds `xxxx` or `your` by chance (about one GitHub token in
    /// 100,000) passed as a placeholder, whatever bytes surrounded it. Filler stands apart
    /// from the secret's random characters; a chance occurrence is wedged between them. So
    /// now an occurrence counts when the placeholder holds a byte that is not a letter or
    /// digit (`<`, `${`, `****`), or when each of its sides meets the secret's edge, a byte
    /// that is not a letter or digit, or more of the one byte it repeats (`xxxx` in
    /// `xxxxxxxx`). Occurrences wedged between other letters and digits count only
    /// together: the secret is a placeholder when what is left without them fails the
    /// rule's length or entropy bar (`mydummypass`), and a credential when it still clears
    /// both (a random body).
    fn is_placeholder(&self, rule: &ContentRule, secret: &[u8]) -> bool {
        let mut wedged = vec![false; secret.len()];
        let mut any_wedged = false;
        for p in &self.placeholders {
            let word = p.iter().all(u8::is_ascii_alphanumeric);
            for at in occurrences(secret, p) {
                if !word || stands_apart(secret, at, p) {
                    return true;
                }
                wedged[at..at + p.len()].fill(true);
                any_wedged = true;
            }
        }
        if !any_wedged {
            return false;
        }
        let rest: Vec<u8> = secret
            .iter()
            .zip(&wedged)
            .filter(|(_, w)| !**w)
            .map(|(b, _)| *b)
            .collect();
        rest.len() < rule.min_len || entropy(&rest) < rule.entropy
    }

    /// Whether `rule` has a candidate in `bytes` that clears every filter.
    fn rule_hits(&self, rule: &ContentRule, bytes: &[u8]) -> bool {
        self.accepted(rule, bytes).next().is_some()
    }

    /// The span of each of `rule`'s candidates in `bytes` that clears every filter: its
    /// `secret` group (else the whole match), whole even past what the filters judge.
    fn accepted<'a>(
        &'a self,
        rule: &'a ContentRule,
        bytes: &'a [u8],
    ) -> impl Iterator<Item = Range<usize>> + 'a {
        let mut context: Option<bool> = None;
        rule.regex
            .captures_iter(bytes)
            .take(MAX_CANDIDATES)
            .filter_map(move |caps| {
                let whole = caps.get(0);
                let secret = rule.secret_group.and_then(|i| caps.get(i)).or(whole)?;
                let s = &secret.as_bytes()[..secret.len().min(MAX_SECRET)];
                if s.len() < rule.min_len || entropy(s) < rule.entropy {
                    return None;
                }
                if rule.allow.iter().any(|a| a.is_match(s)) || self.is_placeholder(rule, s) {
                    return None;
                }
                let start = whole.map_or(secret.start(), |m| m.start());
                if self.inside_hash(bytes, start)
                    || (rule.line_or_colon && !line_or_colon(bytes, start))
                {
                    return None;
                }
                let ok =
                    *context.get_or_insert_with(|| rule.requires.iter().all(|r| r.is_match(bytes)));
                ok.then(|| secret.range())
            })
    }

    /// The content rules `bytes` may trip: the `always` ones and those a keyword woke. None
    /// when no content pattern matches at all (most texts).
    fn woken(&self, bytes: &[u8]) -> Option<Vec<bool>> {
        // One pass over every pattern at once (those run `alone` each in a pass of its own,
        // found by its literal): a file none of them matches is clean (most files are),
        // whatever the filters would say.
        if !self.set.is_match(bytes)
            && !self
                .alone
                .iter()
                .any(|&r| self.contents[r].regex.is_match(bytes))
        {
            return None;
        }
        let mut woken: Vec<bool> = self.contents.iter().map(|r| r.always).collect();
        let mut left = woken.iter().filter(|w| !**w).count();
        // Every position that starts a keyword: the longest keyword there is reported, and
        // the search resumes one byte after its start, so overlapping keywords are seen too
        // (a keyword inside a longer one wakes its rules through the longer one).
        let mut at = 0;
        while left > 0 && at < bytes.len() {
            let Some(m) = self
                .prefilter
                .find(aho_corasick::Input::new(bytes).span(at..bytes.len()))
            else {
                break;
            };
            for &r in &self.keyword_rules[m.pattern().as_usize()] {
                if !woken[r] {
                    woken[r] = true;
                    left -= 1;
                }
            }
            at = m.start() + 1;
        }
        Some(woken)
    }

    /// Every credential in `bytes`: each accepted candidate of every woken rule, as the
    /// span to hide and the rule's id, a block rule's span running on to the block's end
    /// ([`block_end`]); sorted by start, overlapping spans merged (the earlier one names
    /// the kind). Linear in `bytes` for each rule woken.
    pub(crate) fn find(&self, bytes: &[u8]) -> Vec<Found<'_>> {
        let Some(woken) = self.woken(bytes) else {
            return Vec::new();
        };
        let mut found: Vec<Found<'_>> = Vec::new();
        for (rule, _) in self.contents.iter().zip(woken).filter(|(_, w)| *w) {
            for span in self.accepted(rule, bytes) {
                let end = if rule.block {
                    block_end(bytes, span.end)
                } else {
                    span.end
                };
                found.push(Found {
                    span: span.start..end,
                    rule: rule.id.as_str(),
                    block: rule.block,
                });
            }
        }
        found.sort_by_key(|f| (f.span.start, std::cmp::Reverse(f.span.end)));
        let mut merged: Vec<Found<'_>> = Vec::with_capacity(found.len());
        for f in found {
            match merged.last_mut() {
                Some(last) if f.span.start < last.span.end => {
                    if f.span.end > last.span.end {
                        last.span.end = f.span.end;
                        last.block |= f.block;
                    }
                }
                _ => merged.push(f),
            }
        }
        merged
    }

    /// The first content rule `bytes` trips.
    pub(crate) fn scan(&self, bytes: &[u8]) -> Option<&str> {
        let woken = self.woken(bytes)?;
        self.contents
            .iter()
            .zip(woken)
            .filter(|(_, w)| *w)
            .find(|(rule, _)| self.rule_hits(rule, bytes))
            .map(|(rule, _)| rule.id.as_str())
    }

    /// The first name rule `path` trips among those the name alone decides (`pending`
    /// false) or among those the content must confirm (`pending` true).
    pub(crate) fn name(&self, path: &str, pending: bool) -> Option<&NameRule> {
        let ix = &self.name_index;
        let file = path.rsplit('/').next().unwrap_or(path);
        // Most paths match no pattern at all: answered without building the sets of matches
        // (each an allocation), which a copy would otherwise do for every file it selects.
        let any = ix.base.is_match(file)
            || ix.full.is_match(path)
            || path
                .match_indices('/')
                .any(|(i, _)| ix.full.is_match(&path[..i]));
        if !any {
            return None;
        }
        self.name_matched(path, pending)
    }

    /// [`Ruleset::name`] without its shortcut for a path that matches no pattern.
    fn name_matched(&self, path: &str, pending: bool) -> Option<&NameRule> {
        let ix = &self.name_index;
        let file = path.rsplit('/').next().unwrap_or(path);
        // Per rule: a path pattern matched, an exception matched.
        let mut hit = vec![(false, false); self.names.len()];
        let mut mark = |owner: &[(usize, bool)], set: regex::SetMatches| {
            for i in set.iter() {
                let (rule, except) = owner[i];
                if except {
                    hit[rule].1 = true;
                } else {
                    hit[rule].0 = true;
                }
            }
        };
        mark(&ix.base_owner, ix.base.matches(file));
        // A path pattern also matches what is under a directory it matches.
        mark(&ix.full_owner, ix.full.matches(path));
        for (i, _) in path.match_indices('/') {
            mark(&ix.full_owner, ix.full.matches(&path[..i]));
        }
        self.names
            .iter()
            .zip(hit)
            .find(|(r, (h, ex))| *h && !*ex && r.unless_content.is_some() == pending)
            .map(|(r, _)| r)
    }
}

/// The length of the line break at `at`: a real one (`\n`, `\r\n`) or one written as an
/// escape inside a quoted string (`\\n`, `\\r\\n`); 0 when there is none.
fn line_break(bytes: &[u8], at: usize) -> usize {
    let rest = &bytes[at.min(bytes.len())..];
    [&b"\r\n"[..], b"\n", br"\r\n", br"\n"]
        .iter()
        .find(|b| rest.starts_with(b))
        .map_or(0, |b| b.len())
}

/// Where the key block whose first body line ends at `end` ends: after every following line
/// that is only base64 (blanks before it allowed) and after its `-----END …-----` line; the
/// end of `bytes` when the text stops inside the block (more of it may follow in a stream).
/// Linear in what it passes over.
pub(crate) fn block_end(bytes: &[u8], mut end: usize) -> usize {
    loop {
        let brk = line_break(bytes, end);
        if brk == 0 {
            return end;
        }
        match block_line(bytes, end + brk) {
            BlockLine::Body(after) => end = after,
            BlockLine::Last(after) => return after,
            BlockLine::Not => return end,
        }
    }
}

/// What the line starting at `start` is to a key block before it.
pub(crate) enum BlockLine {
    /// More base64: the line ends at this offset.
    Body(usize),
    /// The block ends at this offset: after its END line, or the text stops here.
    Last(usize),
    /// Not the block's (a blank line, prose): the block ended before it.
    Not,
}

/// What the line at `start` is to a key block that came before it.
pub(crate) fn block_line(bytes: &[u8], start: usize) -> BlockLine {
    let mut s = start;
    while s < bytes.len() && matches!(bytes[s], b' ' | b'\t') {
        s += 1;
    }
    if s == bytes.len() {
        return BlockLine::Last(s);
    }
    if bytes[s..].starts_with(b"-----END") {
        let close = bytes[s + 8..]
            .windows(5)
            .take(80)
            .position(|w| w == b"-----");
        return close.map_or(BlockLine::Not, |p| BlockLine::Last(s + 8 + p + 5));
    }
    let run = bytes[s..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        .count();
    let after = s + run;
    if run == 0 || (after < bytes.len() && line_break(bytes, after) == 0) {
        return BlockLine::Not;
    }
    BlockLine::Body(after)
}

/// Whether `start` begins a line (after blanks) or follows a `:`.
fn line_or_colon(bytes: &[u8], start: usize) -> bool {
    let floor = start.saturating_sub(HASH_LOOKBACK);
    let mut s = start;
    if s > 0 && bytes[s - 1] == b':' {
        return true;
    }
    while s > floor && matches!(bytes[s - 1], b' ' | b'\t') {
        s -= 1;
    }
    s == 0 || matches!(bytes[s - 1], b'\n' | b'\r')
}

/// Whether a name rule that the content must confirm is confirmed by `bytes`.
pub(crate) fn confirmed(rule: Option<UnlessContent>, bytes: &[u8]) -> bool {
    match rule {
        None => true,
        Some(UnlessContent::Zip) => {
            !(bytes.starts_with(b"PK\x03\x04")
                || bytes.starts_with(b"PK\x05\x06")
                || bytes.starts_with(b"PK\x07\x08"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_orders_random_above_repetitive() {
        assert_eq!(entropy(b""), 0.0);
        assert_eq!(entropy(b"aaaa"), 0.0);
        assert!((entropy(b"ab") - 1.0).abs() < 1e-9);
        assert!(entropy(b"q8ZrT2vLm0XyPa5KdW3sNcUe") > 4.0);
    }

    /// The shrunk case of `a_planted_token_is_found_anywhere` (legate-workspace,
    /// `tests/secret_rules.rs`): the bytes around the token never mattered. The fake GitHub
    /// token of seed 1924794480582747541 has `xxxx` by chance in its random body
    /// (`…4hvxxxxJz…`), and a placeholder used to count wherever it occurred, so the token
    /// alone, 40 bytes, was waved through as a placeholder.
    #[test]
    fn a_placeholder_inside_a_random_token_by_chance_does_not_hide_it() {
        use crate::fakes::{ALNUM, rnd};
        let token = format!("{}_{}", "ghp", rnd(ALNUM, 36, 1_924_794_480_582_747_541));
        assert!(token.contains("xxxx"));
        assert_eq!(crate::scan_content(token.as_bytes()), Some("github-token"));
    }

    /// Placeholders written as filler still make a candidate no credential: standing apart
    /// (`-your-`), as a run (`xxxx` in `xxxxxxxxxxxxxxxx`), or wedged in a secret whose rest
    /// is too plain to be one (`mydummypass`). Each would be found without the filter.
    #[test]
    fn placeholders_written_as_filler_still_pass() {
        use crate::fakes::{ALNUM, rnd};
        let body = rnd(ALNUM, 20, 7);
        for text in [
            format!("{}-your-own-token-goes-here\n", "glpat"),
            format!("{}_{}xxxxxxxxxxxxxxxx{}\n", "ghp", &body[..10], &body[10..]),
            "machine example.org login bob password mydummypass\n".to_string(),
        ] {
            assert_eq!(crate::scan_content(text.as_bytes()), None, "{text}");
        }
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        /// The shortcut for paths that match no pattern answers what the sets of matches
        /// answer, for paths made of names the rules know, their near misses and noise.
        #[test]
        fn the_shortcut_answers_as_the_full_match(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(vec![
                        ".env", ".env.example", ".env.local", "id_rsa", "id_rsa.pub", ".ssh",
                        "server.key", "cert.pem", "secrets", "credentials.json", ".aws",
                        "config", ".npmrc", "keystore.jks", "src", "a.key.txt", ".netrc",
                        "terraform.tfstate", ".git-credentials", "x",
                    ]).prop_map(str::to_string),
                    "[a-zA-Z0-9._-]{1,12}",
                ],
                1..5,
            ),
            pending in proptest::bool::ANY,
        ) {
            let set = crate::rules::ruleset().expect("the shipped rules compile");
            let path = parts.join("/");
            let fast = set.name(&path, pending).map(|r| r.id.as_str());
            let full = set.name_matched(&path, pending).map(|r| r.id.as_str());
            proptest::prop_assert_eq!(fast, full, "{}", path);
        }
    }

    /// The one combined pass the clearing passes stand for: every content pattern at once.
    fn combined(set: &Ruleset) -> &'static regex::bytes::RegexSet {
        static COMBINED: std::sync::OnceLock<regex::bytes::RegexSet> = std::sync::OnceLock::new();
        COMBINED.get_or_init(|| {
            regex::bytes::RegexSetBuilder::new(set.contents.iter().map(|c| c.regex.as_str()))
                .unicode(false)
                .size_limit(64 << 20)
                .dfa_size_limit(64 << 20)
                .build()
                .expect("the shipped patterns combine")
        })
    }

    /// A rule run `alone` is out of the combined pass, and its pattern alone still keeps a
    /// file it matches from being cleared.
    #[test]
    fn a_rule_run_alone_still_keeps_its_file_from_being_cleared() {
        use crate::fakes::{ALNUM, rnd};
        let set = crate::rules::ruleset().expect("the shipped rules compile");
        let alone: Vec<&str> = set
            .alone
            .iter()
            .map(|&r| set.contents[r].id.as_str())
            .collect();
        assert_eq!(alone, ["terraform-cloud-token"]);
        assert_eq!(set.set.len() + 1, set.contents.len());
        let token = format!(
            "{}.{}.{}",
            rnd(ALNUM, 14, 21),
            "atlasv1",
            rnd(ALNUM, 64, 22)
        );
        let text = format!("token = \"{token}\"\n");
        assert!(!set.set.is_match(text.as_bytes()));
        assert!(set.woken(text.as_bytes()).is_some());
        assert_eq!(
            crate::scan_content(text.as_bytes()),
            Some("terraform-cloud-token")
        );
    }

    proptest::proptest! {
        /// The clearing passes (the combined one and each `alone` rule's) clear exactly the
        /// texts one pass over every content pattern clears: texts of credentials of every
        /// kind, the `alone` rule's shape, near misses and noise.
        #[test]
        fn the_clearing_passes_clear_what_one_combined_pass_clears(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(
                        crate::fakes::fakes().into_iter().map(|(f, _)| f).collect::<Vec<_>>()
                    ),
                    "[A-Za-z0-9]{12,15}[.]atlasv[01][.][A-Za-z0-9_=-]{55,72}",
                    "[a-z0-9 .=:_\"\n-]{0,40}",
                ],
                0..6,
            ),
        ) {
            let set = crate::rules::ruleset().expect("the shipped rules compile");
            let text = parts.concat();
            proptest::prop_assert_eq!(
                set.woken(text.as_bytes()).is_some(),
                combined(set).is_match(text.as_bytes()),
                "{:?}",
                text
            );
        }
    }

    #[test]
    fn a_zip_is_not_confirmed_anything_else_is() {
        assert!(!confirmed(Some(UnlessContent::Zip), b"PK\x03\x04rest"));
        assert!(confirmed(Some(UnlessContent::Zip), b"-----BEGIN"));
        assert!(confirmed(Some(UnlessContent::Zip), b""));
        assert!(confirmed(None, b"PK\x03\x04"));
    }
}
