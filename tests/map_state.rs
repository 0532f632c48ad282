//! A key's whole map state, listed and cleared (`map-state.entries` and
//! `map-state.clear`): the shopping-cart plugin's checkouts at parallelism
//! 2, exactly once under SIGKILL, on both backends — carts listed from
//! state restored from a checkpoint, one of them larger than a page.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{JobDir, Lcg, committed_lines, plugin, run_with_kills, toml_path};

/// Users with small carts, and one who fills a cart of [`HOARDED`] items
/// (more than a page of the host's listing) and checks out last.
const USERS: u64 = 100;
const EVENTS: u64 = 30_000;
const HOARDED: u64 = 6_000;

/// The commands, one JSON line per event, and the output the checkouts
/// must give: `user<TAB>item×n …` (items in text order) or `user<TAB>empty`.
fn cart_session(seed: u64) -> (String, Vec<String>) {
    let mut random = Lcg(seed);
    let mut carts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut input = String::new();
    let mut expected = Vec::new();
    for i in 0..EVENTS {
        let hoarding = i % 4 == 0 && i / 4 < HOARDED;
        let (user, command) = match (hoarding, i == EVENTS - 1) {
            (_, true) => ("hoarder".to_owned(), "checkout".to_owned()),
            (true, false) => ("hoarder".to_owned(), format!("add item{:05}", i / 4)),
            (false, false) => {
                let user = format!("user{}", random.below(USERS));
                let item = format!("item{:02}", random.below(20));
                let command = match random.below(20) {
                    0..14 => format!("add {item}"),
                    14..17 => format!("remove {item}"),
                    _ => "checkout".to_owned(),
                };
                (user, command)
            }
        };
        let cart = carts.entry(user.clone()).or_default();
        match command.split_once(' ') {
            Some(("add", item)) => *cart.entry(item.to_owned()).or_default() += 1,
            Some(("remove", item)) => drop(cart.remove(item)),
            _ => {
                let items: Vec<String> = cart.iter().map(|(item, n)| format!("{item}×{n}")).collect();
                let listed = if items.is_empty() { "empty".to_owned() } else { items.join(" ") };
                expected.push(format!("{user}\t{listed}"));
                cart.clear();
            }
        }
        input.push_str(&format!("{{\"key\":\"{user}\",\"value\":\"{command}\"}}\n"));
    }
    expected.sort();
    (input, expected)
}

fn cart_job(dir: &JobDir, backend: &str) -> PathBuf {
    dir.write(
        "job.toml",
        &format!(
            r#"
name = "carts"
parallelism = 2
state_backend = "{backend}"
checkpoint_dir = "checkpoints"
checkpoint_interval_ms = 150

[[source]]
name = "commands"
type = "file"
format = "json"
path = "in.jsonl"
rate = 8000

[[operator]]
uid = "cart"
plugin = {plugin}
inputs = ["commands"]
key_by = true

[[sink]]
name = "out"
type = "files"
path = "out"
input = "cart"
"#,
            plugin = toml_path(&plugin("shopping-cart"))
        ),
    )
}

fn checkouts_exactly_once_under_kills(backend: &str) {
    let dir = JobDir::new();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    eprintln!("cart session seed: {seed}");
    let (input, expected) = cart_session(seed);
    dir.write("in.jsonl", &input);
    let stderr = run_with_kills(&cart_job(&dir, backend), 3);
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
