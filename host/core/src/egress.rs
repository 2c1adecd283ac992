//! Where outgoing HTTP may go: a step's grants, a tenant's policy, and the
//! check of every address a request connects to.
//!
//! A [`Rule`] is written as a URL prefix, `scheme://host[:port][/path]`:
//!
//! - the scheme is `http` or `https`;
//! - the host is a name (`api.stripe.com`), a `*.` wildcard for every
//!   subdomain of a name (`*.example.org`, not `example.org` itself), an IP
//!   address (`127.0.0.1`, `[::1]`), or `*` for any host;
//! - the port is a number or `*`; without one, only the scheme's default
//!   port (80, 443) matches;
//! - the path is a prefix that ends at a segment boundary (`/v2` matches
//!   `/v2` and `/v2/x`, not `/v2x`); without one, every path matches;
//! - `methods`, if given, lists the methods allowed (`GET`, `POST`, ...).
//!
//! A request is allowed when one of the step's grants matches it and the
//! tenant's [`Policy`] matches it too. Every address the host then connects
//! to is checked with [`Egress::allow_ip`]: loopback, private, link-local,
//! metadata and other non-public addresses ([`non_public`]) are refused
//! unless the grant that matched (and the policy's rule) names that address
//! literally. A name that resolves to `127.0.0.1` is therefore refused even
//! where `127.0.0.1` itself is granted.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// Plain HTTP, port 80 by default.
    Http,
    /// HTTP over TLS, port 443 by default.
    Https,
}

impl Scheme {
    fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Self::Http),
            "https" => Some(Self::Https),
            _ => None,
        }
    }

    /// The port a URL of this scheme means when it names none.
    pub fn default_port(self) -> u16 {
        match self {
            Self::Http => 80,
            Self::Https => 443,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Https => "https",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Any,
    Name(String),
    /// `*.suffix`: every name that ends in `.suffix`.
    Subdomains(String),
    Ip(IpAddr),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortRule {
    Any,
    Is(u16),
}

/// One destination a step is granted, or a tenant's policy allows. See the
/// module's documentation for the syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    text: String,
    scheme: Scheme,
    host: HostRule,
    port: PortRule,
    path: String,
    methods: Option<Vec<String>>,
}

/// A rule as written in a workflow or a policy: a URL prefix, or an object
/// with the URL and the methods allowed.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum RawRule {
    Url(String),
    WithMethods { url: String, methods: Vec<String> },
}

impl Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.methods {
            None => RawRule::Url(self.text.clone()),
            Some(methods) => RawRule::WithMethods {
                url: self.text.clone(),
                methods: methods.clone(),
            },
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let (url, methods) = match RawRule::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "an HTTP rule is a URL prefix such as `https://api.example.com`, \
                 or `{url: ..., methods: [GET, ...]}`",
            )
        })? {
            RawRule::Url(url) => (url, None),
            RawRule::WithMethods { url, methods } => (url, Some(methods)),
        };
        Rule::parse(&url, methods).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        if let Some(methods) = &self.methods {
            write!(f, " ({})", methods.join(", "))?;
        }
        Ok(())
    }
}

