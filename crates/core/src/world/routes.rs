//! HTTP routes (DESIGN §24): what a route is, as `actor.json`'s `"http"` list and the broker's
//! `route` request write it and the registry keeps it, checked here with the reason a person
//! can act on; and [`RouteTable`], which finds the route of a request's path.
//!
//! A path is exact (`/hooks/github`) or a prefix (`/shop/*`, which also matches `/shop`); a
//! static route is always a prefix (its folder's tree lies below it). Between prefixes the
//! longest wins; an exact path wins over any prefix.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long a request waits for its answer unless its route says (`"timeout"`, seconds).
pub const DEFAULT_TIMEOUT_S: u32 = 30;
/// The longest `"timeout"` a route may set.
pub const MAX_TIMEOUT_S: u32 = 300;
/// The largest request body unless the route says (`"max_body"`, bytes): 1 MiB.
pub const DEFAULT_MAX_BODY: u64 = 1 << 20;
/// The largest `"max_body"` a route may set: 64 MiB.
pub const MAX_MAX_BODY: u64 = 64 << 20;
/// Requests a second per client address unless the route says (`"rate"`; 0 turns it off).
pub const DEFAULT_RATE: u32 = 50;
/// The highest `"rate"` a route may set.
pub const MAX_RATE: u32 = 1_000_000;
/// The longest path a route may have.
const MAX_PATH: usize = 256;
/// The methods a route may name.
const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
/// Headers a route may not pass to its actor: they belong to the connection, not the request.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// One route, as the registry keeps it under its path.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Route {
    /// The actor whose mailbox gets its requests (or whose `/public` a static route serves).
    pub actor: String,
    /// The methods it answers; empty is any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Seconds a request waits for its answer ([`DEFAULT_TIMEOUT_S`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
    /// The largest body accepted, in bytes ([`DEFAULT_MAX_BODY`] when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_body: Option<u64>,
    /// Requests a second per client address ([`DEFAULT_RATE`] when unset; 0 is no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    /// Headers passed to the actor that are dropped otherwise (`cookie`, `authorization`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pass: Vec<String>,
    /// A folder under the actor's `/public` that the host serves itself.
    #[serde(default, rename = "static", skip_serializing_if = "Option::is_none")]
    pub static_dir: Option<String>,
    /// Whether it came from the actor's `actor.json` (replaced when a version is installed)
    /// rather than a `route` request (kept until `unroute` or the actor's removal).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifest: bool,
}

impl Route {
    pub fn timeout_s(&self) -> u32 {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT_S)
    }

    pub fn max_body(&self) -> u64 {
        self.max_body.unwrap_or(DEFAULT_MAX_BODY)
    }

    pub fn rate(&self) -> u32 {
        self.rate.unwrap_or(DEFAULT_RATE)
    }

    pub fn allows(&self, method: &str) -> bool {
        self.methods.is_empty() || self.methods.iter().any(|m| m == method)
    }

    /// The route as JSON for `routes` and `list`, its path included.
    pub fn to_json(&self, path: &str) -> Value {
        let mut value = serde_json::to_value(self).expect("a route serialises");
        value["path"] = Value::from(path);
        value
    }
}

