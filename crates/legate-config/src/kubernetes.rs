//! `[kubernetes]` and an agent's `runtime = "kubernetes"`: the pod settings of agents that
//! run in a cluster.
//!
//! Owns the table's shape, its defaults and its checks (every error `CONFIG_INVALID` naming
//! the key). It never connects to a cluster: whether one answers is `legate agents`' to say.

use crate::{Result, refuse};
use legate_core::{AgentKind, PodSettings};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The `[kubernetes]` table.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KubernetesTable {
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    namespace: Option<String>,
    image_pull_policy: Option<String>,
    idle_command: Option<Vec<String>>,
    cpu: Option<String>,
    memory: Option<String>,
    volume_size: Option<String>,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    tolerations: Vec<toml::Value>,
    runtime_class: Option<String>,
    pod_overrides: Option<toml::Value>,
    deadline_secs: Option<u64>,
    start_secs: Option<u64>,
    quota_wait_secs: Option<u64>,
    deny_egress: Option<bool>,
}

/// An agent's own runtime keys.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentPod {
    pub(crate) runtime: Option<String>,
    pub(crate) image: Option<String>,
    pub(crate) pod_command: Option<Vec<String>>,
}

/// The namespace used when `[kubernetes]` names none.
pub(crate) const DEFAULT_NAMESPACE: &str = "legate";

fn json(value: &toml::Value) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

/// A DNS-1123 label: lower-case letters, digits and `-`, at most 63, starting and ending
/// with a letter or digit.
fn dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 63
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-')
}

