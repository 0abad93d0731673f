//! The dashboard in a real browser (headless Chromium over WebDriver).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/browser.rs"]
mod browser;

use browser::Browser;

/// The browser itself works here: a page served from a data URL renders markup as markup
/// and a screenshot is a PNG. (The dashboard's own walk-through follows once it is served.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_browser_starts_and_renders() {
    let Some(b) = Browser::start().await else {
        return;
    };
    b.client
        .goto("data:text/html,<title>t</title><p id=p>hi</p>")
        .await
        .unwrap();
    let p = b.client.find(fantoccini::Locator::Id("p")).await.unwrap();
    assert_eq!(p.text().await.unwrap(), "hi");
    assert!(b.client.screenshot().await.unwrap().starts_with(b"\x89PNG"));
    b.close().await;
}