/// Reads one route of `actor` from its JSON (`{"path": …, "methods": …, …}`): the path and the
/// route, or what is wrong with it.
pub fn parse_route(spec: &Value, actor: &str, manifest: bool) -> Result<(String, Route), String> {
    let Some(fields) = spec.as_object() else {
        return Err(format!(
            "a route is an object such as {{\"path\": \"/hooks/github\", \"methods\": \
             [\"POST\"]}}, not {spec}"
        ));
    };
    const KNOWN: [&str; 7] = [
        "path", "methods", "timeout", "max_body", "rate", "pass", "static",
    ];
    if let Some(unknown) = fields.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(format!(
            "a route has no field `{unknown}`; its fields are {}",
            KNOWN.join(", ")
        ));
    }
    let path = match &spec["path"] {
        Value::String(path) => check_path(path)?,
        Value::Null => return Err("a route needs a `path`, such as \"/hooks/github\"".into()),
        other => return Err(format!("a route's `path` is a string, not {other}")),
    };
    let methods = match &spec["methods"] {
        Value::Null => Vec::new(),
        Value::Array(methods) => methods
            .iter()
            .map(|m| match m.as_str().map(str::to_ascii_uppercase) {
                Some(m) if METHODS.contains(&m.as_str()) => Ok(m),
                _ => Err(format!(
                    "route {path}: `methods` holds {m}, not one of {}",
                    METHODS.join(", ")
                )),
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "route {path}: `methods` is a list such as [\"GET\", \"POST\"], not {other}"
            ));
        }
    };
    let number = |field: &str, min: u64, max: u64, unit: &str| -> Result<Option<u64>, String> {
        match &spec[field] {
            Value::Null => Ok(None),
            value => match value.as_u64() {
                Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
                _ => Err(format!(
                    "route {path}: `{field}` is {value}, not a number of {unit} from {min} to \
                     {max}"
                )),
            },
        }
    };
    let timeout = number("timeout", 1, u64::from(MAX_TIMEOUT_S), "seconds")?.map(|n| n as u32);
    let max_body = number("max_body", 0, MAX_MAX_BODY, "bytes")?;
    let rate = number("rate", 0, u64::from(MAX_RATE), "requests a second")?.map(|n| n as u32);
    let pass = match &spec["pass"] {
        Value::Null => Vec::new(),
        Value::Array(names) => names
            .iter()
            .map(|name| {
                let lower = name.as_str().map(str::to_ascii_lowercase);
                match lower {
                    Some(n) if HOP_BY_HOP.contains(&n.as_str()) => Err(format!(
                        "route {path}: `pass` names `{n}`, a header of the connection that is \
                         never passed"
                    )),
                    Some(n) if is_header_name(&n) => Ok(n),
                    _ => Err(format!(
                        "route {path}: `pass` holds {name}, not a header name such as \"cookie\""
                    )),
                }
            })
            .collect::<Result<_, _>>()?,
        other => {
            return Err(format!(
                "route {path}: `pass` is a list of header names such as [\"authorization\"], \
                 not {other}"
            ));
        }
    };
    let static_dir = match &spec["static"] {
        Value::Null => None,
        Value::String(dir) => Some(check_static(&path, dir)?),
        other => {
            return Err(format!(
                "route {path}: `static` is a folder under /public such as \"/public/site\", not \
                 {other}"
            ));
        }
    };
    if static_dir.is_some() && methods.iter().any(|m| m != "GET" && m != "HEAD") {
        return Err(format!(
            "route {path}: a static route answers GET and HEAD only; leave out `methods`"
        ));
    }
    Ok((
        path,
        Route {
            actor: actor.to_string(),
            methods,
            timeout,
            max_body,
            rate,
            pass,
            static_dir,
            manifest,
        },
    ))
}

/// A route's path as written, or why it cannot be one.
fn check_path(path: &str) -> Result<String, String> {
    let bad = |why: &str| {
        Err(format!(
            "route path {path:?} {why}; write one such as \"/hooks/github\" or \"/shop/*\""
        ))
    };
    if !path.starts_with('/') {
        return bad("does not start with /");
    }
    if path.len() > MAX_PATH {
        return bad(&format!("is longer than {MAX_PATH} bytes"));
    }
    if !path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-._~*%!$&'()+,;=:@".contains(&b))
    {
        return bad("holds a character a path cannot (a space, ?, # or a non-ASCII letter)");
    }
    let stem = path.strip_suffix("/*").unwrap_or(path);
    if stem.contains('*') {
        return bad("has a * that is not its last segment");
    }
    if stem.len() > 1 && stem.ends_with('/') {
        return bad("ends with /");
    }
    if stem.contains("//") {
        return bad("has an empty segment (//)");
    }
    if stem
        .split('/')
        .any(|segment| matches!(segment, "." | "..") || segment.contains('%'))
    {
        return bad("has a . or .. segment, or an encoded character");
    }
    Ok(path.to_string())
}

