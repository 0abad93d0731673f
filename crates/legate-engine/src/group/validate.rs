//! The checks a definition passes before it is stored, and its canonical sha256.
//!
//! Everything here is pure: ids known and unique, the seed's limits (at most
//! [`DEFAULT_MAX_NODES`] nodes unless the configuration allows up to [`MAX_NODES`],
//! [`MAX_DEFINITION_BYTES`] of canonical JSON, [`MAX_ROUTES`](super::peer::MAX_ROUTES) routes), no cycle,
//! `fileSources` a direct dependency, a workflow's final node depending on every other, a
//! prompt of at most [`MAX_CONTEXT_BYTES`] (the context limit; a larger one is
//! `WORKFLOW_CONTEXT_TOO_LARGE`). Checks that need the engine (the project is a git root,
//! agents, roles and criteria exist) are made by `group_create` after these.
//!
//! The canonical form is the definition re-serialized with every object's keys sorted and
//! defaults written out, so that two spellings of one definition hash alike. Nothing here
//! trims, reorders or otherwise repairs a definition: a bad one is refused whole.

use super::definition::GroupDefinition;
pub use crate::config::{DEFAULT_MAX_NODES, MAX_NODES};
use legate_core::{Error, ErrorCode, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The largest definition, as canonical JSON.
pub const MAX_DEFINITION_BYTES: usize = 4 << 20;
/// The largest context a node is given (its prompt, and its predecessors' data), in UTF-8 bytes.
pub const MAX_CONTEXT_BYTES: usize = 64 << 10;
/// The longest node id.
pub const MAX_NODE_ID_BYTES: usize = 64;
/// The longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// The longest group id, in bytes.
pub const MAX_GROUP_ID_BYTES: usize = 128;

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::WorkflowInvalid, message)
}

/// A node id: 1 to [`MAX_NODE_ID_BYTES`] ASCII letters, digits, `-` or `_`.
pub(crate) fn valid_node_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_NODE_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A group id: 1 to [`MAX_GROUP_ID_BYTES`] ASCII letters, digits, `-`, `_` or `.`, not
/// starting with `op-` (the ids of the engine's ops, see `call_tasks`).
pub(crate) fn check_group_id(id: &str) -> Result<()> {
    if id.starts_with("op-") {
        return Err(Error::invalid_input(
            "a group id may not start with \"op-\" (the prefix of the engine's op ids)",
        ));
    }
    let ok = !id.is_empty()
        && id.len() <= MAX_GROUP_ID_BYTES
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "a group id must be 1 to {MAX_GROUP_ID_BYTES} ASCII letters, digits, '-', '_' or '.'"
        )))
    }
}

