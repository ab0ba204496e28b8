//! What each tier may ask of the broker (DESIGN §13, §18), decided in one function, [`may_ask`],
//! that the broker runs for every request, for the person it acts for (`broker::principal`),
//! and the web console runs before it sends one. The agent applies the same table in its own
//! tool code.
//!
//! | request | guest | member | owner |
//! | --- | --- | --- | --- |
//! | `list`, `principal`, `routes` | yes | yes | yes |
//! | `request_secret`, `request_grant`, `approvals`, `decide`, `spend` | yes (decided by `approvals`) | yes | yes |
//! | `spawn` | no | yes, owned by the member; never a surface's id | yes |
//! | `checkpoint`, `restore` | no | only actors the member owns (`checkpoint` also one not made yet), never a surface | yes |
//! | `upgrade`, `rollback`, `stop`, `start`, `remove`, `subscribe`, `unsubscribe`, `fork`, `window`, `route`, `unroute` | no | only actors the member owns, never a surface | yes |
//!
//! A **surface** is an actor that speaks for people: `agent`, `matrix` and any actor an owner
//! granted a kind of handle. Changing one changes what every person's conversation can do.
//! **Invariant:** a refusal changes nothing: it is decided before the request does anything.

use crate::message::{Speaker, Tier};

/// The requests anyone may make: they change nothing of the world (`spans` only reports what
/// its sender did, for traces and metrics).
pub const READ_ONLY: [&str; 4] = ["list", "principal", "spans", "routes"];

/// The requests anyone may make because they only ask: a person decides what they ask for
/// (`approvals`), `decide` is checked against the held action itself, and `spend` asks whether
/// a turn may spend what it has; `delegate` and `dismiss` come from the agent alone, and a
/// sub-agent has its person's tier, never more.
pub const ASKING: [&str; 7] = [
    "request_secret",
    "request_grant",
    "approvals",
    "decide",
    "spend",
    "delegate",
    "dismiss",
];

/// Whether `speaker` may make the broker request `kind` on `actor`, whose owner (a person, as
/// `broker::principal` resolves it) is `owner` (`None` for an actor that does not exist yet);
/// `surface` says whether `actor` speaks for people. `Err` is the refusal, in words for the
/// person.
pub fn may_ask(
    speaker: &Speaker,
    kind: &str,
    actor: Option<&str>,
    owner: Option<&str>,
    surface: bool,
) -> Result<(), String> {
    let person = speaker.person.as_str();
    if READ_ONLY.contains(&kind) || ASKING.contains(&kind) || speaker.tier == Tier::Owner {
        return Ok(());
    }
    if speaker.tier == Tier::Guest {
        return Err(format!(
            "{person} is a guest in this world: guests talk and read; `{kind}` needs a member \
             or an owner (an owner can change your tier with `sausage people tier {person} \
             member`)"
        ));
    }
    match actor {
        Some(actor) if surface => Err(format!(
            "only owners may `{kind}` `{actor}`: it speaks for people (a surface); {person} is a \
             member"
        )),
        _ if kind == "spawn" => Ok(()),
        // What a turn is about to make (a spawn's or a fork's actor) is kept as "absent".
        Some(_) if kind == "checkpoint" && owner.is_none() => Ok(()),
        Some(_) if owner == Some(person) => Ok(()),
        Some(actor) => Err(format!(
            "actor `{actor}` belongs to {}; a member may `{kind}` only the actors they created",
            owner.unwrap_or("nobody")
        )),
        // No actor named: the request is refused for its own reason later.
        None => Ok(()),
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
            (&gus, "list", None, None, false, true),
            (&gus, "principal", Some("x"), None, false, true),
            (&gus, "spawn", Some("x"), None, false, false),
            (&gus, "stop", Some("x"), Some("gus"), false, false),
            (&ann, "spawn", Some("x"), None, false, true),
            (&ann, "spawn", Some("matrix"), None, true, false),
            (&ann, "upgrade", Some("mine"), Some("ann"), false, true),
            (&ann, "remove", Some("mine"), Some("ann"), false, true),
            (&ann, "upgrade", Some("theirs"), Some("bob"), false, false),
            (&ann, "fork", Some("mine"), Some("ann"), false, true),
            (&ann, "route", Some("mine"), Some("ann"), false, true),
            (&ann, "unroute", Some("theirs"), Some("bob"), false, false),
            (&gus, "route", Some("x"), Some("gus"), false, false),
            (&gus, "routes", None, None, false, true),
            (&ann, "checkpoint", Some("new"), None, false, true),
            (
                &ann,
                "checkpoint",
                Some("theirs"),
                Some("bob"),
                false,
                false,
            ),
            (&ann, "restore", Some("mine"), Some("ann"), false, true),
            (&ann, "restore", Some("theirs"), Some("bob"), false, false),
            (&ann, "window", Some("theirs"), Some("bob"), false, false),
            (&ann, "fork", Some("agent"), Some("olga"), true, false),
            (&gus, "window", Some("x"), Some("gus"), false, false),
            (&ann, "stop", Some("old"), None, false, false),
            (&ann, "upgrade", Some("agent"), Some("ann"), true, false),
            (&ann, "stop", Some("relay"), Some("ann"), true, false),
            (&ann, "subscribe", Some("agent"), Some("olga"), true, false),
            (&olga, "upgrade", Some("agent"), Some("bob"), true, true),
            (&olga, "spawn", Some("matrix"), None, true, true),
            (&olga, "remove", Some("theirs"), Some("bob"), false, true),
        ];
        for (who, kind, actor, owner, surface, allowed) in cases {
            let answer = may_ask(who, kind, actor, owner, surface);
            assert_eq!(
                answer.is_ok(),
                allowed,
                "{who:?} {kind} {actor:?}: {answer:?}"
            );
        }
        let why = may_ask(&ann, "upgrade", Some("theirs"), Some("bob"), false).unwrap_err();
        assert!(why.contains("belongs to bob"), "{why}");
        let why = may_ask(&ann, "upgrade", Some("agent"), Some("ann"), true).unwrap_err();
        assert!(why.contains("only owners may `upgrade` `agent`"), "{why}");
        let why = may_ask(&gus, "spawn", Some("x"), None, false).unwrap_err();
        assert!(why.contains("gus is a guest"), "{why}");
    }
}
