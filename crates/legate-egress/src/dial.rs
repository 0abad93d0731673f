//! Reaching an allowed destination: resolving its name once, screening every address
//! (a special address only when an allow rule names it exactly), and connecting to the first
//! address that passes and answers.
//!
//! The address screened is the address connected to: this module never resolves twice and
//! never connects to an address it has not screened.

use legate_supervisor::network::{Destination, Host, Special, special};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;

/// Why an allowed destination was not reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// Resolving the name failed or took too long.
    #[error("resolving {host} failed: {why}")]
    Resolve {
        /// The name.
        host: String,
        /// What failed.
        why: String,
    },
    /// Every address it resolved to is special and named by no rule.
    #[error(
        "{host} resolves only to {classes} addresses ({addresses}), which no rule names exactly"
    )]
    Special {
        /// The host as asked.
        host: String,
        /// The kinds of the addresses, e.g. `loopback`.
        classes: String,
        /// The addresses.
        addresses: String,
    },
    /// Every address it resolved to is refused: special addresses no rule names exactly, or
    /// addresses a deny rule names.
    #[error("{host} resolves only to addresses denied by {rules} ({addresses})")]
    Denied {
        /// The host as asked.
        host: String,
        /// The rules that deny them.
        rules: String,
        /// The addresses.
        addresses: String,
    },
    /// No screened address accepted a connection.
    #[error("connecting to {address} failed: {why}")]
    Connect {
        /// The last address tried.
        address: SocketAddr,
        /// What failed.
        why: String,
    },
}

/// The addresses of a destination after screening, in the resolver's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Screened {
    /// Addresses that may be connected to.
    pub permitted: Vec<SocketAddr>,
    /// Special addresses no allow rule names exactly; never connected to.
    pub refused: Vec<(SocketAddr, Special)>,
    /// Addresses a deny rule names (with its id); never connected to.
    pub denied: Vec<(SocketAddr, String)>,
}

/// Screens resolved addresses: each is made canonical (an IPv4-mapped address becomes its
/// IPv4 address, which is then the one connected to), duplicates are dropped, and a special
/// address is permitted only when `names_exactly` says an allow rule names it.
pub(crate) fn screen(
    addrs: impl IntoIterator<Item = SocketAddr>,
    names_exactly: impl Fn(IpAddr, u16) -> bool,
    denies: impl Fn(IpAddr, u16) -> Option<String>,
) -> Screened {
    let mut out = Screened::default();
    for addr in addrs {
        let addr = SocketAddr::new(addr.ip().to_canonical(), addr.port());
        if out.permitted.contains(&addr)
            || out.refused.iter().any(|(a, _)| *a == addr)
            || out.denied.iter().any(|(a, _)| *a == addr)
        {
            continue;
        }
        if let Some(rule) = denies(addr.ip(), addr.port()) {
            out.denied.push((addr, rule));
            continue;
        }
        match special(addr.ip()) {
            Some(class) if !names_exactly(addr.ip(), addr.port()) => {
                out.refused.push((addr, class));
            }
            _ => out.permitted.push(addr),
        }
    }
    out
}

/// Resolves `dest` once (an IP literal is used as given), bounded by `timeout`.
pub(crate) async fn resolve(
    dest: &Destination,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, DialError> {
    let name = match &dest.host {
        Host::Ip(ip) => return Ok(vec![SocketAddr::new(*ip, dest.port)]),
        Host::Name(name) => name,
    };
    let failed = |why: String| DialError::Resolve {
        host: name.clone(),
        why,
    };
    match tokio::time::timeout(timeout, tokio::net::lookup_host((name.as_str(), dest.port))).await {
        Err(_) => Err(failed(format!("no answer within {timeout:?}"))),
        Ok(Err(error)) => Err(failed(error.to_string())),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(failed("it has no address".into()))
            } else {
                Ok(addrs)
            }
        }
    }
}

