//! Who is looking at the dashboard: one-time login codes, the session cookie they are
//! exchanged for, the per-session CSRF token, and the bearer token as the alternative for
//! scripts (`GET` only).
//!
//! Everything is derived from the existing tokens, so that a code minted by another process
//! (`legate ui --print-url` reads the same token file) is accepted, and a session survives a
//! restart of the server (a reconnecting page resumes):
//!
//! - **one-time code** `<a>.<nonce>.<expiry>.<mac>`: `a` is `c` (caller) or `s` (supervisor),
//!   a random 128-bit nonce, the expiry in Unix milliseconds (hex), and an HMAC-SHA256 over
//!   all three under a key derived from that audience's token. It is valid for [`CODE_TTL`]
//!   and once: the server remembers the nonces it redeemed until they expire, in memory and
//!   (with [`Auth::remembering`]) in the store, so a restarted server refuses it too.
//! - **session cookie** `legate_session=<a>.<id>.<expiry>.<mac>`, same shape, another derived
//!   key, valid [`SESSION_TTL`]; `HttpOnly; SameSite=Strict; Path=/`.
//! - **CSRF token**: an HMAC of the session id under a third derived key, sent as the form
//!   field `csrf` of every `POST`.
//! - **signing out** ends a session on the server: its id is remembered, in memory and in
//!   the store, until it would have expired, and every request with its cookie is refused,
//!   after a restart too. A store that cannot be read or written refuses (fails closed).
//!
//! The audience of a code is the audience of its session: a caller's code can never make a
//! supervisor's session, whatever the code says, because the MAC is checked with the key of
//! the audience the code names.
//!
//! This module never logs a token, a code, a cookie or a CSRF token, and compares MACs in
//! constant time.

pub(crate) mod mac;

use legate_token::{Audience, Token};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How long a one-time code may be redeemed after it is minted.
pub const CODE_TTL: Duration = Duration::from_secs(120);
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// The session cookie's name.
pub const COOKIE: &str = "legate_session";
/// The form field that carries the CSRF token.
pub const CSRF_FIELD: &str = "csrf";
/// The path a one-time URL opens.
pub const LOGIN_PATH: &str = "/login";

/// Why a code or cookie was refused. None carries what was presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Not of the shape this server mints.
    #[error("the code is not one this server mints")]
    Malformed,
    /// The MAC does not match: forged, or minted with another token.
    #[error("the code was not minted with this server's token")]
    Forged,
    /// Past its expiry (or claiming a lifetime longer than any this server mints).
    #[error("the code has expired; mint a fresh one with `legate ui --print-url`")]
    Expired,
    /// Already redeemed.
    #[error(
        "the code was already used; one-time codes work once (`legate ui --print-url` mints another)"
    )]
    Used,
    /// No random bytes.
    #[error("no random bytes for a session")]
    NoRandom,
    /// Signed out: the session was ended on this server.
    #[error("this session was signed out; `legate ui` opens a new one")]
    SignedOut,
    /// The store could not record or read what sign-in must remember: refused, not trusted.
    #[error("the dashboard could not check this sign-in against the store; try again")]
    Unrecorded,
}

/// A signed value of the shape `<a>.<body>.<expiry>.<mac>`.
struct Signed {
    audience: Audience,
    body: Vec<u8>,
    expiry: i64,
}

fn letter(audience: Audience) -> &'static str {
    match audience {
        Audience::Caller => "c",
        Audience::Supervisor => "s",
    }
}

/// A key for `purpose` derived from `token`.
fn derive(token: &Token, purpose: &str) -> [u8; 32] {
    mac::hmac(
        token.expose().as_bytes(),
        &[b"legate-ui/v1/", purpose.as_bytes()],
    )
}

fn sign(key: &[u8; 32], audience: Audience, body: &[u8], expiry: i64) -> String {
    let (a, body, expiry) = (letter(audience), mac::hex(body), format!("{expiry:x}"));
    let m = mac::hmac(
        key,
        &[a.as_bytes(), b".", body.as_bytes(), b".", expiry.as_bytes()],
    );
    format!("{a}.{body}.{expiry}.{}", mac::hex(&m))
}

