// `rules-filter` in JavaScript: passes the events whose key a broadcast rule
// allows — the same operator as the Rust plugins/rules-filter, with the same
// broadcast state, so either can take over the other's savepoint.
//
// Inputs: 0, data (events with keys); 1, rules (a `broadcast` input): key =
// the data key a rule is about, value = `pass` or `block`. Rules are kept in
// broadcast state, so every subtask has all of them. A data event whose key
// has a `pass` rule goes to the main output; any other to the side output
// `blocked`.
//
// Build: scripts/build-js-plugin.sh plugins/js/rules-filter/rules-filter.js rules_filter_js.wasm

import { BroadcastState, Operator, OperatorError, exportOperator } from "weir-sdk";

const DATA = 0;
const RULES = 1;

class RulesFilter extends Operator {
  init(config) {
    config.allowOnly([]); // no configuration
    this.rules = new BroadcastState("rules");
  }

  process(ctx, event) {
    if (event.input === DATA) {
      if (this.rules.get(ctx, event.key) === true) ctx.emit(event.key, event.value);
      else ctx.emitTo("blocked", event.key, event.value);
    } else if (event.input === RULES) {
      const rule = event.valueString();
      if (rule === "pass") this.rules.set(ctx, event.key, true);
      else if (rule === "block") this.rules.remove(ctx, event.key);
      else throw OperatorError.invalidInput(`a rule is \`pass\` or \`block\`, got ${JSON.stringify(rule)}`);
    } else {
      throw OperatorError.other(`rules-filter has two inputs, got an event on input ${event.input}`);
    }
  }
}

export const operator = exportOperator(RulesFilter);
