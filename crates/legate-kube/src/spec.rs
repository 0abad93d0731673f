//! The objects a session makes: its pod, the Secret holding the agent's environment, and the
//! NetworkPolicy that denies the pod's egress.
//!
//! The confinement is fixed here and set last, after the operator's `pod_overrides` merge
//! patch, so no setting can loosen it: no service-account token (`automountServiceAccountToken:
//! false`, and no service links), user and group 65532 and `runAsNonRoot`, a read-only root
//! file system with `emptyDir` volumes for the workspace, the home and `/tmp` only, no
//! privilege escalation, every capability dropped, the runtime's default seccomp profile,
//! `restartPolicy: Never` and `activeDeadlineSeconds`. This module builds objects; it never
//! sends them.

use crate::labels::Owner;
use crate::{HOME, UID, WORKSPACE};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use legate_core::{Error, ErrorCode, PodSettings, Result};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The one container's name.
pub const CONTAINER: &str = "agent";

/// The names of a session's objects: the pod, and its Secret and NetworkPolicy, which share
/// its name.
pub fn object_name(owner: &Owner) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "legate-{}-{}",
        &owner
            .agent
            .to_lowercase()
            .replace(['_', '.'], "-")
            .chars()
            .take(20)
            .collect::<String>()
            .trim_matches('-'),
        &id[..12]
    )
}

/// The pod for `owner`'s session under `settings`, its environment from Secret `name`.
pub fn pod(name: &str, settings: &PodSettings, owner: &Owner) -> Result<Pod> {
    let resources = resources(settings);
    let volume = |n: &str| {
        let mut empty = json!({});
        if let Some(size) = &settings.volume_size {
            empty = json!({ "sizeLimit": size });
        }
        json!({ "name": n, "emptyDir": empty })
    };
    let mut container = json!({
        "name": CONTAINER,
        "image": settings.image,
        "command": settings.idle_command,
        "workingDir": WORKSPACE,
        "envFrom": [{ "secretRef": { "name": name } }],
        "resources": resources,
        "volumeMounts": [
            { "name": "workspace", "mountPath": WORKSPACE },
            { "name": "home", "mountPath": HOME },
            { "name": "tmp", "mountPath": "/tmp" },
        ],
    });
    if let Some(policy) = &settings.image_pull_policy {
        container["imagePullPolicy"] = json!(policy);
    }
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {},
        "spec": {
            "containers": [container],
            "volumes": [volume("workspace"), volume("home"), volume("tmp")],
            "nodeSelector": settings.node_selector,
            "tolerations": settings.tolerations,
        },
    });
    if let Some(class) = &settings.runtime_class {
        pod["spec"]["runtimeClassName"] = json!(class);
    }
    if let Some(patch) = &settings.pod_overrides {
        merge(&mut pod, patch);
    }
    confine(&mut pod, name, settings, owner);
    serde_json::from_value(pod).map_err(|e| {
        Error::caused_by(
            ErrorCode::ConfigInvalid,
            "kubernetes.pod_overrides does not leave a valid pod",
            e,
        )
    })
}

