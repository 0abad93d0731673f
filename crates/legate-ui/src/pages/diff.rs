//! The Task page's diff: a copy's patch as a readable, paged, escaped view.
//!
//! This module owns turning the engine's patch preview (`Engine::patch` → [`Preview`]: files
//! with A/M/D and line counts, the `git diff --binary` bytes) into HTML: the file list, then
//! for each file of the current page a unified diff with old and new line numbers. Every byte
//! of the patch is hostile (the agent wrote the files and chose their names), so it is only
//! ever placed through `maud`'s escaping, decoded lossily, with `\r` shown as a visible mark;
//! binary files are described, never dumped; a page holds at most [`FILES_PER_PAGE`] files and
//! a file at most [`MAX_LINES_PER_FILE`] lines of [`MAX_LINE_CHARS`] characters, with a note
//! saying what was left out and how to read it whole (`legate diff`).
//!
//! It must never decide which file a part of the patch belongs to from a path in a header
//! (paths are the agent's): parts are matched to the preview's files by position, and a
//! part whose `index` line names other blob ids than the preview's file is shown as
//! unreadable instead of under the wrong name. It never changes the copy or calls git.

use crate::pages::tasks::encode;
use legate_core::Task;
use legate_engine::{ChangeStatus, Engine, FileChange, Preview, PreviewReport};
use maud::{Markup, html};
use serde::Deserialize;

/// The Task page's query: which page of the diff's files to show.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct DiffQuery {
    /// 0-based; clamped to the last page.
    pub diff_page: Option<usize>,
}

/// The diff section of `task`, whose current preview is `report`: the patch is read again
/// bound to the preview's sha256 (`PATCH_CHANGED` when the agent changed the copy in
/// between, shown as the engine's error), then rendered with [`render`].
pub async fn view(engine: &Engine, task: &Task, report: &PreviewReport, page: usize) -> Markup {
    let base = format!("/tasks/{}", encode(task.id.as_str()));
    match engine
        .reviews()
        .patch(task.id.as_str(), Some(&report.patch.sha256))
        .await
    {
        Ok(preview) => render(task.id.as_str(), &base, &preview, page),
        Err(e) => html! {
            section.diff #diff {
                h2 { "Patch" }
                p.error { "The patch cannot be shown: " code { (e.code.as_str()) } " " (e.detail()) }
            }
        },
    }
}

/// Files shown on one page of the diff.
pub const FILES_PER_PAGE: usize = 25;
/// Lines of one file's diff shown before the rest is left out.
pub const MAX_LINES_PER_FILE: usize = 2_000;
/// Characters of one diff line shown before the rest is left out.
pub const MAX_LINE_CHARS: usize = 2_000;

/// What a line of a unified diff is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// A `@@ -a,b +c,d @@` hunk header.
    Hunk,
    /// A line in both sides.
    Context,
    /// A line only in the new side.
    Added,
    /// A line only in the old side.
    Removed,
    /// `\ No newline at end of file`, or another note git adds.
    Note,
    /// A file header line (`old mode`, `new file mode`, …) before the first hunk.
    Header,
}

/// One line of a file's diff, with its numbers on each side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    /// What it is.
    pub kind: LineKind,
    /// Its number in the old file.
    pub old: Option<u64>,
    /// Its number in the new file.
    pub new: Option<u64>,
    /// Its text without the leading `+`/`-`/` ` (lossily decoded, `\r` made visible, cut at
    /// [`MAX_LINE_CHARS`]).
    pub text: String,
    /// Whether the line ended in `\r\n`.
    pub crlf: bool,
    /// Whether the text was cut.
    pub cut: bool,
}

/// A file's diff, parsed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FileDiff {
    /// Its lines, at most [`MAX_LINES_PER_FILE`].
    pub lines: Vec<DiffLine>,
    /// Lines left out after the cap.
    pub omitted: usize,
}

/// Splits a whole `git diff` into its per-file parts, in order: each starts at a line that
/// begins with `diff --git `. Content lines always carry a one-character prefix, and git
/// quotes a path holding a newline, so no content can start a part.
pub fn split_parts(patch: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut at_line_start = true;
    for (i, b) in patch.iter().enumerate() {
        if at_line_start && patch[i..].starts_with(b"diff --git ") {
            starts.push(i);
        }
        at_line_start = *b == b'\n';
    }
    let mut parts = Vec::with_capacity(starts.len());
    for (n, s) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(patch.len());
        parts.push(&patch[*s..end]);
    }
    parts
}

