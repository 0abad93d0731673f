//! Reaching an allowed destination: resolving its name once, screening every address
//! (a special address, or one of this host's own, only when an allow rule names it
//! exactly), and connecting to the first address that passes and answers.
//!
//! The address screened is the address connected to: this module never resolves twice and
//! never connects to an address it has not screened. An address of this host's is found
//! before connecting ([`is_this_hosts`]: one the kernel routes to itself) and again once
//! connected (the connection's two ends share it): the
//! proxy runs on the host, so its connections to the host's public address would reach
//! every service listening on all addresses, which no name rule may.

use crate::lookups::Lookups;
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
/// address, or one `this_host` says is this host's, is permitted only when `names_exactly`
/// says an allow rule names it.
pub(crate) fn screen(
    addrs: impl IntoIterator<Item = SocketAddr>,
    names_exactly: impl Fn(IpAddr, u16) -> bool,
    denies: impl Fn(IpAddr, u16) -> Option<String>,
    this_host: impl Fn(IpAddr) -> bool,
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
        let class =
            special(addr.ip()).or_else(|| this_host(addr.ip()).then_some(Special::ThisHost));
        match class {
            Some(class) if !names_exactly(addr.ip(), addr.port()) => {
                out.refused.push((addr, class));
            }
            _ => out.permitted.push(addr),
        }
    }
    out
}

/// Whether `ip` (a global address: the special ones are screened before) is one of this
/// host's: the kernel routes it locally, so that a socket pointed at it takes it as its own
/// source (a UDP socket's `connect` sends nothing). The IPv4 address a NAT64 address of the
/// well-known prefix (`64:ff9b::/96`) carries is asked for too; another prefix an operator
/// chose is not known here. An address this host cannot route to is not
/// its own; a socket that cannot be made counts it as this host's (refused, and said).
pub(crate) fn is_this_hosts(ip: IpAddr) -> bool {
    let local = |ip: IpAddr| {
        let unspecified: IpAddr = match ip {
            IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        };
        let socket = match std::net::UdpSocket::bind(SocketAddr::new(unspecified, 0)) {
            Ok(socket) => socket,
            Err(error) => {
                tracing::warn!(%ip, %error, "no socket to tell whether an address is this host's: refused as if it were");
                return true;
            }
        };
        socket.connect(SocketAddr::new(ip, 9)).is_ok()
            && socket.local_addr().is_ok_and(|own| own.ip() == ip)
    };
    let nat64 = match ip {
        IpAddr::V6(v6) if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            let [.., a, b, c, d] = v6.octets();
            Some(IpAddr::V4(std::net::Ipv4Addr::new(a, b, c, d)))
        }
        _ => None,
    };
    local(ip.to_canonical()) || nat64.is_some_and(local)
}

/// Resolves `dest` once (an IP literal is used as given), bounded by `timeout`.
pub(crate) async fn resolve(
    dest: &Destination,
    lookups: &Lookups,
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
    match lookups.resolve(name, dest.port, timeout).await {
        Err(why) => Err(failed(why)),
        Ok(addrs) if addrs.is_empty() => Err(failed("it has no address".into())),
        Ok(addrs) => Ok(addrs),
    }
}