/// Checks `definition` (see the module docs), with at most `max_nodes` nodes (the
/// configured limit, itself at most [`MAX_NODES`]). `WORKFLOW_INVALID`, or
/// `WORKFLOW_CONTEXT_TOO_LARGE` for a prompt over the context limit.
pub(crate) fn check(definition: &GroupDefinition, max_nodes: usize) -> Result<()> {
    if !definition.working_directory.is_absolute() {
        return Err(invalid("workingDirectory must be an absolute path"));
    }
    if let Some(title) = &definition.title
        && (title.chars().count() > MAX_TITLE_CHARS || title.chars().any(char::is_control))
    {
        return Err(invalid(format!(
            "the title must be at most {MAX_TITLE_CHARS} characters with no control characters"
        )));
    }
    let n = definition.nodes.len();
    let max_nodes = max_nodes.min(MAX_NODES);
    if n == 0 || n > max_nodes {
        return Err(invalid(format!(
            "a group has 1 to {max_nodes} nodes (max_group_nodes); this one has {n}"
        )));
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    for (i, node) in definition.nodes.iter().enumerate() {
        if !valid_node_id(&node.id) {
            return Err(invalid(format!(
                "node {} has an invalid id: 1 to {MAX_NODE_ID_BYTES} ASCII letters, digits, '-' or '_'",
                i + 1
            )));
        }
        if index.insert(node.id.as_str(), i).is_some() {
            return Err(invalid(format!("node id {} is used twice", node.id)));
        }
    }
    for node in &definition.nodes {
        if node.prompt.trim().is_empty() {
            return Err(invalid(format!("node {} has an empty prompt", node.id)));
        }
        if node.prompt.len() > MAX_CONTEXT_BYTES {
            return Err(Error::new(
                ErrorCode::WorkflowContextTooLarge,
                format!(
                    "node {}'s prompt is {} bytes; a node's context is at most {MAX_CONTEXT_BYTES} (nothing is cut)",
                    node.id,
                    node.prompt.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for dep in &node.depends_on {
            if !index.contains_key(dep.as_str()) {
                return Err(invalid(format!(
                    "node {} depends on {}, which is not a node of this group",
                    node.id,
                    shown(dep)
                )));
            }
            if dep == &node.id {
                return Err(invalid(format!("node {} depends on itself", node.id)));
            }
            if !seen.insert(dep.as_str()) {
                return Err(invalid(format!(
                    "node {} names dependency {dep} twice",
                    node.id
                )));
            }
        }
        if let Some(src) = &node.file_sources
            && !node.depends_on.contains(src)
        {
            return Err(invalid(format!(
                "node {}'s fileSources {} must be one of its direct dependencies",
                node.id,
                shown(src)
            )));
        }
        if let Some(model) = &node.model {
            // The cause is a validation sentence (its message only), folded into the node's.
            crate::core::request::validate_model(model)
                .map_err(|e| invalid(format!("node {}: {}", node.id, e.message)))?;
        }
        if let Some(role) = &node.role
            && !crate::roles::valid_role_name(role)
        {
            return Err(invalid(format!("node {} names an invalid role", node.id)));
        }
        check_options(node)?;
    }
    order(definition)?;
    check_routes(definition, &index)?;
    if let Some(budget) = definition.budget
        && budget.max_total_tokens == 0
    {
        return Err(invalid("budget.maxTotalTokens must be at least 1"));
    }
    if let Some(wf) = &definition.workflow {
        let Some(&last) = index.get(wf.final_node.as_str()) else {
            return Err(invalid(format!(
                "workflow.finalNode {} is not a node of this group",
                shown(&wf.final_node)
            )));
        };
        let reach = ancestors(definition, last);
        if let Some(missing) = definition
            .nodes
            .iter()
            .enumerate()
            .find(|(i, _)| *i != last && !reach.contains(i))
        {
            return Err(invalid(format!(
                "the final node {} must depend, directly or not, on every other node; it does not on {}",
                wf.final_node, missing.1.id
            )));
        }
        if let Some(bare) = definition.nodes.iter().find(|n| n.criteria.is_empty()) {
            return Err(invalid(format!(
                "node {} is a workflow step without acceptanceCriteria; every step needs at least one",
                bare.id
            )));
        }
        if let Some(unknown) = wf.hooks.keys().find(|k| !index.contains_key(k.as_str())) {
            return Err(invalid(format!(
                "workflow.hooks names {}, which is not a node of this group",
                shown(unknown)
            )));
        }
    }
    let size = canonical(definition)?.len();
    if size > MAX_DEFINITION_BYTES {
        return Err(invalid(format!(
            "the definition is {size} bytes; the limit is {MAX_DEFINITION_BYTES}"
        )));
    }
    Ok(())
}

/// A node's own task options, as far as they can be checked without the engine.
fn check_options(node: &super::definition::NodeDef) -> Result<()> {
    if node.file_sources.is_some() && (!node.include_paths.is_empty() || !node.skills.is_empty()) {
        return Err(invalid(format!(
            "node {} starts from its fileSources' copy, which keeps that copy's includePaths and skills; leave them out",
            node.id
        )));
    }
    let max = crate::core::request::MAX_TASK_TIMEOUT.as_secs();
    if let Some(s) = node.timeout_seconds
        && !(1..=max).contains(&s)
    {
        return Err(invalid(format!(
            "node {}'s timeoutSeconds must be 1 to {max}",
            node.id
        )));
    }
    Ok(())
}

/// The routes are peer messages' (`peer::validate_routes`, which owns their limits).
fn check_routes(definition: &GroupDefinition, index: &HashMap<&str, usize>) -> Result<()> {
    let nodes: std::collections::HashSet<&str> = index.keys().copied().collect();
    super::peer::validate_routes(
        definition
            .peer_routes
            .iter()
            .map(|r| (r.from.as_str(), r.to.as_str())),
        &nodes,
    )
}

/// Each node's index in the definition, by id.
fn node_index(definition: &GroupDefinition) -> HashMap<&str, usize> {
    definition
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect()
}

/// The nodes in an order where each comes after its dependencies (Kahn, ties by definition
/// order); `WORKFLOW_INVALID` naming a node on a cycle.
pub(crate) fn order(definition: &GroupDefinition) -> Result<Vec<usize>> {
    let index = node_index(definition);
    let mut waiting: Vec<usize> = definition
        .nodes
        .iter()
        .map(|n| n.depends_on.len())
        .collect();
    let mut out = Vec::with_capacity(waiting.len());
    let mut ready: std::collections::BTreeSet<usize> =
        (0..waiting.len()).filter(|&i| waiting[i] == 0).collect();
    while let Some(i) = ready.pop_first() {
        out.push(i);
        for (j, n) in definition.nodes.iter().enumerate() {
            let hits = n
                .depends_on
                .iter()
                .filter(|d| index.get(d.as_str()) == Some(&i))
                .count();
            if hits > 0 {
                waiting[j] -= hits;
                if waiting[j] == 0 {
                    ready.insert(j);
                }
            }
        }
    }
    if out.len() != definition.nodes.len() {
        let on_cycle = (0..definition.nodes.len())
            .find(|i| !out.contains(i))
            .map_or("?", |i| definition.nodes[i].id.as_str());
        return Err(invalid(format!(
            "the dependencies form a cycle (through node {on_cycle})"
        )));
    }
    Ok(out)
}

/// The nodes `node` depends on, directly or not (indices).
fn ancestors(definition: &GroupDefinition, node: usize) -> BTreeSet<usize> {
    let index = node_index(definition);
    let mut seen = BTreeSet::new();
    let mut stack = vec![node];
    while let Some(i) = stack.pop() {
        for d in &definition.nodes[i].depends_on {
            if let Some(&j) = index.get(d.as_str())
                && seen.insert(j)
            {
                stack.push(j);
            }
        }
    }
    seen
}

/// The definition as canonical JSON: every object's keys sorted, defaults written out.
pub(crate) fn canonical(definition: &GroupDefinition) -> Result<String> {
    let value = serde_json::to_value(definition).map_err(|e| {
        Error::caused_by(ErrorCode::Internal, "a definition could not be encoded", e)
    })?;
    let sorted = sort_keys(value);
    serde_json::to_string(&sorted)
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "a definition could not be encoded", e))
}

/// `value` with every object's keys in sorted order, whatever map serde_json was built with.
pub(crate) fn sort_keys(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sort_keys(v))).collect();
            let mut out = serde_json::Map::new();
            for (k, v) in sorted {
                out.insert(k, v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

/// Caller text shortened for an error sentence, control characters escaped.
fn shown(s: &str) -> String {
    let cut: String = s.chars().take(40).collect();
    format!("{:?}", cut)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::group::definition::{NodeDef, Workflow};
    use proptest::prelude::*;

    #[test]
    fn a_group_id_may_not_take_an_op_id() {
        assert_eq!(
            check_group_id("op-0123").unwrap_err().code,
            legate_core::ErrorCode::InvalidInput
        );
        check_group_id("ops-1").unwrap();
    }

    fn node(id: &str, deps: Vec<String>, source: Option<String>) -> NodeDef {
        NodeDef {
            id: id.into(),
            role: None,
            agent: None,
            model: None,
            prompt: "do it".into(),
            depends_on: deps,
            file_sources: source,
            mode: None,
            criteria: vec![],
            ..NodeDef::default()
        }
    }

    fn def(nodes: Vec<NodeDef>) -> GroupDefinition {
        GroupDefinition {
            working_directory: "/p".into(),
            title: None,
            nodes,
            peer_routes: vec![],
            budget: None,
            workflow: None,
        }
    }

    /// Whether the dependency lists (by index) have a cycle: a plain depth-first search,
    /// independent of the Kahn order under test.
    fn cyclic(deps: &[Vec<usize>]) -> bool {
        fn visit(i: usize, deps: &[Vec<usize>], color: &mut [u8]) -> bool {
            color[i] = 1;
            for &d in &deps[i] {
                if color[d] == 1 || (color[d] == 0 && visit(d, deps, color)) {
                    return true;
                }
            }
            color[i] = 2;
            false
        }
        let mut color = vec![0u8; deps.len()];
        (0..deps.len()).any(|i| color[i] == 0 && visit(i, deps, &mut color))
    }

    proptest! {
        /// A random graph (dependencies by index, possibly unknown, repeated, to itself or
        /// backwards, and a file source that may or may not be a direct dependency) is
        /// accepted exactly when every rule holds, and then its order puts each node after
        /// its dependencies.
        #[test]
        fn a_graph_is_accepted_exactly_when_every_rule_holds(
            n in 0usize..36,
            edges in proptest::collection::vec((0usize..40, 0usize..40), 0..60),
            sources in proptest::collection::vec((0usize..40, 0usize..40), 0..4),
            final_node in proptest::option::of(0usize..40),
        ) {
            let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
            for (a, b) in &edges {
                if *a < n {
                    deps[*a].push(*b);
                }
            }
            let mut src: Vec<Option<usize>> = vec![None; n];
            for (a, b) in &sources {
                if *a < n {
                    src[*a] = Some(*b);
                }
            }
            let nodes: Vec<NodeDef> = (0..n)
                .map(|i| node(
                    &format!("n{i}"),
                    deps[i].iter().map(|d| format!("n{d}")).collect(),
                    src[i].map(|s| format!("n{s}")),
                ))
                .collect();
            let mut d = def(nodes);
            if let Some(f) = final_node {
                d.workflow = Some(Workflow { final_node: format!("n{f}"), hooks: Default::default() });
                // Every workflow step names criteria (its own rule, tested apart): the graph's
                // rules are what this checks.
                let criterion: crate::Criterion = serde_json::from_value(
                    serde_json::json!({"id": "c", "description": "it holds"}),
                ).unwrap();
                for node in &mut d.nodes {
                    node.criteria = vec![criterion.clone()];
                }
            }
            let known = deps.iter().flatten().all(|&x| x < n);
            let unique = deps.iter().all(|l| {
                let mut s = l.clone();
                s.sort_unstable();
                s.dedup();
                s.len() == l.len()
            });
            let no_self = deps.iter().enumerate().all(|(i, l)| !l.contains(&i));
            let sources_ok = (0..n).all(|i| src[i].is_none_or(|s| deps[i].contains(&s)));
            let acyclic = known && !cyclic(&deps);
            let final_ok = match final_node {
                None => true,
                Some(f) if f >= n => false,
                Some(f) => {
                    // Everyone else is reachable backwards from the final node.
                    let mut seen = vec![false; n];
                    let mut stack = vec![f];
                    while let Some(i) = stack.pop() {
                        for &x in &deps[i] {
                            if x < n && !seen[x] {
                                seen[x] = true;
                                stack.push(x);
                            }
                        }
                    }
                    (0..n).all(|i| i == f || seen[i])
                }
            };
            let ok = (1..=DEFAULT_MAX_NODES).contains(&n) && known && unique && no_self && sources_ok
                && acyclic && final_ok;
            let got = check(&d, DEFAULT_MAX_NODES);
            prop_assert_eq!(got.is_ok(), ok, "{:?}", got);
            if let Err(e) = got {
                prop_assert_eq!(e.code, ErrorCode::WorkflowInvalid);
            } else {
                let order = order(&d).unwrap();
                let place: HashMap<usize, usize> = order.iter().enumerate().map(|(p, &i)| (i, p)).collect();
                for (i, l) in deps.iter().enumerate() {
                    for &x in l {
                        prop_assert!(place[&x] < place[&i]);
                    }
                }
            }
        }

        /// A node id is accepted exactly when short and of safe characters.
        #[test]
        fn node_ids_are_plain(id in "\\PC{0,10}|[a-zA-Z0-9_-]{60,70}|[a-z]{1,3}[/ .\\n\\x00][a-z]{0,3}") {
            let ok = !id.is_empty() && id.len() <= MAX_NODE_ID_BYTES
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            prop_assert_eq!(valid_node_id(&id), ok);
            let got = check(&def(vec![node(&id, vec![], None)]), DEFAULT_MAX_NODES);
            prop_assert_eq!(got.is_ok(), ok);
        }

        /// Two spellings of one definition (keys in another order, defaults left out) hash
        /// alike; any change of content hashes otherwise.
        #[test]
        fn the_hash_is_of_the_content_not_the_spelling(prompt in "[a-z ]{1,20}", other in "[a-z ]{1,20}") {
            let a: GroupDefinition = serde_json::from_str(&format!(
                r#"{{"nodes":[{{"prompt":"{prompt}","id":"a"}}],"workingDirectory":"/p"}}"#
            )).unwrap();
            let b: GroupDefinition = serde_json::from_str(&format!(
                r#"{{"workingDirectory":"/p","peerRoutes":[],"nodes":[{{"id":"a","dependsOn":[],"prompt":"{prompt}"}}]}}"#
            )).unwrap();
            prop_assert_eq!(canonical(&a).unwrap(), canonical(&b).unwrap());
            let mut c = a.clone();
            c.nodes[0].prompt = other.clone();
            prop_assert_eq!(canonical(&a).unwrap() == canonical(&c).unwrap(), prompt == other);
        }
    }

    #[test]
    fn the_node_limit_is_the_configured_one_and_never_past_the_ceiling() {
        let chain = |n: usize| {
            def((0..n)
                .map(|i| {
                    let deps = if i == 0 {
                        vec![]
                    } else {
                        vec![format!("n{}", i - 1)]
                    };
                    node(&format!("n{i}"), deps, None)
                })
                .collect())
        };
        assert!(check(&chain(DEFAULT_MAX_NODES), DEFAULT_MAX_NODES).is_ok());
        let e = check(&chain(DEFAULT_MAX_NODES + 1), DEFAULT_MAX_NODES).unwrap_err();
        assert_eq!(e.code, ErrorCode::WorkflowInvalid);
        assert!(e.message.contains("33"), "{}", e.message);
        assert!(check(&chain(50), 50).is_ok());
        assert_eq!(
            check(&chain(51), 50).unwrap_err().code,
            ErrorCode::WorkflowInvalid
        );
        // A limit above the ceiling is the ceiling.
        assert!(check(&chain(MAX_NODES), usize::MAX).is_ok());
        let e = check(&chain(MAX_NODES + 1), usize::MAX).unwrap_err();
        assert_eq!(e.code, ErrorCode::WorkflowInvalid);
        assert_eq!(
            check(&def(vec![]), 50).unwrap_err().code,
            ErrorCode::WorkflowInvalid
        );
    }

    #[test]
    fn unknown_fields_and_oversized_definitions_are_refused() {
        let e = serde_json::from_str::<GroupDefinition>(
            r#"{"workingDirectory":"/p","nodes":[],"jobs":[]}"#,
        );
        assert!(e.is_err(), "unknown fields are refused, not ignored");
        let mut d = def(vec![node("a", vec![], None)]);
        d.working_directory = "relative".into();
        assert_eq!(
            check(&d, DEFAULT_MAX_NODES).unwrap_err().code,
            ErrorCode::WorkflowInvalid
        );
        // 32 nodes each at the context limit, with long criteria: over 4 MiB in all.
        let mut big = def((0..32)
            .map(|i| node(&format!("n{i}"), vec![], None))
            .collect());
        for n in &mut big.nodes {
            n.prompt = "x".repeat(MAX_CONTEXT_BYTES);
            n.criteria = (0..3)
                .map(|c| legate_review::Criterion {
                    id: format!("c{c}"),
                    description: "y".repeat(25_000),
                    check: None,
                })
                .collect();
        }
        let err = check(&big, DEFAULT_MAX_NODES).unwrap_err();
        assert_eq!(err.code, ErrorCode::WorkflowInvalid);
        assert!(err.message.contains("bytes"), "{}", err.message);
    }
}