/// Whether a part's `index <old>..<new>` line agrees with the preview's file (a part with no
/// `index` line, a pure mode change, agrees).
pub fn part_matches(part: &[u8], file: &FileChange) -> bool {
    let Some(line) = part
        .split(|b| *b == b'\n')
        .take_while(|l| !l.starts_with(b"@@") && !l.starts_with(b"GIT binary patch"))
        .find(|l| l.starts_with(b"index "))
    else {
        return true;
    };
    let text = String::from_utf8_lossy(&line[b"index ".len()..]);
    let ids = text.split_whitespace().next().unwrap_or("");
    let Some((old, new)) = ids.split_once("..") else {
        return false;
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let same = |id: &str, want: &Option<String>| match want {
        Some(w) => id == w,
        None => zero(id),
    };
    same(old, &file.old_blob) && same(new, &file.new_blob)
}

/// Parses one file's part of a unified diff into numbered lines.
pub fn parse_file(part: &[u8]) -> FileDiff {
    let mut out = FileDiff::default();
    let (mut old, mut new) = (0u64, 0u64);
    let mut in_hunk = false;
    let mut lines = part.split(|b| *b == b'\n').peekable();
    let mut first = true;
    while let Some(raw) = lines.next() {
        if raw.is_empty() && lines.peek().is_none() {
            break; // the part's final newline
        }
        if first {
            first = false;
            continue; // the `diff --git` line: its paths are the agent's; the title comes from the preview
        }
        if out.lines.len() >= MAX_LINES_PER_FILE {
            out.omitted += 1;
            continue;
        }
        let (body, crlf) = match raw.strip_suffix(b"\r") {
            Some(b) => (b, true),
            None => (raw, false),
        };
        let (kind, text, o, n) = if raw.starts_with(b"@@") {
            match hunk_start(raw) {
                Some((a, c)) => {
                    old = a;
                    new = c;
                    in_hunk = true;
                    (LineKind::Hunk, body, None, None)
                }
                None => (LineKind::Header, body, None, None),
            }
        } else if !in_hunk {
            (LineKind::Header, body, None, None)
        } else {
            match body.first() {
                Some(b'+') => {
                    new += 1;
                    (LineKind::Added, &body[1..], None, Some(new))
                }
                Some(b'-') => {
                    old += 1;
                    (LineKind::Removed, &body[1..], Some(old), None)
                }
                Some(b' ') => {
                    old += 1;
                    new += 1;
                    (LineKind::Context, &body[1..], Some(old), Some(new))
                }
                Some(b'\\') => (LineKind::Note, body, None, None),
                // An empty context line some tools emit.
                None => {
                    old += 1;
                    new += 1;
                    (LineKind::Context, body, Some(old), Some(new))
                }
                Some(_) => (LineKind::Header, body, None, None),
            }
        };
        let (text, cut) = visible(text);
        out.lines.push(DiffLine {
            kind,
            old: o,
            new: n,
            text,
            crlf,
            cut,
        });
    }
    out
}

/// The first line numbers of a hunk, from `@@ -a[,b] +c[,d] @@`. A number is the line before
/// which the hunk starts, so the first line shown is one more (a `0` start is an empty side).
fn hunk_start(line: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split(' ');
    if words.next()? != "@@" {
        return None;
    }
    let num = |w: &str, sign: char| -> Option<u64> {
        let w = w.strip_prefix(sign)?;
        let start = w.split(',').next()?;
        start.parse::<u64>().ok()
    };
    let a = num(words.next()?, '-')?;
    let c = num(words.next()?, '+')?;
    Some((a.saturating_sub(1), c.saturating_sub(1)))
}

/// Lossy text with control characters made visible (`\r` as `␍`, a tab kept), cut at
/// [`MAX_LINE_CHARS`].
fn visible(bytes: &[u8]) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len().min(MAX_LINE_CHARS));
    let mut cut = false;
    for (n, c) in text.chars().enumerate() {
        if n >= MAX_LINE_CHARS {
            cut = true;
            break;
        }
        out.push(match c {
            '\t' => '\t',
            '\r' => '\u{240D}',
            c if c.is_control() => '\u{FFFD}',
            c => c,
        });
    }
    (out, cut)
}

fn status_word(s: ChangeStatus) -> &'static str {
    match s {
        ChangeStatus::A => "added",
        ChangeStatus::M => "modified",
        ChangeStatus::D => "deleted",
    }
}

fn count(n: Option<u64>, sign: char) -> String {
    n.map_or_else(|| "–".to_owned(), |n| format!("{sign}{n}"))
}

/// The pages a diff of `files` files has.
pub fn pages(files: usize) -> usize {
    files.div_ceil(FILES_PER_PAGE).max(1)
}

