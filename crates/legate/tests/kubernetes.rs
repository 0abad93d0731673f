//! The Kubernetes runtime against a real cluster (`scripts/k8s-local.sh up`; skipped without
//! one unless `LEGATE_REQUIRE_K8S` is on): revisor runs in a pod of its own per session, from
//! an image of this very build, supervised and reviewed by the local Legate.
//!
//! Each test has a namespace of its own. What is checked: a sandbox task completes in a pod
//! and leaves none; a copy task's work comes back as a patch that integrates into the local
//! original; four tasks at once run on four pods; the pod holds no service-account token,
//! runs as 65532 and cannot write its root file system; `kill -9` of Legate mid-task leaves
//! no pod once the next engine starts; a pod deleted under a running task fails it with
//! `POD_LOST`; a shared directory is refused before any pod is made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, task_id, text};
use legate_testkit::cluster::{LocalCluster, TestNamespace};
use serde_json::Value;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// A home whose revisor runs in `ns` of the local cluster, from an image of this build.
fn home(cluster: &LocalCluster, ns: &TestNamespace) -> CliHome {
    let (tag, inside) = cluster.image(std::path::Path::new(LEGATE));
    let config = format!(
        "[kubernetes]\nkubeconfig = {:?}\nnamespace = {:?}\nimage_pull_policy = \"Never\"\nstart_secs = 120\nmemory = \"256Mi\"\n\n[agents.revisor]\nruntime = \"kubernetes\"\nimage = {tag:?}\npod_command = [{:?}, \"agent\", \"revisor\"]\n",
        cluster.kubeconfig.display().to_string(),
        ns.name,
        inside.display().to_string(),
    );
    CliHome::with_config(LEGATE, &config)
}

fn setup(prefix: &str) -> Option<(LocalCluster, TestNamespace, CliHome)> {
    let cluster = LocalCluster::from_env()?;
    let ns = cluster.namespace(prefix);
    let env = home(&cluster, &ns);
    Some((cluster, ns, env))
}

/// The pod a task's events name in their confinement notice.
fn pod_of(env: &CliHome, id: &str) -> Option<String> {
    env.events(id).iter().find_map(|e| {
        (e["detail"]["confinement"] == "pod")
            .then(|| e["detail"]["pod"].as_str().unwrap().to_string())
    })
}

