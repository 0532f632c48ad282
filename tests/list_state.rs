//! List state (`ListState`, on the host's map and value states): the
//! count-window plugin's groups at parallelism 2, exactly once under
//! SIGKILL, on both backends — each key's groups of `size` events in
//! arrival order, none lost, repeated or mixed with a group before it.

mod common;

use common::groups::{group_session, groups_job};
use common::{JobDir, assert_exactly_once_under_kills, plugin, printed_seed};

const EVENTS: u64 = 24_000;
const SIZE: usize = 4;

fn groups_exactly_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let (input, expected) = group_session(printed_seed("events"), EVENTS, SIZE);
    dir.write("in.jsonl", &input);
    let job = groups_job(&dir, backend, &plugin("count-window"), SIZE);
    assert_exactly_once_under_kills(&dir, &job, 3, &expected, "a group is its key's next events, in order");
}

#[test]
fn count_windows_group_each_keys_events_exactly_once_under_sigkill_memory() {
    groups_exactly_once_under_kills("memory");
}

#[test]
fn count_windows_group_each_keys_events_exactly_once_under_sigkill_rocksdb() {
    groups_exactly_once_under_kills("rocksdb");
}
