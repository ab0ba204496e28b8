//! The broker's half of HTTP routes (DESIGN §24): the requests `route`, `unroute` and
//! `routes`, the routes a version's `actor.json` brings when it is installed, and the table the
//! public address reads ([`Broker::route_table`]).
//!
//! A route is its actor's owner's (§18): an owner's actor takes any free path, a member's
//! takes free paths outside the prefixes owners' actors hold, a guest's none. Two actors never
//! hold one path. A refusal changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};

use super::Broker;
use super::principal::Principal;
use crate::message::{ActorId, Tier};
use crate::world::Registry;
use crate::world::routes::{Route, RouteTable, covers, is_prefix, parse_route, stem};

/// The fields of a `route` request that are the route's own (the rest address the request).
const ROUTE_FIELDS: [&str; 7] = [
    "path", "methods", "timeout", "max_body", "rate", "pass", "static",
];

impl Broker {
    /// The routes as the public address looks them up now.
    pub fn route_table(&self) -> Arc<RouteTable> {
        self.routes.read().expect("routes lock").clone()
    }

    /// Notes where this host serves the routes (the public address, once it listens).
    pub fn serving_http_at(&self, addr: std::net::SocketAddr) {
        let _ = self.public_address.set(addr);
    }

    /// The URL a person opens for the route at `path` on this host, when it serves them.
    pub fn route_url(&self, path: &str) -> Option<String> {
        let addr = self.public_address.get()?;
        let stem = crate::world::routes::stem(path);
        let slash = if path.ends_with("/*") && stem != "/" {
            "/"
        } else {
            ""
        };
        Some(format!("http://{addr}{stem}{slash}"))
    }

    /// The URLs of `actor`'s routes, for the reply to its spawn or upgrade.
    pub(super) async fn route_urls(&self, actor: &ActorId) -> Vec<String> {
        let registry = self.registry().await;
        (registry.routes.iter())
            .filter(|(_, route)| route.actor == actor.as_str())
            .filter_map(|(path, _)| self.route_url(path))
            .collect()
    }

    /// Makes the table the public address reads from `registry`'s routes.
    pub(super) fn apply_routes(&self, registry: &Registry) {
        let table = Arc::new(RouteTable::new(&registry.routes));
        *self.routes.write().expect("routes lock") = table;
    }

    /// `route`: `actor` serves `path` (a request's route fields as `actor.json` writes them).
    pub(super) async fn route(&self, body: &Value) -> Result<Value, String> {
        let id = super::requests::actor_field(body)?;
        self.known_wasm_actor(&id).await?;
        let mut spec = serde_json::Map::new();
        for field in ROUTE_FIELDS {
            if let Some(value) = body.get(field) {
                spec.insert(field.to_string(), value.clone());
            }
        }
        let (path, route) = parse_route(&Value::Object(spec), id.as_str(), false)?;
        let (reply, url) = (route.to_json(&path), self.route_url(&path));
        let tier = self.owner_tier(&id).await?;
        self.take_routes(&id, tier, vec![(path, route)], false)
            .await?;
        let mut routed = json!({"type": "routed", "actor": id.as_str(), "route": reply});
        if let Some(url) = url {
            routed["url"] = json!(url);
        }
        Ok(routed)
    }

    /// `unroute`: `actor` no longer serves `path`.
    pub(super) async fn unroute(&self, body: &Value) -> Result<Value, String> {
        let id = super::requests::actor_field(body)?;
        let Some(path) = body.get("path").and_then(Value::as_str) else {
            return Err(
                "`unroute` needs the `path` of a route of the actor; `routes` lists them".into(),
            );
        };
        let registry = self.registry().await;
        match registry.routes.get(path) {
            Some(route) if route.actor == id.as_str() => {}
            Some(route) => {
                return Err(format!(
                    "path {path} is served by actor `{}`, not `{id}`",
                    route.actor
                ));
            }
            None => {
                return Err(format!(
                    "actor `{id}` serves no route at {path}; `routes` lists them"
                ));
            }
        }
        let path = path.to_string();
        self.update_registry(|registry| registry.routes.remove(&path))
            .await
            .map_err(|e| format!("{e:#}"))?;
        Ok(json!({"type": "unrouted", "actor": id.as_str(), "path": path}))
    }

