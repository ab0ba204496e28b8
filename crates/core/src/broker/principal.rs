//! Who a request acts for (DESIGN §18): its **principal**, a person with their tier, or nobody.
//! The broker, `cargo` and `scheduler` ask [`Broker::principal`] for every request and check it
//! against `people::tiers`; nothing is allowed because a request speaks for nobody.
//!
//! | the request comes from | it acts for |
//! | --- | --- |
//! | a person, through a surface (console, web, `"as"`, a person's schedule) | that person (the envelope's `person`, `tier`) |
//! | a WASM actor | its owner, followed through actors that own actors to a person |
//! | a native actor carrying nobody's message | nobody |
//!
//! **Invariant:** a principal is read from the registry and `people.json` as they are when the
//! request is answered, off the world's thread; an actor never has more power than its owner.

use serde_json::Value;

use super::Broker;
use crate::message::{ActorId, Envelope, Speaker, Tier};
use crate::people::{People, Person};
use crate::world::Registry;

/// The longest chain of actors owning actors followed to a person: a registry edited by hand
/// into a longer chain (or a loop) acts for nobody, rather than make the broker walk for ever.
pub const MAX_OWNER_CHAIN: usize = 64;

/// The actors that always act for people, whatever the grants say: only owners may change
/// them (DESIGN §18, surfaces). Grants in `people.json` add more.
pub const BUILT_IN_SURFACES: [&str; 2] = ["agent", "matrix"];

/// What a request acts for.
#[derive(Clone, Debug, PartialEq)]
pub enum Principal {
    Person(Speaker),
    /// Nobody, and why (in words for the one who asked).
    Nobody(String),
}

impl Principal {
    pub fn person(&self) -> Option<&Speaker> {
        match self {
            Principal::Person(speaker) => Some(speaker),
            Principal::Nobody(_) => None,
        }
    }

    /// The principal in a sentence's subject: `ann (a member)`, or `nobody`.
    pub fn describe(&self) -> String {
        match self {
            Principal::Person(s) => format!("{} ({})", s.person, s.tier.as_str()),
            Principal::Nobody(_) => "nobody".into(),
        }
    }
}

/// The people and surface grants as one read of `people.json`.
pub struct PeopleNow {
    pub people: Vec<Person>,
    /// Actors that speak for people: the built-in ones and every granted one.
    pub surfaces: Vec<String>,
}

impl PeopleNow {
    /// Reads `people.json` once (blocking: call it on the blocking pool).
    pub fn read(people: &People) -> Result<PeopleNow, String> {
        let (people, grants) = people
            .read_all()
            .map_err(|e| format!("cannot read who the world's people are: {e:#}"))?;
        let mut surfaces: Vec<String> = BUILT_IN_SURFACES.iter().map(|s| s.to_string()).collect();
        surfaces.extend(grants.into_keys());
        Ok(PeopleNow { people, surfaces })
    }

    fn speaker(&self, id: &str) -> Option<Speaker> {
        let person = self.people.iter().find(|p| p.id == id)?;
        Some(Speaker {
            person: ActorId::parse(&person.id).ok()?,
            tier: person.tier,
        })
    }

    /// The world's first owner: who owns the actors made before owners were recorded.
    fn first_owner(&self) -> Option<Speaker> {
        let owner = self.people.iter().find(|p| p.tier == Tier::Owner)?;
        self.speaker(&owner.id)
    }

    pub fn is_surface(&self, actor: &str) -> bool {
        self.surfaces.iter().any(|s| s == actor)
    }

