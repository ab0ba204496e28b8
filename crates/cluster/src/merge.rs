//! The three-way merge of a JSON file that two hosts changed at once (the people, the secrets):
//! from the value both last held, each host's change to a part the other left alone is kept;
//! where both changed one part, the host merging (the later writer) keeps its own. Objects merge
//! key by key, lists of objects with an `"id"` (the people) item by item; anything else is one
//! value. Nothing here knows what the file means.

use std::collections::HashMap;

use serde_json::{Map, Value};

/// `ours` and `theirs` merged from `base`, as pretty JSON; `None` when one of them is not JSON
/// (the caller keeps its own then).
pub(crate) fn merge_bytes(base: &[u8], ours: &[u8], theirs: &[u8]) -> Option<Vec<u8>> {
    let parse = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).ok();
    // An empty base (nothing shared before) is a value nobody had.
    let base = if base.is_empty() {
        None
    } else {
        Some(parse(base)?)
    };
    let (ours, theirs) = (parse(ours)?, parse(theirs)?);
    let merged = merge(base.as_ref(), Some(&ours), Some(&theirs)).unwrap_or(Value::Null);
    serde_json::to_vec_pretty(&merged).ok()
}

/// One part merged: `None` in and out is a part that is absent (a key or an item removed).
fn merge(base: Option<&Value>, ours: Option<&Value>, theirs: Option<&Value>) -> Option<Value> {
    if ours == base || ours == theirs {
        return theirs.cloned();
    }
    if theirs == base {
        return ours.cloned();
    }
    match (ours, theirs) {
        (Some(Value::Object(o)), Some(Value::Object(t))) => {
            let b = base.and_then(Value::as_object);
            let keys = t.keys().chain(o.keys().filter(|k| !t.contains_key(*k)));
            let mut merged = Map::new();
            for key in keys {
                let base = b.and_then(|m| m.get(key));
                if let Some(value) = merge(base, o.get(key), t.get(key)) {
                    merged.insert(key.clone(), value);
                }
            }
            Some(Value::Object(merged))
        }
        (Some(Value::Array(o)), Some(Value::Array(t))) => {
            let b = match base {
                Some(Value::Array(b)) => by_id(b),
                _ => Some(HashMap::new()),
            };
            match (b, by_id(o), by_id(t)) {
                (Some(b), Some(om), Some(tm)) => {
                    let ids = (t.iter().chain(o.iter()))
                        .filter_map(|item| item["id"].as_str())
                        .collect::<Vec<_>>();
                    let mut merged = Vec::new();
                    let mut seen = std::collections::HashSet::new();
                    for id in ids.into_iter().filter(|id| seen.insert(*id)) {
                        let (bi, oi, ti) = (b.get(id), om.get(id), tm.get(id));
                        merged.extend(merge(bi.copied(), oi.copied(), ti.copied()));
                    }
                    Some(Value::Array(merged))
                }
                _ => ours.cloned(),
            }
        }
        _ => ours.cloned(),
    }
}

/// The items of a list by their `"id"`, when every item is an object with a string one and no
/// two share it.
fn by_id(items: &[Value]) -> Option<HashMap<&str, &Value>> {
    let mut map = HashMap::new();
    for item in items {
        let id = item.get("id")?.as_str()?;
        if map.insert(id, item).is_some() {
            return None;
        }
    }
    Some(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(base: Value, ours: Value, theirs: Value) -> Value {
        let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
        let out = merge_bytes(&bytes(&base), &bytes(&ours), &bytes(&theirs)).unwrap();
        serde_json::from_slice(&out).unwrap()
    }

    fn ann(links: &[&str]) -> Value {
        json!({"id": "ann", "tier": "member", "links": links})
    }

    #[test]
    fn changes_to_different_people_on_two_hosts_are_both_kept() {
        let base = json!({"people": [ann(&["l1"])]});
        // Here ann used her link; there bob was added and a surface granted.
        let ours = json!({"people": [ann(&[])]});
        let theirs = json!({"people": [ann(&["l1"]), {"id": "bob", "tier": "owner"}],
                            "surfaces": {"matrix": "matrix"}});
        assert_eq!(
            merged(base, ours, theirs),
            json!({"people": [ann(&[]), {"id": "bob", "tier": "owner"}],
                   "surfaces": {"matrix": "matrix"}})
        );
    }

    #[test]
    fn a_removal_on_one_host_and_an_addition_on_the_other_are_both_kept() {
        let base = json!({"people": [ann(&[]), {"id": "bob"}]});
        let ours = json!({"people": [ann(&[])]});
        let theirs = json!({"people": [ann(&[]), {"id": "bob"}, {"id": "cy"}]});
        assert_eq!(
            merged(base, ours, theirs),
            json!({"people": [ann(&[]), {"id": "cy"}]})
        );
    }

    #[test]
    fn where_both_changed_one_value_the_merging_host_keeps_its_own() {
        let base = json!({"people": [ann(&["l1"])]});
        let ours = json!({"people": [ann(&["l1", "l2"])]});
        let theirs = json!({"people": [ann(&["l1", "l3"])]});
        assert_eq!(
            merged(base, ours.clone(), theirs),
            ours,
            "a list without ids is one value"
        );
        // Both made the same change: one copy.
        let same = json!({"people": [ann(&[]), {"id": "bob"}]});
        assert_eq!(
            merged(json!({"people": []}), same.clone(), same.clone()),
            same
        );
    }

    #[test]
    fn nothing_shared_before_or_a_file_that_is_not_json() {
        let ours = json!({"people": [ann(&[])]});
        let theirs = json!({"people": [{"id": "bob"}]});
        let out = merge_bytes(
            b"",
            ours.to_string().as_bytes(),
            theirs.to_string().as_bytes(),
        );
        let out: Value = serde_json::from_slice(&out.unwrap()).unwrap();
        assert_eq!(out, json!({"people": [{"id": "bob"}, ann(&[])]}));
        assert_eq!(merge_bytes(b"{}", b"not json", b"{}"), None);
    }
}