impl Rule {
    /// Parses `text` (`scheme://host[:port][/path]`), allowing only
    /// `methods` if given. The error says what is wrong with it.
    pub fn parse(text: &str, methods: Option<Vec<String>>) -> Result<Self, String> {
        let wrong = |why: &str| format!("`{text}` is not a usable HTTP rule: {why}");
        let (scheme, rest) = text
            .split_once("://")
            .ok_or_else(|| wrong("it names no scheme; write `https://host`"))?;
        let scheme =
            Scheme::parse(scheme).ok_or_else(|| wrong("the scheme is not http or https"))?;
        if rest.contains(['?', '#']) {
            return Err(wrong("a rule cannot have a query or a fragment"));
        }
        let (authority, path) = match rest.find('/') {
            Some(at) => rest.split_at(at),
            None => (rest, "/"),
        };
        if authority.contains('@') {
            return Err(wrong("a rule cannot carry user information"));
        }
        let (host, port) = split_port(authority).map_err(|why| wrong(&why))?;
        let host = parse_host(host).map_err(|why| wrong(&why))?;
        let port = match port {
            None => PortRule::Is(scheme.default_port()),
            Some("*") => PortRule::Any,
            Some(port) => match port.parse::<u16>() {
                Ok(port) if port > 0 => PortRule::Is(port),
                _ => {
                    return Err(wrong(&format!(
                        "the port `{port}` is not 1 to 65535 or `*`"
                    )));
                }
            },
        };
        if has_dot_segment(path) {
            return Err(wrong("the path has a `.` or `..` segment"));
        }
        let methods = methods
            .map(|methods| {
                methods
                    .into_iter()
                    .map(|m| {
                        let upper = m.to_ascii_uppercase();
                        if !upper.is_empty() && upper.bytes().all(|b| b.is_ascii_uppercase()) {
                            Ok(upper)
                        } else {
                            Err(wrong(&format!("`{m}` is not an HTTP method")))
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        if methods.as_ref().is_some_and(Vec::is_empty) {
            return Err(wrong("`methods` is empty, which would allow nothing"));
        }
        Ok(Self {
            text: text.to_owned(),
            scheme,
            host,
            port,
            path: path.to_owned(),
            methods,
        })
    }

    /// The rule as written, without its methods.
    pub fn url(&self) -> &str {
        &self.text
    }

    /// Whether the rule lets `target` through (the address it resolves to
    /// aside).
    pub fn matches(&self, target: &Target) -> bool {
        self.scheme == target.scheme
            && match (&self.host, &target.host) {
                (HostRule::Any, _) => true,
                (HostRule::Name(name), TargetHost::Name(host)) => name == host,
                (HostRule::Subdomains(suffix), TargetHost::Name(host)) => host
                    .strip_suffix(suffix.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                (HostRule::Ip(ip), TargetHost::Ip(host)) => canonical(*ip) == canonical(*host),
                _ => false,
            }
            && match self.port {
                PortRule::Any => true,
                PortRule::Is(port) => port == target.port,
            }
            && path_within(&target.path, &self.path)
            && (self.path == "/" || !escapes_segments(&target.path))
            && self
                .methods
                .as_ref()
                .is_none_or(|methods| methods.contains(&target.method))
    }

    /// Whether the rule names `ip` literally, which a non-public address
    /// needs.
    fn names(&self, ip: IpAddr) -> bool {
        matches!(self.host, HostRule::Ip(named) if canonical(named) == canonical(ip))
    }

    /// Whether every request `other` matches, this rule matches too: a
    /// grant within a tenant's policy.
    pub fn covers(&self, other: &Rule) -> bool {
        self.scheme == other.scheme
            && match (&self.host, &other.host) {
                // `*` covers every name and every public address; a
                // non-public address must be named.
                (HostRule::Any, HostRule::Ip(ip)) => non_public(*ip).is_none(),
                (HostRule::Any, _) => true,
                (HostRule::Name(a), HostRule::Name(b)) => a == b,
                (HostRule::Subdomains(a), HostRule::Subdomains(b)) if a == b => true,
                (HostRule::Subdomains(a), HostRule::Name(b) | HostRule::Subdomains(b)) => b
                    .strip_suffix(a.as_str())
                    .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                (HostRule::Ip(a), HostRule::Ip(b)) => canonical(*a) == canonical(*b),
                _ => false,
            }
            && match (self.port, other.port) {
                (PortRule::Any, _) => true,
                (PortRule::Is(a), PortRule::Is(b)) => a == b,
                (PortRule::Is(_), PortRule::Any) => false,
            }
            && path_within(&other.path, &self.path)
            && match (&self.methods, &other.methods) {
                (None, _) => true,
                (Some(_), None) => false,
                (Some(mine), Some(theirs)) => theirs.iter().all(|m| mine.contains(m)),
            }
    }
}

/// Splits `host[:port]`, with IPv6 addresses in brackets.
fn split_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if authority.is_empty() {
        return Err("it names no host".to_owned());
    }
    if let Some(rest) = authority.strip_prefix('[') {
        let (ip, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address is not closed with `]`")?;
        return match after {
            "" => Ok((ip, None)),
            _ => after
                .strip_prefix(':')
                .map(|port| (ip, Some(port)))
                .ok_or_else(|| format!("`{after}` after the address is not `:port`")),
        };
    }
    Ok(match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    })
}

fn parse_host(host: &str) -> Result<HostRule, String> {
    if host == "*" {
        return Ok(HostRule::Any);
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(HostRule::Ip(ip));
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        return check_name(suffix).map(HostRule::Subdomains);
    }
    check_name(host).map(HostRule::Name)
}

/// A DNS name, lowercased and without a trailing dot. Names whose last
/// label is numeric (`2130706433`, `127.1`, `0x7f.1`) are refused: resolvers
/// read them as IPv4 addresses in odd notations.
fn check_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        });
    if !valid {
        return Err(format!("`{name}` is not a host name, an IP address or `*`"));
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    if last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x") {
        return Err(format!(
            "`{name}` reads as an IPv4 address in an unusual notation; write it as a.b.c.d"
        ));
    }
    Ok(name)
}

/// Whether `path` (its query cut off) is `prefix` or below it.
fn path_within(path: &str, prefix: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if prefix == "/" {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// Whether `path` (its query cut off) holds what some servers read as a
/// segment boundary or a way up: an encoded `/` or `\\`, a `\\`, or a `;`
/// (path parameters). A request under a granted path prefix may not.
fn escapes_segments(path: &str) -> bool {
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    path.contains("%2f") || path.contains("%5c") || path.contains('\\') || path.contains(';')
}

/// Whether `path` has a `.` or `..` segment, percent-encoded or not.
fn has_dot_segment(path: &str) -> bool {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split('/').any(|segment| {
        let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
        decoded == "." || decoded == ".."
    })
}

/// An IPv4 address in IPv6 clothing, as the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Why `ip` is not a public address (`loopback`, `private`, `link-local`,
/// `metadata`, ...), or `None` if it is one.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip == Ipv4Addr::new(169, 254, 169, 254) => "metadata",
        _ if ip == Ipv4Addr::new(100, 100, 100, 200) => "metadata",
        _ if ip == Ipv4Addr::new(168, 63, 129, 16) => "metadata",
        (0, ..) => "unspecified",
        (127, ..) => "loopback",
        (10, ..) => "private",
        (172, 16..=31, _) => "private",
        (192, 168, _) => "private",
        (169, 254, _) => "link-local",
        (100, 64..=127, _) => "shared (carrier-grade NAT)",
        (192, 0, 0) => "IETF protocol",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved",
        _ => return None,
    })
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return non_public_v4(v4);
    }
    let s = ip.segments();
    let embedded = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback",
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254] => "metadata",
        // IPv4-compatible (deprecated) and NAT64 addresses carry an IPv4
        // address, which decides.
        [0, 0, 0, 0, 0, 0, _, _]
        | [0x64, 0xff9b, 0, 0, 0, 0, _, _]
        | [0, 0, 0, 0, 0xffff, 0, _, _] => {
            return non_public_v4(embedded()).or(Some("IPv4-embedding"));
        }
        [0x64, 0xff9b, 1, ..] => "local-use NAT64",
        [0x2001, 0, ..] => "Teredo",
        [0x2002, ..] => {
            let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
            return non_public_v4(v4);
        }
        [first, ..] if first & 0xfe00 == 0xfc00 => "private (unique local)",
        [first, ..] if first & 0xffc0 == 0xfe80 => "link-local",
        [first, ..] if first & 0xffc0 == 0xfec0 => "site-local",
        [first, ..] if first & 0xff00 == 0xff00 => "multicast",
        [0x2001, 0x0db8, ..] => "documentation",
        [0x0100, 0, 0, 0, ..] => "discard",
        _ => return None,
    })
}