/// Resolves and screens `dest`: the permitted addresses, or why there are none.
pub(crate) async fn addresses(
    dest: &Destination,
    lookups: &Lookups,
    timeout: Duration,
    names_exactly: impl Fn(IpAddr, u16) -> bool,
    denies: impl Fn(IpAddr, u16) -> Option<String>,
) -> Result<Vec<SocketAddr>, DialError> {
    let screened = screen(
        resolve(dest, lookups, timeout).await?,
        names_exactly,
        denies,
        is_this_hosts,
    );
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

/// Connects to the first of `addrs` (screened for `dest`) that answers, each attempt
/// bounded by `timeout`. A connection that reached this host (its two ends share the
/// address: the kernel delivered it locally) to an address no rule names exactly is closed
/// at once and the next address tried; when that is all there was, `Special` (a refusal).
pub(crate) async fn connect(
    dest: &Destination,
    addrs: &[SocketAddr],
    timeout: Duration,
    names_exactly: impl Fn(IpAddr, u16) -> bool,
) -> Result<(TcpStream, SocketAddr), DialError> {
    let mut last = None;
    let mut this_host = Vec::new();
    for &address in addrs {
        let why = match tokio::time::timeout(timeout, TcpStream::connect(address)).await {
            Ok(Ok(stream))
                if reached_this_host(&stream, address)
                    && !names_exactly(address.ip(), address.port()) =>
            {
                tracing::info!(%address, "a connection reached this host: closed");
                this_host.push(address);
                continue;
            }
            Ok(Ok(stream)) => return Ok((stream, address)),
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {timeout:?}"),
        };
        tracing::debug!(%address, why, "connect attempt failed");
        last = Some(DialError::Connect { address, why });
    }
    if !this_host.is_empty() {
        return Err(DialError::Special {
            host: dest.host.to_string(),
            classes: Special::ThisHost.as_str().to_string(),
            addresses: this_host
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    Err(last.unwrap_or(DialError::Resolve {
        host: String::new(),
        why: "no address to connect to".into(),
    }))
}

/// Whether `stream`, connected to `address`, was delivered by this host to itself: its
/// local end has the address it connected to (the kernel picks a local destination as its
/// own source). An end that cannot be read counts as this host's.
fn reached_this_host(stream: &TcpStream, address: SocketAddr) -> bool {
    match stream.local_addr() {
        Ok(local) => local.ip().to_canonical() == address.ip().to_canonical(),
        Err(_) => true,
    }
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
            |_| false,
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
        let s = screen(
            [sa("127.0.0.1:81")],
            |_, port| port == 80,
            |_, _| None,
            |_| false,
        );
        assert!(s.permitted.is_empty());
        let s = screen(
            [sa("127.0.0.1:80")],
            |_, port| port == 80,
            |_, _| None,
            |_| false,
        );
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
            |_| false,
        );
        assert_eq!(s.permitted, vec![sa("93.184.215.15:443")]);
        assert_eq!(
            s.denied,
            vec![(sa("93.184.215.14:443"), "network.deny[0]".to_string())]
        );
    }

    /// A global address of this host's is refused as any special one: unless a rule names
    /// it exactly.
    #[test]
    fn an_address_of_this_hosts_is_refused_unless_named_exactly() {
        let mine = |ip: IpAddr| ip == "93.184.215.14".parse::<IpAddr>().unwrap();
        let addrs = [sa("93.184.215.14:5432"), sa("93.184.215.15:5432")];
        let s = screen(addrs, |_, _| false, |_, _| None, mine);
        assert_eq!(s.permitted, vec![sa("93.184.215.15:5432")]);
        assert_eq!(
            s.refused,
            vec![(sa("93.184.215.14:5432"), Special::ThisHost)]
        );
        let s = screen(addrs, |_, port| port == 5432, |_, _| None, mine);
        assert_eq!(s.permitted, addrs.to_vec());
    }

    /// This host's addresses are the ones it routes to itself; a global address no machine
    /// here holds is not one, in either form.
    #[test]
    fn this_hosts_addresses_are_the_ones_it_routes_to_itself() {
        assert!(is_this_hosts("127.0.0.1".parse().unwrap()));
        assert!(is_this_hosts("64:ff9b::127.0.0.1".parse().unwrap()));
        assert!(!is_this_hosts("8.8.8.8".parse().unwrap()));
        assert!(!is_this_hosts("64:ff9b::8.8.8.8".parse().unwrap()));
    }

    /// Once connected, a connection the kernel delivered to this host (here to a listener
    /// on its loopback, as it would to its public address) is closed and refused unless a
    /// rule names the address exactly: the check behind the screening, where the kernel
    /// binds any address.
    #[tokio::test]
    async fn a_connection_that_reached_this_host_is_closed_unless_named_exactly() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let dest = Destination::new(Host::Name("db.example".into()), address.port());
        let err = connect(&dest, &[address], Duration::from_secs(5), |_, _| false)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "db.example resolves only to this host's addresses (127.0.0.1), which no rule names exactly"
            )
        );
        let (_, reached) = connect(&dest, &[address], Duration::from_secs(5), |_, _| true)
            .await
            .unwrap();
        assert_eq!(reached, address);
    }

    /// Set for the run of [`inside_a_namespace_with_a_global_address`] that the outer test
    /// starts inside the namespace.
    const INNER: &str = "LEGATE_EGRESS_TEST_THIS_HOST";

    /// In a network namespace of its own where this host holds a global address (8.8.4.4,
    /// on one end of a veth pair), a destination at that address, allowed by a name rule, is
    /// refused as this host's before any connection, and permitted when a rule names it
    /// exactly: the screening as the proxy runs it. Skipped where this process may not make
    /// a network namespace (`unshare`, `ip`, root).
    #[test]
    fn a_global_address_of_this_hosts_is_refused_before_connecting() {
        if std::env::var_os(INNER).is_some() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let script = "ip link add v0 type veth peer name v1 && ip addr add 8.8.4.4/32 dev v0 && \
                      ip link set v0 up && exec \"$0\" --exact \
                      dial::tests::inside_a_namespace_with_a_global_address --nocapture";
        let out = std::process::Command::new("unshare")
            .args(["--net", "sh", "-c", script])
            .arg(&exe)
            .env(INNER, "1")
            .output();
        let out = match out {
            Ok(out) if out.status.success() => out,
            Ok(out) if String::from_utf8_lossy(&out.stderr).contains("unshare failed") => {
                eprintln!("skipped: no network namespace here");
                return;
            }
            Ok(out) => panic!(
                "{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => {
                eprintln!("skipped: unshare could not run ({e})");
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("checked inside"), "{text}");
    }

    /// The inner half of [`a_global_address_of_this_hosts_is_refused_before_connecting`].
    #[tokio::test]
    async fn inside_a_namespace_with_a_global_address() {
        if std::env::var_os(INNER).is_none() {
            return;
        }
        assert!(is_this_hosts("8.8.4.4".parse().unwrap()));
        assert!(is_this_hosts("64:ff9b::8.8.4.4".parse().unwrap()));
        let dest = Destination::new(Host::Ip("8.8.4.4".parse().unwrap()), 443);
        let err = addresses(
            &dest,
            &Lookups::new(1),
            Duration::from_secs(1),
            |_, _| false,
            |_, _| None,
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "8.8.4.4 resolves only to this host's addresses (8.8.4.4), which no rule names exactly"
        );
        let named = addresses(
            &dest,
            &Lookups::new(1),
            Duration::from_secs(1),
            |_, _| true,
            |_, _| None,
        )
        .await
        .unwrap();
        assert_eq!(named, vec![sa("8.8.4.4:443")]);
        println!("checked inside");
    }

    #[tokio::test]
    async fn only_denied_addresses_is_an_error_naming_the_rule() {
        let dest = Destination::new(Host::Ip("127.0.0.1".parse().unwrap()), 80);
        let err = addresses(
            &dest,
            &Lookups::new(1),
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
        let err = addresses(
            &dest,
            &Lookups::new(1),
            Duration::from_secs(1),
            |_, _| false,
            |_, _| None,
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "169.254.169.254 resolves only to link-local addresses (169.254.169.254), which no rule names exactly"
        );
    }
}
