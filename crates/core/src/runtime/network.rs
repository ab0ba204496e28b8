//! Outgoing HTTP of one instance: which hosts it may reach, and the credentials the host adds.
//!
//! Deny-first: an instance reaches only the hosts it is given, and a request to any other
//! fails at once with `HTTP-request-denied`. Credentials are plain data handed in by the
//! caller; this module never reads them from disk and knows nothing of actors.

use std::future::Future;
use std::sync::Arc;

use http::uri::Scheme;
use http::{HeaderName, HeaderValue};
use serde::{Deserialize, Serialize};
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

/// Outgoing `wasi:http` of one instance. The default allows nothing.
#[derive(Default)]
pub struct Network {
    /// Hosts the instance may reach, as `host` (any port) or `host:port`, compared with the
    /// request URI's host (without case) and its port (explicit or the scheme's default).
    pub allowed: Vec<String>,
    /// Headers the host adds to requests below their base URL (the model provider's, MCP
    /// servers'); the guest never sees them.
    pub credentials: Vec<Credentials>,
    /// Called with the request's `host[:port]` each time a request is denied, so the caller
    /// can tell whom it concerns (the runtime keeps no logs).
    pub on_denied: Option<OnDenied>,
    /// Secrets granted to the instance's actor, asked at each request (a grant or a
    /// revocation holds from the next one): each also allows its base URL's host.
    pub granted: Option<Arc<dyn Grants>>,
}

/// What an actor is granted now, and where its uses are told.
pub trait Grants: Send + Sync {
    fn current(&self) -> Arc<Vec<Granted>>;
    /// A request went out with secret `secret`'s header: its response's status, or why none
    /// came.
    fn used(&self, secret: &str, url: &str, status: Result<u16, String>);
}

/// One granted secret, as the header it adds.
#[derive(Clone)]
pub struct Granted {
    pub secret: String,
    pub credentials: Credentials,
}

/// Told the `host[:port]` of a denied request.
pub type OnDenied = Arc<dyn Fn(&str) + Send + Sync>;

/// A header added by the host to every request whose URL starts with `base_url`, replacing
/// any header of that name the guest sent.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    pub base_url: String,
    pub header: String,
    pub value: String,
}

/// Never the value: a debug print ends up in logs.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("base_url", &self.base_url)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// An actor's credentials as their file holds them: one object, or a list of them.
    pub fn parse_all(bytes: &[u8]) -> serde_json::Result<Vec<Credentials>> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(Credentials),
            Many(Vec<Credentials>),
        }
        Ok(match serde_json::from_slice(bytes)? {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        })
    }
}

/// Whether a request to `host` (as the URI spells it, IPv6 in brackets) on `port` is allowed
/// by one `entry` of an allow-list: `host` allows every port, `host:port` that port only.
pub fn allows(entry: &str, host: &str, port: u16) -> bool {
    let entry = entry.trim();
    // A colon after the last `]` (or anywhere, without brackets) starts the port.
    let port_at = match entry.rfind(']') {
        Some(bracket) => entry[bracket..].find(':').map(|i| bracket + i),
        None => entry.rfind(':'),
    };
    let (entry_host, entry_port) = match port_at {
        Some(i) => (&entry[..i], Some(&entry[i + 1..])),
        None => (entry, None),
    };
    entry_host.eq_ignore_ascii_case(host)
        && entry_port.is_none_or(|p| p.parse::<u16>().ok() == Some(port))
}

/// Whether `url` is `base_url` or lies below it (not merely a longer host name).
fn under_base(url: &str, base_url: &str) -> bool {
    let base = base_url.trim_end_matches('/');
    url.strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']))
}

/// The `wasi:http` hooks of one instance: the host does TLS; the allow-list and credentials
/// of its [`Network`] apply to every request.
pub(super) struct HttpHooks {
    pub(super) network: Network,
}

impl HttpHooks {
    /// The request's `host[:port]` when neither the allow-list nor a granted secret's base
    /// URL allows it.
    fn denied(&self, uri: &http::Uri, granted: &[Granted]) -> Option<String> {
        let host = uri.host().unwrap_or_default();
        let port = uri.port_u16().unwrap_or(default_port(uri));
        let allowed = self
            .network
            .allowed
            .iter()
            .any(|entry| allows(entry, host, port))
            || granted.iter().any(|g| {
                g.credentials
                    .base_url
                    .parse::<http::Uri>()
                    .is_ok_and(|base| {
                        base.scheme() == uri.scheme()
                            && base.host().is_some_and(|h| h.eq_ignore_ascii_case(host))
                            && base.port_u16().unwrap_or(default_port(&base)) == port
                    })
            });
        (!allowed).then(|| match uri.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        })
    }
}

/// The port a URI's scheme implies.
fn default_port(uri: &http::Uri) -> u16 {
    if uri.scheme() == Some(&Scheme::HTTP) {
        80
    } else {
        443
    }
}

type Sent = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

