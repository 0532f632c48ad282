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
const { beginCall, mapKeyedWrites, mapReads, openedExpiring, resetHost, storedMap, storedValue } = await import("./host-stand-in.mjs");
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

/** Sums per key in tumbling windows `t` of 1 s with `lateness` ms, emitting
 *  results (late firings too) as JSON; an event "fail" fails its call. */
function tumblingSums(lateness) {
  class Tumbling extends Operator {
    init() {
      this.windows = Windows.tumbling("t", 1000, SUM, { lateness });
    }
    process(ctx, event) {
      if (event.valueString() === "fail") throw new Error("refused");
      for (const result of this.windows.add(ctx, event, Number(event.valueString()))) ctx.emit(event.key, JSON.stringify(result));
    }
    onTimer(ctx, timer) {
      for (const result of this.windows.onTimer(ctx, timer)) ctx.emit(timer.key, JSON.stringify(result));
    }
  }
  const tumbling = exportOperator(Tumbling);
  tumbling.init([]);
  return tumbling;
}

test("tumbling windows sum within and across calls, held between calls, written back by key when the host flushes; a failed call's sums never reach it", () => {
  resetHost();
  const tumbling = tumblingSums(5000); // no `weir.state`: restored, so each key's windows are read once
  assert.deepEqual(run(tumbling, [["a", "1", 100], ["b", "10", 200], ["a", "2", 900], ["a", "4", 1000]]), []);
  assert.deepEqual(mapReads(), { gets: 0, getManys: 0, listings: 2 }, "a and b listed once each");
  assert.deepEqual(storedMap("t"), { a: {}, b: {} }, "held, not written yet");
  tumbling.flush();
  const written = { a: { 0: "[1000,3,false]", 1000: "[2000,4,false]" }, b: { 0: "[1000,10,false]" } };
  assert.deepEqual(storedMap("t"), written);
  tumbling.flush();
  assert.equal(mapKeyedWrites(), 3, "nothing changed since: nothing written again");
  run(tumbling, [["a", "1", 150]]);
  assert.deepEqual(mapReads().listings, 2, "a is held");
  assert.throws(() => run(tumbling, [["a", "8", 300], ["a", "fail", 300]]), /refused/);
  tumbling.flush();
  assert.deepEqual(storedMap("t"), written, "the failed call forgot what it held, the sum of its earlier call too (the task restarts from its checkpoint)");
  run(tumbling, [["a", "16", 500], ["b", "20", 1500]]);
  assert.deepEqual(mapReads().listings, 4, "a and b read again after the failure");
  tumbling.flush();
  assert.deepEqual(storedMap("t"), { a: { 0: "[1000,19,false]", 1000: "[2000,4,false]" }, b: { 0: "[1000,10,false]", 1000: "[2000,20,false]" } });
  // Past the watermark (1500), within the lateness: the window's result changes now.
  const late = run(tumbling, [["a", "32", 700], ["a", "64", 800]], 1500).map(([, value]) => JSON.parse(value));
  assert.deepEqual(late, [{ start: 0, end: 1000, value: 51 }, { start: 0, end: 1000, value: 115 }]);
  tumbling.flush();
  assert.equal(storedMap("t").a[0], "[1000,115,true]");
});

