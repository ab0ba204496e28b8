//! Per-person limits on actors and their memory (DESIGN §11, §13, §18): how many actors one
//! person may own and how many MiB of `memory_mb` they may have together, per tier, from
//! `"limits"` in `sausage.json` (`world::Limits`). A person owns the actors whose registry
//! owner leads to them (`principal`), whoever asked. Checked by `spawn` and `fork` (one actor
//! more) and by `upgrade` and `rollback` when they raise an actor's memory.
//! **Invariant:** the check comes before anything is stored, and its [`Admission`] is held
//! until the registry records the change, so two requests for one person cannot both pass on
//! the same count; a refusal changes nothing.

use std::collections::HashMap;
use std::sync::Arc;

use super::Broker;
use super::principal::PeopleNow;
use crate::message::{ActorId, Tier};
use crate::runtime::DEFAULT_MEMORY_MB;
use crate::world::{Allowance, Manifest, REGISTRY, Registry, World};

/// What a request would add to one person's actors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Growth {
    pub actors: u32,
    pub memory_mb: u64,
}

/// A passed check, held until the registry records what was checked: the next request for the
/// same person waits for it (see the module's invariant). Dropping it lets that one go on.
pub struct Admission {
    _held: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// One lock per person whose tier has a limit; see [`Admission`].
#[derive(Default)]
pub struct Admissions(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

/// What one person owns now.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Owned {
    actors: u32,
    memory_mb: u64,
}

/// The memory limit an actor's manifest gives its instances, as the supervisor applies it: a
/// missing or invalid `memory_mb` is the default.
pub fn memory_mb(manifest: &Manifest) -> u32 {
    manifest
        .memory_mb
        .clone()
        .ok()
        .flatten()
        .unwrap_or(DEFAULT_MEMORY_MB)
}

impl Broker {
    /// Whether `owner` (a person's id) may be given `growth`: refused with the limit, the
    /// numbers and how to change them when it would pass their tier's limits. An owner of no
    /// limit passes without counting.
    pub(super) async fn admit(&self, owner: &str, growth: Growth) -> Result<Admission, String> {
        let people = self.people_now().await?;
        let Some(tier) = people.people.iter().find(|p| p.id == owner).map(|p| p.tier) else {
            return Err(format!(
                "`owner`: {owner} is not a person of this world; `sausage people list` shows \
                 who is"
            ));
        };
        let registry = self.registry().await;
        let allowance = registry.limits.of(tier);
        if allowance
            == (Allowance {
                max_actors: None,
                max_memory_mb: None,
            })
        {
            return Ok(Admission { _held: None });
        }
        let lock = self
            .admissions
            .0
            .lock()
            .expect("admissions lock")
            .entry(owner.to_string())
            .or_default()
            .clone();
        let held = lock.lock_owned().await;
        // Counted after the lock: what the request before it added is in the registry now.
        let registry = self.registry().await;
        let (world, person) = (self.world.clone(), owner.to_string());
        let owned =
            tokio::task::spawn_blocking(move || owned_by(&world, &registry, &people, &person))
                .await
                .map_err(|e| format!("host bug: counting {owner}'s actors failed: {e}"))?;
        check(owner, tier, allowance, owned, growth)?;
        Ok(Admission { _held: Some(held) })
    }

