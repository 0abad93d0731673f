use super::*;
use proptest::prelude::*;

fn entry(i: u64, verdict: Verdict) -> Entry {
    Entry {
        path: format!("d/f{i}.txt"),
        key: FileState::from_parts(
            (2049, 1000 + i, 10 * i, 0o100644),
            (1_700_000_000 + i as i64, 5),
            (1_700_000_001 + i as i64, 7),
        ),
        pending: None,
        verdict,
    }
}

fn sample() -> Vec<Entry> {
    vec![
        entry(1, Verdict::Clean),
        entry(
            2,
            Verdict::Blocked {
                reason: BlockReason::SecretContent,
                rule: "aws-access-key-id".into(),
            },
        ),
    ]
}

#[test]
fn a_cache_file_reads_back_only_whole_and_for_the_same_rules() {
    let bytes = render("fp", sample()).unwrap();
    assert_eq!(parse(&bytes, "fp").unwrap(), sample());
    assert!(parse(&bytes, "other").is_err(), "other rules or patterns");
    let mut v2 = bytes.clone();
    v2[MAGIC.len() - 2] = b'2';
    assert!(parse(&v2, "fp").is_err(), "another version");
    assert!(parse(b"", "fp").is_err());
}

#[test]
fn the_fingerprint_follows_the_exclusions_and_exceptions() {
    let none = fingerprint(&SecretPatterns::default());
    let excl = fingerprint(&SecretPatterns::new(&["*.pem".into()], &[]).unwrap());
    let exc = fingerprint(&SecretPatterns::new(&[], &["*.pem".into()]).unwrap());
    assert_ne!(none, excl);
    assert_ne!(none, exc);
    assert_ne!(excl, exc);
    assert_eq!(none, fingerprint(&SecretPatterns::default()));
}

#[test]
fn a_saved_cache_is_private_and_replaced_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("project");
    let state = tmp.path().join("state");
    let secrets = SecretPatterns::default();
    let cache = ScanCache::open(&state, &root, &secrets);
    assert!(cache.is_empty());
    cache.save(&[], sample());
    let again = ScanCache::open(&state, &root, &secrets);
    assert_eq!(again.len(), 2);
    let dir = cache.file.parent().unwrap();
    assert_eq!(fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
    assert_eq!(fs::metadata(&cache.file).unwrap().mode() & 0o777, 0o600);
    // Only the cache file is left: no temporary file.
    assert_eq!(fs::read_dir(dir).unwrap().count(), 1);
    // A stale temporary file a killed writer left is swept at the next save.
    let stale = dir.join(format!(".{FILE}.tmp-1-1"));
    fs::write(&stale, b"half").unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(600);
    File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(old)
        .unwrap();
    again.save(&[], Vec::new());
    assert!(!stale.exists());
    // The earlier verdicts on files this copy did not select are kept.
    assert_eq!(ScanCache::open(&state, &root, &secrets).len(), 2);
    // Another project has its own.
    assert!(ScanCache::open(&state, &tmp.path().join("other"), &secrets).is_empty());
}

#[test]
fn a_verdict_the_detector_could_not_make_is_not_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    fs::write(&path, b"x").unwrap();
    let meta = fs::metadata(&path).unwrap();
    let f = SelectedFile {
        path: "f".into(),
        size: 1,
        dev: meta.dev(),
        ino: meta.ino(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
        ctime: (meta.ctime(), meta.ctime_nsec()),
        mode: meta.mode(),
        pending_rule: None,
    };
    let unavailable = Verdict::Blocked {
        reason: BlockReason::SecretContent,
        rule: SCANNER_UNAVAILABLE.into(),
    };
    assert!(Entry::new(&f, &meta, unavailable).is_none());
    let found = Verdict::Blocked {
        reason: BlockReason::SecretContent,
        rule: "aws-access-key-id".into(),
    };
    assert!(Entry::new(&f, &meta, found).is_some());
    assert!(Entry::new(&f, &meta, Verdict::Clean).is_some());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any cut or any changed byte of a cache file makes it unusable, never a different
    /// set of verdicts.
    #[test]
    fn a_cut_or_changed_cache_file_is_refused(cut in 0usize..2000, at in 0usize..2000, to: u8) {
        let bytes = render("fp", sample()).unwrap();
        let cut = cut % bytes.len();
        prop_assert!(parse(&bytes[..cut], "fp").is_err());
        let at = at % bytes.len();
        let mut changed = bytes.clone();
        prop_assume!(changed[at] != to);
        changed[at] = to;
        match parse(&changed, "fp") {
            Err(_) => {}
            // A changed byte can only be accepted where it means the same (none here
            // does: the checksum covers the body, the header is compared whole).
            Ok(entries) => prop_assert_eq!(entries, sample()),
        }
    }

    /// Arbitrary bytes never panic the parser.
    #[test]
    fn arbitrary_bytes_are_refused_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut with_magic = MAGIC.as_bytes().to_vec();
        with_magic.extend_from_slice(&bytes);
        let _ = parse(&bytes, "fp");
        let _ = parse(&with_magic, "fp");
    }
}