/// Parses and checks a signed value; `key` gives the key of the audience it names.
fn open(
    text: &str,
    body_len: usize,
    key: impl Fn(Audience) -> [u8; 32],
) -> Result<Signed, Refused> {
    let mut parts = text.split('.');
    let (Some(a), Some(body), Some(expiry), Some(m), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(Refused::Malformed);
    };
    let audience = match a {
        "c" => Audience::Caller,
        "s" => Audience::Supervisor,
        _ => return Err(Refused::Malformed),
    };
    let raw = mac::unhex(body).filter(|b| b.len() == body_len);
    let given = mac::unhex(m).filter(|m| m.len() == 32);
    let valid_expiry = !expiry.is_empty()
        && expiry.len() <= 16
        && expiry
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let (Some(raw), Some(given), true) = (raw, given, valid_expiry) else {
        return Err(Refused::Malformed);
    };
    let expected = mac::hmac(
        &key(audience),
        &[a.as_bytes(), b".", body.as_bytes(), b".", expiry.as_bytes()],
    );
    if !mac::same(&expected, &given) {
        return Err(Refused::Forged);
    }
    let expiry = i64::from_str_radix(expiry, 16).map_err(|_| Refused::Malformed)?;
    Ok(Signed {
        audience,
        body: raw,
        expiry,
    })
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Mints a one-time code for `audience`, under its `token`, valid [`CODE_TTL`] from `now_ms`.
/// What `legate ui --print-url` and `legate serve --ui` call.
pub fn mint_code(token: &Token, audience: Audience, now_ms: i64) -> Result<String, Refused> {
    let nonce = mac::random::<16>().map_err(|_| Refused::NoRandom)?;
    Ok(sign(
        &derive(token, "code"),
        audience,
        &nonce,
        now_ms.saturating_add(ms(CODE_TTL)),
    ))
}

/// The one-time URL of `code` on the server at `base` (`http://127.0.0.1:8733`).
pub fn login_url(base: &str, code: &str) -> String {
    format!("{}{LOGIN_PATH}?code={code}", base.trim_end_matches('/'))
}

/// A signed-in browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Whose token the code was minted with.
    pub audience: Audience,
    /// Random, 128 bits, hex.
    id: String,
    /// Unix milliseconds.
    pub expiry: i64,
}

/// The keys of one server and the codes it has redeemed.
#[derive(Debug)]
pub struct Auth {
    caller: Token,
    supervisor: Token,
    /// Where redeemed codes and signed-out sessions are also kept, across restarts.
    store: Option<legate_engine::Engine>,
    /// Redeemed nonces and their expiry (pruned as they expire).
    used: Mutex<HashMap<Vec<u8>, i64>>,
    /// Sessions signed out, by id, with their expiry (pruned as they expire).
    signed_out: Mutex<HashMap<String, i64>>,
}

impl Auth {
    /// The keys of a server accepting `caller`'s and `supervisor`'s tokens.
    pub fn new(caller: Token, supervisor: Token) -> Self {
        Self {
            caller,
            supervisor,
            store: None,
            used: Mutex::new(HashMap::new()),
            signed_out: Mutex::new(HashMap::new()),
        }
    }

    /// These keys, also remembering redeemed codes and signed-out sessions in `engine`'s
    /// store: a restarted server (or another process on the home) honours them (issue 29,
    /// finding 8: a used code worked again, and a signed-out cookie came back, after a
    /// restart).
    pub fn remembering(mut self, engine: legate_engine::Engine) -> Self {
        self.store = Some(engine);
        self
    }

