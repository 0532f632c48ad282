//! The shopping-cart session the map-state tests run through a cart
//! plugin in any language: commands, the checkouts they must give, and
//! the job.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{JobDir, Lcg, keyed_file_job};

/// How many users have small carts, beside the `hoarder`.
const USERS: u64 = 100;

/// `events` commands, one JSON line each, and the output the checkouts
/// must give: `user<TAB>item×n …` (items in text order) or `user<TAB>empty`,
/// sorted. Users with small carts, and a `hoarder` who fills a cart of
/// `hoarded` items (more than a page of a listing) and checks out last.
pub fn cart_session(seed: u64, events: u64, hoarded: u64) -> (String, Vec<String>) {
    let mut random = Lcg(seed);
    let mut carts: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    let mut input = String::new();
    let mut expected = Vec::new();
    for i in 0..events {
        let hoarding = i % 4 == 0 && i / 4 < hoarded;
        let (user, command) = match (hoarding, i == events - 1) {
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

/// The cart job ([`keyed_file_job`]) on `backend` with `plugin`.
pub fn cart_job(dir: &JobDir, backend: &str, plugin: &Path) -> PathBuf {
    keyed_file_job(dir, "carts", backend, plugin, "")
}