/// The host a request names: a DNS name or an IP address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetHost {
    /// A name, lowercased, without a trailing dot.
    Name(String),
    /// An IP address written as one.
    Ip(IpAddr),
}

impl TargetHost {
    /// The host as a resolver takes it: a name, or an address without
    /// brackets.
    pub fn lookup_name(&self) -> String {
        match self {
            Self::Name(name) => name.clone(),
            Self::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for TargetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Self::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A request, as the egress check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The method, uppercase.
    pub method: String,
    /// `http` or `https`.
    pub scheme: Scheme,
    /// The host named.
    pub host: TargetHost,
    /// The port, the scheme's default if none is named.
    pub port: u16,
    /// The path, with its query.
    pub path: String,
}

impl Target {
    /// A request from its parts. `host` may be bracketed (`[::1]`). Fails
    /// for a host that is not a name or an address, and for a path with a
    /// `.` or `..` segment (which a server may resolve outside a granted
    /// prefix).
    pub fn new(
        method: &str,
        scheme: &str,
        host: &str,
        port: Option<u16>,
        path: &str,
    ) -> Result<Self, String> {
        let scheme = Scheme::parse(scheme)
            .ok_or_else(|| format!("the scheme `{scheme}` is not http or https"))?;
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = match bare.parse::<IpAddr>() {
            Ok(ip) => TargetHost::Ip(ip),
            Err(_) => TargetHost::Name(check_name(bare)?),
        };
        let path = if path.is_empty() { "/" } else { path };
        if has_dot_segment(path) {
            return Err("the path has a `.` or `..` segment".to_owned());
        }
        Ok(Self {
            method: method.to_ascii_uppercase(),
            scheme,
            host,
            port: port.unwrap_or(scheme.default_port()),
            path: path.to_owned(),
        })
    }

    /// Parses an absolute `http` or `https` URL, as a webhook's. URLs with
    /// user information are refused.
    pub fn parse_url(method: &str, url: &str) -> Result<Self, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!(
                "`{url}` carries user information, which is not allowed"
            ));
        }
        let host = parsed
            .host_str()
            .ok_or_else(|| format!("`{url}` names no host"))?;
        let mut path = parsed.path().to_owned();
        if let Some(query) = parsed.query() {
            path.push('?');
            path.push_str(query);
        }
        Self::new(method, parsed.scheme(), host, parsed.port(), &path)
    }

    /// The URL, with the values of its query replaced by `…`: what a record
    /// keeps of it.
    pub fn redacted_url(&self) -> String {
        let port = if self.port == self.scheme.default_port() {
            String::new()
        } else {
            format!(":{}", self.port)
        };
        let (path, query) = match self.path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (self.path.as_str(), None),
        };
        let mut url = format!("{}://{}{port}{path}", self.scheme.as_str(), self.host);
        if let Some(query) = query {
            let keys: Vec<String> = query
                .split('&')
                .filter(|pair| !pair.is_empty())
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) => format!("{key}=…"),
                    None => pair.to_owned(),
                })
                .collect();
            url.push('?');
            url.push_str(&keys.join("&"));
        }
        url
    }
}

