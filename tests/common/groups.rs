//! The count-window session the list-state tests run through a
//! count-window plugin in any language: events, the groups they must
//! give, and the job.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{JobDir, Lcg, keyed_file_job};

/// How many keys the events spread over.
const KEYS: u64 = 50;

/// `n` events, one JSON line each (key `kN`, value `eI` for the I-th
/// event), and the groups they must give, sorted: each key's values in
/// consecutive groups of `size`, a last incomplete one left out.
pub fn group_session(seed: u64, n: u64, size: usize) -> (String, Vec<String>) {
    let mut random = Lcg(seed);
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut input = String::new();
    for i in 0..n {
        let key = format!("k{}", random.below(KEYS));
        input.push_str(&format!("{{\"key\":\"{key}\",\"value\":\"e{i}\"}}\n"));
        by_key.entry(key).or_default().push(format!("e{i}"));
    }
    let mut groups: Vec<String> = by_key
        .iter()
        .flat_map(|(key, values)| values.chunks_exact(size).map(move |group| format!("{key}\t{}", group.join(" "))))
        .collect();
    groups.sort();
    (input, groups)
}

/// The count-window job ([`keyed_file_job`]) on `backend` with `plugin`
/// grouping by `size`.
pub fn groups_job(dir: &JobDir, backend: &str, plugin: &Path, size: usize) -> PathBuf {
    keyed_file_job(dir, "groups", backend, plugin, &format!("size = {size}"))
}
