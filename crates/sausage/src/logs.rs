//! Host notes (DESIGN §19): the one `tracing` subscriber, installed once by `main`. A note prints
//! on stderr as `sausage: <message>` and nothing else (no time, level, target or colour): people
//! and the tests read these lines as they were before notes had levels. `SAUSAGE_LOG` chooses
//! which notes print. The console's own words to the person are output, not notes: they do not
//! come through here.

use std::fmt;

use anyhow::{Result, anyhow};
use tracing::Subscriber;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The variable that chooses which notes print.
pub const VARIABLE: &str = "SAUSAGE_LOG";

/// The filter when `SAUSAGE_LOG` is unset or empty.
pub const DEFAULT: &str = "info";

/// Sausage's own crates (`sausage`, `sausage_core`, `sausage_cluster`: a target matches by
/// prefix). A bare level is theirs; a dependency's notes (async-nats, wasmtime) print only where
/// the filter names it, since they were never part of what the host prints.
const OWN: &str = "sausage";

/// Installs the subscriber with the filter `SAUSAGE_LOG` gives; fails on a value it cannot
/// read, saying what to write instead.
pub fn install() -> Result<()> {
    let value = std::env::var(VARIABLE).unwrap_or_default();
    let value = if value.trim().is_empty() {
        DEFAULT
    } else {
        &value
    };
    let layer = tracing_subscriber::fmt::layer()
        .event_format(Note)
        .with_writer(std::io::stderr);
    tracing_subscriber::registry()
        .with(filter(value)?)
        .with(layer)
        .try_init()
        .map_err(|e| anyhow!("bug: the log subscriber was installed twice: {e}"))
}

/// Reads a filter: comma-separated directives, each a level (`warn`) or a target and its level
/// (`sausage_cluster=debug`). A bare word that is not a level is refused rather than read as a
/// target to trace, since it is nearly always a misspelt level.
fn filter(value: &str) -> Result<Targets> {
    let refuse = |why: String| {
        anyhow!(
            "{VARIABLE}={value}: {why}; write a level (off, error, warn, info, debug or trace), \
             optionally followed by targets with their own, such as {VARIABLE}=warn or \
             {VARIABLE}=info,sausage_cluster=debug"
        )
    };
    let level = |word: &str| {
        (!word.is_empty())
            .then(|| word.parse::<LevelFilter>().ok())
            .flatten()
            .ok_or_else(|| refuse(format!("`{word}` is not a level")))
    };
    let mut own = LevelFilter::OFF;
    let mut named = Vec::new();
    for directive in value.split(',').map(str::trim) {
        match directive.split_once('=') {
            Some((target, word)) if !target.trim().is_empty() => {
                named.push((target.trim().to_owned(), level(word.trim())?));
            }
            Some(_) => return Err(refuse(format!("`{directive}` names no target"))),
            None => own = level(directive)?,
        }
    }
    if !named.iter().any(|(target, _)| target == OWN) {
        named.push((OWN.to_owned(), own));
    }
    Ok(Targets::new().with_targets(named))
}

/// The one line of a note: `sausage: ` and the message (and any fields a dependency adds).
struct Note;

impl<S, N> FormatEvent<S, N> for Note
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        write!(writer, "sausage: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The level each target gets under `value`, as (target, level) pairs in the filter.
    fn levels(value: &str) -> Vec<(String, LevelFilter)> {
        let mut pairs: Vec<_> = filter(value)
            .unwrap()
            .iter()
            .map(|(target, level)| (target.to_owned(), level))
            .collect();
        pairs.sort();
        pairs
    }

    #[test]
    fn a_bare_level_is_sausages_own_and_a_named_target_keeps_its_level() {
        assert_eq!(levels("warn"), [("sausage".into(), LevelFilter::WARN)]);
        assert_eq!(
            levels("info, sausage_cluster=debug,async_nats=warn"),
            [
                ("async_nats".into(), LevelFilter::WARN),
                ("sausage".into(), LevelFilter::INFO),
                ("sausage_cluster".into(), LevelFilter::DEBUG),
            ]
        );
        assert_eq!(
            levels("sausage_core=debug"),
            [
                ("sausage".into(), LevelFilter::OFF),
                ("sausage_core".into(), LevelFilter::DEBUG),
            ]
        );
    }

    #[test]
    fn a_value_that_is_not_a_filter_is_refused_with_what_to_write() {
        for (value, says) in [
            ("loud", "`loud` is not a level"),
            ("warning", "`warning` is not a level"),
            ("info,,debug", "`` is not a level"),
            ("sausage_cluster=", "`` is not a level"),
            ("=debug", "`=debug` names no target"),
        ] {
            let e = filter(value).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("SAUSAGE_LOG={value}: {says};")),
                "{e}"
            );
            assert!(e.contains("SAUSAGE_LOG=info,sausage_cluster=debug"), "{e}");
        }
    }
}
