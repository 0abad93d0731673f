//! The page shell every page shares: the head (embedded assets by their hashed names), the
//! skip link, the navigation (Tasks, Approvals, Usage), who is signed in, and the error page;
//! plus the small formatting helpers pages share (times, durations, token counts).
//!
//! It renders only what it is given; it never reads the engine. Every page and live fragment
//! leaves through [`shown`]: a character a reader does not see as itself (a right-to-left
//! override, a zero-width space, a control character) is written as a visible `\u{…}`,
//! whichever page put agent text where (issue 29, finding 7).

use crate::assets;
use crate::web::{PageError, Viewer};
use legate_core::Timestamp;
use legate_token::Audience;
use maud::{DOCTYPE, Markup, html};

/// Which navigation entry is the current page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The tasks list and a task.
    Tasks,
    /// The approval queue.
    Approvals,
    /// Usage.
    Usage,
    /// None (an error page).
    None,
}

/// A whole page: `title`, the navigation with `active` marked, and `body`.
pub fn page(title: &str, viewer: Option<&Viewer>, active: Nav, body: Markup) -> Markup {
    let entry = |nav: Nav, href: &str, label: &str| {
        html! {
            li {
                @if nav == active {
                    a href=(href) aria-current="page" { (label) }
                } @else {
                    a href=(href) { (label) }
                }
            }
        }
    };
    shown(html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Legate" }
                link rel="stylesheet" href=(assets::url(assets::CSS));
                script src=(assets::url(assets::JS)) defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header {
                    nav aria-label="Main" {
                        ul {
                            li.brand { "Legate" }
                            (entry(Nav::Tasks, "/tasks", "Tasks"))
                            (entry(Nav::Approvals, "/approvals", "Approvals"))
                            (entry(Nav::Usage, "/usage", "Usage"))
                        }
                    }
                    @if let Some(v) = viewer {
                        div.who {
                            "Signed in as the " strong { (v.audience.as_str()) }
                            @if v.audience == Audience::Caller { " (may not answer approvals)" }
                            @if v.session.is_some() {
                                " "
                                form.logout method="post" action="/logout" {
                                    (csrf_field(v))
                                    button type="submit" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                main id="main" tabindex="-1" {
                    (body)
                }
            }
        }
    })
}

/// `html` with every character a reader does not see as itself
/// ([`legate_core::text::is_unseen`]) but line breaks and tabs written as a visible `\u{…}`.
/// Safe on rendered HTML: what it writes is plain ASCII text, and no markup of the
/// dashboard's own holds such a character.
pub fn shown(html: Markup) -> Markup {
    match legate_core::text::visible(&html.0, &['\n', '\r', '\t']) {
        std::borrow::Cow::Borrowed(_) => html,
        std::borrow::Cow::Owned(text) => maud::PreEscaped(text),
    }
}

/// The error page of `e`.
pub fn error_page(e: &PageError) -> Markup {
    page(
        "Error",
        None,
        Nav::None,
        html! {
            h1 { "Error " (e.status.as_u16()) }
            p.error role="alert" { code { (e.code) } ": " (e.message) }
            p { a href="/tasks" { "Back to the tasks" } }
        },
    )
}

/// A hidden CSRF field for a form of `viewer`'s (nothing without a session: the POST is
/// then refused, as it must be).
pub fn csrf_field(viewer: &Viewer) -> Markup {
    html! {
        @if let Some(token) = &viewer.csrf {
            input type="hidden" name=(crate::auth::CSRF_FIELD) value=(token);
        }
    }
}

/// `2026-12-01 17:20:00Z`.
pub fn time(t: Timestamp) -> String {
    humantime::format_rfc3339_seconds(t.to_system_time())
        .to_string()
        .replace('T', " ")
}

/// `1h 2m 3s`, `4.5s`, `120ms`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        return format!("{:.1}s", ms as f64 / 1000.0);
    }
    let s = ms / 1000;
    let (h, m, s) = (s / 3600, (s % 3600) / 60, s % 60);
    if h > 0 {
        format!("{h}h {m}m {s}s")
    } else {
        format!("{m}m {s}s")
    }
}

/// A token count with thousands separators, or an em dash.
pub fn tokens(n: Option<u64>) -> String {
    let Some(n) = n else {
        return "—".to_string();
    };
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_durations_read_well() {
        assert_eq!(tokens(Some(1234567)), "1,234,567");
        assert_eq!(tokens(Some(12)), "12");
        assert_eq!(tokens(None), "—");
        assert_eq!(duration(120), "120ms");
        assert_eq!(duration(4500), "4.5s");
        assert_eq!(duration(3_723_000), "1h 2m 3s");
    }
}
