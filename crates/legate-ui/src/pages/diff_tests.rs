//! Hostile patches through the diff view: markup in content and in paths, CRLF, no newline at
//! the end, binary parts, parts that do not match the file list, and size caps.

use super::*;
use legate_engine::{PatchSummary, Preview};
use proptest::prelude::*;

const OLD: &str = "1111111111111111111111111111111111111111";
const NEW: &str = "2222222222222222222222222222222222222222";

fn change(path: &str, status: ChangeStatus, ins: u64, del: u64) -> FileChange {
    FileChange {
        path: path.to_owned(),
        status,
        insertions: Some(ins),
        deletions: Some(del),
        binary: false,
        mode: Some(0o644),
        old_blob: (status != ChangeStatus::A).then(|| OLD.to_owned()),
        new_blob: (status != ChangeStatus::D).then(|| NEW.to_owned()),
    }
}

fn preview(files: Vec<FileChange>, patch: &[u8]) -> Preview {
    Preview {
        sha256: "ab".repeat(32),
        patch_length: patch.len() as u64,
        tree: "t".into(),
        summary: PatchSummary {
            files_changed: files.len(),
            ..PatchSummary::default()
        },
        files,
        patch: patch.to_vec(),
    }
}

fn modified(path: &str, body: &str) -> String {
    format!(
        "diff --git a/{path} b/{path}\nindex {OLD}..{NEW} 100644\n--- a/{path}\n+++ b/{path}\n{body}"
    )
}

#[test]
fn script_in_content_and_path_is_escaped() {
    let path = "<script>alert(1)</script>.md";
    let patch = modified(
        path,
        "@@ -1 +1 @@\n-<b>old</b>\n+<script>alert('x')</script>&amp;\n",
    );
    let html = render(
        "t1",
        "/tasks/t1",
        &preview(vec![change(path, ChangeStatus::M, 1, 1)], patch.as_bytes()),
        0,
    )
    .into_string();
    assert!(!html.contains("<script"), "raw markup leaked: {html}");
    assert!(!html.contains("<b>old"), "raw markup leaked: {html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;.md"));
    assert!(html.contains("+&lt;script&gt;alert('x')&lt;/script&gt;&amp;amp;"));
    assert!(html.contains("-&lt;b&gt;old&lt;/b&gt;"));
}

#[test]
fn line_numbers_follow_the_hunks() {
    let part = modified(
        "a.txt",
        "@@ -3,4 +3,5 @@ fn x\n ctx3\n-gone4\n+new4\n+new5\n ctx5\n@@ -20,0 +22,1 @@\n+tail\n",
    );
    let d = parse_file(part.as_bytes());
    let nums: Vec<_> = d
        .lines
        .iter()
        .filter(|l| !matches!(l.kind, LineKind::Header | LineKind::Hunk))
        .map(|l| (l.kind, l.old, l.new, l.text.as_str()))
        .collect();
    assert_eq!(
        nums,
        vec![
            (LineKind::Context, Some(3), Some(3), "ctx3"),
            (LineKind::Removed, Some(4), None, "gone4"),
            (LineKind::Added, None, Some(4), "new4"),
            (LineKind::Added, None, Some(5), "new5"),
            (LineKind::Context, Some(5), Some(6), "ctx5"),
            (LineKind::Added, None, Some(22), "tail"),
        ]
    );
}

#[test]
fn crlf_is_marked_and_no_newline_is_a_note() {
    let part = modified(
        "w.txt",
        "@@ -1 +1 @@\n-one\r\n+one\r\x1b[31mred\r\n\\ No newline at end of file\n",
    );
    let d = parse_file(part.as_bytes());
    let removed = d
        .lines
        .iter()
        .find(|l| l.kind == LineKind::Removed)
        .unwrap();
    assert!(removed.crlf);
    assert_eq!(removed.text, "one");
    let added = d.lines.iter().find(|l| l.kind == LineKind::Added).unwrap();
    // The inner CR is visible, the escape byte is replaced: nothing reaches a terminal or DOM raw.
    assert_eq!(added.text, "one\u{240D}\u{FFFD}[31mred");
    assert!(added.crlf);
    let note = d.lines.iter().find(|l| l.kind == LineKind::Note).unwrap();
    assert_eq!(note.text, "\\ No newline at end of file");
    let html = render_file(&d, "t").into_string();
    assert!(html.contains("CRLF"));
    assert!(!html.contains('\x1b'));
}

#[test]
fn binary_files_are_described_not_dumped() {
    let patch = format!(
        "diff --git a/img.png b/img.png\nindex {OLD}..{NEW} 100644\nGIT binary patch\nliteral 12\nTcmZ?l<script>secretpayload\n\n"
    );
    let mut f = change("img.png", ChangeStatus::M, 0, 0);
    f.binary = true;
    f.insertions = None;
    f.deletions = None;
    let html = render("t", "/tasks/t", &preview(vec![f], patch.as_bytes()), 0).into_string();
    assert!(html.contains("Binary file modified"));
    assert!(
        !html.contains("secretpayload"),
        "binary body dumped: {html}"
    );
    assert!(!html.contains("GIT binary patch"));
}

