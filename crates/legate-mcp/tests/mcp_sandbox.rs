//! The test sandbox policy over MCP, end to end in one process: rmcp's own client talks to
//! `LegateMcp` over an in-memory pipe, the engine runs the scripted agent on a copy of a
//! fresh git repository, and `test` runs real commands under the kernel's confinement.
//!
//! The acceptance test: a selection that grants network lets a test command reach a loopback
//! HTTP origin through Legate's egress proxy, as `[network]` allows it (and a destination no
//! rule allows is refused with `403`), every connection in the evidence; the same command
//! without it reaches nothing and no proxy runs (Landlock ABI 4 refuses the connection; on an
//! older kernel the evidence must say the network was not kernel-denied). The attacks: a selection outside the ceiling, a symlinked root, the
//! source project and `$LEGATE_HOME` as roots, a stale sha256, and approval mode `ask`
//! with a client that declines (or cannot answer) the form.
//!
//! The agent binaries must be built first: `cargo build -p legate-testkit --bins` (a plain
//! `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_engine::ApprovalMode;
use legate_frontkit::mcp::{self, McpClient as Client, McpFront};
use legate_mcp::Profile;
use legate_testkit::{EngineHarness, TestAgent};
use rmcp::model::{CallToolResult, ElicitResult, ElicitationAction};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

async fn harness(profile: Profile, approval: ApprovalMode, handler: Client) -> McpFront {
    harness_with(profile, approval, handler, |_| {}).await
}

/// [`harness`], with the engine's configuration tuned by `tune` too.
async fn harness_with(
    profile: Profile,
    approval: ApprovalMode,
    handler: Client,
    tune: impl FnOnce(&mut legate_engine::EngineConfig) + 'static,
) -> McpFront {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let kit = EngineHarness::builder()
        .in_dir(dir)
        .agent(TestAgent::scripted("agent"))
        .config(tune)
        .config({
            // Every harness forbids `<base>/forbidden` (forbidden_directories).
            let forbidden = base.join("forbidden");
            std::fs::create_dir_all(&forbidden).unwrap();
            move |c| {
                c.review.approval = approval;
                c.forbidden_directories = vec![forbidden];
            }
        })
        .start();
    McpFront::serve(kit, mcp::profile(profile), handler).await
}

/// The sandbox suite's own calls.
trait SandboxCalls {
    async fn policy(&self) -> (Value, String);
    async fn copy(&self, name: &str) -> (PathBuf, String, String);
    async fn test(
        &self,
        id: &str,
        sha: &str,
        command: Value,
        sandbox: Option<Value>,
    ) -> CallToolResult;
}

impl SandboxCalls for McpFront {
    async fn policy(&self) -> (Value, String) {
        let p = self.call("get_sandbox_policy", json!({})).await;
        (
            p["policy"].clone(),
            p["sha256"].as_str().unwrap().to_string(),
        )
    }

    /// A copy task of a fresh project and its patch sha256.
    async fn copy(&self, name: &str) -> (PathBuf, String, String) {
        let project = self.project(name);
        let id = self.copy_task(&project).await;
        let preview = self.call("preview", json!({"taskId": id})).await;
        let sha = preview["sha256"].as_str().unwrap().to_string();
        (project, id, sha)
    }

    async fn test(
        &self,
        id: &str,
        sha: &str,
        command: Value,
        sandbox: Option<Value>,
    ) -> CallToolResult {
        let mut args =
            json!({"taskId": id, "expectedSha256": sha, "command": command, "timeoutSeconds": 30});
        if let Some(s) = sandbox {
            args["sandbox"] = s;
        }
        self.call_raw("test", args).await
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn code_of(r: &CallToolResult) -> String {
    assert_eq!(r.is_error, Some(true), "{:?}", r.structured_content);
    r.structured_content.as_ref().unwrap()["error"]["code"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Whether the kernel that ran `record` has Landlock's TCP rules: ABI 4 or newer, enforced.
fn kernel_denies_network(record: &Value) -> bool {
    record["sandbox"]["landlockAbi"].as_u64().unwrap() >= 4 && record["confinement"] != "none"
}

/// A loopback HTTP origin answering every request with `hello`; how many it served.
fn origin() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&served);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            count.fetch_add(1, Ordering::SeqCst);
            let _ = s.write_all(
                b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            );
        }
    });
    (port, served)
}

