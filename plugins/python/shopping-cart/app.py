"""`shopping-cart` in Python: a cart per user in a map state.

The twin of the Rust plugins/shopping-cart, with the same commands, output
and state (map state `cart`: item -> quantity, a JSON number): `add ITEM`,
`remove ITEM`, and `checkout`, which emits every item of the user's cart in
item order (`ITEM×N ITEM×N …`, or `empty`) and clears it.
"""

from weir_sdk import InputError, MapState, Operator, export


class Cart(Operator):
    def init(self, config):
        self.cart = MapState("cart")

    def process(self, ctx, event):
        command, _, item = event.value_str().partition(" ")
        if command == "add":
            self.cart.set(ctx, item, self.cart.get(ctx, item, 0) + 1)
        elif command == "remove":
            self.cart.remove(ctx, item)
        elif command != "checkout" or item:
            raise InputError(f"unknown command {event.value_str()!r}: use `add ITEM`, `remove ITEM` or `checkout`")
        elif self.cart.is_empty(ctx):
            ctx.emit(event.key, "empty")
        else:
            ctx.emit(event.key, " ".join(f"{item}×{n}" for item, n in self.cart.entries(ctx)))
            self.cart.clear(ctx)


export(Cart)
