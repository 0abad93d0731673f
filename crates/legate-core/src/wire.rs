//! [`wire_enum!`](crate::wire_enum): a fieldless enum declared once with the wire string of
//! each variant, from which its serde names, `ALL`, `as_str`, `parse` and `Display` are
//! generated, so that the string a client reads and the string Legate parses cannot drift
//! apart.
//!
//! This module owns no enum itself and must never hold a wire string outside the macro's
//! list: a hand-written `as_str` beside `rename_all` is what it replaces.

/// Declares a fieldless enum whose every variant names its wire string:
///
/// ```
/// legate_core::wire_enum! {
///     /// A colour.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Colour {
///         /// Red.
///         Red => "red",
///         /// Dark blue.
///         DarkBlue => "dark-blue",
///     }
/// }
/// assert_eq!(Colour::DarkBlue.as_str(), "dark-blue");
/// assert_eq!(Colour::parse("red"), Some(Colour::Red));
/// assert_eq!(serde_json::to_string(&Colour::DarkBlue).unwrap(), "\"dark-blue\"");
/// assert_eq!(Colour::ALL.len(), 2);
/// ```
///
/// The enum derives `Serialize` and `Deserialize` (each variant `#[serde(rename = ...)]` its
/// string), so the calling crate needs `serde` as a dependency. Attributes before `enum`
/// (derives, `cfg_attr`, docs) and before a variant (`#[default]`, docs) are kept.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident => $wire:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(::serde::Serialize, ::serde::Deserialize)]
        $vis enum $name {
            $($(#[$vmeta])* #[serde(rename = $wire)] $variant,)+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$(Self::$variant,)+];

            /// The wire form: the string serde writes and reads.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)+
                }
            }

            /// Parses the wire form; `None` for any other string.
            pub fn parse(s: &str) -> Option<Self> {
                match s {
                    $($wire => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::{TaskMode, TaskState, ToolKind, ToolStatus, WorkspaceKind};
    use proptest::prelude::*;
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    /// `as_str` is what serde writes, and `parse` reads back exactly what serde reads.
    fn agrees<T: Copy + PartialEq + std::fmt::Debug + Serialize + DeserializeOwned>(
        all: &[T],
        as_str: fn(T) -> &'static str,
        parse: fn(&str) -> Option<T>,
    ) {
        for &v in all {
            let json = serde_json::to_value(v).unwrap();
            assert_eq!(json, serde_json::Value::from(as_str(v)));
            assert_eq!(parse(as_str(v)), Some(v));
            assert_eq!(serde_json::from_value::<T>(json).unwrap(), v);
        }
    }

    #[test]
    fn every_wire_enum_writes_what_it_parses() {
        agrees(TaskState::ALL, TaskState::as_str, TaskState::parse);
        agrees(TaskMode::ALL, TaskMode::as_str, TaskMode::parse);
        agrees(
            WorkspaceKind::ALL,
            WorkspaceKind::as_str,
            WorkspaceKind::parse,
        );
        agrees(ToolKind::ALL, ToolKind::as_str, ToolKind::parse);
        agrees(ToolStatus::ALL, ToolStatus::as_str, ToolStatus::parse);
    }

    #[test]
    fn the_wire_strings_are_the_published_ones() {
        let states: Vec<_> = TaskState::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(
            states,
            [
                "submitted",
                "working",
                "input-required",
                "completed",
                "failed",
                "canceled",
                "rejected",
                "auth-required"
            ]
        );
        let modes: Vec<_> = TaskMode::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(modes, ["write", "read-only"]);
        let kinds: Vec<_> = WorkspaceKind::ALL.iter().map(|s| s.as_str()).collect();
        assert_eq!(kinds, ["sandbox", "shared", "copy"]);
        assert_eq!(ToolKind::SwitchMode.as_str(), "switch_mode");
        assert_eq!(ToolStatus::InProgress.as_str(), "in_progress");
    }

    proptest! {
        /// Whatever a hostile client sends, `parse` accepts it exactly when serde does, and
        /// as the same variant.
        #[test]
        fn parse_and_serde_agree_on_any_string(s in "\\PC{0,20}|[a-z_-]{0,16}") {
            let by_serde = serde_json::from_value::<TaskState>(serde_json::Value::from(s.as_str())).ok();
            prop_assert_eq!(TaskState::parse(&s), by_serde);
            let by_serde = serde_json::from_value::<WorkspaceKind>(serde_json::Value::from(s.as_str())).ok();
            prop_assert_eq!(WorkspaceKind::parse(&s), by_serde);
            let by_serde = serde_json::from_value::<TaskMode>(serde_json::Value::from(s.as_str())).ok();
            prop_assert_eq!(TaskMode::parse(&s), by_serde);
        }
    }
}