/// Every pod gone, and with them their Secrets and NetworkPolicies (owned by the pods).
fn no_pods(ns: &TestNamespace) {
    ns.until_pods(
        "every pod deleted",
        Duration::from_secs(60),
        <[_]>::is_empty,
    );
    let since = std::time::Instant::now();
    while !ns.legate_objects().is_empty() {
        assert!(
            since.elapsed() < Duration::from_secs(60),
            "left behind: {:?}",
            ns.legate_objects()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_revisor_task_runs_in_a_pod_and_leaves_none() {
    let Some((_cluster, ns, env)) = setup("lt-run") else {
        return;
    };
    let out = env.run(&["run", "write notes.txt: made in a pod", "read notes.txt"]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    assert_eq!(env.show(&id)["state"], "completed");
    let pod = pod_of(&env, &id).expect("a confinement notice naming the pod");
    let events = env.events(&id);
    let confinement = events
        .iter()
        .find(|e| e["detail"]["confinement"] == "pod")
        .unwrap();
    let message = confinement["message"].as_str().unwrap();
    for holds in [
        "no service-account token",
        "non-root",
        "read-only root file system",
        "all capabilities dropped",
        "seccomp RuntimeDefault",
        "memory 256Mi",
    ] {
        assert!(message.contains(holds), "{holds}: {message}");
    }
    let answer = serde_json::to_string(&events).unwrap();
    assert!(
        answer.contains("made in a pod"),
        "revisor read back what it wrote in the pod"
    );
    assert!(pod.starts_with("legate-revisor-"), "{pod}");
    // `legate run` ended: its session, and with it the pod, is gone.
    no_pods(&ns);
}

const CRITERIA: &str = r#"[
  {"id": "greets", "description": "the greeting says hi",
   "check": {"kind": "file-contains", "path": "src/greeting.txt", "text": "hi world"}}
]"#;

const REVIEWS: &str = r#"[
  {"criterionId": "greets", "verdict": "passed", "path": "src/greeting.txt", "line": 1,
   "quote": "hi world", "explanation": "the first line now says hi"}
]"#;

#[test]
fn a_copy_task_in_a_pod_comes_back_as_a_patch_that_integrates() {
    let Some((_cluster, ns, env)) = setup("lt-copy") else {
        return;
    };
    env.make_project(&[
        ("src/greeting.txt", "hello world\n"),
        ("README.md", "# Project\n"),
    ]);
    let project = env.project().to_string_lossy().into_owned();
    let criteria = env.write("criteria.json", CRITERIA);
    let out = env.run(&[
        "run",
        "--copy",
        &project,
        "--criteria",
        &criteria,
        "replace src/greeting.txt: hello => hi",
        "write NOTES.md: # Notes",
        "delete README.md",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    // The original is untouched; the local copy holds the pod's work.
    assert_eq!(
        std::fs::read_to_string(env.project().join("src/greeting.txt")).unwrap(),
        "hello world\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.copy(&id).join("NOTES.md")).unwrap(),
        "# Notes"
    );
    assert!(
        env.events(&id)
            .iter()
            .any(|e| e["detail"]["event"] == "pod_workspace_returned")
    );
    let preview = env.json(&["diff", "--json", &id]);
    assert_eq!(preview["summary"]["filesChanged"], 3, "{preview}");
    let sha = preview["sha256"].as_str().unwrap().to_string();
    let reviews = env.write("reviews.json", REVIEWS);
    let verify = env.run(&["verify", &id, "--review", &reviews, "--sha256", &sha]);
    assert!(verify.status.success(), "{}", text(&verify));
    let integrate = env.run(&["integrate", &id, "--sha256", &sha]);
    assert!(integrate.status.success(), "{}", text(&integrate));
    assert_eq!(
        std::fs::read_to_string(env.project().join("src/greeting.txt")).unwrap(),
        "hi world\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.project().join("NOTES.md")).unwrap(),
        "# Notes"
    );
    assert!(!env.project().join("README.md").exists());
    no_pods(&ns);
}

#[test]
fn four_tasks_at_once_run_on_four_pods() {
    let Some((_cluster, ns, env)) = setup("lt-four") else {
        return;
    };
    let children: Vec<_> = (0..4)
        .map(|i| env.spawn(&["run", &format!("write task{i}.txt: {i}")]))
        .collect();
    let mut pods = std::collections::BTreeSet::new();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let id = task_id(&out);
        assert_eq!(env.show(&id)["state"], "completed");
        pods.insert(pod_of(&env, &id).expect("its pod"));
    }
    assert_eq!(pods.len(), 4, "each task on its own pod: {pods:?}");
    no_pods(&ns);
}

/// Starts a task that runs until stopped and returns its process, its id and its pod (once
/// the pod runs the agent's command).
fn hanging(env: &CliHome, ns: &TestNamespace) -> (std::process::Child, String, String) {
    let child = env.spawn_silent(&["run", "run sleep 600"]);
    let id = env.wait_for_state("working", Duration::from_secs(120));
    let pods = ns.until_pods("the task's pod", Duration::from_secs(120), |p| {
        !p.is_empty()
    });
    let pod = pods[0].metadata.name.clone().unwrap();
    let _ = ns.until_pods("the sleep running", Duration::from_secs(60), |_| {
        ns.exec(&pod, &["sh", "-c", "ps | grep -q '[s]leep 600'"]).0 == 0
    });
    (child, id, pod)
}

#[test]
fn the_pod_is_confined_and_a_killed_legate_leaves_no_pod_after_the_next_start() {
    let Some((_cluster, ns, env)) = setup("lt-kill") else {
        return;
    };
    let (mut child, id, pod) = hanging(&env, &ns);
    // What holds inside, seen from inside.
    let (code, _) = ns.exec(
        &pod,
        &[
            "test",
            "-e",
            "/var/run/secrets/kubernetes.io/serviceaccount/token",
        ],
    );
    assert_ne!(code, 0, "no service-account token is mounted");
    assert_eq!(ns.exec(&pod, &["id", "-u"]).1.trim(), "65532");
    assert_ne!(
        ns.exec(&pod, &["touch", "/x"]).0,
        0,
        "the root file system is read-only"
    );
    assert_eq!(
        ns.exec(&pod, &["touch", "/workspace/x"]).0,
        0,
        "the workspace is writable"
    );
    let caps = ns
        .exec(&pod, &["sh", "-c", "grep CapEff /proc/self/status"])
        .1;
    assert!(caps.contains("0000000000000000"), "no capability: {caps}");
    let object = ns
        .pods()
        .into_iter()
        .find(|p| p.metadata.name.as_deref() == Some(pod.as_str()))
        .unwrap();
    let spec = serde_json::to_value(object.spec.unwrap()).unwrap();
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert!(spec["activeDeadlineSeconds"].as_u64().is_some());

    child.kill().unwrap(); // SIGKILL: nothing of this legate runs after it.
    child.wait().unwrap();
    // The agent's exec died with the connection; the pod's watchdog ends the pod by itself.
    ns.until_pods(
        "the killed run's pod ended by its watchdog",
        Duration::from_secs(60),
        |p| {
            p.iter().all(|p| {
                p.metadata.name.as_deref() != Some(pod.as_str())
                    || p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
            })
        },
    );
    // The next engine (a task of its own, long enough for the sweep) deletes the dead one's pod.
    let out = env.run(&["run", "write after.txt: x"]);
    assert!(out.status.success(), "{}", text(&out));
    ns.until_pods(
        "the killed run's pod deleted",
        Duration::from_secs(60),
        |p| {
            p.iter()
                .all(|p| p.metadata.name.as_deref() != Some(pod.as_str()))
        },
    );
    let task = env.show(&id);
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(
        task["error"]["code"], "SERVER_RESTARTED",
        "never re-run: {task}"
    );
    no_pods(&ns);
}

#[test]
fn a_pod_deleted_under_a_running_task_fails_it_with_pod_lost() {
    let Some((_cluster, ns, env)) = setup("lt-lost") else {
        return;
    };
    let (child, id, pod) = hanging(&env, &ns);
    ns.delete_pod(&pod);
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    let task: Value = env.show(&id);
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "POD_LOST", "{task}");
    no_pods(&ns);
}

#[test]
fn a_shared_directory_never_goes_to_a_pod() {
    let Some((_cluster, ns, env)) = setup("lt-shared") else {
        return;
    };
    env.make_project(&[("a.txt", "a\n")]);
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&["run", "--cwd", &project, "write b.txt: b"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("POD_WORKSPACE_UNSUPPORTED"),
        "{}",
        text(&out)
    );
    assert!(env.tasks_json().is_empty(), "nothing was stored");
    assert!(!env.project().join("b.txt").exists());
    assert!(ns.pods().is_empty(), "no pod was made");
}

#[test]
fn a_full_quota_makes_tasks_wait_not_fail() {
    let Some((_cluster, ns, env)) = setup("lt-quota") else {
        return;
    };
    ns.quota_pods(1);
    let children: Vec<_> = (0..2)
        .map(|i| env.spawn(&["run", &format!("write q{i}.txt: {i}")]))
        .collect();
    let mut waited = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let id = task_id(&out);
        assert_eq!(env.show(&id)["state"], "completed");
        if env
            .events(&id)
            .iter()
            .any(|e| e["detail"]["event"] == "pod_quota_wait")
        {
            waited += 1;
        }
    }
    assert_eq!(waited, 1, "one of the two waited for the other's pod to go");
    no_pods(&ns);
}

#[test]
fn an_image_that_cannot_be_had_and_an_api_server_that_is_down_have_clear_codes() {
    let Some((cluster, ns, env)) = setup("lt-faults") else {
        return;
    };
    let config = std::fs::read_to_string(env.home().join("legate.toml")).unwrap();
    env.configure(&config.replace(
        "image = \"legate-test",
        "image = \"no-such-image-legate-test",
    ));
    let out = env.run(&["run", "write a.txt: a"]);
    assert!(!out.status.success(), "{}", text(&out));
    let task = env.show(&task_id(&out));
    assert_eq!(task["error"]["code"], "POD_START_FAILED", "{task}");
    assert!(
        task["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ErrImageNeverPull"),
        "{task}"
    );
    no_pods(&ns);

    // The same cluster through a port nothing listens on.
    let kubeconfig = std::fs::read_to_string(&cluster.kubeconfig).unwrap();
    let server = kubeconfig
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap()
        .to_string();
    let down = env.write(
        "down.kubeconfig",
        &kubeconfig.replace(&server, "https://127.0.0.1:9"),
    );
    env.configure(&config.replace(&cluster.kubeconfig.display().to_string(), &down));
    let out = env.run(&["run", "write a.txt: a"]);
    assert!(!out.status.success(), "{}", text(&out));
    let task = env.show(&task_id(&out));
    assert_eq!(task["error"]["code"], "KUBE_UNAVAILABLE", "{task}");
    assert!(
        !text(&out).contains("kube_client"),
        "the client's own logs stay quiet: {}",
        text(&out)
    );
}

/// The opt-in suite's part (`cargo test -p legate --test kubernetes -- --ignored`, after
/// `scripts/real-adapters.sh` installed the adapters): the real Claude adapter in a pod, its
/// model the scripted server on the cluster's pod bridge (10.244.0.1, this machine's side of
/// the pod network `k8s-local.sh` made), writing a file under the local supervisor's ruling.
#[test]
#[ignore = "opt-in: needs scripts/real-adapters.sh's adapters and the local cluster"]
fn claude_runs_in_a_pod() {
    use legate_testkit::model_server::{ModelServer, Step};
    let Some(cluster) = LocalCluster::from_env() else {
        return;
    };
    let adapters = std::path::PathBuf::from(std::env::var_os("HOME").unwrap())
        .join(".cache/legate-adapters/current");
    let js = "node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js";
    assert!(
        adapters.join(js).is_file(),
        "run scripts/real-adapters.sh first"
    );
    let tag = cluster.node_image(&adapters);
    let server = ModelServer::start_on(std::net::Ipv4Addr::new(10, 244, 0, 1)).unwrap();
    server.script(vec![
        Step::tool(
            "Write",
            serde_json::json!({"file_path": "/workspace/hello.txt", "content": "written in a pod"}),
        ),
        Step::text("Done: hello.txt is written."),
    ]);
    let ns = cluster.namespace("lt-claude");
    let config = format!(
        "[kubernetes]\nkubeconfig = {:?}\nnamespace = {:?}\nimage_pull_policy = \"Never\"\nstart_secs = 120\n# The scripted model is on the node's side of the pod bridge.\ndeny_egress = false\n\n[agents.claude]\nruntime = \"kubernetes\"\nimage = {tag:?}\npod_command = [\"node\", \"/opt/agent/{js}\"]\nenv = {{ ANTHROPIC_BASE_URL = {:?}, ANTHROPIC_API_KEY = \"sk-ant-legate-test\" }}\n",
        cluster.kubeconfig.display().to_string(),
        ns.name,
        server.url(),
    );
    let env = CliHome::with_config(LEGATE, &config);
    env.make_project(&[("README.md", "# Project\n")]);
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&[
        "run",
        "--agent",
        "claude",
        "--timeout",
        "300",
        "--copy",
        &project,
        "Do what the model says.",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    assert_eq!(env.show(&id)["state"], "completed");
    assert!(pod_of(&env, &id).is_some(), "it ran in a pod");
    let events = env.events(&id);
    let all = serde_json::to_string(&events).unwrap();
    assert!(all.contains("hello.txt"), "the write is among its events");
    // The adapter in the pod asked to write; the local supervisor answered, as for a local one.
    let permissions: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "permission")
        .collect();
    assert!(
        permissions
            .iter()
            .any(|p| p.to_string().contains("hello.txt") && p["verdict"]["optionId"].is_string()),
        "{permissions:?}"
    );
    assert!(
        !server.requests().is_empty(),
        "the adapter in the pod reached its model"
    );
    no_pods(&ns);
}

#[test]
fn legate_agents_probes_a_pod_agent_and_says_where_it_runs() {
    let Some((_cluster, ns, env)) = setup("lt-agents") else {
        return;
    };
    let rows = env.json_lines(&["agents", "--json"]);
    let revisor = rows
        .iter()
        .find(|r| r["name"] == "revisor")
        .expect("revisor");
    assert_eq!(revisor["runtime"], "kubernetes", "{revisor}");
    assert_eq!(revisor["namespace"], ns.name.as_str(), "{revisor}");
    assert_eq!(revisor["confinement"], "pod", "{revisor}");
    assert_eq!(
        revisor["starts"], true,
        "probed in a pod of its own: {revisor}"
    );
    let text = env.run(&["agents"]);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("runs in a Kubernetes pod"),
        "{}",
        legate_frontkit::cli::text(&text)
    );
    no_pods(&ns);
}

