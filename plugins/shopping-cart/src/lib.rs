//! `shopping-cart`: a cart per user, in a map state — the pattern that
//! needs a key's whole map: list it, then drop it.
//!
//! Keyed by user, it reads commands as event values: `add ITEM` puts one
//! more of the item in the user's cart, `remove ITEM` takes the item out,
//! and `checkout` emits `(user, "ITEM×N ITEM×N …")` — every item in the
//! cart, in item order — or `(user, "empty")`, and empties the cart. The
//! cart is a map from item to quantity, so an event touches one entry
//! however full the cart is, and checkout reads the whole map a page at a
//! time and clears it in one call.

use weir_sdk::{Config, Context, Error, Event, MapState, Operator};

pub struct ShoppingCart {
    cart: MapState<u64>,
}

impl Operator for ShoppingCart {
    fn init(config: &Config) -> Result<Self, Error> {
        config.allow_only(&[])?;
        Ok(ShoppingCart { cart: MapState::new("cart") })
    }

    fn process(&mut self, ctx: &mut Context<'_>, event: &Event<'_>) -> Result<(), Error> {
        let command = event.value_str()?;
        match command.split_once(' ') {
            Some(("add", item)) => {
                let entry = self.cart.entry(ctx, item)?;
                let quantity = entry.get(ctx)?.unwrap_or(0) + 1;
                entry.set(ctx, &quantity)
            }
            Some(("remove", item)) => self.cart.remove(ctx, item),
            None if command == "checkout" => self.checkout(ctx, event.key()),
            _ => Err(Error::other(format!("unknown command {command:?}: use `add ITEM`, `remove ITEM` or `checkout`"))),
        }
    }
}

impl ShoppingCart {
    fn checkout(&mut self, ctx: &mut Context<'_>, user: &[u8]) -> Result<(), Error> {
        if self.cart.is_empty(ctx)? {
            ctx.emit(user, "empty");
            return Ok(());
        }
        let items: Vec<String> =
            self.cart.entries::<String>(ctx)?.into_iter().map(|(item, quantity)| format!("{item}×{quantity}")).collect();
        ctx.emit(user, items.join(" "));
        self.cart.clear(ctx)
    }
}

weir_sdk::export_operator!(ShoppingCart);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{TestEvent, TestHarness};

    fn run(op: &mut TestHarness<ShoppingCart>, events: &[(&str, &str)]) -> Vec<(String, String)> {
        let out = op.process(events.iter().map(|(user, command)| TestEvent::new(*user, *command))).unwrap();
        out.iter().map(|e| (e.key_str(), e.value_str())).collect()
    }

    #[test]
    fn checkout_lists_the_cart_in_item_order_and_empties_it() {
        let mut op = TestHarness::<ShoppingCart>::new(&[]).unwrap();
        run(&mut op, &[("ann", "add pear"), ("ann", "add apple"), ("bob", "add fig"), ("ann", "add pear")]);
        let out = run(&mut op, &[("ann", "remove fig"), ("ann", "add fig"), ("ann", "checkout"), ("ann", "checkout")]);
        assert_eq!(out, [("ann".into(), "apple×1 fig×1 pear×2".into()), ("ann".into(), "empty".into())]);
        assert_eq!(run(&mut op, &[("bob", "checkout")]), [("bob".into(), "fig×1".into())], "another key's cart is its own");
        assert_eq!(run(&mut op, &[("ann", "add kiwi"), ("ann", "checkout")]), [("ann".into(), "kiwi×1".into())]);
    }

    #[test]
    fn an_unknown_command_is_a_clear_error() {
        let mut op = TestHarness::<ShoppingCart>::new(&[]).unwrap();
        let error = op.process([TestEvent::new("ann", "buy")]).unwrap_err();
        assert!(error.to_string().contains("use `add ITEM`"), "{error}");
    }
}