    /// Whom `actor` acts for: its registry owner when that is a person; when it is an actor,
    /// that actor's owner, and so on; an actor with no recorded owner (from before people
    /// existed) acts for the world's first owner.
    pub fn owner_of(&self, registry: &Registry, actor: &str) -> Principal {
        let mut at = actor.to_string();
        for _ in 0..MAX_OWNER_CHAIN {
            let Some(entry) = registry.actors.get(&at) else {
                return Principal::Nobody(format!("actor {at} is not in the world's registry"));
            };
            let owner = match &entry.owner {
                None => {
                    return self.first_owner().map_or_else(
                        || Principal::Nobody("the world has no owner".into()),
                        Principal::Person,
                    );
                }
                Some(owner) => owner,
            };
            if let Some(speaker) = self.speaker(owner) {
                return Principal::Person(speaker);
            }
            if !registry.actors.contains_key(owner) {
                return Principal::Nobody(format!(
                    "actor {actor} acts for nobody: its owner {owner} is neither a person of \
                     this world nor an actor (an owner can re-add {owner} with `sausage people \
                     add {owner} --tier TIER`)"
                ));
            }
            at = owner.clone();
        }
        Principal::Nobody(format!(
            "actor {actor} acts for nobody: its owners form a chain longer than \
             {MAX_OWNER_CHAIN} actors"
        ))
    }
}

impl Broker {
    /// The people and grants as `people.json` has them now, read on the blocking pool.
    pub async fn people_now(&self) -> Result<PeopleNow, String> {
        let people = People::new(&self.world);
        tokio::task::spawn_blocking(move || PeopleNow::read(&people))
            .await
            .map_err(|e| format!("host bug: reading the people failed: {e}"))?
    }

    /// Whom `request` acts for (see the module's table).
    pub async fn principal(&self, request: &Envelope) -> Principal {
        if let Some(speaker) = &request.speaker {
            return Principal::Person(speaker.clone());
        }
        if request.from.is_native() {
            return Principal::Nobody(format!(
                "{} sent it for nobody: native actors have no power of their own",
                request.from
            ));
        }
        self.principal_of_actor(&request.from).await
    }

    /// Whom the actor `id` acts for: its owner, as a person.
    pub async fn principal_of_actor(&self, id: &ActorId) -> Principal {
        match self.people_now().await {
            Ok(people) => people.owner_of(&self.registry().await, id.as_str()),
            Err(e) => Principal::Nobody(e),
        }
    }
}

/// The `principal` request's answer for `actor` in `body`: whom that actor acts for.
pub(super) fn answer(actor: &ActorId, principal: &Principal) -> Result<Value, String> {
    match principal {
        Principal::Person(s) => Ok(serde_json::json!({
            "type": "principal", "actor": actor.as_str(), "person": s.person.as_str(),
            "tier": s.tier,
        })),
        Principal::Nobody(why) => Err(why.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::ActorEntry;

    fn person(id: &str, tier: Tier) -> Person {
        serde_json::from_value(serde_json::json!({"id": id, "name": id, "tier": tier})).unwrap()
    }

    fn registry(owners: &[(&str, Option<&str>)]) -> Registry {
        let mut registry = Registry::default();
        for (id, owner) in owners {
            registry.actors.insert(
                id.to_string(),
                ActorEntry {
                    version: 1,
                    next_version: 2,
                    running: true,
                    owner: owner.map(str::to_string),
                    subagent: None,
                },
            );
        }
        registry
    }

    /// An actor acts for its owner, through actors that own actors; never for more.
    #[test]
    fn an_actor_acts_for_its_owner_transitively_and_never_for_nobody() {
        let now = PeopleNow {
            people: vec![person("olga", Tier::Owner), person("ann", Tier::Member)],
            surfaces: vec!["agent".into()],
        };
        let registry = registry(&[
            ("relay", Some("ann")),
            ("child", Some("relay")),
            ("grandchild", Some("child")),
            ("old", None),
            ("orphan", Some("gone")),
            ("loop-a", Some("loop-b")),
            ("loop-b", Some("loop-a")),
        ]);
        let of = |actor| now.owner_of(&registry, actor);
        let ann = Principal::Person(Speaker {
            person: ActorId::parse("ann").unwrap(),
            tier: Tier::Member,
        });
        assert_eq!(of("relay"), ann);
        assert_eq!(of("grandchild"), ann);
        assert_eq!(of("old").person().unwrap().person.as_str(), "olga");
        for nobody in ["orphan", "loop-a", "missing"] {
            assert!(matches!(of(nobody), Principal::Nobody(_)), "{nobody}");
        }
        let Principal::Nobody(why) = of("orphan") else {
            unreachable!()
        };
        assert!(why.contains("its owner gone is neither a person"), "{why}");
    }
}