impl WasiHttpHooks for HttpHooks {
    fn is_supported_scheme(&mut self, scheme: &Scheme) -> bool {
        *scheme == Scheme::HTTP || *scheme == Scheme::HTTPS
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sent {
        // Nothing reports on `fut` here: errors come back through the returned future.
        drop(fut);
        let granted = match &self.network.granted {
            Some(grants) => grants.current(),
            None => Arc::default(),
        };
        if let Some(host) = self.denied(request.uri(), &granted) {
            if let Some(on_denied) = &self.network.on_denied {
                on_denied(&host);
            }
            return Box::new(async { Err(Error::HttpRequestDenied) });
        }
        let url = request.uri().to_string();
        // The credentials of the most precise base the request is under; a granted secret's
        // before the host's own for the same base.
        let credentials = (granted.iter().map(|g| (Some(&g.secret), &g.credentials)))
            .chain(self.network.credentials.iter().map(|c| (None, c)))
            .filter(|(_, c)| under_base(&url, &c.base_url))
            .rev()
            .max_by_key(|(_, c)| c.base_url.len());
        let mut using = None;
        if let Some((secret, credentials)) = credentials {
            // Credentials come from the host's own files; an unusable one is skipped (the
            // provider then refuses the request and says so).
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(credentials.header.as_str()),
                HeaderValue::try_from(credentials.value.as_str()),
            ) {
                request.headers_mut().insert(name, value);
                using = secret.cloned().zip(self.network.granted.clone());
            }
        }
        Box::new(async move {
            let sent = wasmtime_wasi_http::default_send_request(request, options).await;
            if let Some((secret, grants)) = using {
                let status = match &sent {
                    Ok((response, _)) => Ok(response.status().as_u16()),
                    Err(e) => Err(format!("{e:?}")),
                };
                grants.used(&secret, &url, status);
            }
            let (response, io) = sent?;
            Ok((
                response.map(WasiBody::new),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_with_or_without_a_port() {
        assert!(allows("api.openai.com", "api.openai.com", 443));
        assert!(allows("API.openai.com", "api.openai.com", 8080));
        assert!(allows("127.0.0.1:8080", "127.0.0.1", 8080));
        assert!(!allows("127.0.0.1:8080", "127.0.0.1", 8081));
        assert!(allows("localhost", "localhost", 3000));
        assert!(allows("[::1]:9", "[::1]", 9));
        assert!(allows("[::1]", "[::1]", 9));
        assert!(!allows("openai.com", "api.openai.com", 443));
        assert!(!allows(
            "api.openai.com",
            "api.openai.com.evil.example",
            443
        ));
        assert!(!allows("example.com:http", "example.com", 80));
    }

    #[test]
    fn the_default_port_is_the_schemes() {
        let hooks = |allowed: &[&str]| HttpHooks {
            network: Network {
                allowed: allowed.iter().map(|s| s.to_string()).collect(),
                ..Network::default()
            },
        };
        let uri = |u: &str| u.parse::<http::Uri>().unwrap();
        let h = hooks(&["example.com:443", "plain.example:80"]);
        assert_eq!(h.denied(&uri("https://example.com/x"), &[]), None);
        assert_eq!(h.denied(&uri("http://plain.example/"), &[]), None);
        assert_eq!(
            h.denied(&uri("http://example.com/"), &[]),
            Some("example.com".into())
        );
        assert_eq!(
            hooks(&[]).denied(&uri("http://127.0.0.1:5/"), &[]),
            Some("127.0.0.1:5".into())
        );
        // A granted secret allows its base URL's host, scheme and port.
        let granted = |base: &str| Granted {
            secret: "s".into(),
            credentials: Credentials {
                base_url: base.into(),
                header: "authorization".into(),
                value: "v".into(),
            },
        };
        let g = [granted("https://api.example/v1")];
        assert_eq!(
            hooks(&[]).denied(&uri("https://api.example/other"), &g),
            None
        );
        assert!(hooks(&[]).denied(&uri("http://api.example/"), &g).is_some());
        assert!(
            hooks(&[])
                .denied(&uri("https://api.example:8443/"), &g)
                .is_some()
        );
        assert!(
            hooks(&[])
                .denied(&uri("https://evil.example/"), &g)
                .is_some()
        );
        let local = [granted("http://127.0.0.1:9")];
        assert_eq!(
            hooks(&[]).denied(&uri("http://127.0.0.1:9/x"), &local),
            None
        );
    }

    #[test]
    fn credentials_apply_below_their_base_url_only() {
        assert!(under_base(
            "https://api.x.com/v1/responses",
            "https://api.x.com"
        ));
        assert!(under_base("https://api.x.com/v1", "https://api.x.com/"));
        assert!(under_base("https://api.x.com", "https://api.x.com"));
        assert!(!under_base(
            "https://api.x.com.evil.example/v1",
            "https://api.x.com"
        ));
        assert!(!under_base("http://api.x.com/v1", "https://api.x.com"));
    }

    #[test]
    fn a_credentials_file_holds_one_or_a_list() {
        let one = br#"{"base_url":"https://a","header":"authorization","value":"Bearer 1"}"#;
        assert_eq!(Credentials::parse_all(one).unwrap().len(), 1);
        let two = br#"[{"base_url":"https://a","header":"h","value":"1"},
            {"base_url":"http://127.0.0.1:9/mcp","header":"authorization","value":"Bearer 2"}]"#;
        assert_eq!(Credentials::parse_all(two).unwrap()[1].value, "Bearer 2");
        for bad in [&b"{}"[..], b"[1]", b"nope", br#"{"base_url":"x"}"#] {
            assert!(Credentials::parse_all(bad).is_err());
        }
    }
}