    /// `routes`: every route, or `actor`'s, by path.
    pub(super) async fn list_routes(&self, body: &Value) -> Result<Value, String> {
        let only = match body.get("actor") {
            None | Some(Value::Null) => None,
            Some(Value::String(actor)) => Some(actor.clone()),
            Some(other) => return Err(format!("`actor` is an actor's id, not {other}")),
        };
        let registry = self.registry().await;
        let routes: Vec<Value> = registry
            .routes
            .iter()
            .filter(|(_, route)| only.as_ref().is_none_or(|a| *a == route.actor))
            .map(|(path, route)| route.to_json(path))
            .collect();
        Ok(json!({"type": "routes", "routes": routes}))
    }

    /// The tier of the person `actor` belongs to (through the actors that own it), which
    /// decides the paths it may take; `None` when it belongs to nobody.
    pub(super) async fn owner_tier(&self, actor: &ActorId) -> Result<Option<Tier>, String> {
        let registry = self.registry().await;
        let people = self.people_now().await?;
        Ok(match people.owner_of(&registry, actor.as_str()) {
            Principal::Person(speaker) => Some(speaker.tier),
            Principal::Nobody(_) => None,
        })
    }

    /// Checks that `actor`, whose owner has `tier`, may take `wanted` (with `manifest`, in
    /// place of its manifest routes) against the routes now: what a spawn or an upgrade asks
    /// before it installs anything.
    pub(super) async fn check_routes(
        &self,
        actor: &ActorId,
        tier: Option<Tier>,
        wanted: &[(String, Route)],
        manifest: bool,
    ) -> Result<(), String> {
        let owners = self.owners_routing().await?;
        let registry = self.registry().await;
        let by_owner = |route: &Route| owners.contains(&route.actor);
        claim(
            &registry.routes,
            actor.as_str(),
            tier,
            by_owner,
            wanted.to_vec(),
            manifest,
        )
        .map(drop)
    }

    /// Makes `actor`, whose owner has `tier`, take `wanted` (with `manifest`, in place of its
    /// manifest routes), checked and changed under the registry's lock.
    pub(super) async fn take_routes(
        &self,
        actor: &ActorId,
        tier: Option<Tier>,
        wanted: Vec<(String, Route)>,
        manifest: bool,
    ) -> Result<(), String> {
        let registry = self.registry().await;
        if wanted.is_empty() && !registry.routes.values().any(|r| r.actor == actor.as_str()) {
            return Ok(());
        }
        let owners = self.owners_routing().await?;
        let by_owner = |route: &Route| owners.contains(&route.actor);
        self.update_registry(|registry| {
            let routes = claim(
                &registry.routes,
                actor.as_str(),
                tier,
                by_owner,
                wanted,
                manifest,
            )?;
            registry.routes = routes;
            Ok(())
        })
        .await
        .map_err(|e| format!("{e:#}"))?
    }

    /// The actors that serve routes and belong to an owner: their prefixes are kept from
    /// members' actors.
    async fn owners_routing(&self) -> Result<BTreeSet<String>, String> {
        let registry = self.registry().await;
        let people = self.people_now().await?;
        Ok((registry.routes.values())
            .map(|route| &route.actor)
            .filter(|id| {
                matches!(people.owner_of(&registry, id), Principal::Person(s) if s.tier == Tier::Owner)
            })
            .cloned()
            .collect())
    }
}