test("an instance that starts empty reads no window from the host; past its bound it writes back, forgets, and reads keys again", () => {
  resetHost();
  const tumbling = tumblingSums(0);
  tumbling.init([["weir.state", "empty"], ["weir.memory-limit-mb", "1"]]); // holds up to 1 024 keys and windows
  const keys = Array.from({ length: 600 }, (_, i) => `k${i}`);
  run(tumbling, keys.slice(0, 500).map((key) => [key, "1", 100]));
  assert.deepEqual(mapReads(), { gets: 0, getManys: 0, listings: 0 });
  assert.deepEqual(storedMap("t"), {}, "1 000 held: within the bound");
  run(tumbling, keys.map((key) => [key, "2", 200]));
  assert.equal(mapReads().listings, 0, "the 100 new keys are new to the host too");
  assert.equal(Object.keys(storedMap("t")).length, 600, "1 200 held: written back and forgotten");
  assert.equal(storedMap("t").k0[0], "[1000,3,false]");
  run(tumbling, [["k0", "4", 300], ["k599", "8", 300]]);
  assert.equal(mapReads().listings, 2, "forgotten keys are read again");
  tumbling.flush();
  assert.deepEqual([storedMap("t").k0, storedMap("t").k599], [{ 0: "[1000,7,false]" }, { 0: "[1000,10,false]" }]);
});

test("an instance that started empty lets go of a key whose windows fired: a key seen once a window is not held until the bound", () => {
  resetHost();
  const tumbling = tumblingSums(0);
  tumbling.init([["weir.state", "empty"], ["weir.memory-limit-mb", "1"]]); // holds up to 1 024 keys and windows
  const first = Array.from({ length: 400 }, (_, i) => `k${i}`);
  const second = Array.from({ length: 400 }, (_, i) => `m${i}`);
  run(tumbling, first.map((key) => [key, "1", 100]));
  assert.equal(fireAll(tumbling, first.map((key) => [key, 999]), 999).length, 400);
  run(tumbling, second.map((key) => [key, "2", 1100]));
  assert.deepEqual(storedMap("t"), {}, "800 held, not 1 200: nothing written back");
  run(tumbling, [["k0", "4", 1200]]);
  assert.equal(mapReads().listings, 0, "a key let go of is new to the host too");
  tumbling.flush();
  assert.deepEqual([storedMap("t").k0, storedMap("t").m0, storedMap("t").k1], [{ 1000: "[2000,4,false]" }, { 1000: "[2000,2,false]" }, undefined]);
});

test("held windows tell keys apart by all their bytes: short ones that differ in length only, and long ones", () => {
  resetHost();
  const tumbling = tumblingSums(0);
  tumbling.init([["weir.state", "empty"]]);
  const long = "x".repeat(5000);
  const keys = ["a", "\u0000a", "\u0000\u0000a", "abcdef", "abcdefg", "abcdefh", `${long}1`, `${long}2`];
  run(tumbling, keys.map((key, i) => [key, String(2 ** i), 100]));
  run(tumbling, keys.map((key, i) => [key, String(2 ** i), 200]));
  tumbling.flush();
  assert.deepEqual(keys.map((key) => storedMap("t")[key]), keys.map((_, i) => ({ 0: `[1000,${2 * 2 ** i},false]` })));
});

test("integers are emitted as their digits, negative, at the 32-bit bounds and past them too", () => {
  resetHost();
  const numbers = [0, -0, 7, -5, 9, 10, 99, 100, -10, 2147483647, -2147483648, 2147483648, -2147483649, 4294967295, 4294967296,
    1700000000123, -1700000000123, 2 ** 53 - 1, -(2 ** 53 - 1), 2 ** 53, 1e21, 0.5];
  class Numbers extends Operator {
    process(ctx) {
      for (const n of numbers) ctx.emit(n, n);
    }
  }
  const op = exportOperator(Numbers);
  op.init([]);
  const expected = ["0", "-0", "7", "-5", "9", "10", "99", "100", "-10", "2147483647", "-2147483648", "2147483648", "-2147483649", "4294967295", "4294967296", "1700000000123", "-1700000000123", "9007199254740991",
    "-9007199254740991", "9007199254740992", "1000000000000000000000", "0.5"];
  assert.deepEqual(run(op, [["k", "x"]]), expected.map((text) => [text, text]));
});

