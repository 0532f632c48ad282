// Unit tests of the JavaScript SDK's keyed state and windows under Node,
// against the in-memory host of host-stand-in.mjs, and of the example
// plugins that use them:
//
//   node guest-sdk/js/tests/state.test.mjs
//
// Run by scripts/test.sh; the same plugins run on the real host in
// tests/languages.rs.

import { register } from "node:module";
import test from "node:test";
import assert from "node:assert/strict";

register("./host-hooks.mjs", import.meta.url);
const { ListState, Operator, SUM, ValueState, Windows, exportOperator } = await import("../weir-sdk.js");
const { beginCall, openedExpiring, resetHost, storedMap } = await import("./host-stand-in.mjs");
const cart = (await import("../../../plugins/js/shopping-cart/shopping-cart.js")).operator;
const countWindow = (await import("../../../plugins/js/count-window/count-window.js")).operator;
const dedup = (await import("../../../plugins/js/dedup/dedup.js")).operator;

const utf8 = new TextEncoder();
const text = new TextDecoder();

/** Runs one keyed batch of `[key, value, timestamp?]` events through
 *  `operator`; returns what it emitted as `[key, value]` pairs. */
function run(operator, events, watermark = 0) {
  const keys = [...new Set(events.map(([key]) => key))];
  beginCall(keys);
  const parts = events.flatMap(([key, value]) => [utf8.encode(key), utf8.encode(value)]);
  const offsets = new Uint32Array(parts.length + 1);
  parts.forEach((part, i) => (offsets[i + 1] = offsets[i] + part.length));
  const data = new Uint8Array(offsets[parts.length]);
  parts.forEach((part, i) => data.set(part, offsets[i]));
  const timestamps = events.some((e) => e.length > 2) ? BigInt64Array.from(events, (e) => BigInt(e[2] ?? 0)) : new BigInt64Array(0);
  const keySlots = Uint32Array.from(events, ([key]) => keys.indexOf(key));
  const batch = { input: 0, events: { data, offsets, timestamps }, keySlots, watermark: BigInt(watermark), processingTime: 0n };
  const emitted = [];
  for (const output of operator.process(batch)) {
    const { data, offsets } = output.events;
    for (let i = 0; 2 * i + 1 < offsets.length - 1; i++) {
      const slice = (j) => text.decode(data.slice(offsets[j], offsets[j + 1]));
      emitted.push([slice(2 * i), slice(2 * i + 1)]);
    }
  }
  return emitted;
}

test("a cart lists its entries in sub-key order with the call's writes over them, and clears them", () => {
  resetHost();
  cart.init([]);
  run(cart, Array.from({ length: 5000 }, (_, i) => ["ann", `add item${String(i).padStart(5, "0")}`]));
  run(cart, [["bob", "add fig"]]);
  const out = run(cart, [["ann", "remove item00004"], ["ann", "add zz"], ["ann", "add item00003"], ["ann", "checkout"], ["ann", "checkout"]]);
  const listed = out[0][1].split(" ");
  assert.equal(listed.length, 5000, "two pages of stored entries, less one removed, plus one new");
  assert.deepEqual(listed.slice(3, 5), ["item00003×2", "item00005×1"]);
  assert.equal(listed.at(-1), "zz×1");
  assert.deepEqual(out[1], ["ann", "empty"], "cleared, and empty in the same call");
  assert.deepEqual(storedMap("cart").ann, {}, "cleared on the host");
  assert.deepEqual(storedMap("cart").bob, { fig: "1" }, "another key's cart is its own");
});

test("is_empty sees entries the call removed and wrote", () => {
  resetHost();
  cart.init([]);
  run(cart, [["k", "add a"], ["k", "add b"]]);
  const out = run(cart, [["k", "remove a"], ["k", "remove b"], ["k", "checkout"], ["k", "add c"], ["k", "remove c"], ["k", "checkout"]]);
  assert.deepEqual(out, [["k", "empty"], ["k", "empty"]]);
});

test("count-window groups each key's events in order across calls, stored as the Rust SDK stores lists", () => {
  resetHost();
  countWindow.init([["size", "3"]]);
  assert.deepEqual(run(countWindow, [["a", "e0"], ["b", "e1"], ["a", "e2"], ["b", "e3"], ["a", "e4"]]), [["a", "e0 e2 e4"]]);
  assert.deepEqual(run(countWindow, [["b", "e5"], ["a", "e6"]]), [["b", "e1 e3 e5"]]);
  assert.deepEqual(storedMap("group").a, { "00000000000000000000": '"e6"' }, "item 0 under 20 digits");
});

test("a late event re-fires the sliding windows it updates latest start first, as Flink", () => {
  resetHost();
  class Sliding extends Operator {
    init() {
      this.windows = Windows.sliding("w", 1000, 500, SUM, { lateness: 5000 });
    }
    process(ctx, event) {
      for (const result of this.windows.add(ctx, event, Number(event.valueString()))) ctx.emit(event.key, JSON.stringify(result));
    }
  }
  const sliding = exportOperator(Sliding);
  sliding.init([]);
  const out = run(sliding, [["a", "2", 600]], 2000).map(([, value]) => JSON.parse(value));
  assert.deepEqual(out.map(({ start, end }) => [start, end]), [[500, 1500], [0, 1000]]);
});

test("states with a time-to-live open the host's expiring states, with the WIT's record", () => {
  resetHost();
  dedup.init([["ttl_ms", "1500"]]);
  assert.deepEqual(run(dedup, [["a", "x"], ["b", "y"], ["a", "z"]]), [["a", "x"], ["b", "y"]]);
  assert.deepEqual(openedExpiring(), [{ kind: "value", name: "seen", ttl: { millis: 1500n, refreshOnRead: false } }]);

  resetHost();
  dedup.init([["ttl_ms", "0"]]);
  run(dedup, [["a", "x"]]);
  assert.deepEqual(openedExpiring(), [], "0: remembered for ever, no time-to-live");

  class Lists extends Operator {
    init() {
      this.log = new ListState("log", { ttl: { millis: 60000, refreshOnRead: true } });
    }
    process(ctx, event) {
      this.log.add(ctx, event.valueString());
    }
  }
  resetHost();
  const lists = exportOperator(Lists);
  lists.init([]);
  run(lists, [["a", "x"]]);
  const ttl = { millis: 60000n, refreshOnRead: true };
  assert.deepEqual(openedExpiring(), [{ kind: "value", name: "log#next", ttl }, { kind: "map", name: "log", ttl }], "both parts of a list");
  assert.throws(() => new ValueState("bad", { ttl: { millis: 0 } }), /at least 1/);
});