/// The pod settings of agent `name` (of `kind`, running `command` with `args` locally), or
/// `None` when it runs locally.
pub(crate) fn resolve(
    name: &str,
    kind: &AgentKind,
    pod: &AgentPod,
    default_command: Vec<String>,
    table: &KubernetesTable,
) -> Result<Option<PodSettings>> {
    match pod.runtime.as_deref() {
        None | Some("local") => {
            if pod.image.is_some() || pod.pod_command.is_some() {
                refuse!(
                    "agents.{name}.image and pod_command apply to runtime = \"kubernetes\" only"
                );
            }
            return Ok(None);
        }
        Some("kubernetes") => {}
        Some(other) => {
            let shown: String = other.chars().take(64).collect();
            refuse!("agents.{name}.runtime must be \"local\" or \"kubernetes\" (got {shown:?})");
        }
    }
    if *kind != AgentKind::ACP && *kind != AgentKind::REVISOR {
        refuse!(
            "agents.{name}.runtime = \"kubernetes\" applies to ACP agents and revisor, not to kind {kind}"
        );
    }
    let Some(image) = pod.image.clone().filter(|i| !i.trim().is_empty()) else {
        refuse!("agents.{name}.image is required with runtime = \"kubernetes\"");
    };
    let command = pod.pod_command.clone().unwrap_or(default_command);
    if command.is_empty() || command[0].trim().is_empty() {
        refuse!("agents.{name}.pod_command must name a program");
    }
    let namespace = table
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    if !dns_label(&namespace) {
        refuse!("kubernetes.namespace must be a DNS label (got {namespace:?})");
    }
    let mut s = PodSettings::new(namespace, image, command);
    s.kubeconfig = table.kubeconfig.clone();
    if let Some(path) = &s.kubeconfig
        && !path.is_absolute()
    {
        refuse!(
            "kubernetes.kubeconfig must be an absolute path (got {})",
            path.display()
        );
    }
    s.context = table.context.clone();
    if let Some(p) = &table.image_pull_policy {
        if !["Always", "IfNotPresent", "Never"].contains(&p.as_str()) {
            refuse!(
                "kubernetes.image_pull_policy must be Always, IfNotPresent or Never (got {p:?})"
            );
        }
        s.image_pull_policy = Some(p.clone());
    }
    if let Some(idle) = &table.idle_command {
        if idle.is_empty() {
            refuse!("kubernetes.idle_command must name a program");
        }
        s.idle_command = idle.clone();
    }
    s.cpu = table.cpu.clone();
    s.memory = table.memory.clone();
    s.volume_size = table.volume_size.clone();
    s.node_selector = table.node_selector.clone();
    s.tolerations = table.tolerations.iter().map(json).collect();
    s.runtime_class = table.runtime_class.clone();
    if let Some(o) = &table.pod_overrides {
        if !o.is_table() {
            refuse!("kubernetes.pod_overrides must be a table (a JSON merge patch over the pod)");
        }
        s.pod_overrides = Some(json(o));
    }
    for (key, value, min, max, set) in [
        (
            "deadline_secs",
            table.deadline_secs,
            60,
            7 * 24 * 3600,
            &mut s.deadline_secs,
        ),
        ("start_secs", table.start_secs, 5, 3600, &mut s.start_secs),
        (
            "quota_wait_secs",
            table.quota_wait_secs,
            0,
            24 * 3600,
            &mut s.quota_wait_secs,
        ),
    ] {
        if let Some(v) = value {
            if !(min..=max).contains(&v) {
                refuse!("kubernetes.{key} must be between {min} and {max} (got {v})");
            }
            *set = v;
        }
    }
    if let Some(d) = table.deny_egress {
        s.deny_egress = d;
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn table(text: &str) -> KubernetesTable {
        toml::from_str(text).unwrap()
    }

    fn pod(runtime: &str, image: Option<&str>) -> AgentPod {
        AgentPod {
            runtime: Some(runtime.into()),
            image: image.map(str::to_string),
            pod_command: None,
        }
    }

    #[test]
    fn a_kubernetes_agent_gets_the_tables_settings() {
        let t = table(
            "namespace = \"agents\"\nimage_pull_policy = \"Never\"\nmemory = \"1Gi\"\ntolerations = [{ key = \"k\", operator = \"Exists\" }]\npod_overrides = { spec = { priorityClassName = \"low\" } }\nquota_wait_secs = 30\n",
        );
        let s = resolve(
            "r",
            &AgentKind::REVISOR,
            &pod("kubernetes", Some("img:1")),
            vec!["legate".into()],
            &t,
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.namespace, "agents");
        assert_eq!(s.image, "img:1");
        assert_eq!(s.command, ["legate"]);
        assert_eq!(s.memory.as_deref(), Some("1Gi"));
        assert_eq!(s.quota_wait_secs, 30);
        assert_eq!(s.tolerations[0]["operator"], "Exists");
        assert_eq!(s.pod_overrides.unwrap()["spec"]["priorityClassName"], "low");
        assert!(s.deny_egress);
    }

    #[test]
    fn bad_runtime_keys_are_refused() {
        let t = KubernetesTable::default();
        let cases: Vec<(AgentKind, AgentPod, &str)> = vec![
            (AgentKind::ACP, pod("docker", Some("i")), "runtime"),
            (AgentKind::ACP, pod("kubernetes", None), "image"),
            (AgentKind::AGY, pod("kubernetes", Some("i")), "kind agy"),
            (
                AgentKind::ACP,
                AgentPod {
                    runtime: None,
                    image: Some("i".into()),
                    pod_command: None,
                },
                "apply to runtime",
            ),
            (
                AgentKind::ACP,
                AgentPod {
                    runtime: Some("kubernetes".into()),
                    image: Some("i".into()),
                    pod_command: Some(vec![]),
                },
                "pod_command",
            ),
        ];
        for (kind, p, want) in cases {
            let e = resolve("x", &kind, &p, vec!["a".into()], &t)
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{e}");
        }
        for bad in [
            "namespace = \"Bad_NS\"",
            "image_pull_policy = \"Sometimes\"",
            "deadline_secs = 1",
            "kubeconfig = \"rel\"",
            "pod_overrides = 3",
        ] {
            let e = resolve(
                "x",
                &AgentKind::ACP,
                &pod("kubernetes", Some("i")),
                vec!["a".into()],
                &table(bad),
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("kubernetes."), "{bad}: {e}");
        }
    }
}