/// What bounds the destinations a tenant may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// Only step grants bound a request: the host's own tenant, when the
    /// operator set no policy.
    Unbounded,
    /// A request (and every grant) must match one of these rules too.
    Rules(Vec<Rule>),
}

impl Policy {
    /// The default for a tenant with no policy of its own on a host with
    /// none: any public address, on any port.
    pub fn public_only() -> Self {
        let any = |scheme: Scheme| Rule {
            text: format!("{}://*:*", scheme.as_str()),
            scheme,
            host: HostRule::Any,
            port: PortRule::Any,
            path: "/".to_owned(),
            methods: None,
        };
        Self::Rules(vec![any(Scheme::Https), any(Scheme::Http)])
    }

    /// Checks that `grant` stays within the policy, for a workflow at
    /// deploy time.
    pub fn check_grant(&self, grant: &Rule) -> Result<(), String> {
        match self {
            Self::Unbounded => Ok(()),
            Self::Rules(rules) if rules.iter().any(|rule| rule.covers(grant)) => Ok(()),
            Self::Rules(rules) => Err(format!(
                "the grant `{grant}` is outside the tenant's egress policy ({})",
                list(rules)
            )),
        }
    }
}

fn list(rules: &[Rule]) -> String {
    if rules.is_empty() {
        return "nothing".to_owned();
    }
    rules
        .iter()
        .map(|r| format!("`{r}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A refused request: what was asked, and the rule that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// The method and URL (query values left out).
    pub request: String,
    /// Why, naming the rule.
    pub reason: String,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not allowed: {}", self.request, self.reason)
    }
}

/// What one caller may reach: its grants, within its tenant's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    grants: Vec<Rule>,
    policy: Policy,
}