/// A hostile agent in the pod: a link to the pod's `/etc/passwd`, a `.git` directory and a
/// flood of files its own `tar` cannot read (one complaint each, past the exec's stderr
/// buffer). The links and `.git` are left out and named; the flood neither stalls the
/// copy-back nor outlives the task's timeout: the turn ends, with a clear code.
#[test]
fn what_a_hostile_agent_leaves_in_the_pod_comes_back_checked_and_never_stalls() {
    let Some((_cluster, ns, env)) = setup("lt-hostile") else {
        return;
    };
    env.make_project(&[("a.txt", "a\n")]);
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&[
        "run",
        "--copy",
        &project,
        "run ln -s /etc/passwd link && mkdir -p .git && echo x > .git/config",
        "write ok.txt: ok",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    assert_eq!(
        std::fs::read_to_string(env.copy(&id).join("ok.txt")).unwrap(),
        "ok"
    );
    assert!(std::fs::symlink_metadata(env.copy(&id).join("link")).is_err());
    assert!(!env.copy(&id).join(".git").exists());
    let returned = env
        .events(&id)
        .into_iter()
        .find(|e| e["detail"]["event"] == "pod_workspace_returned")
        .expect("the workspace came back");
    assert_eq!(
        returned["detail"]["leftOut"],
        serde_json::json!([".git/config", "link"])
    );

    let started = std::time::Instant::now();
    let out = env.run(&[
        "run",
        "--copy",
        &project,
        "--timeout",
        "120",
        "run mkdir d && for i in $(seq 1 1500); do echo $i > d/f$i; done && chmod 000 d/*",
    ]);
    assert!(
        started.elapsed() < Duration::from_secs(110),
        "the copy-back stalled"
    );
    let task = env.show(&task_id(&out));
    assert_eq!(task["state"], "failed", "{task}");
    assert!(
        task["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reading the pod's workspace"),
        "{task}"
    );
    no_pods(&ns);
}
