// `dedup` in JavaScript: passes an event the first time its key is seen and
// drops repeats for a time-to-live.
//
// The twin of the Rust plugins/dedup, with the same config, output and state
// (value state `seen`, `true` per id seen, expiring `ttl_ms` of processing
// time after it was written; `ttl_ms = 0` remembers for ever).

import { Operator, OperatorError, ValueState, exportOperator } from "weir-sdk";

/** One hour. */
const DEFAULT_TTL_MS = 3_600_000;

class Dedup extends Operator {
  init(config) {
    config.allowOnly(["ttl_ms"]);
    const ttlMs = config.number("ttl_ms", DEFAULT_TTL_MS);
    if (!Number.isSafeInteger(ttlMs) || ttlMs < 0) {
      throw OperatorError.invalidConfig("`ttl_ms` must be a whole number of milliseconds (0: remember for ever)");
    }
    this.seen = new ValueState("seen", ttlMs > 0 ? { ttl: { millis: ttlMs } } : {});
  }

  process(ctx, event) {
    if (this.seen.get(ctx) === undefined) {
      this.seen.set(ctx, true);
      ctx.emit(event.key, event.value);
    }
  }
}

export const operator = exportOperator(Dedup);