impl Egress {
    /// A step's grants under its tenant's policy.
    pub fn new(grants: Vec<Rule>, policy: Policy) -> Self {
        Self { grants, policy }
    }

    /// For a destination the tenant names itself (a webhook's URL): the
    /// URL is its own grant, within the policy.
    pub fn destination(target: &Target, policy: Policy) -> Self {
        let host = match &target.host {
            TargetHost::Name(name) => HostRule::Name(name.clone()),
            TargetHost::Ip(ip) => HostRule::Ip(*ip),
        };
        let grant = Rule {
            text: format!(
                "{}://{}:{}",
                target.scheme.as_str(),
                target.host,
                target.port
            ),
            scheme: target.scheme,
            host,
            port: PortRule::Is(target.port),
            path: "/".to_owned(),
            methods: None,
        };
        Self::new(vec![grant], policy)
    }

    /// Whether any destination is granted.
    pub fn grants_any(&self) -> bool {
        !self.grants.is_empty()
    }

    /// Checks `target` against the grants and the policy.
    pub fn allow(&self, target: &Target) -> Result<(), Denied> {
        let denied = |reason: String| Denied {
            request: format!("{} {}", target.method, target.redacted_url()),
            reason,
        };
        if !self.grants.iter().any(|g| g.matches(target)) {
            return Err(denied(if self.grants.is_empty() {
                "the step is granted no HTTP destination (`allow: {http: [...]}`)".to_owned()
            } else {
                format!(
                    "no grant of the step matches it (grants: {})",
                    list(&self.grants)
                )
            }));
        }
        if let Policy::Rules(rules) = &self.policy
            && !rules.iter().any(|r| r.matches(target))
        {
            return Err(denied(format!(
                "the tenant's egress policy does not allow it (policy: {})",
                list(rules)
            )));
        }
        Ok(())
    }

    /// Checks every address `target` resolved to ([`Egress::allow_ip`]):
    /// one refused refuses them all.
    pub fn allow_addrs(
        &self,
        target: &Target,
        addrs: impl IntoIterator<Item = IpAddr>,
    ) -> Result<(), Denied> {
        addrs
            .into_iter()
            .try_for_each(|ip| self.allow_ip(target, ip))
    }

