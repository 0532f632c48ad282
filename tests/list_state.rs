//! List state (`ListState`, on the host's map and value states): the
//! count-window plugin's groups at parallelism 2, exactly once under
//! SIGKILL, on both backends — each key's groups of `size` events in
//! arrival order, none lost, repeated or mixed with a group before it.

mod common;

use common::groups::{group_session, groups_job};
use common::{JobDir, committed_lines, plugin, run_with_kills};

const EVENTS: u64 = 24_000;
const SIZE: usize = 4;

fn groups_exactly_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("events seed: {seed}");
    let (input, expected) = group_session(seed, EVENTS, SIZE);
    dir.write("in.jsonl", &input);
    let stderr = run_with_kills(&groups_job(&dir, backend, &plugin("count-window"), SIZE), 3);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    let out = committed_lines(&dir.path("out"), None);
    assert_eq!(out.len(), expected.len(), "each group once");
    for (got, want) in out.iter().zip(&expected) {
        assert_eq!(got, want, "a group is its key's next {SIZE} events, in order");
    }
}

#[test]
fn count_windows_group_each_keys_events_exactly_once_under_sigkill_memory() {
    groups_exactly_once_under_kills("memory");
}

#[test]
fn count_windows_group_each_keys_events_exactly_once_under_sigkill_rocksdb() {
    groups_exactly_once_under_kills("rocksdb");
}