test("events' timestamps are read exactly from the host's 64-bit times: negative, past 32 bits, and none", () => {
  resetHost();
  class Times extends Operator {
    process(ctx, event) {
      ctx.emit(event.key, String(event.timestamp));
    }
  }
  const op = exportOperator(Times);
  op.init([]);
  const times = [0, -1, 4294967295, 4294967296, -4294967297, 1700000000123, 2 ** 53 - 1, -(2 ** 53 - 1)];
  const events = times.map((t, i) => [`k${i}`, "x", t]);
  events.push(["none", "x", -9223372036854775808n]);
  assert.deepEqual(run(op, events), [...times.map((t, i) => [`k${i}`, String(t)]), ["none", "null"]]);
});

test("Windows.add returns an empty frozen array when no fired window changed, iterable like any other", () => {
  resetHost();
  class Probe extends Operator {
    init() {
      this.windows = Windows.tumbling("p", 1000, SUM);
    }
    process(ctx, event) {
      const updated = this.windows.add(ctx, event, 1);
      let looped = 0;
      for (const _ of updated) looped++;
      ctx.emit(event.key, JSON.stringify([updated.length, Array.isArray(updated), Object.isFrozen(updated), [...updated].length, looped]));
    }
  }
  const op = exportOperator(Probe);
  op.init([]);
  assert.deepEqual(run(op, [["a", "1", 100], ["a", "1", 200]]), [["a", "[0,true,true,0,0]"], ["a", "[0,true,true,0,0]"]]);
});

test("a value state takes finite numbers (the fast path) and refuses others; bytes of any length are emitted as they are", () => {
  resetHost();
  const long = utf8.encode("a key longer than sixteen bytes");
  class Values extends Operator {
    init() {
      this.v = new ValueState("v");
    }
    process(ctx, event) {
      for (const bad of [NaN, Infinity, -Infinity]) assert.throws(() => this.v.set(ctx, bad), /value state `v`: .* cannot be stored as JSON/);
      this.v.set(ctx, (this.v.get(ctx) ?? 0) + 2.5);
      ctx.emit(event.key, this.v.get(ctx));
      ctx.emit(long, event.key);
    }
  }
  const op = exportOperator(Values);
  op.init([]);
  assert.deepEqual(run(op, [["k", "x"], ["k", "y"]]), [["k", "2.5"], [text.decode(long), "k"], ["k", "5"], [text.decode(long), "k"]]);
  assert.equal(text.decode(storedValue("v", "k")), "5", "the last finite value stored");
});