    /// Checks an address `target` resolved to, on every connection. A
    /// non-public address passes only if a grant that matches `target`
    /// names it literally, and, under a policy, a rule of the policy does
    /// too; without one, never a metadata or link-local address.
    pub fn allow_ip(&self, target: &Target, ip: IpAddr) -> Result<(), Denied> {
        let Some(class) = non_public(ip) else {
            return Ok(());
        };
        let named = |rules: &[Rule]| rules.iter().any(|r| r.names(ip) && r.matches(target));
        let allowed = named(&self.grants)
            && match &self.policy {
                // Without a policy, a grant (or a webhook's own URL) may
                // name a loopback or private address, but never a cloud
                // metadata service or a link-local one: only a policy the
                // operator wrote (`--egress-allow`) reaches those.
                Policy::Unbounded => !matches!(class, "metadata" | "link-local"),
                Policy::Rules(rules) => named(rules),
            };
        if allowed {
            return Ok(());
        }
        Err(Denied {
            request: format!("{} {}", target.method, target.redacted_url()),
            reason: format!(
                "`{}` is {ip}, a {class} address, which only a grant naming {ip} literally may reach",
                target.host
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Rule {
        Rule::parse(text, None).unwrap()
    }

    fn target(method: &str, url: &str) -> Target {
        Target::parse_url(method, url).unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn rules_parse_and_refuse_what_they_cannot_mean() {
        assert!(Rule::parse("https://api.stripe.com", None).is_ok());
        assert!(Rule::parse("https://*.example.org:8443/v2/", None).is_ok());
        assert!(Rule::parse("http://[::1]:8080", None).is_ok());
        for (bad, why) in [
            ("api.stripe.com", "no scheme"),
            ("ftp://x.org", "not http or https"),
            ("https://x.org/?a=1", "query"),
            ("https://u:p@x.org", "user information"),
            ("https://x.org:0", "port"),
            ("https://x.org:99999", "port"),
            ("http://2130706433", "unusual notation"),
            ("http://127.1", "unusual notation"),
            ("http://0x7f.0.0.1", "unusual notation"),
            ("https://x.org/a/../b", "segment"),
            ("https://bad_host.org", "not a host name"),
        ] {
            let error = Rule::parse(bad, None).unwrap_err();
            assert!(error.contains(why), "{bad}: {error}");
        }
        let error = Rule::parse("https://x.org", Some(vec![])).unwrap_err();
        assert!(error.contains("empty"), "{error}");
    }

    #[test]
    fn hosts_ports_paths_and_methods_match_as_documented() {
        let stripe = rule("https://api.stripe.com");
        assert!(stripe.matches(&target("POST", "https://api.stripe.com/v1/charges?x=1")));
        assert!(stripe.matches(&target("GET", "https://API.Stripe.com./")));
        assert!(!stripe.matches(&target("GET", "http://api.stripe.com/")));
        assert!(!stripe.matches(&target("GET", "https://api.stripe.com:8443/")));
        assert!(!stripe.matches(&target("GET", "https://evil-api.stripe.com/")));

        let sub = rule("https://*.example.org:8443/v2/");
        assert!(sub.matches(&target("GET", "https://a.example.org:8443/v2/x")));
        assert!(sub.matches(&target("GET", "https://a.b.example.org:8443/v2/")));
        assert!(!sub.matches(&target("GET", "https://example.org:8443/v2/x")));
        assert!(!sub.matches(&target("GET", "https://badexample.org:8443/v2/x")));
        assert!(!sub.matches(&target("GET", "https://a.example.org:8443/v3/x")));
        assert!(!sub.matches(&target("GET", "https://a.example.org/v2/x")));

        let prefix = rule("https://x.org/v2");
        assert!(prefix.matches(&target("GET", "https://x.org/v2")));
        assert!(prefix.matches(&target("GET", "https://x.org/v2/y")));
        assert!(!prefix.matches(&target("GET", "https://x.org/v2x")));

        let get = Rule::parse("https://x.org", Some(vec!["get".to_owned()])).unwrap();
        assert!(get.matches(&target("GET", "https://x.org/")));
        assert!(!get.matches(&target("DELETE", "https://x.org/")));

        let any_port = rule("http://127.0.0.1:*");
        assert!(any_port.matches(&target("GET", "http://127.0.0.1:9/")));
        assert!(!any_port.matches(&target("GET", "http://127.0.0.2:9/")));
    }

    #[test]
    fn a_path_prefix_refuses_what_servers_read_as_other_segments() {
        let prefix = rule("https://x.org/v2/");
        for path in [
            "/v2/..%2fadmin",
            "/v2/%2E%2E%2Fadmin",
            "/v2/..;/admin",
            "/v2/..\\admin",
            "/v2/a%5cb",
        ] {
            let url = format!("https://x.org{path}");
            let target = Target::new("GET", "https", "x.org", None, path).unwrap();
            assert!(!prefix.matches(&target), "{url}");
        }
        assert!(prefix.matches(&target("GET", "https://x.org/v2/a?x=%2f")));
        // Without a path prefix, such paths are the server's business.
        let root = rule("https://x.org");
        assert!(root.matches(&Target::new("GET", "https", "x.org", None, "/a;b").unwrap()));
    }

    #[test]
    fn paths_with_dot_segments_are_refused() {
        for path in ["/v2/../admin", "/v2/%2e%2E/admin", "/./x"] {
            let error = Target::new("GET", "https", "x.org", None, path).unwrap_err();
            assert!(error.contains("segment"), "{path}: {error}");
        }
        assert!(Target::new("GET", "https", "x.org", None, "/v2/..x").is_ok());
    }

    #[test]
    fn non_public_ranges_are_named() {
        for (addr, class) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("fd12::1", "private (unique local)"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("169.254.169.254", "metadata"),
            ("fd00:ec2::254", "metadata"),
            ("::ffff:169.254.169.254", "metadata"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("64:ff9b::7f00:1", "loopback"),
            ("2002:7f00:1::", "loopback"),
            ("::127.0.0.1", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("224.0.0.1", "multicast"),
            ("ff02::1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("192.0.2.1", "documentation"),
            ("2001:db8::1", "documentation"),
            ("168.63.129.16", "metadata"),
            ("64:ff9b:1::a00:1", "local-use NAT64"),
            ("::ffff:0:7f00:1", "loopback"),
            ("fec0::1", "site-local"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
        ] {
            assert_eq!(non_public(ip(addr)), Some(class), "{addr}");
        }
        for public in [
            "1.1.1.1",
            "93.184.216.34",
            "172.32.0.1",
            "2606:4700::1111",
            "2002:0101:0101::",
        ] {
            assert_eq!(non_public(ip(public)), None, "{public}");
        }
    }

    #[test]
    fn a_non_public_address_needs_a_literal_grant() {
        let literal = Egress::new(vec![rule("http://127.0.0.1:8080")], Policy::Unbounded);
        let to_ip = target("GET", "http://127.0.0.1:8080/x");
        assert!(literal.allow(&to_ip).is_ok());
        assert!(literal.allow_ip(&to_ip, ip("127.0.0.1")).is_ok());
        // A name that resolves to the granted address is refused: the grant
        // does not match the name, and had one matched, the address would
        // not be named.
        let by_name = target("GET", "http://localhost:8080/x");
        assert!(literal.allow(&by_name).is_err());
        let named = Egress::new(vec![rule("http://localhost:8080")], Policy::Unbounded);
        assert!(named.allow(&by_name).is_ok());
        let error = named.allow_ip(&by_name, ip("127.0.0.1")).unwrap_err();
        assert!(error.reason.contains("loopback"), "{error}");
        // `*` reaches public addresses only.
        let any = Egress::new(vec![rule("https://*")], Policy::Unbounded);
        let public = target("GET", "https://example.com/");
        assert!(any.allow_ip(&public, ip("93.184.216.34")).is_ok());
        for private in ["10.0.0.1", "169.254.169.254", "::1", "fe80::1"] {
            assert!(any.allow_ip(&public, ip(private)).is_err(), "{private}");
        }
        // Without a policy, not even a literal grant (a webhook's URL is
        // one) reaches a metadata service or a link-local address.
        for (url, address) in [
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.169.254",
            ),
            ("http://169.254.1.1/", "169.254.1.1"),
            ("http://[fd00:ec2::254]/", "fd00:ec2::254"),
        ] {
            let granted = Egress::new(vec![rule(url)], Policy::Unbounded);
            let error = granted
                .allow_ip(&target("GET", url), ip(address))
                .unwrap_err();
            assert!(error.reason.contains(address), "{error}");
        }
        // Another port or `[::1]` on a literal grant of 127.0.0.1.
        assert!(
            literal
                .allow(&target("GET", "http://127.0.0.1:8081/"))
                .is_err()
        );
        assert!(literal.allow(&target("GET", "http://[::1]:8080/")).is_err());
        // The decimal form of 127.0.0.1 is read as that address by a URL
        // parser, and is then only as good as the literal.
        assert_eq!(
            target("GET", "http://2130706433:8080/").host,
            TargetHost::Ip(ip("127.0.0.1"))
        );
        // Without grants, nothing.
        let none = Egress::new(vec![], Policy::Unbounded);
        assert!(
            none.allow(&public)
                .unwrap_err()
                .reason
                .contains("no HTTP destination")
        );
    }

    #[test]
    fn a_policy_bounds_grants_and_requests() {
        let policy = Policy::Rules(vec![
            rule("https://*.example.org"),
            rule("http://10.0.0.5:*"),
        ]);
        assert!(
            policy
                .check_grant(&rule("https://api.example.org/v1"))
                .is_ok()
        );
        assert!(
            policy
                .check_grant(&rule("https://*.api.example.org"))
                .is_ok()
        );
        assert!(policy.check_grant(&rule("https://*.example.org")).is_ok());
        assert!(policy.check_grant(&rule("http://10.0.0.5:9000")).is_ok());
        assert!(policy.check_grant(&rule("https://example.org")).is_err());
        assert!(policy.check_grant(&rule("https://api.stripe.com")).is_err());
        assert!(policy.check_grant(&rule("http://10.0.0.6:9000")).is_err());
        let public = Policy::public_only();
        assert!(public.check_grant(&rule("https://api.stripe.com")).is_ok());
        assert!(public.check_grant(&rule("http://127.0.0.1:8080")).is_err());
        assert!(public.check_grant(&rule("http://8.8.8.8")).is_ok());

        let egress = Egress::new(vec![rule("http://127.0.0.1:*")], Policy::public_only());
        let local = target("GET", "http://127.0.0.1:8080/");
        assert!(egress.allow(&local).is_ok());
        assert!(egress.allow_ip(&local, ip("127.0.0.1")).is_err());
    }

    #[test]
    fn a_destination_is_its_own_grant_within_the_policy() {
        let hook = target("POST", "http://127.0.0.1:9000/hook");
        let own = Egress::destination(&hook, Policy::Unbounded);
        assert!(own.allow(&hook).is_ok() && own.allow_ip(&hook, ip("127.0.0.1")).is_ok());
        let bounded = Egress::destination(&hook, Policy::public_only());
        assert!(bounded.allow_ip(&hook, ip("127.0.0.1")).is_err());
        let named = target("POST", "http://localhost:9000/hook");
        let own = Egress::destination(&named, Policy::Unbounded);
        assert!(own.allow_ip(&named, ip("127.0.0.1")).is_err());
    }

    #[test]
    fn urls_keep_query_keys_but_not_values() {
        assert_eq!(
            target("GET", "https://x.org/a?token=s3cret&page=2&flag").redacted_url(),
            "https://x.org/a?token=…&page=…&flag"
        );
        assert_eq!(
            target("GET", "http://[::1]:8080/").redacted_url(),
            "http://[::1]:8080/"
        );
    }

    #[test]
    fn rules_round_trip_through_serde() {
        let rules: Vec<Rule> = serde_json::from_str(
            r#"["https://a.org", {"url": "https://b.org/v1", "methods": ["GET"]}]"#,
        )
        .unwrap();
        assert_eq!(rules[1].to_string(), "https://b.org/v1 (GET)");
        let again: Vec<Rule> =
            serde_json::from_value(serde_json::to_value(&rules).unwrap()).unwrap();
        assert_eq!(again, rules);
        assert!(serde_json::from_str::<Rule>(r#""ftp://x""#).is_err());
    }
}
