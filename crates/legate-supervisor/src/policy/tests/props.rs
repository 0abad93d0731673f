//! Property tests: command words and path globs under hostile input.

use super::*;
use proptest::prelude::*;

/// Quotes one word for a POSIX shell (single quotes; `'` as `'\''`).
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn word() -> impl Strategy<Value = String> {
    // Any text, operators and quotes included.
    "[ -~\t\n]{0,12}"
}

fn safe_word() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_./=:,+-]{1,10}"
}

fn operator() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        ";", "&&", "||", "|", "&", "\n", ">", ">>", "<", "2>", "$(", "`", "(", ")", " #",
    ])
}

fn allowed_by_policy(policed: &Policed, s: &Supervision, raw: serde_json::Value) -> bool {
    let r = policed.decide(s, &execute(raw));
    r.decision == Decision::Allow && r.decider == Decider::Policy
}

fn cargo_test() -> Policed {
    Policed::new(policy(super::CARGO_TEST), Rules)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Words quoted by the shell's own rules come back as exactly those words, one command:
    /// no quoting can split a word or join two.
    #[test]
    fn quoted_words_come_back_unchanged(words in prop::collection::vec(word(), 1..6)) {
        let script = words.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" ");
        let command = Command::from_script(&script);
        prop_assert_eq!(command.plain, Some(words.clone()));
        prop_assert!(!command.unreadable);
    }

    /// A chain, redirection or substitution anywhere after an allowed prefix is never allowed,
    /// whatever comes around it.
    #[test]
    fn a_chain_never_matches_allow(
        args in prop::collection::vec(safe_word(), 0..4),
        op in operator(),
        tail in prop::collection::vec(word(), 0..4),
        spaced in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = shared(dir.path());
        let gap = if spaced { " " } else { "" };
        let script = format!("cargo test {}{gap}{op}{gap}{}", args.join(" "), tail.join(" "));
        let plain = allowed_by_policy(&cargo_test(), &s, json!({ "command": script.clone() }));
        prop_assert!(!plain, "{}", script);
        // The same script behind a shell wrapper, as Codex sends it.
        let argv = json!({ "command": ["/bin/bash", "-lc", script.clone()] });
        prop_assert!(!allowed_by_policy(&cargo_test(), &s, argv), "{}", script);
    }

    /// Prefix matching is on whole words: `cargo test ARGS…` is allowed for any quoted args;
    /// a program or first argument that differs by a character, or words glued by quoting,
    /// is not.
    #[test]
    fn prefixes_match_whole_words(
        args in prop::collection::vec(word(), 0..4),
        program in "[a-z]{1,6}",
        first in "[a-z]{1,6}",
    ) {
        let dir = tempfile::tempdir().unwrap();
        let s = shared(dir.path());
        let policed = cargo_test();
        let quoted: Vec<String> = args.iter().map(|a| quote(a)).collect();
        let tail = quoted.join(" ");
        let allowed = |text: String| allowed_by_policy(&policed, &s, json!({ "command": text }));
        let mut argv = vec!["cargo".to_string(), "test".to_string()];
        argv.extend(args.iter().cloned());
        let argv_allowed = allowed_by_policy(&policed, &s, json!({ "command": argv }));
        let glued = quote(&format!("test {first}"));
        let (a, b, c) = (format!("cargo test {tail}"), format!("'cargo' \"test\" {tail}"), format!("{program} test {tail}"));
        let (d, e, f) = (format!("cargo {first} {tail}"), format!("'cargo test' {tail}"), format!("cargo {glued} {tail}"));
        prop_assert!(allowed(a));
        prop_assert!(allowed(b));
        prop_assert!(argv_allowed);
        prop_assert_eq!(allowed(c), program == "cargo");
        prop_assert_eq!(allowed(d), first == "test");
        prop_assert!(!allowed(e));
        prop_assert!(!allowed(f));
    }

    /// A program named by a path stands for its name only directly inside a standard bin
    /// directory; any other directory, or `.`/`..` anywhere, stands for nothing.
    #[test]
    fn a_program_path_outside_the_bin_dirs_is_not_the_program(
        dirs in prop::collection::vec("[a-z.]{1,6}", 0..4),
    ) {
        let path = format!("/{}/cargo", dirs.join("/"));
        let expected = command::STANDARD_BIN_DIRS.contains(&format!("/{}", dirs.join("/")).as_str());
        prop_assert_eq!(command::program_name(&path) == Some("cargo"), expected, "{}", path);
        let dir = tempfile::tempdir().unwrap();
        let s = shared(dir.path());
        let raw = json!({ "command": format!("{path} test") });
        prop_assert_eq!(allowed_by_policy(&cargo_test(), &s, raw), expected);
    }

    /// Whatever text an agent sends, the parser returns (no panic), and only a command with
    /// one segment is ever plain.
    #[test]
    fn any_text_parses_or_is_unreadable(script in "[ -~\t\n]{0,64}") {
        let command = Command::from_script(&script);
        if command.plain.is_some() {
            prop_assert_eq!(command.segments.len(), 1, "{}", script);
            prop_assert!(!command.unreadable);
        }
    }

    /// A location that leaves the root by `..`, by an absolute path, or through a symlink
    /// planted inside it is outside: it matches no glob, not even `**`.
    #[test]
    fn paths_that_leave_the_root_match_nothing(
        parts in prop::collection::vec(prop::sample::select(vec!["..", ".", "a", "b", "link", "secrets"]), 1..7),
        absolute in prop::sample::select(vec!["/etc/passwd", "/", "/tmp", "/root/.ssh/id_rsa"]),
    ) {
        let outside = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        let all = paths::Globs::new(&["**".to_string()]).unwrap();
        let relative: PathBuf = parts.iter().collect();
        let lexical = crate::containment::normalize(&root.join(&relative));
        let through_link = parts.iter().scan(PathBuf::new(), |p, c| { p.push(c); Some(crate::containment::normalize(p)) })
            .any(|p| p.starts_with("link"));
        let places = paths::places(&root, std::slice::from_ref(&relative));
        if !lexical.starts_with(&root) || through_link {
            prop_assert_eq!(&places[0], &Place::Outside, "{}", relative.display());
            prop_assert!(!paths::any_match(&all, &places));
            prop_assert!(!paths::all_match(&all, &places));
        }
        let places = paths::places(&root, &[PathBuf::from(absolute)]);
        prop_assert_eq!(&places[0], &Place::Outside);
        prop_assert!(!paths::all_match(&all, &places));
    }

    /// A glob matches the resolved path relative to the root, so `src/**` holds only what
    /// is under `src/` once `..` and `.` are taken out.
    #[test]
    fn a_glob_matches_only_beneath_its_directory(
        parts in prop::collection::vec(prop::sample::select(vec!["..", ".", "src", "docs", "x.rs"]), 1..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let globs = paths::Globs::new(&["src/**".to_string()]).unwrap();
        let relative: PathBuf = parts.iter().collect();
        let places = paths::places(&root, std::slice::from_ref(&relative));
        let lexical = crate::containment::normalize(&root.join(&relative));
        let beneath_src = lexical.strip_prefix(&root).is_ok_and(|r| r.starts_with("src") && r != Path::new("src"));
        prop_assert_eq!(paths::all_match(&globs, &places), beneath_src, "{}", relative.display());
    }
}
