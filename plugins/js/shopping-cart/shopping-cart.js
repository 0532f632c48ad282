// `shopping-cart` in JavaScript: a cart per user in a map state.
//
// The twin of the Rust plugins/shopping-cart, with the same commands, output
// and state (map state `cart`: item -> quantity, a JSON number): `add ITEM`,
// `remove ITEM`, and `checkout`, which emits every item of the user's cart in
// item order (`ITEM×N ITEM×N …`, or `empty`) and clears it.

import { MapState, Operator, OperatorError, exportOperator } from "weir-sdk";

class Cart extends Operator {
  init(config) {
    this.cart = new MapState("cart");
  }
  process(ctx, event) {
    const command = event.valueString();
    const space = command.indexOf(" ");
    const verb = space < 0 ? command : command.slice(0, space);
    const item = command.slice(space + 1);
    if (verb === "add") {
      this.cart.set(ctx, item, (this.cart.get(ctx, item) ?? 0) + 1);
    } else if (verb === "remove") {
      this.cart.remove(ctx, item);
    } else if (command !== "checkout") {
      const usage = "use `add ITEM`, `remove ITEM` or `checkout`";
      throw OperatorError.invalidInput(`unknown command ${JSON.stringify(command)}: ${usage}`);
    } else if (this.cart.isEmpty(ctx)) {
      ctx.emit(event.key, "empty");
    } else {
      ctx.emit(event.key, this.cart.entries(ctx).map(([item, n]) => `${item}×${n}`).join(" "));
      this.cart.clear(ctx);
    }
  }
}
export const operator = exportOperator(Cart);