#[test]
fn a_part_naming_other_blobs_is_not_shown_under_the_files_name() {
    // The agent cannot make a part render under another file's name: the index line must
    // name the preview's blobs.
    let patch = format!(
        "diff --git a/a b/a\nindex 3333333333333333333333333333333333333333..{NEW} 100644\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+forged\n"
    );
    let html = render(
        "t",
        "/tasks/t",
        &preview(vec![change("a", ChangeStatus::M, 1, 1)], patch.as_bytes()),
        0,
    )
    .into_string();
    assert!(!html.contains("forged"));
    assert!(html.contains("names other blobs"));
}

#[test]
fn content_that_looks_like_a_header_does_not_start_a_part() {
    let body = "@@ -0,0 +1,2 @@\n+diff --git a/evil b/evil\n+index 0..1\n";
    let patch = format!(
        "diff --git a/n b/n\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..{NEW}\n--- /dev/null\n+++ b/n\n{body}"
    );
    assert_eq!(split_parts(patch.as_bytes()).len(), 1);
    let html = render(
        "t",
        "/tasks/t",
        &preview(vec![change("n", ChangeStatus::A, 2, 0)], patch.as_bytes()),
        0,
    )
    .into_string();
    assert!(html.contains("+diff --git a/evil b/evil"));
    assert!(!html.contains("do not line up"));
}

#[test]
fn mismatched_part_count_shows_no_per_file_diff() {
    let patch = modified("a", "@@ -1 +1 @@\n-x\n+y\n");
    let files = vec![
        change("a", ChangeStatus::M, 1, 1),
        change("b", ChangeStatus::M, 1, 1),
    ];
    let html = render("t", "/tasks/t", &preview(files, patch.as_bytes()), 0).into_string();
    assert!(html.contains("do not line up"));
    assert!(!html.contains("diff-lines"));
}

#[test]
fn large_patches_are_paged_and_long_files_cut() {
    let mut patch = String::new();
    let mut files = Vec::new();
    for i in 0..(FILES_PER_PAGE + 3) {
        let p = format!("f{i:03}");
        patch.push_str(&modified(&p, "@@ -1 +1 @@\n-a\n+b\n"));
        files.push(change(&p, ChangeStatus::M, 1, 1));
    }
    let pv = preview(files, patch.as_bytes());
    let first = render("t", "/tasks/t", &pv, 0).into_string();
    assert!(first.contains("id=\"file-0\""));
    assert!(!first.contains("id=\"file-25\""));
    assert!(first.contains("?diff_page=1#diff"));
    let second = render("t", "/tasks/t", &pv, 9).into_string();
    assert!(
        second.contains("id=\"file-27\""),
        "page clamped to the last"
    );
    assert!(!second.contains("id=\"file-0\""));

    let mut body = String::from("@@ -0,0 +1,3000 @@\n");
    for i in 0..3000 {
        body.push_str(&format!(
            "+{i}{}\n",
            "x".repeat(if i == 0 { 5000 } else { 1 })
        ));
    }
    let d = parse_file(modified("big", &body).as_bytes());
    assert_eq!(d.lines.len(), MAX_LINES_PER_FILE);
    assert!(d.omitted > 900);
    assert!(d.lines.iter().any(|l| l.cut));
    assert!(
        render_file(&d, "t")
            .into_string()
            .contains("more lines are not shown")
    );
}

proptest! {
    /// Whatever bytes a part holds, parsing never panics, the caps hold, and the rendered
    /// HTML holds no `<` the view did not write.
    #[test]
    fn any_bytes_render_escaped(body in proptest::collection::vec(any::<u8>(), 0..2000), path in "\\PC{0,40}") {
        let mut part = modified(&path, "@@ -1,2 +1,2 @@\n").into_bytes();
        part.extend_from_slice(&body);
        let d = parse_file(&part);
        prop_assert!(d.lines.len() <= MAX_LINES_PER_FILE);
        for l in &d.lines {
            prop_assert!(l.text.chars().count() <= MAX_LINE_CHARS);
            prop_assert!(!l.text.chars().any(|c| c.is_control() && c != '\t'));
        }
        let html = render_file(&d, "t").into_string();
        let stripped = html
            .replace("<table", "").replace("</table", "").replace("<thead", "").replace("</thead", "")
            .replace("<tbody", "").replace("</tbody", "").replace("<tr", "").replace("</tr", "")
            .replace("<td", "").replace("</td", "").replace("<th", "").replace("</th", "")
            .replace("<code", "").replace("</code", "").replace("<span", "").replace("</span", "")
            .replace("<abbr", "").replace("</abbr", "").replace("<p", "").replace("</p", "");
        prop_assert!(!stripped.contains('<'), "unexpected markup in {}", html);
    }
}
