// `count-window` in JavaScript: each key's events in groups of `size`.
//
// The twin of the Rust plugins/count-window, with the same config, output and
// state (list state `group`): a key's event values are appended to a list
// until the `size`-th arrives; then the group is emitted as
// `(key, "V1 V2 … Vsize")`, in arrival order, and the list emptied.

import { ListState, Operator, OperatorError, exportOperator } from "weir-sdk";

class CountWindow extends Operator {
  init(config) {
    config.allowOnly(["size"]);
    this.size = config.number("size", 3);
    if (!Number.isSafeInteger(this.size) || this.size < 1) {
      throw OperatorError.invalidConfig("`size` must be a whole number, at least 1: it is how many events of a key make a group");
    }
    this.group = new ListState("group");
  }

  process(ctx, event) {
    this.group.add(ctx, event.valueString());
    if (this.group.length(ctx) === this.size) {
      ctx.emit(event.key, this.group.get(ctx).join(" "));
      this.group.clear(ctx);
    }
  }
}

export const operator = exportOperator(CountWindow);
