//! The role definitions a group runs with: the sha256 of every role its nodes use (name,
//! base, instructions and defaults), recorded in the store when the group first starts and
//! compared before each admission and each resume. A role defined otherwise since (the
//! configuration changed and another engine took the group over) pauses the group with
//! `GROUP_PROFILE_CHANGED`: no node is admitted with a role other than the one the group
//! started with.
//!
//! This module never changes a role or a node; it only hashes, records and compares.

use super::definition::GroupDefinition;
use super::validate::sort_keys;
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result};
use std::collections::BTreeMap;

impl Core {
    /// The sha256 of the definitions of the roles `definition`'s nodes use; a role no longer
    /// defined hashes as absent.
    fn roles_sha256(&self, definition: &GroupDefinition) -> String {
        let mut used: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
        for node in &definition.nodes {
            let name = node.role.as_deref().unwrap_or("implementer");
            used.entry(name)
                .or_insert_with(|| match self.roles().resolve(name) {
                    Ok((role, defaults)) => serde_json::json!({
                        "base": role.base.as_str(),
                        "instructions": role.instructions,
                        "defaults": defaults,
                    }),
                    Err(_) => serde_json::Value::Null,
                });
        }
        let value = serde_json::to_value(used).unwrap_or_default();
        legate_core::remote::sha256_hex(sort_keys(value).to_string().as_bytes())
    }

    /// `GROUP_PROFILE_CHANGED` when the roles `definition` uses are not defined as they were
    /// when group `group` first started (recording them now if it never did).
    pub(crate) fn profile_changed(
        &self,
        group: &str,
        definition: &GroupDefinition,
    ) -> Result<Option<Error>> {
        let now = self.roles_sha256(definition);
        let recorded = self.store().record_group_roles(group, &now)?;
        if recorded.as_deref().is_none_or(|r| r == now) {
            return Ok(None);
        }
        Ok(Some(Error::new(
            ErrorCode::GroupProfileChanged,
            format!(
                "a role group {group}'s nodes use is defined otherwise than when it started; no node is admitted until the role is defined as it was (or cancel the group and create another)"
            ),
        )))
    }
}