test("timers fire and forget held windows without reading the host; a window opened and fired between flushes never reaches it", () => {
  resetHost();
  const tumbling = tumblingSums(500);
  run(tumbling, [["a", "1", 100], ["b", "2", 200], ["c", "4", 300], ["a", "8", 1100]]);
  const before = mapReads();
  const fired = fireAll(tumbling, [["a", 999], ["b", 999], ["c", 999]], 999);
  assert.deepEqual(fired, [1, 2, 4].map((value) => ({ start: 0, end: 1000, value })));
  assert.deepEqual(mapReads(), before, "held: no read");
  tumbling.flush();
  assert.deepEqual(storedMap("t").a, { 0: "[1000,1,true]", 1000: "[2000,8,false]" }, "fired, kept for the lateness");
  assert.deepEqual(fireAll(tumbling, [["a", 1499], ["b", 1499]], 1499), []);
  tumbling.flush();
  assert.deepEqual(storedMap("t"), { a: { 1000: "[2000,8,false]" }, b: {}, c: { 0: "[1000,4,true]" } }, "forgotten past the lateness");

  resetHost();
  const noLateness = tumblingSums(0);
  run(noLateness, [["a", "1", 100], ["a", "2", 1100]]);
  assert.deepEqual(fireAll(noLateness, [["a", 999]], 999), [{ start: 0, end: 1000, value: 1 }]);
  noLateness.flush();
  assert.deepEqual(storedMap("t"), { a: { 1000: "[2000,2,false]" } });
  assert.equal(mapKeyedWrites(), 1, "only the window still open");
  assert.deepEqual(fireAll(noLateness, [["a", 1999]], 1999), [{ start: 1000, end: 2000, value: 2 }]);
  noLateness.flush();
  assert.deepEqual(storedMap("t"), { a: {} }, "a window the host had is removed from it");
  assert.equal(mapKeyedWrites(), 2);
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

/** Sums per key in sessions of 100 ms, late events to `late`, emitting results as JSON. */
class Sessions extends Operator {
  init() {
    this.windows = Windows.session("s", 100, SUM, { lateOutput: "late" });
  }
  process(ctx, event) {
    for (const result of this.windows.add(ctx, event, Number(event.valueString()))) ctx.emit(event.key, JSON.stringify(result));
  }
  onTimer(ctx, timer) {
    for (const result of this.windows.onTimer(ctx, timer)) ctx.emit(timer.key, JSON.stringify(result));
  }
}

/** Fires the event-time timer of `key` at `timestamp` in `operator`; returns what it emitted. */
function fire(operator, key, timestamp, watermark) {
  return fireAll(operator, [[key, timestamp]], watermark);
}

/** Fires the event-time timers `[key, timestamp]` in `operator` in one call; returns what it emitted. */
function fireAll(operator, fired, watermark) {
  const keys = [...new Set(fired.map(([key]) => key))];
  beginCall(keys);
  const parts = fired.map(([key]) => utf8.encode(key));
  const offsets = new Uint32Array(parts.length + 1);
  parts.forEach((part, i) => (offsets[i + 1] = offsets[i] + part.length));
  const timers = {
    data: Uint8Array.from(parts.flatMap((part) => [...part])),
    offsets,
    timestamps: BigInt64Array.from(fired, ([, timestamp]) => BigInt(timestamp)),
    domains: fired.map(() => "event-time"),
    keySlots: Uint32Array.from(fired, ([key]) => keys.indexOf(key)),
    watermark: BigInt(watermark),
    processingTime: 0n,
  };
  const emitted = [];
  for (const output of operator.onTimer(timers)) {
    const { data, offsets } = output.events;
    for (let i = 0; 2 * i + 1 < offsets.length - 1; i++) emitted.push(JSON.parse(text.decode(data.slice(offsets[2 * i + 1], offsets[2 * i + 2]))));
  }
  return emitted;
}

test("session windows merge as the Rust SDK's, in its state layout, and fire at their end", () => {
  resetHost();
  const sessions = exportOperator(Sessions);
  sessions.init([]);
  run(sessions, [["a", "1", 0], ["a", "1", 50], ["a", "10", 200]], -1000);
  // An out-of-order event at 120 bridges a's two sessions, [0, 150) and [200, 300).
  run(sessions, [["a", "100", 120]], -1000);
  assert.deepEqual(fire(sessions, "a", 149, 149), [], "no session ends at 150 any more");
  assert.deepEqual(fire(sessions, "a", 299, 299), [{ start: 0, end: 300, value: 112 }]);
  // Late for its own session and overlapping none open: to the late output.
  const late = run(sessions, [["b", "5", 200]], 10_000);
  assert.deepEqual(late, [["b", "5"]]);
  assert.throws(() => Windows.session("s", 10, { create: () => 0, add: (a) => a, result: (a) => a }), /needs a `merge`/);
  assert.throws(() => Windows.session("s", 0, SUM), /the gap must be a whole number of ms above 0/);
});

test("a session holds the Rust SDK's layout: [[start, end, acc, fired], …]", () => {
  resetHost();
  const sessions = exportOperator(Sessions);
  sessions.init([]);
  run(sessions, [["a", "1", 0], ["a", "2", 100], ["a", "4", 500]], -1000);
  assert.deepEqual(JSON.parse(text.decode(storedValue("s", "a"))), [[0, 200, 3, false], [500, 600, 4, false]]);
});