    /// Ends `session` on this server: its cookie, wherever it was copied, is refused from
    /// now until it would have expired (issue 29, finding 8: signing out only forgot it in
    /// one browser), after a restart too when the store remembers it.
    pub fn sign_out(&self, session: &Session, now_ms: i64) -> Result<(), Refused> {
        {
            let mut out = self.signed_out.lock().unwrap_or_else(|p| p.into_inner());
            out.retain(|_, expiry| *expiry > now_ms);
            out.insert(session.id.clone(), session.expiry);
        }
        if let Some(engine) = &self.store {
            engine
                .spend_sign_in(legate_engine::Spent::Session, &session.id, session.expiry)
                .map_err(|_| Refused::Unrecorded)?;
        }
        Ok(())
    }

    fn token(&self, audience: Audience) -> &Token {
        match audience {
            Audience::Caller => &self.caller,
            Audience::Supervisor => &self.supervisor,
        }
    }

    /// Mints a code for `audience` (what a test or `serve --ui` prints).
    pub fn mint(&self, audience: Audience, now_ms: i64) -> Result<String, Refused> {
        mint_code(self.token(audience), audience, now_ms)
    }

    /// Redeems a one-time code for a new session: at most once, before its expiry.
    pub fn redeem(&self, code: &str, now_ms: i64) -> Result<Session, Refused> {
        let signed = open(code, 16, |a| derive(self.token(a), "code"))?;
        if signed.expiry <= now_ms || signed.expiry > now_ms.saturating_add(ms(CODE_TTL)) {
            return Err(Refused::Expired);
        }
        {
            // A poisoned lock only means another request panicked mid-insert; the map
            // itself is still a map.
            let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
            used.retain(|_, expiry| *expiry > now_ms);
            if used.insert(signed.body.clone(), signed.expiry).is_some() {
                return Err(Refused::Used);
            }
        }
        if let Some(engine) = &self.store {
            let nonce = mac::hex(&signed.body);
            let fresh = engine
                .spend_sign_in(legate_engine::Spent::Code, &nonce, signed.expiry)
                .map_err(|_| Refused::Unrecorded)?;
            if !fresh {
                return Err(Refused::Used);
            }
        }
        let id = mac::random::<16>().map_err(|_| Refused::NoRandom)?;
        Ok(Session {
            audience: signed.audience,
            id: mac::hex(&id),
            expiry: now_ms.saturating_add(ms(SESSION_TTL)),
        })
    }

    /// The cookie value of `session`.
    pub fn cookie_value(&self, session: &Session) -> String {
        let key = derive(self.token(session.audience), "session");
        let id = mac::unhex(&session.id).unwrap_or_default();
        sign(&key, session.audience, &id, session.expiry)
    }

