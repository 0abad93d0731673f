//! Headless Chromium driven over WebDriver (`chromedriver`, Debian's `chromium-driver`) with
//! `fantoccini`: the one place the dashboard's browser tests start a browser.
//!
//! chromedriver is started on a port it picks itself (`--port=0`, local connections only) and
//! the port is read from the line it prints once it listens, so nothing waits on a timer.
//! Chromium runs with a fresh profile and every background feature that would reach the
//! network switched off (this machine's network is closed; a refused connection otherwise
//! stalls start-up). When the browser is not installed the test is skipped with a message,
//! unless `CI` or `LEGATE_REQUIRE_BROWSER` is on: then it fails.

// Each test binary that includes this module uses a part of it.
#![allow(dead_code)]

use fantoccini::{Client, ClientBuilder};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Switch that makes a missing browser a failure (`.ci/run` sets it; `CI` counts too).
pub const REQUIRE_BROWSER_ENV: &str = "LEGATE_REQUIRE_BROWSER";
/// Switch that writes the screenshots into `docs/images/` (to refresh the committed ones).
pub const UPDATE_SCREENSHOTS_ENV: &str = "LEGATE_UPDATE_SCREENSHOTS";

fn switched_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    })
}

/// Whether a missing browser fails the test instead of skipping it.
pub fn browser_required() -> bool {
    switched_on(REQUIRE_BROWSER_ENV) || switched_on("CI")
}

fn find(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| p.is_file())
}

/// A running chromedriver and one Chromium session.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Child,
    shots: PathBuf,
    _profile: tempfile::TempDir,
    _shots_tmp: Option<tempfile::TempDir>,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session; `None` (after printing
    /// `SKIPPED: …`) when they are not installed and not required.
    pub async fn start() -> Option<Browser> {
        let chromium = find("LEGATE_CHROMIUM", &["chromium", "chromium-browser"]);
        let driver = find("LEGATE_CHROMEDRIVER", &["chromedriver"]);
        let (Some(chromium), Some(driver)) = (chromium, driver) else {
            assert!(
                !browser_required(),
                "chromium or chromedriver is not installed, and {REQUIRE_BROWSER_ENV} or CI is set, so the browser test may not be skipped: apt-get install chromium chromium-driver"
            );
            eprintln!(
                "SKIPPED: chromium or chromedriver is not installed, so the dashboard's browser test cannot run (apt-get install chromium chromium-driver; set {REQUIRE_BROWSER_ENV}=1 to make that a failure)"
            );
            return None;
        };
        let mut child = Command::new(&driver)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start chromedriver");
        let port = read_port(&mut child).await;
        let profile = tempfile::tempdir().expect("profile dir");
        let args = [
            "--headless=new".to_string(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--window-size=1100,760".into(),
            // A foreign site for the Origin test: its name resolves to this machine only.
            "--host-resolver-rules=MAP evil.example 127.0.0.1".into(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium, "args": args }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a WebDriver session with headless Chromium");
        let (shots, shots_tmp) = if switched_on(UPDATE_SCREENSHOTS_ENV) {
            let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/images");
            std::fs::create_dir_all(&d).expect("docs/images");
            (d, None)
        } else {
            let t = tempfile::tempdir().expect("screenshot dir");
            (t.path().to_path_buf(), Some(t))
        };
        Some(Browser {
            client,
            driver: child,
            shots,
            _profile: profile,
            _shots_tmp: shots_tmp,
        })
    }

    /// Saves a PNG of the page as `<name>.png` (under `docs/images/` when
    /// `LEGATE_UPDATE_SCREENSHOTS` is on) and returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }
}

/// Reads chromedriver's stdout until it says which port it listens on.
async fn read_port(child: &mut Child) -> u16 {
    let out = child.stdout.take().expect("chromedriver stdout");
    let mut lines = BufReader::new(out).lines();
    while let Some(line) = lines.next_line().await.expect("read chromedriver") {
        if let Some(rest) = line.split("started successfully on port ").nth(1) {
            let port = rest.trim_end_matches('.').trim().parse().expect("a port");
            // Keep draining its stdout so it never blocks on a full pipe.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return port;
        }
    }
    panic!("chromedriver exited before it listened");
}