/// Fetches each URL with urllib as the environment says (`HTTP_PROXY`, `NO_PROXY`).
const FETCH: &str = r#"
import sys, urllib.request, urllib.error
for url in sys.argv[1:]:
    try:
        r = urllib.request.urlopen(url, timeout=10)
        print("OK", url, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print("HTTP", url, e.code)
    except Exception as e:
        print("ERR", url, type(e).__name__)
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_granting_network_reaches_what_the_network_policy_allows_through_the_proxy() {
    let (port, served) = origin();
    let (other, other_served) = origin();
    let rule = format!("127.0.0.1:{port}");
    let h = harness_with(
        Profile::Full,
        ApprovalMode::Auto,
        Client::default(),
        move |c| {
            c.network = legate_supervisor::network::NetworkRules::default()
                .with_allow(rule.parse().unwrap(), "network.allow[0]");
        },
    )
    .await;
    let (policy, sha) = h.policy().await;
    assert_eq!(
        policy,
        json!({"readRoots": [], "writeRoots": [], "network": false,
               "childProcesses": true, "maxOutputChars": 4000})
    );
    let (_, id, patch) = h.copy("net").await;
    let allowed = format!("http://127.0.0.1:{port}/ok");
    let refused = format!("http://127.0.0.1:{other}/no");
    let cmd = json!({"executable": "/usr/bin/python3",
        "args": ["-c", FETCH, allowed.clone(), refused.clone()]});

    // The default ceiling allows no network: asking for it is refused before anything runs.
    let r = h
        .test(&id, &patch, cmd.clone(), Some(json!({"network": true})))
        .await;
    assert_eq!(code_of(&r), "SANDBOX_SELECTION_DENIED");

    let set = h
        .call(
            "set_sandbox_policy",
            json!({"expectedSha256": sha, "policy": {"network": true}}),
        )
        .await;
    let new_sha = set["sha256"].as_str().unwrap().to_string();
    assert_ne!(new_sha, sha);
    assert_eq!(h.policy().await.1, new_sha);

    let r = h
        .test(&id, &patch, cmd.clone(), Some(json!({"network": true})))
        .await;
    let record = r.structured_content.clone().unwrap();
    eprintln!("with network: {record}");
    assert_ne!(r.is_error, Some(true), "{record}");
    assert_eq!(record["passed"], true, "{record}");
    assert_eq!(record["sandbox"]["policySha256"], new_sha.as_str());
    assert_eq!(record["sandbox"]["selection"]["network"], true);
    assert_eq!(record["sandbox"]["networkRules"], false);
    assert_eq!(record["sandbox"]["reads"], "restricted");
    let stdout = record["stdout"].as_str().unwrap();
    if record["network"] == "allowed" {
        // No network namespace of its own here: the host's network, no proxy.
        eprintln!("no network namespace: the test reached the host's network directly");
        assert!(record.get("connections").is_none(), "{record}");
        return;
    }
    assert_eq!(record["network"], "proxy");
    assert_eq!(record["sandbox"]["network"], "proxy");
    assert!(
        stdout.contains(&format!("OK {allowed} 200 hello")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("HTTP {refused} 403")), "{stdout}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert_eq!(other_served.load(Ordering::SeqCst), 0);
    let connections = record["connections"].as_array().unwrap();
    assert_eq!(connections.len(), 2, "{record}");
    let ok = connections
        .iter()
        .find(|c| c["destination"] == format!("127.0.0.1:{port}"))
        .unwrap();
    assert_eq!(ok["decision"], "allow");
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["ruleId"], "network.allow[0]");
    assert_eq!(ok["address"], format!("127.0.0.1:{port}"));
    assert!(ok["sent"].as_u64().unwrap() > 0 && ok["received"].as_u64().unwrap() > 0);
    let no = connections
        .iter()
        .find(|c| c["destination"] == format!("127.0.0.1:{other}"))
        .unwrap();
    assert_eq!(no["decision"], "deny");
    assert!(no.get("address").is_none(), "{no}");
    assert!(
        no["reason"]
            .as_str()
            .unwrap()
            .starts_with("refused: a test command's connections are decided by rules only"),
        "{no}"
    );
    // The preview lists the record as stored, connections included.
    let preview = h.call("preview", json!({"taskId": id})).await;
    eprintln!("preview: {preview}");

    // The same command, the same ceiling, a selection without network: no proxy, nothing
    // reached.
    let r = h.test(&id, &patch, cmd, Some(json!({}))).await;
    let record = r.structured_content.unwrap().clone();
    eprintln!("without network: {record}");
    assert_eq!(record["sandbox"]["selection"]["network"], false);
    assert!(record.get("connections").is_none(), "{record}");
    let stdout = record["stdout"].as_str().unwrap();
    assert!(stdout.contains(&format!("ERR {allowed}")), "{stdout}");
    assert!(!stdout.contains("OK "), "{stdout}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    if kernel_denies_network(&record) {
        assert_eq!(record["network"], "denied");
        assert_eq!(record["sandbox"]["networkRules"], true);
    } else {
        assert_eq!(record["network"], "not-enforced");
        assert_eq!(record["sandbox"]["networkRules"], false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selections_and_proposals_that_touch_protected_paths_links_or_leave_the_ceiling_are_refused()
 {
    let h = harness(Profile::Full, ApprovalMode::Auto, Client::default()).await;
    let (_, sha) = h.policy().await;
    let home = h.kit.home();
    let (reads, writes) = (h.dir("roots/reads"), h.dir("roots/writes"));
    h.dir("projects");
    let inner = h.dir("roots/writes/inner");
    std::os::unix::fs::symlink(&inner, writes.join("link")).unwrap();
    std::os::unix::fs::symlink(&writes, h.base.join("roots/writes-link")).unwrap();

    // Proposals: Legate's home, a root containing it, a link, a relative path, `/`, ~/.ssh.
    let user_home = PathBuf::from(std::env::var("HOME").unwrap());
    for (root, code) in [
        (s(&home), "INVALID_INPUT"),
        (s(&home.join("copies")), "INVALID_INPUT"),
        (s(&h.base), "INVALID_INPUT"),
        (s(&h.base.join("roots/writes-link")), "INVALID_INPUT"),
        (s(&writes.join("link")), "INVALID_INPUT"),
        (s(&writes.join("inner/../inner")), "INVALID_INPUT"),
        ("roots/writes".to_string(), "INVALID_INPUT"),
        ("/".to_string(), "INVALID_INPUT"),
        (s(&user_home.join(".ssh")), "INVALID_INPUT"),
        (s(&user_home), "INVALID_INPUT"),
        // System directories and the one holding Legate's binary are never write roots
        // (issue 29, finding 5: they were accepted, and a test wrote into /etc).
        ("/etc".to_string(), "INVALID_INPUT"),
        ("/usr/local/bin".to_string(), "INVALID_INPUT"),
        (
            s(std::env::current_exe().unwrap().parent().unwrap()),
            "INVALID_INPUT",
        ),
    ] {
        let got = h
            .fail(
                "set_sandbox_policy",
                json!({"expectedSha256": sha, "policy": {"writeRoots": [root]}}),
            )
            .await;
        assert_eq!(got, code, "{root}");
    }
    for root in [h.base.join("forbidden"), h.dir("forbidden/inner")] {
        let got = h
            .fail(
                "set_sandbox_policy",
                json!({"expectedSha256": sha, "policy": {"readRoots": [s(&root)]}}),
            )
            .await;
        assert_eq!(got, "FORBIDDEN_DIRECTORY", "{}", root.display());
    }
    assert_eq!(
        h.policy().await.1,
        sha,
        "a refused proposal changed the policy"
    );

    // A stale sha256.
    let set = h
        .call(
            "set_sandbox_policy",
            json!({"expectedSha256": sha, "policy": {
                "readRoots": [s(&reads)], "writeRoots": [s(&writes), s(&h.base.join("projects"))],
                "childProcesses": false, "maxOutputChars": 100}}),
        )
        .await;
    let current = set["sha256"].as_str().unwrap().to_string();
    assert_eq!(
        h.fail(
            "set_sandbox_policy",
            json!({"expectedSha256": sha, "policy": {}})
        )
        .await,
        "SANDBOX_POLICY_CHANGED"
    );
    assert_eq!(h.policy().await.1, current);

    let project = h.base.join("projects/src-project");
    std::fs::create_dir_all(h.base.join("projects")).unwrap();
    let id = {
        let p = h.project("projects/src-project");
        assert_eq!(p, project);
        h.copy_task(&p).await
    };
    let patch = h.call("preview", json!({"taskId": id})).await["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let cmd = json!({"executable": "true"});
    for (sandbox, why) in [
        (
            json!({"writePaths": [s(&reads)]}),
            "a read root is not a write root",
        ),
        (
            json!({"readPaths": [s(&h.dir("elsewhere"))]}),
            "outside every root",
        ),
        (
            json!({"writePaths": [s(&writes.join("link"))]}),
            "a symlinked write path",
        ),
        (
            json!({"readPaths": [s(&h.base.join("roots/writes-link"))]}),
            "a link to a root",
        ),
        (json!({"writePaths": [s(&project)]}), "the source project"),
        (
            json!({"readPaths": [s(&project.join("src"))]}),
            "inside the source project",
        ),
        (
            json!({"writePaths": [s(&h.base.join("projects"))]}),
            "contains the source project",
        ),
        (json!({"readPaths": [s(&home)]}), "Legate's home"),
        (json!({"network": true}), "network beyond the ceiling"),
        (
            json!({"childProcesses": true}),
            "children beyond the ceiling",
        ),
        (
            json!({"maxOutputChars": 101}),
            "more output than the ceiling",
        ),
        (json!({"maxOutputChars": 0}), "no output"),
    ] {
        let r = h.test(&id, &patch, cmd.clone(), Some(sandbox)).await;
        assert_eq!(code_of(&r), "SANDBOX_SELECTION_DENIED", "{why}");
    }
    // Within the ceiling: the evidence names the selection and the policy it was checked by.
    let r = h
        .test(
            &id,
            &patch,
            cmd,
            Some(json!({"readPaths": [s(&reads)], "writePaths": [s(&inner)]})),
        )
        .await;
    let record = r.structured_content.unwrap().clone();
    assert_eq!(record["passed"], true, "{record}");
    assert_eq!(record["sandbox"]["policySha256"], current.as_str());
    assert_eq!(
        record["sandbox"]["selection"]["readPaths"],
        json!([s(&reads)])
    );
    assert_eq!(
        record["sandbox"]["selection"]["writePaths"],
        json!([s(&inner)])
    );
    assert_eq!(record["sandbox"]["selection"]["childProcesses"], false);
    assert_eq!(record["sandbox"]["selection"]["maxOutputChars"], 100);
    assert_eq!(record["sandbox"]["childProcesses"], "denied-seccomp");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_ask_mode_only_a_confirmed_form_replaces_the_policy() {
    // A client that cannot answer a form at all.
    let h = harness(Profile::Full, ApprovalMode::Ask, Client::default()).await;
    let (_, sha) = h.policy().await;
    let proposal = json!({"expectedSha256": sha, "policy": {"network": true}});
    assert_eq!(
        h.fail("set_sandbox_policy", proposal.clone()).await,
        "SANDBOX_POLICY_DECLINED"
    );
    assert_eq!(h.policy().await.1, sha);
    drop(h);

    let client = Client {
        elicits: true,
        ..Client::default()
    };
    let h = harness(Profile::Full, ApprovalMode::Ask, client).await;
    let (_, sha) = h.policy().await;
    let proposal = json!({"expectedSha256": sha, "policy": {"network": true}});
    for answer in [
        ElicitResult::new(ElicitationAction::Decline),
        ElicitResult::new(ElicitationAction::Cancel),
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": false})),
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": "true"})),
    ] {
        *h.handler.answer.lock().unwrap() = Some(answer);
        assert_eq!(
            h.fail("set_sandbox_policy", proposal.clone()).await,
            "SANDBOX_POLICY_DECLINED"
        );
        assert_eq!(h.policy().await.1, sha, "a declined change was applied");
    }
    let asked = h.handler.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 4);
    assert!(asked[0].0.contains(&sha), "{}", asked[0].0);
    assert!(
        asked[0].0.contains("network: may be granted"),
        "{}",
        asked[0].0
    );
    assert_eq!(asked[0].1["required"], json!(["confirm"]));

    // A stale sha256 is refused before anyone is asked.
    assert_eq!(
        h.fail(
            "set_sandbox_policy",
            json!({"expectedSha256": "0".repeat(64), "policy": {}})
        )
        .await,
        "SANDBOX_POLICY_CHANGED"
    );
    assert_eq!(h.handler.asked.lock().unwrap().len(), 4);

    *h.handler.answer.lock().unwrap() =
        Some(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": true})));
    let set = h.call("set_sandbox_policy", proposal).await;
    assert_eq!(set["policy"]["network"], true);
    assert_eq!(h.policy().await.1, set["sha256"].as_str().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_query_profile_reads_the_policy_and_cannot_set_it() {
    let h = harness(Profile::Query, ApprovalMode::Auto, Client::default()).await;
    let (_, sha) = h.policy().await;
    assert_eq!(
        h.refused(
            "set_sandbox_policy",
            json!({"expectedSha256": sha, "policy": {}})
        )
        .await,
        "TOOL_NOT_AVAILABLE"
    );
}
