//! Who a bearer token speaks for, and the one check every guarded endpoint makes.
//!
//! Legate has two audiences: the **caller** (the agent or person that delegates work, through
//! MCP's `/mcp` or A2A) and the **supervisor** (who answers permission requests an agent is
//! waiting on: `/supervisor/mcp`, the CLI's answering commands, the dashboard to come). Each
//! has a token of its own, and the separation is enforced here, not advised: a [`Gate`] accepts
//! exactly its audience's token and refuses the other audience's by name; configuration that
//! gives both audiences the same secret is refused before anything listens ([`separate`]).
//!
//! This module never logs a token, never puts one in an error, and compares in constant time.

use crate::Token;
use legate_core::{Error, ErrorCode, Result};
use std::fmt;
use std::path::Path;

/// The supervisor token's file, under `$LEGATE_HOME`.
pub const SUPERVISOR_TOKEN_FILE: &str = "supervisor-token";
/// The environment variable that gives the supervisor token instead of the file.
pub const SUPERVISOR_TOKEN_ENV: &str = "LEGATE_SUPERVISOR_TOKEN";

/// Who a token speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// The party that delegates tasks.
    Caller,
    /// The party that answers an agent's permission requests.
    Supervisor,
}

impl Audience {
    /// `caller` or `supervisor`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Caller => "caller",
            Self::Supervisor => "supervisor",
        }
    }
}

impl fmt::Display for Audience {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a [`Gate`] refused a request. None of them carries the token presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A bearer token that is nobody's.
    Invalid,
    /// The token of another audience: valid elsewhere, refused here.
    OtherAudience(Audience),
}

impl Denied {
    /// The sentence a refusal carries (no token in it).
    pub fn message(self, gate: Audience) -> String {
        match self {
            Self::Missing | Self::Invalid => {
                format!("a valid {gate} bearer token is required (Authorization: Bearer <token>)")
            }
            Self::OtherAudience(other) => format!(
                "this endpoint is the {gate}'s; the {other} token is refused here (the two are kept apart)"
            ),
        }
    }
}

/// The token check of one endpoint: its audience's token is accepted, the tokens of the other
/// audiences are refused by name, anything else is invalid.
#[derive(Debug, Clone)]
pub struct Gate {
    audience: Audience,
    accepted: Token,
    refused: Vec<(Audience, Token)>,
}

impl Gate {
    /// A gate that accepts `accepted`, the token of `audience`.
    pub fn new(audience: Audience, accepted: Token) -> Self {
        Self {
            audience,
            accepted,
            refused: Vec::new(),
        }
    }

    /// The same gate, naming `token` (of `audience`) when it refuses it.
    pub fn refusing(mut self, audience: Audience, token: Token) -> Self {
        self.refused.push((audience, token));
        self
    }

    /// The audience this gate admits.
    pub fn audience(&self) -> Audience {
        self.audience
    }

    /// Checks the value of an `Authorization` header. Another audience's token is refused
    /// even if it were (wrongly) equal to the accepted one: refusal is checked first.
    pub fn check(&self, authorization: Option<&str>) -> std::result::Result<(), Denied> {
        let Some(presented) = authorization.and_then(presented) else {
            return Err(Denied::Missing);
        };
        self.check_token(presented)
    }

    /// Checks a bare token (from an environment variable, say).
    pub fn check_token(&self, presented: &str) -> std::result::Result<(), Denied> {
        // Every comparison runs, so which one matched does not show in the time taken.
        let mut other = None;
        for (audience, token) in &self.refused {
            if token.matches(presented) && other.is_none() {
                other = Some(*audience);
            }
        }
        let accepted = self.accepted.matches(presented);
        match (other, accepted) {
            (Some(a), _) => Err(Denied::OtherAudience(a)),
            (None, true) => Ok(()),
            (None, false) => Err(Denied::Invalid),
        }
    }
}