/// Sets the fields no override may change: identity, confinement, lifetime.
fn confine(pod: &mut Value, name: &str, settings: &PodSettings, owner: &Owner) {
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    let metadata = &mut pod["metadata"];
    metadata["name"] = json!(name);
    metadata["namespace"] = json!(settings.namespace);
    let mut labels: BTreeMap<String, String> =
        serde_json::from_value(metadata["labels"].take()).unwrap_or_default();
    labels.extend(owner.labels());
    labels.insert(POD_LABEL.into(), name.into());
    metadata["labels"] = json!(labels);
    let mut annotations: BTreeMap<String, String> =
        serde_json::from_value(metadata["annotations"].take()).unwrap_or_default();
    // An annotation can loosen a profile (AppArmor `unconfined`, the old seccomp keys): none
    // of those is kept.
    annotations.retain(|k, _| {
        let k = k.to_ascii_lowercase();
        !(k.contains("apparmor") || k.contains("seccomp"))
    });
    annotations.extend(owner.annotations());
    metadata["annotations"] = json!(annotations);
    let spec = &mut pod["spec"];
    spec["automountServiceAccountToken"] = json!(false);
    spec["enableServiceLinks"] = json!(false);
    spec["hostNetwork"] = json!(false);
    spec["hostPID"] = json!(false);
    spec["hostIPC"] = json!(false);
    spec["shareProcessNamespace"] = json!(false);
    spec["restartPolicy"] = json!("Never");
    spec["activeDeadlineSeconds"] = json!(settings.deadline_secs);
    spec["terminationGracePeriodSeconds"] = json!(2);
    spec["securityContext"] = json!({
        "runAsNonRoot": true,
        "runAsUser": UID,
        "runAsGroup": UID,
        "fsGroup": UID,
        "seccompProfile": { "type": "RuntimeDefault" },
    });
    // Only Legate's container, volumes of Legate's kinds: an override cannot add a host path,
    // an init container or a sidecar that would run unconfined.
    spec["initContainers"] = Value::Null;
    spec["ephemeralContainers"] = Value::Null;
    let containers = spec["containers"]
        .as_array_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut agent = containers
        .into_iter()
        .find(|c| c["name"] == CONTAINER)
        .unwrap_or_else(|| json!({ "name": CONTAINER }));
    agent["image"] = json!(settings.image);
    agent["command"] = json!(settings.idle_command);
    agent["args"] = Value::Null;
    agent["stdin"] = json!(false);
    agent["tty"] = json!(false);
    agent["securityContext"] = json!({
        "runAsNonRoot": true,
        "runAsUser": UID,
        "runAsGroup": UID,
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "capabilities": { "drop": ["ALL"] },
        "seccompProfile": { "type": "RuntimeDefault" },
    });
    agent["envFrom"] = json!([{ "secretRef": { "name": name } }]);
    // The limits the settings give (and the notice reports), no port on the host, no hook
    // that would run outside the agent's exec.
    agent["resources"] = resources(settings);
    if let Some(ports) = agent["ports"].as_array_mut() {
        for port in ports {
            if let Some(p) = port.as_object_mut() {
                p.remove("hostPort");
                p.remove("hostIP");
            }
        }
    }
    agent["lifecycle"] = Value::Null;
    agent["env"] = Value::Null;
    agent["volumeMounts"] = json!([
        { "name": "workspace", "mountPath": WORKSPACE },
        { "name": "home", "mountPath": HOME },
        { "name": "tmp", "mountPath": "/tmp" },
    ]);
    spec["containers"] = json!([agent]);
    let volumes = spec["volumes"]
        .as_array_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    // The volumes Legate's settings size: an override neither adds one nor resizes one.
    drop(volumes);
    let kept: Vec<Value> = ["workspace", "home", "tmp"]
        .iter()
        .map(|n| match &settings.volume_size {
            Some(size) => json!({ "name": n, "emptyDir": { "sizeLimit": size } }),
            None => json!({ "name": n, "emptyDir": {} }),
        })
        .collect();
    spec["volumes"] = json!(kept);
}

/// The container's requests and limits: the settings' cpu and memory, each as both.
fn resources(settings: &PodSettings) -> Value {
    let mut amounts = serde_json::Map::new();
    if let Some(cpu) = &settings.cpu {
        amounts.insert("cpu".into(), json!(cpu));
    }
    if let Some(memory) = &settings.memory {
        amounts.insert("memory".into(), json!(memory));
    }
    if amounts.is_empty() {
        json!({})
    } else {
        json!({ "requests": amounts, "limits": amounts })
    }
}

/// RFC 7386 JSON merge patch of `patch` onto `target`.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in patch {
            if v.is_null() {
                t.remove(k);
            } else {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// The Secret that holds the agent's environment, labelled like its pod.
pub fn secret(
    name: &str,
    settings: &PodSettings,
    owner: &Owner,
    env: &[(String, String)],
) -> Secret {
    let data: BTreeMap<String, String> = env.iter().cloned().collect();
    Secret {
        metadata: meta(name, settings, owner),
        string_data: Some(data),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// The NetworkPolicy that denies every egress of the pod `name` (and allows no ingress).
pub fn deny_egress(name: &str, settings: &PodSettings, owner: &Owner) -> Result<NetworkPolicy> {
    let policy = json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(name, settings, owner),
        "spec": {
            "podSelector": { "matchLabels": { crate::labels::RUNNER: owner.runner, POD_LABEL: name } },
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [],
            "egress": [],
        },
    });
    serde_json::from_value(policy).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "the network policy could not be built",
            e,
        )
    })
}

/// The label that names a session's pod (for its NetworkPolicy's selector).
pub const POD_LABEL: &str = "legate.dev/pod";

