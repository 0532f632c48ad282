//! A key's whole map state, listed and cleared (`map-state.entries` and
//! `map-state.clear`): the shopping-cart plugin's checkouts at parallelism
//! 2, exactly once under SIGKILL, on both backends — carts listed from
//! state restored from a checkpoint, one of them larger than a page.

mod common;

use common::carts::{cart_job, cart_session};
use common::{JobDir, assert_exactly_once_under_kills, plugin, printed_seed};

/// Events, and the items the hoarder's cart holds at the end.
const EVENTS: u64 = 30_000;
const HOARDED: u64 = 6_000;

fn checkouts_exactly_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let (input, expected) = cart_session(printed_seed("cart session"), EVENTS, HOARDED);
    let hoarded = expected.iter().find(|line| line.starts_with("hoarder\t")).map(|line| line.split(' ').count());
    assert_eq!(hoarded, Some(HOARDED as usize), "the session fills a cart larger than a page");
    dir.write("in.jsonl", &input);
    let job = cart_job(&dir, backend, &plugin("shopping-cart"));
    let what = "a checkout lists what its cart held (no item lost, none left from before a checkout)";
    assert_exactly_once_under_kills(&dir, &job, 3, &expected, what);
}

#[test]
fn checkouts_list_and_clear_whole_carts_exactly_once_under_sigkill_memory() {
    checkouts_exactly_once_under_kills("memory");
}

#[test]
fn checkouts_list_and_clear_whole_carts_exactly_once_under_sigkill_rocksdb() {
    checkouts_exactly_once_under_kills("rocksdb");
}