/// A static route's folder: `/public` or a folder under it, without `..`.
fn check_static(path: &str, dir: &str) -> Result<String, String> {
    let trimmed = dir.trim_end_matches('/');
    let under_public = trimmed == "/public" || trimmed.starts_with("/public/");
    let clean = !trimmed
        .split('/')
        .skip(1)
        .any(|s| s.is_empty() || s == "." || s == ".." || s.starts_with('.'));
    match under_public && clean {
        true => Ok(trimmed.to_string()),
        false => Err(format!(
            "route {path}: `static` is {dir:?}; it must be /public or a folder under it, such as \
             \"/public/site\" (no .., no hidden folders)"
        )),
    }
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The part of a route's path that requests under it start with: `/shop` for `/shop/*`.
pub fn stem(path: &str) -> &str {
    match path.strip_suffix("/*") {
        Some("") => "/",
        Some(stem) => stem,
        None => path,
    }
}

/// Whether a route at `path` matches more than its own path.
pub fn is_prefix(path: &str, route: &Route) -> bool {
    path.ends_with("/*") || route.static_dir.is_some()
}

/// Whether a prefix route at `prefix` covers `path` (a request's path, or another route's).
pub fn covers(prefix: &str, path: &str) -> bool {
    let (stem, path) = (stem(prefix), stem(path));
    stem == "/" || path == stem || path.strip_prefix(stem).is_some_and(|r| r.starts_with('/'))
}

/// The routes of a world, looked up by a request's path: exact paths in one map, prefixes in
/// another, so a lookup costs a hash per segment of the path, however many routes there are.
#[derive(Default, Debug)]
pub struct RouteTable {
    exact: HashMap<String, (String, Route)>,
    prefixes: HashMap<String, (String, Route)>,
}

impl RouteTable {
    pub fn new(routes: &BTreeMap<String, Route>) -> RouteTable {
        let mut table = RouteTable::default();
        for (path, route) in routes {
            let entry = (path.clone(), route.clone());
            match is_prefix(path, route) {
                true => table.prefixes.insert(stem(path).to_string(), entry),
                false => table.exact.insert(path.clone(), entry),
            };
        }
        table
    }

    /// Whether a route's path is `path`.
    pub fn has(&self, path: &str) -> bool {
        self.exact.contains_key(path)
            || self
                .prefixes
                .get(stem(path))
                .is_some_and(|(at, _)| at == path)
    }

    /// The route of a request for `path` (without its query) and the route's own path: an
    /// exact route first, else the longest prefix that covers it.
    pub fn find(&self, path: &str) -> Option<(&str, &Route)> {
        if let Some((at, route)) = self.exact.get(path) {
            return Some((at, route));
        }
        let mut stem = path.trim_end_matches('/');
        loop {
            let key = if stem.is_empty() { "/" } else { stem };
            if let Some((at, route)) = self.prefixes.get(key) {
                return Some((at, route));
            }
            if stem.is_empty() {
                return None;
            }
            stem = &stem[..stem.rfind('/').expect("a path starts with /")];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn route(spec: Value) -> Result<(String, Route), String> {
        parse_route(&spec, "shop", true)
    }

    #[test]
    fn a_route_is_read_with_its_defaults_and_kept_as_written() {
        let (path, r) = route(json!({"path": "/hooks/github", "methods": ["post"]})).unwrap();
        assert_eq!(path, "/hooks/github");
        assert_eq!(r.methods, ["POST"]);
        assert_eq!((r.timeout_s(), r.max_body(), r.rate()), (30, 1 << 20, 50));
        assert!(r.allows("POST") && !r.allows("GET"));
        let kept = serde_json::to_value(&r).unwrap();
        assert_eq!(
            kept,
            json!({"actor": "shop", "methods": ["POST"], "manifest": true})
        );
        let (_, site) = route(json!({"path": "/", "static": "/public/site/"})).unwrap();
        assert_eq!(site.static_dir.as_deref(), Some("/public/site"));
        assert_eq!(
            serde_json::to_value(&site).unwrap()["static"],
            "/public/site"
        );
    }

    #[test]
    fn a_wrong_route_is_refused_with_what_to_write() {
        for (spec, says) in [
            (json!("/x"), "is an object"),
            (json!({}), "needs a `path`"),
            (json!({"path": 3}), "is a string"),
            (json!({"path": "x"}), "does not start with /"),
            (json!({"path": "/a b"}), "a character"),
            (json!({"path": "/a/*/b"}), "not its last segment"),
            (json!({"path": "/a*"}), "not its last segment"),
            (json!({"path": "/a/"}), "ends with /"),
            (json!({"path": "/a//b"}), "empty segment"),
            (json!({"path": "/a/../b"}), ".. segment"),
            (json!({"path": "/a/%2e%2e"}), "encoded"),
            (
                json!({"path": format!("/{}", "a".repeat(300))}),
                "longer than",
            ),
            (
                json!({"path": "/x", "methods": ["FETCH"]}),
                "not one of GET",
            ),
            (json!({"path": "/x", "methods": "GET"}), "is a list"),
            (json!({"path": "/x", "timeout": 0}), "from 1 to 300"),
            (json!({"path": "/x", "timeout": 301}), "from 1 to 300"),
            (json!({"path": "/x", "timeout": "5"}), "number of seconds"),
            (
                json!({"path": "/x", "max_body": 67108865}),
                "bytes from 0 to 67108864",
            ),
            (json!({"path": "/x", "rate": -1}), "requests a second"),
            (
                json!({"path": "/x", "pass": ["connection"]}),
                "never passed",
            ),
            (
                json!({"path": "/x", "pass": ["bad header"]}),
                "not a header name",
            ),
            (json!({"path": "/x", "static": "/data"}), "under it"),
            (json!({"path": "/x", "static": "/public/../data"}), "no .."),
            (json!({"path": "/x", "static": "/public/.git"}), "hidden"),
            (
                json!({"path": "/x", "static": "/public", "methods": ["POST"]}),
                "GET and HEAD",
            ),
            (json!({"path": "/x", "verb": "GET"}), "no field `verb`"),
        ] {
            let err = route(spec.clone()).unwrap_err();
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn the_exact_route_then_the_longest_prefix_wins() {
        let mut routes = BTreeMap::new();
        for spec in [
            json!({"path": "/", "static": "/public"}),
            json!({"path": "/shop/*"}),
            json!({"path": "/shop/cart/*"}),
            json!({"path": "/shop/cart/pay"}),
            json!({"path": "/api/*"}),
        ] {
            let (path, route) = route(spec).unwrap();
            routes.insert(path, route);
        }
        let table = RouteTable::new(&routes);
        let found = |p: &str| table.find(p).map(|(at, _)| at.to_string());
        for (request, route) in [
            ("/", "/"),
            ("/index.html", "/"),
            ("/shop", "/shop/*"),
            ("/shop/", "/shop/*"),
            ("/shop/hat", "/shop/*"),
            ("/shopping", "/"),
            ("/shop/cart", "/shop/cart/*"),
            ("/shop/cart/pay", "/shop/cart/pay"),
            ("/shop/cart/pay/now", "/shop/cart/*"),
            ("/api/v1/x", "/api/*"),
        ] {
            assert_eq!(found(request).as_deref(), Some(route), "{request}");
        }
        let mut no_root = routes.clone();
        no_root.remove("/");
        let table = RouteTable::new(&no_root);
        assert!(table.find("/nothing").is_none());
        assert!(table.find("/").is_none());
        assert!(covers("/shop/*", "/shop/hat") && covers("/shop/*", "/shop"));
        assert!(!covers("/shop/*", "/shopping") && covers("/", "/anything"));
        // `/*` is every path, `/` itself included.
        let mut everything = no_root.clone();
        everything.insert("/*".into(), routes["/shop/*"].clone());
        let table = RouteTable::new(&everything);
        assert_eq!(table.find("/").map(|(at, _)| at), Some("/*"));
        assert_eq!(table.find("/nothing").map(|(at, _)| at), Some("/*"));
        assert!(table.has("/*") && covers("/*", "/") && covers("/*", "/a/b"));
    }
}
