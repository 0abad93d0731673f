//! Special addresses: the ones an agent's traffic must never reach through a name or a
//! wildcard (loopback, private networks, link-local and cloud metadata, multicast, …).
//!
//! [`special`] classifies one address; an IPv6 address that embeds an IPv4 address
//! (IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible
//! `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is classified by that IPv4 address.
//! Pure: no I/O, no lookups.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is special: what kind of network it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Special {
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `169.254.0.0/16` (cloud metadata `169.254.169.254` included), `fe80::/10`.
    LinkLocal,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, and shared address space
    /// `100.64.0.0/10` (carrier-grade NAT).
    Private,
    /// `fc00::/7`.
    UniqueLocal,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `0.0.0.0/8`, `::`.
    Unspecified,
    /// `255.255.255.255`.
    Broadcast,
    /// An address of this host's own (a global one on one of its interfaces): through it
    /// every service that listens on all of the host's addresses would be reached.
    /// [`special`] never says so (it is pure); the egress proxy finds it when it screens an
    /// address, and again once connected.
    ThisHost,
    /// Any other address that is not global unicast: `240.0.0.0/4`, `192.0.0.0/24`,
    /// documentation (`192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`, `2001:db8::/32`),
    /// benchmarking `198.18.0.0/15`, `2001::/23`, site-local `fec0::/10`, and every IPv6
    /// address outside `2000::/3` not named above.
    Reserved,
}

impl Special {
    /// Its name in a sentence: "loopback", "private", ….
    pub fn as_str(self) -> &'static str {
        match self {
            Special::Loopback => "loopback",
            Special::LinkLocal => "link-local",
            Special::Private => "private",
            Special::UniqueLocal => "unique-local",
            Special::Multicast => "multicast",
            Special::Unspecified => "unspecified",
            Special::Broadcast => "broadcast",
            Special::ThisHost => "this host's",
            Special::Reserved => "reserved",
        }
    }
}

impl fmt::Display for Special {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of special address `addr` is; `None` for a global unicast address.
pub fn special(addr: IpAddr) -> Option<Special> {
    match addr {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(a: Ipv4Addr) -> Option<Special> {
    let [o0, o1, o2, _] = a.octets();
    let special = match (o0, o1, o2) {
        (0, _, _) => Special::Unspecified,
        (127, _, _) => Special::Loopback,
        (10, _, _) => Special::Private,
        (172, 16..=31, _) => Special::Private,
        (192, 168, _) => Special::Private,
        (100, 64..=127, _) => Special::Private,
        (169, 254, _) => Special::LinkLocal,
        (224..=239, _, _) => Special::Multicast,
        (255, 255, 255) if a == Ipv4Addr::BROADCAST => Special::Broadcast,
        (240..=255, _, _) => Special::Reserved,
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (198, 18..=19, _) => {
            Special::Reserved
        }
        _ => return None,
    };
    Some(special)
}

fn special_v6(a: Ipv6Addr) -> Option<Special> {
    let s = a.segments();
    if let Some(v4) = embedded_v4(a) {
        return special_v4(v4);
    }
    if a.is_unspecified() {
        return Some(Special::Unspecified);
    }
    if a.is_loopback() {
        return Some(Special::Loopback);
    }
    let special = match s[0] {
        0xff00..=0xffff => Special::Multicast,
        0xfe80..=0xfebf => Special::LinkLocal,
        0xfec0..=0xfeff => Special::Reserved,
        0xfc00..=0xfdff => Special::UniqueLocal,
        0x2001 if s[1] < 0x0200 || s[1] == 0x0db8 => Special::Reserved,
        0x2000..=0x3fff => return None,
        _ => Special::Reserved,
    };
    Some(special)
}

/// `addr` as the one address rules compare: an IPv6 address that embeds an IPv4 address (in
/// the forms [`special`] reads) is that IPv4 address; any other is itself.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(addr, IpAddr::V4),
        IpAddr::V4(_) => addr,
    }
}

/// The IPv4 address an IPv6 address stands for, in the forms that route to it.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        // IPv4-mapped ::ffff:a.b.c.d and IPv4-translated ::ffff:0:a.b.c.d.
        [0, 0, 0, 0, 0, 0xffff, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        // IPv4-compatible ::a.b.c.d (not :: and ::1, which are their own).
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 || lo > 1 => Some(low),
        // NAT64 well-known prefix 64:ff9b::/96.
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low),
        // 6to4 2002:a.b.c.d::/48.
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn class(s: &str) -> Option<Special> {
        special(s.parse().unwrap())
    }