    /// The `Set-Cookie` header of `session`.
    pub fn set_cookie(&self, session: &Session) -> String {
        let max_age =
            (session.expiry / 1000).saturating_sub(legate_core::Timestamp::now().0 / 1000);
        format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            self.cookie_value(session),
            max_age.max(0)
        )
    }

    /// The session a cookie value stands for, if it is valid at `now_ms`.
    pub fn session(&self, value: &str, now_ms: i64) -> Result<Session, Refused> {
        let signed = open(value, 16, |a| derive(self.token(a), "session"))?;
        if signed.expiry <= now_ms {
            return Err(Refused::Expired);
        }
        let id = mac::hex(&signed.body);
        let out = self.signed_out.lock().unwrap_or_else(|p| p.into_inner());
        if out.contains_key(&id) {
            return Err(Refused::SignedOut);
        }
        drop(out);
        if let Some(engine) = &self.store {
            let ended = engine
                .sign_in_spent(legate_engine::Spent::Session, &id)
                .map_err(|_| Refused::Unrecorded)?;
            if ended {
                return Err(Refused::SignedOut);
            }
        }
        Ok(Session {
            audience: signed.audience,
            id,
            expiry: signed.expiry,
        })
    }

    /// The CSRF token of `session`.
    pub fn csrf(&self, session: &Session) -> String {
        let key = derive(self.token(session.audience), "csrf");
        mac::hex(&mac::hmac(&key, &[session.id.as_bytes()]))
    }

    /// Whether `presented` is `session`'s CSRF token.
    pub fn csrf_ok(&self, session: &Session, presented: &str) -> bool {
        mac::same(self.csrf(session).as_bytes(), presented.as_bytes())
    }

    /// The audience of a bare bearer token, if it is one of the two.
    pub fn bearer(&self, presented: &str) -> Option<Audience> {
        // Both compared, so the time taken does not say which matched.
        let caller = self.caller.matches(presented);
        let supervisor = self.supervisor.matches(presented);
        match (caller, supervisor) {
            (_, true) => Some(Audience::Supervisor),
            (true, false) => Some(Audience::Caller),
            (false, false) => None,
        }
    }
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v.trim())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn auth() -> Auth {
        Auth::new(
            Token::configured(&"c".repeat(40)).unwrap(),
            Token::configured(&"s".repeat(40)).unwrap(),
        )
    }

    #[test]
    fn a_code_works_once_and_keeps_its_audience() {
        let a = auth();
        let code = a.mint(Audience::Caller, 1_000).unwrap();
        let s = a.redeem(&code, 2_000).unwrap();
        assert_eq!(s.audience, Audience::Caller);
        assert_eq!(a.redeem(&code, 2_001), Err(Refused::Used));
        let code = a.mint(Audience::Supervisor, 1_000).unwrap();
        assert_eq!(
            a.redeem(&code, 2_000).unwrap().audience,
            Audience::Supervisor
        );
    }

    #[test]
    fn a_caller_code_relabelled_supervisor_is_forged() {
        let a = auth();
        let code = a.mint(Audience::Caller, 1_000).unwrap();
        let relabelled = format!("s{}", &code[1..]);
        assert_eq!(a.redeem(&relabelled, 2_000), Err(Refused::Forged));
        // And a caller code is not a session cookie.
        assert_eq!(a.session(&code, 2_000).unwrap_err(), Refused::Forged);
    }

    #[test]
    fn expired_and_foreign_codes_are_refused() {
        let a = auth();
        let code = a.mint(Audience::Caller, 0).unwrap();
        assert_eq!(a.redeem(&code, ms(CODE_TTL) + 1), Err(Refused::Expired));
        let other = Auth::new(
            Token::configured(&"x".repeat(40)).unwrap(),
            Token::configured(&"y".repeat(40)).unwrap(),
        );
        let code = other.mint(Audience::Caller, 0).unwrap();
        assert_eq!(a.redeem(&code, 1), Err(Refused::Forged));
    }

    #[test]
    fn a_session_round_trips_through_its_cookie_and_its_csrf_is_its_own() {
        let a = auth();
        let s = a.redeem(&a.mint(Audience::Caller, 0).unwrap(), 1).unwrap();
        let back = a.session(&a.cookie_value(&s), 2).unwrap();
        assert_eq!(back, s);
        let t = a.redeem(&a.mint(Audience::Caller, 0).unwrap(), 1).unwrap();
        assert!(a.csrf_ok(&s, &a.csrf(&s)));
        assert!(!a.csrf_ok(&s, &a.csrf(&t)));
        assert!(!a.csrf_ok(&s, ""));
        assert_eq!(
            a.session(&a.cookie_value(&s), s.expiry),
            Err(Refused::Expired)
        );
    }

    #[test]
    fn cookies_are_found_by_name() {
        assert_eq!(cookie("a=1; legate_session=x.y; b=2", COOKIE), Some("x.y"));
        assert_eq!(cookie("xlegate_session=1", COOKIE), None);
    }

    proptest! {
        /// Whatever a client sends as a code or a cookie, it is refused without a panic
        /// unless it is one this server minted.
        #[test]
        fn hostile_codes_and_cookies_are_refused(text in "[cs]?\\.?[0-9a-f.]{0,120}|.{0,200}") {
            let a = auth();
            prop_assert!(a.redeem(&text, 1).is_err());
            prop_assert!(a.session(&text, 1).is_err());
            let _ = cookie(&text, COOKIE);
        }
    }
}
