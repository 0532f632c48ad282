// `word-count` in JavaScript: counts events per key.
//
// Keyed by word (a `key_by` edge in the job file), it keeps one value state
// `count` per key — a JSON number, the same state as the Rust
// plugins/word-count, so either can take over the other's savepoint — and
// emits `(key, count so far)` for every event, the count as decimal text,
// so the last output for a key is its total.
//
// Build: scripts/build-js-plugin.sh plugins/js/word-count/word-count.js word_count_js.wasm

import { Operator, ValueState, exportOperator } from "weir-sdk";

class WordCount extends Operator {
  init(config) {
    config.allowOnly([]); // no configuration
    this.count = new ValueState("count", { check: (n) => Number.isSafeInteger(n) && n >= 0 });
  }

  process(ctx, event) {
    const n = (this.count.get(ctx) ?? 0) + 1;
    this.count.set(ctx, n);
    ctx.emit(event.key, n);
  }
}

export const operator = exportOperator(WordCount);