    #[test]
    fn ipv4_ranges() {
        use Special::*;
        for (addr, want) in [
            ("0.0.0.0", Some(Unspecified)),
            ("0.255.1.2", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.254", Some(Loopback)),
            ("10.0.0.1", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("172.15.255.255", None),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.0", None),
            ("192.168.1.1", Some(Private)),
            ("192.169.0.1", None),
            ("100.63.255.255", None),
            ("100.64.0.1", Some(Private)),
            ("100.127.255.255", Some(Private)),
            ("100.128.0.0", None),
            ("169.254.169.254", Some(LinkLocal)),
            ("169.254.0.1", Some(LinkLocal)),
            ("169.253.0.1", None),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.255", Some(Multicast)),
            ("240.0.0.1", Some(Reserved)),
            ("255.255.255.254", Some(Reserved)),
            ("255.255.255.255", Some(Broadcast)),
            ("192.0.0.8", Some(Reserved)),
            ("192.0.2.1", Some(Reserved)),
            ("198.51.100.1", Some(Reserved)),
            ("203.0.113.1", Some(Reserved)),
            ("198.18.0.1", Some(Reserved)),
            ("198.19.255.255", Some(Reserved)),
            ("198.20.0.1", None),
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("93.184.215.14", None),
        ] {
            assert_eq!(class(addr), want, "{addr}");
        }
    }

    #[test]
    fn ipv6_ranges() {
        use Special::*;
        for (addr, want) in [
            ("::", Some(Unspecified)),
            ("::1", Some(Loopback)),
            ("fe80::1", Some(LinkLocal)),
            ("febf:ffff::1", Some(LinkLocal)),
            ("fec0::1", Some(Reserved)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Reserved)),
            ("2001::1", Some(Reserved)),
            ("100::1", Some(Reserved)),
            ("4000::1", Some(Reserved)),
            ("2606:4700::1111", None),
            ("2001:4860:4860::8888", None),
        ] {
            assert_eq!(class(addr), want, "{addr}");
        }
    }

    #[test]
    fn embedded_ipv4_is_classified_as_itself() {
        use Special::*;
        for (addr, want) in [
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:7f00:1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("::ffff:8.8.8.8", None),
            ("::ffff:0:127.0.0.1", Some(Loopback)),
            ("::127.0.0.1", Some(Loopback)),
            ("::10.0.0.1", Some(Private)),
            ("::8.8.8.8", None),
            ("64:ff9b::127.0.0.1", Some(Loopback)),
            ("64:ff9b::169.254.169.254", Some(LinkLocal)),
            ("64:ff9b::192.168.0.1", Some(Private)),
            ("64:ff9b::8.8.8.8", None),
            ("2002:7f00:1::1", Some(Loopback)),
            ("2002:a9fe:a9fe::", Some(LinkLocal)),
            ("2002:808:808::1", None),
        ] {
            assert_eq!(class(addr), want, "{addr}");
        }
    }

    #[test]
    fn rules_compare_the_embedded_ipv4_address() {
        let v4 = IpAddr::from([1, 2, 3, 4]);
        for form in ["::ffff:1.2.3.4", "64:ff9b::102:304", "2002:102:304::1"] {
            let v6: IpAddr = form.parse().unwrap();
            assert_eq!(canonical(v6), v4, "{form}");
        }
        let plain: IpAddr = "2606:4700::1111".parse().unwrap();
        assert_eq!(canonical(plain), plain);
        let rule: super::super::HostRule = "1.2.3.4:443".parse().unwrap();
        assert!(rule.names_exactly("64:ff9b::102:304".parse().unwrap(), 443));
    }
}