fn meta(
    name: &str,
    settings: &PodSettings,
    owner: &Owner,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    let mut labels = owner.labels();
    labels.insert(POD_LABEL.into(), name.into());
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some(name.into()),
        namespace: Some(settings.namespace.clone()),
        labels: Some(labels),
        annotations: Some(owner.annotations()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn settings() -> PodSettings {
        PodSettings::new("ns", "img:1", vec!["agent".into()])
    }

    fn owner() -> Owner {
        Owner::new("0123456789abcdef0123", "r1", "t-1", "revisor")
    }

    /// A hostile override (a host path, privilege, a token, root, a sidecar) changes none of
    /// the confinement.
    #[test]
    fn overrides_cannot_loosen_the_confinement() {
        let mut s = settings();
        s.memory = Some("128Mi".into());
        s.volume_size = Some("100Mi".into());
        s.pod_overrides = Some(json!({
            "metadata": {
                "labels": { "team": "a", "legate.dev/runner": "forged" },
                "annotations": { "container.apparmor.security.beta.kubernetes.io/agent": "unconfined", "note": "kept" },
            },
            "spec": {
                "automountServiceAccountToken": true,
                "hostNetwork": true,
                "priorityClassName": "low",
                "securityContext": { "runAsUser": 0 },
                "initContainers": [{ "name": "x", "image": "evil" }],
                "containers": [
                    { "name": "agent", "securityContext": { "privileged": true }, "env": [{"name": "A", "value": "1"}],
                      "resources": {}, "ports": [{ "containerPort": 80, "hostPort": 18080 }],
                      "lifecycle": { "postStart": { "exec": { "command": ["sh", "-c", "x"] } } } },
                    { "name": "sidecar", "image": "evil" },
                ],
                "volumes": [
                    { "name": "workspace", "hostPath": { "path": "/" } },
                    { "name": "home", "emptyDir": { "sizeLimit": "1000Gi" } },
                    { "name": "extra", "hostPath": { "path": "/etc" } },
                ],
            },
        }));
        let pod = serde_json::to_value(pod("p", &s, &owner()).unwrap()).unwrap();
        let spec = &pod["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["hostNetwork"], false);
        assert_eq!(
            spec["priorityClassName"], "low",
            "what confines nothing is the operator's"
        );
        assert_eq!(spec["securityContext"]["runAsUser"], 65532);
        assert!(spec.get("initContainers").is_none());
        let containers = spec["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        let c = &containers[0];
        assert_eq!(c["securityContext"]["privileged"], false);
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert!(c.get("env").is_none());
        assert_eq!(
            spec["volumes"][0],
            json!({ "name": "workspace", "emptyDir": { "sizeLimit": "100Mi" } })
        );
        assert_eq!(spec["volumes"][1]["emptyDir"]["sizeLimit"], "100Mi");
        assert_eq!(spec["volumes"].as_array().unwrap().len(), 3);
        assert_eq!(c["resources"]["limits"]["memory"], "128Mi");
        assert!(c["ports"][0].get("hostPort").is_none());
        assert!(c.get("lifecycle").is_none());
        let annotations = &pod["metadata"]["annotations"];
        assert!(
            annotations
                .get("container.apparmor.security.beta.kubernetes.io/agent")
                .is_none()
        );
        assert_eq!(annotations["note"], "kept");
        assert_eq!(pod["metadata"]["labels"]["legate.dev/runner"], "r1");
        assert_eq!(pod["metadata"]["labels"]["team"], "a");
    }

    #[test]
    fn settings_reach_the_pod() {
        let mut s = settings();
        s.cpu = Some("500m".into());
        s.memory = Some("1Gi".into());
        s.volume_size = Some("2Gi".into());
        s.runtime_class = Some("gvisor".into());
        s.image_pull_policy = Some("Never".into());
        s.node_selector.insert("pool".into(), "agents".into());
        let pod = serde_json::to_value(pod("p", &s, &owner()).unwrap()).unwrap();
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["resources"]["limits"]["memory"], "1Gi");
        assert_eq!(c["resources"]["requests"]["cpu"], "500m");
        assert_eq!(c["imagePullPolicy"], "Never");
        assert_eq!(c["command"][0], "sh", "the watchdog by default");
        assert_eq!(pod["spec"]["runtimeClassName"], "gvisor");
        assert_eq!(pod["spec"]["nodeSelector"]["pool"], "agents");
        assert_eq!(pod["spec"]["activeDeadlineSeconds"], 21600);
        assert_eq!(pod["spec"]["volumes"][1]["emptyDir"]["sizeLimit"], "2Gi");
    }

    #[test]
    fn names_are_dns_labels() {
        let o = Owner::new("0123456789abcdef0123", "r1", "t", "My_Agent.v2");
        let n = object_name(&o);
        assert!(n.len() <= 63, "{n}");
        assert!(
            n.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{n}"
        );
    }
}