/// Resolves and screens `dest`: the permitted addresses, or why there are none.
pub(crate) async fn addresses(
    dest: &Destination,
    timeout: Duration,
    names_exactly: impl Fn(IpAddr, u16) -> bool,
    denies: impl Fn(IpAddr, u16) -> Option<String>,
) -> Result<Vec<SocketAddr>, DialError> {
    let screened = screen(resolve(dest, timeout).await?, names_exactly, denies);
    if !screened.permitted.is_empty() {
        if !screened.refused.is_empty() || !screened.denied.is_empty() {
            tracing::info!(
                destination = %dest,
                refused = screened.refused.len(),
                "special addresses skipped"
            );
        }
        return Ok(screened.permitted);
    }
    if screened.refused.is_empty() {
        let mut rules: Vec<&str> = Vec::new();
        for (_, rule) in &screened.denied {
            if !rules.contains(&rule.as_str()) {
                rules.push(rule);
            }
        }
        return Err(DialError::Denied {
            host: dest.host.to_string(),
            rules: rules.join(", "),
            addresses: screened
                .denied
                .iter()
                .map(|(a, _)| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let mut classes: Vec<&str> = Vec::new();
    for (_, class) in &screened.refused {
        if !classes.contains(&class.as_str()) {
            classes.push(class.as_str());
        }
    }
    Err(DialError::Special {
        host: dest.host.to_string(),
        classes: classes.join(" or "),
        addresses: screened
            .refused
            .iter()
            .map(|(a, _)| a.ip().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// Connects to the first of `addrs` that answers, each attempt bounded by `timeout`.
pub(crate) async fn connect(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let mut last = None;
    for &address in addrs {
        let why = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => return Ok((stream, address)),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        tracing::debug!(%address, why, "connect attempt failed");
        last = Some(DialError::Connect { address, why });
    }
    Err(last.unwrap_or(DialError::Resolve {
        host: String::new(),
        why: "no address to connect to".into(),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn screening_keeps_order_and_checks_every_address() {
        let exact =
            |ip: IpAddr, port: u16| ip == "10.0.0.7".parse::<IpAddr>().unwrap() && port == 80;
        let s = screen(
            [
                sa("127.0.0.1:80"),
                sa("93.184.215.14:80"),
                sa("[::ffff:10.0.0.7]:80"),
                sa("10.0.0.7:80"),
                sa("169.254.169.254:80"),
                sa("[2606:4700::1111]:80"),
                sa("[::ffff:127.0.0.1]:80"),
            ],
            exact,
            |_, _| None,
        );
        assert_eq!(
            s.permitted,
            vec![
                sa("93.184.215.14:80"),
                sa("10.0.0.7:80"),
                sa("[2606:4700::1111]:80")
            ]
        );
        assert_eq!(
            s.refused,
            vec![
                (sa("127.0.0.1:80"), Special::Loopback),
                (sa("169.254.169.254:80"), Special::LinkLocal),
            ]
        );
    }

    #[test]
    fn the_exact_check_sees_the_port() {
        let s = screen([sa("127.0.0.1:81")], |_, port| port == 80, |_, _| None);
        assert!(s.permitted.is_empty());
        let s = screen([sa("127.0.0.1:80")], |_, port| port == 80, |_, _| None);
        assert_eq!(s.permitted, vec![sa("127.0.0.1:80")]);
    }

    #[test]
    fn an_address_a_deny_rule_names_is_never_permitted() {
        let deny = |ip: IpAddr, _| {
            (ip == "93.184.215.14".parse::<IpAddr>().unwrap())
                .then(|| "network.deny[0]".to_string())
        };
        let s = screen(
            [
                sa("93.184.215.14:443"),
                sa("[::ffff:93.184.215.14]:443"),
                sa("93.184.215.15:443"),
            ],
            |_, _| false,
            deny,
        );
        assert_eq!(s.permitted, vec![sa("93.184.215.15:443")]);
        assert_eq!(
            s.denied,
            vec![(sa("93.184.215.14:443"), "network.deny[0]".to_string())]
        );
    }

    #[tokio::test]
    async fn only_denied_addresses_is_an_error_naming_the_rule() {
        let dest = Destination::new(Host::Ip("127.0.0.1".parse().unwrap()), 80);
        let err = addresses(
            &dest,
            Duration::from_secs(1),
            |_, _| true,
            |_, _| Some("network.deny[2]".into()),
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "127.0.0.1 resolves only to addresses denied by network.deny[2] (127.0.0.1)"
        );
    }

    #[tokio::test]
    async fn only_special_addresses_is_an_error_naming_them() {
        let dest = Destination::new(Host::Ip("169.254.169.254".parse().unwrap()), 80);
        let err = addresses(&dest, Duration::from_secs(1), |_, _| false, |_, _| None)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "169.254.169.254 resolves only to link-local addresses (169.254.169.254), which no rule names exactly"
        );
    }
}