/// The token of an `Authorization` header value: `Bearer <token>`, scheme case-insensitive.
pub fn presented(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// `CONFIG_INVALID` if two of `tokens` (each named by where it is configured) are the same
/// secret: a caller holding its own token must not hold the supervisor's too.
pub fn separate(tokens: &[(&str, &Token)]) -> Result<()> {
    for (i, (a_name, a)) in tokens.iter().enumerate() {
        for (b_name, b) in &tokens[i + 1..] {
            if a.matches(b.expose()) {
                return Err(Error::new(
                    ErrorCode::ConfigInvalid,
                    format!(
                        "{a_name} and {b_name} hold the same token; the caller's and the supervisor's must differ"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The supervisor token: `configured` (from [`SUPERVISOR_TOKEN_ENV`]) if given, else the one
/// in `file`, made there (mode 0600, its directory created) on first use.
pub fn supervisor_token(
    configured: Option<&Token>,
    file: &Path,
) -> Result<(Token, crate::TokenSource)> {
    if let Some(t) = configured {
        return Ok((t.clone(), crate::TokenSource::Configured));
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::caused_by(
                ErrorCode::ConfigInvalid,
                format!("could not create {}", dir.display()),
                e,
            )
        })?;
    }
    Token::load_or_create(file)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn token(c: char) -> Token {
        Token::configured(&c.to_string().repeat(40)).unwrap()
    }

    #[test]
    fn a_gate_admits_its_own_token_and_names_the_other_audience() {
        let gate =
            Gate::new(Audience::Supervisor, token('s')).refusing(Audience::Caller, token('c'));
        let bearer = |c: char| format!("Bearer {}", c.to_string().repeat(40));
        assert_eq!(gate.check(Some(&bearer('s'))), Ok(()));
        assert_eq!(
            gate.check(Some(&bearer('c'))),
            Err(Denied::OtherAudience(Audience::Caller))
        );
        assert_eq!(gate.check(Some(&bearer('x'))), Err(Denied::Invalid));
        assert_eq!(gate.check(None), Err(Denied::Missing));
        assert_eq!(gate.check(Some("Basic abc")), Err(Denied::Missing));
        let message = Denied::OtherAudience(Audience::Caller).message(Audience::Supervisor);
        assert!(message.contains("caller token is refused"), "{message}");
        assert!(!message.contains(&"c".repeat(40)));
    }

    #[test]
    fn a_refused_token_stays_refused_even_if_it_equals_the_accepted_one() {
        let gate =
            Gate::new(Audience::Supervisor, token('s')).refusing(Audience::Caller, token('s'));
        assert_eq!(
            gate.check_token(&"s".repeat(40)),
            Err(Denied::OtherAudience(Audience::Caller))
        );
    }

    #[test]
    fn the_same_secret_for_two_audiences_is_refused() {
        let (a, b) = (token('a'), token('b'));
        separate(&[("mcp", &a), ("supervisor", &b)]).unwrap();
        let e = separate(&[("mcp", &a), ("a2a", &b), ("supervisor", &a)]).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("mcp and supervisor"), "{}", e.message);
        assert!(!e.message.contains(&"a".repeat(40)));
    }

    #[test]
    fn the_supervisor_token_file_is_made_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("home").join(SUPERVISOR_TOKEN_FILE);
        let (t, source) = supervisor_token(None, &file).unwrap();
        assert_eq!(source, crate::TokenSource::Created);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, _) = supervisor_token(None, &file).unwrap();
        assert_eq!(again, t);
        let (c, source) = supervisor_token(Some(&token('z')), &file).unwrap();
        assert_eq!((c, source), (token('z'), crate::TokenSource::Configured));
    }

    proptest! {
        /// Whatever a client sends as `Authorization`, the check answers without panicking,
        /// only the exact accepted token passes, and the supervisor's is named.
        #[test]
        fn hostile_headers_never_pass_or_panic(
            value in "(Bearer |bearer |BEARER  |Basic |Bearer)?[ks ]{0,44}|.{0,120}"
        ) {
            let gate = Gate::new(Audience::Caller, token('k')).refusing(Audience::Supervisor, token('s'));
            let k = "k".repeat(40);
            let verdict = gate.check(Some(&value));
            prop_assert_eq!(verdict.is_ok(), presented(&value) == Some(k.as_str()));
            let s = format!("Bearer {}", "s".repeat(40));
            prop_assert_eq!(gate.check(Some(&s)), Err(Denied::OtherAudience(Audience::Supervisor)));
        }
    }
}