    /// [`Broker::admit`] for a new memory limit `to` of `id` (from `from`): nothing to check
    /// unless it is raised.
    pub(super) async fn admit_memory(
        &self,
        id: &ActorId,
        from: u32,
        to: u32,
    ) -> Result<Admission, String> {
        if to <= from {
            return Ok(Admission { _held: None });
        }
        let owner = self.principal_of_actor(id).await;
        let Some(owner) = owner.person() else {
            // An actor of nobody: its requests are refused by its principal already, and an
            // owner's change of it counts against no one.
            return Ok(Admission { _held: None });
        };
        let growth = Growth {
            actors: 0,
            memory_mb: u64::from(to - from),
        };
        self.admit(owner.person.as_str(), growth).await
    }
}

/// What `person` owns in `registry`: the actors whose owners lead to them, and the sum of their
/// memory limits (each manifest read from disk: call it on the blocking pool).
fn owned_by(world: &World, registry: &Registry, people: &PeopleNow, person: &str) -> Owned {
    let mut owned = Owned {
        actors: 0,
        memory_mb: 0,
    };
    for id in registry.actors.keys() {
        let principal = people.owner_of(registry, id);
        if principal
            .person()
            .is_none_or(|p| p.person.as_str() != person)
        {
            continue;
        }
        owned.actors += 1;
        let memory =
            ActorId::parse(id).map_or(DEFAULT_MEMORY_MB, |id| memory_mb(&world.manifest(&id)));
        owned.memory_mb += u64::from(memory);
    }
    owned
}

/// The decision: `person` of `tier`, who owns `owned`, may be given `growth` within
/// `allowance`; the refusal names the limit, the numbers, and how to change it.
fn check(
    person: &str,
    tier: Tier,
    allowance: Allowance,
    owned: Owned,
    growth: Growth,
) -> Result<(), String> {
    let tier_name = tier.as_str();
    let raise = |field: &str| {
        format!(
            "an owner can raise it with \"limits\": {{\"{tier_name}\": {{\"{field}\": N}}}} in \
             the world's {REGISTRY} (edited while the world is stopped)"
        )
    };
    if let Some(max) = allowance.max_actors
        && growth.actors > 0
        && owned.actors + growth.actors > max
    {
        return Err(format!(
            "person {person} ({}) owns {} actors and may own at most {max} (the {tier_name} \
             limit max_actors); remove one of them first, or {}",
            a(tier),
            owned.actors,
            raise("max_actors")
        ));
    }
    if let Some(max) = allowance.max_memory_mb
        && growth.memory_mb > 0
        && owned.memory_mb + growth.memory_mb > max
    {
        return Err(format!(
            "person {person} ({}) has {} MiB of memory in {} actors, and {} MiB more would pass \
             the {max} MiB they may have together (the {tier_name} limit max_memory_mb); lower \
             \"memory_mb\" in an actor.json or remove an actor first, or {}",
            a(tier),
            owned.memory_mb,
            owned.actors,
            growth.memory_mb,
            raise("max_memory_mb")
        ));
    }
    Ok(())
}

/// A tier with its article, as a sentence names it.
fn a(tier: Tier) -> &'static str {
    match tier {
        Tier::Owner => "an owner",
        Tier::Member => "a member",
        Tier::Guest => "a guest",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(actors: u32, memory_mb: u64) -> Owned {
        Owned { actors, memory_mb }
    }

    /// A limit is reached, not passed; each refusal names its limit, the numbers and the fix.
    #[test]
    fn a_person_gets_up_to_their_tiers_limits_and_no_further() {
        let member = Allowance {
            max_actors: Some(3),
            max_memory_mb: Some(1000),
        };
        let one = Growth {
            actors: 1,
            memory_mb: 256,
        };
        assert!(check("ann", Tier::Member, member, owned(2, 744), one).is_ok());
        let why = check("ann", Tier::Member, member, owned(3, 300), one).unwrap_err();
        assert!(
            why.starts_with("person ann (a member) owns 3 actors and may own at most 3 (the member limit max_actors)"),
            "{why}"
        );
        assert!(
            why.contains(r#""limits": {"member": {"max_actors": N}}"#),
            "{why}"
        );
        let why = check("ann", Tier::Member, member, owned(2, 745), one).unwrap_err();
        assert!(
            why.contains(
                "has 745 MiB of memory in 2 actors, and 256 MiB more would pass the 1000 MiB"
            ),
            "{why}"
        );
        assert!(why.contains("max_memory_mb"), "{why}");
        // An upgrade that raises no memory adds nothing; one that does adds only the rise.
        let none = Growth {
            actors: 0,
            memory_mb: 0,
        };
        assert!(check("ann", Tier::Member, member, owned(9, 9000), none).is_ok());
        let rise = Growth {
            actors: 0,
            memory_mb: 10,
        };
        assert!(check("ann", Tier::Member, member, owned(3, 990), rise).is_ok());
        assert!(check("ann", Tier::Member, member, owned(3, 991), rise).is_err());
        let guest = Allowance {
            max_actors: Some(0),
            max_memory_mb: Some(0),
        };
        let why = check("gus", Tier::Guest, guest, owned(0, 0), one).unwrap_err();
        assert!(
            why.contains("gus (a guest) owns 0 actors and may own at most 0"),
            "{why}"
        );
    }
}