/// Renders the diff of a copy's patch: totals, the file list (every file, linked to its part
/// when it is on this page), then the parts of page `page` (0-based; clamped). `base` is the
/// Task page's path, to which `?diff_page=N#diff` links are added.
pub fn render(task_id: &str, base: &str, preview: &Preview, page: usize) -> Markup {
    let total_pages = pages(preview.files.len());
    let page = page.min(total_pages - 1);
    let first = page * FILES_PER_PAGE;
    let shown = first..(first + FILES_PER_PAGE).min(preview.files.len());
    let parts = split_parts(&preview.patch);
    let aligned = parts.len() == preview.files.len();
    let s = &preview.summary;
    html! {
        section.diff #diff aria-labelledby="diff-title" {
            h2 #diff-title { "Patch" }
            p.diff-summary {
                (s.files_changed) " files changed ("
                (s.added) " added, " (s.modified) " modified, " (s.deleted) " deleted), "
                span.ins { "+" (s.insertions) } " " span.del { "−" (s.deletions) }
                @if s.binary_files > 0 { ", " (s.binary_files) " binary" }
                ". sha256 " code { (preview.sha256) } " (" (preview.patch_length) " bytes)."
            }
            @if preview.files.is_empty() {
                p { "The copy has no changes." }
            } @else {
                table.diff-files {
                    caption { "Changed files" }
                    thead { tr { th scope="col" { "Status" } th scope="col" { "Path" } th scope="col" { "Added" } th scope="col" { "Removed" } } }
                    tbody {
                        @for (i, f) in preview.files.iter().enumerate() {
                            tr {
                                td { abbr.status class={ "st-" (f.status.as_str()) } title=(status_word(f.status)) { (f.status.as_str()) } }
                                td {
                                    @if shown.contains(&i) {
                                        a href={ "#file-" (i) } { code { (f.path) } }
                                    } @else {
                                        a href={ (base) "?diff_page=" (i / FILES_PER_PAGE) "#file-" (i) } { code { (f.path) } }
                                    }
                                    @if f.binary { " (binary)" }
                                }
                                td.ins { (count(f.insertions, '+')) }
                                td.del { (count(f.deletions, '−')) }
                            }
                        }
                    }
                }
                @if total_pages > 1 {
                    nav.pager aria-label="Patch pages" {
                        "Files " (first + 1) "–" (shown.end) " of " (preview.files.len()) ". "
                        @if page > 0 { a href={ (base) "?diff_page=" (page - 1) "#diff" } rel="prev" { "Previous files" } " " }
                        @if page + 1 < total_pages { a href={ (base) "?diff_page=" (page + 1) "#diff" } rel="next" { "Next files" } }
                    }
                }
                @if !aligned {
                    p.warn role="note" { "The patch's parts do not line up with its file list, so no per-file diff is shown; read it with " code { "legate diff " (task_id) } "." }
                }
                @for i in shown.clone() {
                    @let f = &preview.files[i];
                    article.diff-file #{ "file-" (i) } aria-labelledby={ "file-" (i) "-title" } {
                        h3 #{ "file-" (i) "-title" } {
                            abbr.status class={ "st-" (f.status.as_str()) } title=(status_word(f.status)) { (f.status.as_str()) }
                            " " code { (f.path) }
                            " " span.ins { (count(f.insertions, '+')) } " " span.del { (count(f.deletions, '−')) }
                        }
                        @if !aligned {
                        } @else if f.binary {
                            p.note { "Binary file " (status_word(f.status)) "; its contents are not shown."
                                @if let Some(b) = &f.old_blob { " Old blob " code { (b) } "." }
                                @if let Some(b) = &f.new_blob { " New blob " code { (b) } "." } }
                        } @else if !part_matches(parts[i], f) {
                            p.warn role="note" { "This part of the patch names other blobs than the file list; it is not shown. Read it with " code { "legate diff " (task_id) } "." }
                        } @else {
                            (render_file(&parse_file(parts[i]), task_id))
                        }
                    }
                }
            }
        }
    }
}

/// One file's numbered diff as a table (old number, new number, line).
pub fn render_file(diff: &FileDiff, task_id: &str) -> Markup {
    html! {
        table.diff-lines {
            thead { tr { th scope="col" { "Old" } th scope="col" { "New" } th scope="col" { "Line" } } }
            tbody {
                @for l in &diff.lines {
                    @let class = match l.kind {
                        LineKind::Hunk => "hunk", LineKind::Context => "ctx", LineKind::Added => "add",
                        LineKind::Removed => "rem", LineKind::Note => "note", LineKind::Header => "hdr",
                    };
                    @let mark = match l.kind { LineKind::Added => "+", LineKind::Removed => "-", LineKind::Context => " ", _ => "" };
                    tr class=(class) {
                        td.ln { @if let Some(n) = l.old { (n) } }
                        td.ln { @if let Some(n) = l.new { (n) } }
                        td.code {
                            @if l.kind == LineKind::Added { span.visually-hidden { "added: " } }
                            @if l.kind == LineKind::Removed { span.visually-hidden { "removed: " } }
                            code { (mark) (l.text) }
                            @if l.crlf { " " abbr.eol title="this line ends in CR LF" { "CRLF" } }
                            @if l.cut { " " span.note { "(line cut)" } }
                        }
                    }
                }
            }
        }
        @if diff.omitted > 0 {
            p.note role="note" { (diff.omitted) " more lines are not shown; read the file's whole part with " code { "legate diff " (task_id) } "." }
        }
    }
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