/// `routes` after `actor`, whose owner has `tier` (`None`: nobody owns it), takes `wanted`;
/// `by_owner` says whether a route's actor belongs to an owner. With `manifest`, the actor's
/// manifest routes are replaced by `wanted`.
pub(super) fn claim(
    routes: &BTreeMap<String, Route>,
    actor: &str,
    tier: Option<Tier>,
    by_owner: impl Fn(&Route) -> bool,
    wanted: Vec<(String, Route)>,
    manifest: bool,
) -> Result<BTreeMap<String, Route>, String> {
    let mut claimed = routes.clone();
    if manifest {
        claimed.retain(|_, route| !(route.actor == actor && route.manifest));
    }
    for (path, mut route) in wanted {
        route.actor = actor.to_string();
        match tier {
            None | Some(Tier::Guest) => {
                return Err(format!(
                    "actor `{actor}` may not serve {path}: routes belong to the actor's owner, \
                     and only members and owners may have them"
                ));
            }
            Some(Tier::Member) => {
                let reserved = claimed.iter().find(|(at, held)| {
                    held.actor != actor
                        && is_prefix(at, held)
                        && by_owner(held)
                        && covers(at, &path)
                });
                if let Some((at, held)) = reserved {
                    return Err(format!(
                        "path {path} lies under {at}, which actor `{}` of an owner serves; a \
                         member's actors take paths outside it",
                        held.actor
                    ));
                }
            }
            Some(Tier::Owner) => {}
        }
        // `/site` serving a folder and `/site/*` are one prefix: one route may hold it.
        let same_prefix = claimed.iter().find(|(at, held)| {
            **at != path
                && is_prefix(at, held)
                && is_prefix(&path, &route)
                && stem(at) == stem(&path)
        });
        if let Some((at, held)) = same_prefix {
            return Err(format!(
                "path {path} is the same prefix as {at}, which actor `{}` serves; choose another \
                 path, or `unroute` {at} first",
                held.actor
            ));
        }
        match claimed.get(&path) {
            Some(held) if held.actor != actor => {
                return Err(format!(
                    "path {path} is served by actor `{}`; choose another path, or its owner can \
                     `unroute` it",
                    held.actor
                ));
            }
            _ => {
                claimed.insert(path, route);
            }
        }
    }
    Ok(claimed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(actor: &str, path: &str, manifest: bool) -> (String, Route) {
        parse_route(&json!({"path": path}), actor, manifest).unwrap()
    }

    fn routes(list: &[(&str, &str)]) -> BTreeMap<String, Route> {
        list.iter().map(|(a, p)| route(a, p, false)).collect()
    }

    #[test]
    fn a_path_is_one_actors_and_an_owners_prefix_is_kept_from_members() {
        let held = routes(&[("shop", "/shop/*"), ("blog", "/blog/*")]);
        let by_owner = |r: &Route| r.actor == "shop";
        let take = |actor: &str, tier, path: &str| {
            claim(
                &held,
                actor,
                Some(tier),
                by_owner,
                vec![route(actor, path, false)],
                false,
            )
        };
        // Owners: any free path, under any prefix.
        assert!(take("admin", Tier::Owner, "/shop/admin").is_ok());
        assert!(take("mine", Tier::Owner, "/blog/x").is_ok());
        // Members: free paths outside owners' prefixes.
        assert!(take("mine", Tier::Member, "/mine").is_ok());
        assert!(take("mine", Tier::Member, "/blog/mine").is_ok());
        for path in ["/shop", "/shop/x", "/shop/x/*"] {
            let err = take("mine", Tier::Member, path).unwrap_err();
            assert!(err.contains("lies under /shop/*"), "{path}: {err}");
        }
        // Nobody: a path another actor holds.
        let err = take("admin", Tier::Owner, "/shop/*").unwrap_err();
        assert!(err.contains("served by actor `shop`"), "{err}");
        // The actor itself may take its path again (changing the route).
        assert!(take("shop", Tier::Owner, "/shop/*").is_ok());
        // Nor one prefix under two names: `/shop` serving a folder is `/shop/*`.
        let folder = parse_route(
            &json!({"path": "/shop", "static": "/public/s"}),
            "shop",
            false,
        );
        let err = claim(
            &held,
            "shop",
            Some(Tier::Owner),
            by_owner,
            vec![folder.unwrap()],
            false,
        )
        .unwrap_err();
        assert!(err.contains("the same prefix as /shop/*"), "{err}");
        // Guests and actors of nobody: none.
        let err = take("g", Tier::Guest, "/g").unwrap_err();
        assert!(err.contains("only members and owners"), "{err}");
        assert!(
            claim(
                &held,
                "x",
                None,
                by_owner,
                vec![route("x", "/x", false)],
                false
            )
            .is_err()
        );
    }

    #[test]
    fn a_version_replaces_its_manifest_routes_and_keeps_requested_ones() {
        let mut held = routes(&[("site", "/api/*")]);
        held.extend([route("site", "/old", true), route("other", "/other", true)]);
        let next = claim(
            &held,
            "site",
            Some(Tier::Member),
            |_| false,
            vec![route("site", "/new", true)],
            true,
        )
        .unwrap();
        let paths: Vec<&str> = next.keys().map(String::as_str).collect();
        assert_eq!(paths, ["/api/*", "/new", "/other"]);
    }
}
