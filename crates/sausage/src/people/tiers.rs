//! What each tier may ask of the broker (DESIGN §13), decided in one function, [`may_ask`], that
//! the broker runs for every request that speaks for a person and the web console runs before
//! it sends one. The agent applies the same table in its own tool code.
//!
//! | request | guest | member | owner |
//! | --- | --- | --- | --- |
//! | `list` | yes | yes | yes |
//! | `spawn` | no | yes, owned by the member | yes |
//! | `upgrade`, `rollback`, `stop`, `start`, `remove`, `subscribe`, `unsubscribe` | no | only actors the member owns, never `agent` | yes |
//!
//! **Invariant:** a refusal changes nothing: it is decided before the request does anything.

use crate::message::{Speaker, Tier};

/// The actor that only owners may change, whoever created it: changing it changes what every
/// person's conversation can do.
pub const AGENT: &str = "agent";

/// Whether `speaker` may make the broker request `kind` on `actor`, whose registry owner is
/// `owner` (`None` for an actor that does not exist yet, or has no recorded owner). `Err` is the
/// refusal, in words for the person.
pub fn may_ask(
    speaker: &Speaker,
    kind: &str,
    actor: Option<&str>,
    owner: Option<&str>,
) -> Result<(), String> {
    let person = speaker.person.as_str();
    match (speaker.tier, kind) {
        (_, "list") | (Tier::Owner, _) => Ok(()),
        (Tier::Guest, _) => Err(format!(
            "{person} is a guest in this world: guests talk and read; `{kind}` needs a member \
             or an owner (an owner can change your tier with `sausage people tier {person} \
             member`)"
        )),
        (Tier::Member, "spawn") => Ok(()),
        (Tier::Member, _) => match actor {
            Some(AGENT) => Err(format!(
                "only owners may change the agent; {person} is a member"
            )),
            Some(_) if owner == Some(person) => Ok(()),
            Some(actor) => Err(format!(
                "actor `{actor}` belongs to {}; a member may `{kind}` only the actors they \
                 created",
                owner.unwrap_or("nobody recorded (an actor from before people existed)")
            )),
            // No actor named: the request is refused for its own reason later.
            None => Ok(()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ActorId;

    fn speaker(person: &str, tier: Tier) -> Speaker {
        Speaker {
            person: ActorId::parse(person).unwrap(),
            tier,
        }
    }

    /// The table of the module's doc, row by row.
    #[test]
    fn each_tier_may_ask_what_the_table_says() {
        let ann = speaker("ann", Tier::Member);
        let gus = speaker("gus", Tier::Guest);
        let olga = speaker("olga", Tier::Owner);
        let cases = [
            (&gus, "list", None, None, true),
            (&gus, "spawn", Some("x"), None, false),
            (&gus, "stop", Some("x"), Some("gus"), false),
            (&ann, "spawn", Some("x"), None, true),
            (&ann, "upgrade", Some("mine"), Some("ann"), true),
            (&ann, "remove", Some("mine"), Some("ann"), true),
            (&ann, "upgrade", Some("theirs"), Some("bob"), false),
            (&ann, "stop", Some("old"), None, false),
            (&ann, "upgrade", Some("agent"), Some("ann"), false),
            (&olga, "upgrade", Some("agent"), Some("bob"), true),
            (&olga, "remove", Some("theirs"), Some("bob"), true),
        ];
        for (who, kind, actor, owner, allowed) in cases {
            let answer = may_ask(who, kind, actor, owner);
            assert_eq!(
                answer.is_ok(),
                allowed,
                "{who:?} {kind} {actor:?}: {answer:?}"
            );
        }
        let why = may_ask(&ann, "upgrade", Some("theirs"), Some("bob")).unwrap_err();
        assert!(why.contains("belongs to bob"), "{why}");
        let why = may_ask(&gus, "spawn", Some("x"), None).unwrap_err();
        assert!(why.contains("gus is a guest"), "{why}");
    }
}