/// Sets `path`'s mtime `days` days back (a directory's too).
fn age(path: &Path, days: u64) {
    let then = std::time::SystemTime::now() - Duration::from_secs(days * 24 * 3600);
    File::open(path)
        .unwrap()
        .set_times(fs::FileTimes::new().set_modified(then))
        .unwrap();
}

/// A project's cache directory under `state` as a copy leaves it, its file `days` old.
fn project(state: &Path, name: &str, days: u64) -> PathBuf {
    let dir = state.join(name);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(FILE), b"x").unwrap();
    age(&dir.join(FILE), days);
    dir
}

#[test]
fn only_caches_unused_for_the_period_and_holding_only_their_own_files_are_pruned() {
    let state = tempfile::tempdir().unwrap();
    let state = state.path();
    let hash = |c: char| c.to_string().repeat(64);
    let old = project(state, &hash('a'), 40);
    let fresh = project(state, &hash('b'), 2);
    // Another file inside: not this module's to remove, whatever its age.
    let foreign = project(state, &hash('c'), 40);
    fs::write(foreign.join("notes"), b"mine").unwrap();
    // A name that is not a sha256.
    let other_name = project(state, "projects", 40);
    // A link named as a cache, to an old cache elsewhere: neither is touched.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = project(elsewhere.path(), &hash('d'), 40);
    std::os::unix::fs::symlink(&target, state.join(hash('e'))).unwrap();
    // Only a killed writer's temporary file left, in a directory unused for as long.
    let temp_only = state.join(hash('f'));
    fs::create_dir(&temp_only).unwrap();
    fs::write(temp_only.join(format!("{TEMP_PREFIX}1-2")), b"half").unwrap();
    age(&temp_only.join(format!("{TEMP_PREFIX}1-2")), 40);
    age(&temp_only, 40);

    let month = Duration::from_secs(30 * 24 * 3600);
    assert_eq!(prune(state, month), 2);
    assert!(!old.exists() && !temp_only.exists());
    assert!(fresh.join(FILE).exists());
    assert!(foreign.join(FILE).exists() && foreign.join("notes").exists());
    assert!(other_name.join(FILE).exists());
    assert!(target.join(FILE).exists());
    assert!(fs::symlink_metadata(state.join(hash('e'))).is_ok());
    // Nothing more to do, and no state directory is no error.
    assert_eq!(prune(state, month), 0);
    assert_eq!(prune(&state.join("missing"), month), 0);
}

#[test]
fn a_pruned_projects_next_copy_starts_an_empty_cache() {
    let state = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let secrets = SecretPatterns::default();
    let cache = ScanCache::open(state.path(), root.path(), &secrets);
    write(&cache.file, &cache.fingerprint, sample()).unwrap();
    assert_eq!(
        ScanCache::open(state.path(), root.path(), &secrets).len(),
        2
    );
    age(&cache.file, 40);
    assert_eq!(prune(state.path(), Duration::from_secs(30 * 24 * 3600)), 1);
    assert!(ScanCache::open(state.path(), root.path(), &secrets).is_empty());
}
