//! A key's whole map state, listed and cleared (`map-state.entries` and
//! `map-state.clear`): the shopping-cart plugin's checkouts at parallelism
//! 2, exactly once under SIGKILL, on both backends — carts listed from
//! state restored from a checkpoint, one of them larger than a page.

mod common;

use common::carts::{cart_job, cart_session};
use common::{JobDir, committed_lines, plugin, run_with_kills};

/// Events, and the items the hoarder's cart holds at the end.
const EVENTS: u64 = 30_000;
const HOARDED: u64 = 6_000;

fn checkouts_exactly_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("cart session seed: {seed}");
    let (input, expected) = cart_session(seed, EVENTS, HOARDED);
    dir.write("in.jsonl", &input);
    let stderr = run_with_kills(&cart_job(&dir, backend, &plugin("shopping-cart")), 3);
    assert!(stderr.contains("resumed from checkpoint"), "the last run resumes: {stderr}");
    let out = committed_lines(&dir.path("out"), None);
    let hoarded = out.iter().find(|line| line.starts_with("hoarder\t")).map(|line| line.split(' ').count());
    assert_eq!(hoarded, Some(HOARDED as usize), "the large cart is listed whole");
    assert_eq!(out.len(), expected.len(), "each checkout once");
    for (got, want) in out.iter().zip(&expected) {
        assert_eq!(got, want, "a checkout lists what its cart held (no item lost, none left from before a checkout)");
    }
}

#[test]
fn checkouts_list_and_clear_whole_carts_exactly_once_under_sigkill_memory() {
    checkouts_exactly_once_under_kills("memory");
}

#[test]
fn checkouts_list_and_clear_whole_carts_exactly_once_under_sigkill_rocksdb() {
    checkouts_exactly_once_under_kills("rocksdb");
}
