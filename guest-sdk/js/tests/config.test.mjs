// Unit tests of the JavaScript SDK's config and number reading, under Node:
//
//   node guest-sdk/js/tests/config.test.mjs
//
// Run by scripts/test.sh. State and windows are tested in state.test.mjs,
// and what a plugin does on the host by tests/languages.rs.

import { register } from "node:module";
import test from "node:test";
import assert from "node:assert/strict";

register("./host-hooks.mjs", import.meta.url);
const { BroadcastState, Config, Event, Operator, SUM, Windows, checkState, exportOperator, shortStack } = await import(
  "../weir-sdk.js"
);

const utf8 = new TextEncoder();

/** Whether `read` throws the SDK's `kind` error with a message matching `pattern`. */
function refuses(read, kind, pattern) {
  assert.throws(read, (e) => e.kind === kind && pattern.test(e.message), `expected ${kind} matching ${pattern}`);
}

test("config numbers are read as the Rust SDK reads them", () => {
  const good = { a: "12", b: "+5", c: "-0.5", d: ".5", e: "5.", f: "1e3", g: "2.5E-2" };
  const config = new Config(Object.entries(good));
  assert.deepEqual(
    Object.keys(good).map((key) => config.number(key)),
    [12, 5, -0.5, 0.5, 5, 1000, 0.025],
  );
  assert.equal(config.number("absent", 7), 7);
  // JavaScript's own forms, padding and non-finite values are refused,
  // naming the key.
  const bad = ["0x10", "0b1", "0o7", "1_000", " 12", "12 ", "", "１２", "inf", "Infinity", "NaN", "1e999", "1e", "--1"];
  const refused = new Config(bad.map((text, i) => [`k${i}`, text]));
  bad.forEach((text, i) => {
    refuses(() => refused.number(`k${i}`), "invalid-config", new RegExp(`^\`k${i}\` = .* is not a valid number$`));
  });
});

test("config booleans are exactly true or false", () => {
  const config = new Config([["on", "true"], ["off", "false"], ["yes", "yes"], ["one", "1"], ["caps", "True"]]);
  assert.equal(config.boolean("on"), true);
  assert.equal(config.boolean("off"), false);
  assert.equal(config.boolean("absent", true), true);
  for (const key of ["yes", "one", "caps"]) {
    refuses(() => config.boolean(key), "invalid-config", new RegExp(`^\`${key}\` = .* is not a valid boolean$`));
  }
});

test("the host's keys are the task's, not the operator's", () => {
  const config = new Config([
    ["weir.subtask", "1"],
    ["weir.parallelism", "3"],
    ["weir.attempt", "2"],
    ["weir.state", "empty"],
    ["weir.memory-limit-mb", "512"],
    ["n", "2"],
  ]);
  assert.deepEqual(config.task, { subtask: 1, parallelism: 3, attempt: 2 });
  assert.equal(config.restored, false);
  assert.equal(config.memoryLimitMb, 512);
  assert.deepEqual(config.toObject(), { n: "2" });
  // A host that does not say (an older one): restored, as in Rust.
  const bare = new Config([]);
  assert.deepEqual([bare.restored, bare.memoryLimitMb, bare.task.parallelism], [true, null, 1]);
});

test("keys the operator never read are refused after init", () => {
  const config = new Config([["window_ms", "1000"], ["windw_ms", "10"]]);
  config.number("window_ms");
  refuses(() => config._rejectUnread(), "invalid-config", /^unknown key `windw_ms`; this operator understands: window_ms$/);
  const some = new Config([["a", "1"], ["b", "2"]]);
  refuses(() => some.allowOnly(["a"]), "invalid-config", /^unknown key `b`; this operator understands: a$/);
  const any = new Config([["x", "1"]]);
  any.allowAny();
  any._rejectUnread();
});

test("event numbers are decimal text, as in Rust", () => {
  const texts = ["42", "-1.5", "1e3", "0x10", " 1", "", "Infinity"];
  const data = utf8.encode(texts.join(""));
  const offsets = [0];
  for (const text of texts) offsets.push(offsets.at(-1), offsets.at(-1) + utf8.encode(text).length);
  const event = new Event(data, Uint32Array.from(offsets), 0);
  const read = (i) => {
    event._i = i;
    return event.valueNumber();
  };
  assert.deepEqual([0, 1, 2].map(read), [42, -1.5, 1000]);
  for (const i of [3, 4, 5, 6]) {
    refuses(() => read(i), "invalid-input", /^expected a number as value, got /);
  }
});

test("event numbers read without a string are the numbers their text gives", () => {
  const texts = ["0", "-0", "+7", "007", "5.", ".5", "12.345", "-0.1", "0.3", "999999999999999", "1234567.89012345", "9007199254740993",
    "0.1234567890123456789", "1e-7", "-.5e2"];
  for (let seed = 1; texts.length < 2000; seed = (seed * 48271) % 2147483647) {
    const digits = (String(seed).padStart(10, "0") + String((seed * 16807) % 2147483647).padStart(10, "0")).slice(0, 1 + (seed % 18));
    const at = seed % (digits.length + 1);
    texts.push(`${seed % 3 === 0 ? "-" : ""}${digits.slice(0, at)}.${digits.slice(at)}`.replace(/^(-?)\.$/, "$10"));
  }
  const bad = ["", "-", ".", "+.", "1.2.3", "1-2", "--1", "1 ", "١٢"];
  const all = [...texts, ...bad];
  // Each text as the key and as the value of an event.
  const data = utf8.encode(all.map((text) => text + text).join(""));
  const offsets = [0];
  for (const text of all) {
    const length = utf8.encode(text).length;
    offsets.push(offsets.at(-1) + length, offsets.at(-1) + 2 * length);
  }
  const event = new Event(data, Uint32Array.from(offsets), 0);
  texts.forEach((text, i) => {
    event._i = i;
    assert.ok(Object.is(event.valueNumber(), Number(text)), `${text}: ${event.valueNumber()} is not ${Number(text)}`);
    assert.ok(Object.is(event.keyNumber(), Number(text)), `${text} as a key`);
  });
  bad.forEach((text, j) => {
    event._i = texts.length + j;
    refuses(() => event.valueNumber(), "invalid-input", /^expected a (number|UTF-8) /);
    refuses(() => event.keyNumber(), "invalid-input", /^expected a (number|UTF-8) /);
  });
});

test("an error's stack is shown short: a recursion folded, at most 12 frames", () => {
  const deep = ["boom@/src/op.js:3:5", ...Array(400).fill("recurse@/src/op.js:7:3"), "process@/src/op.js:12:9"];
  assert.equal(shortStack(deep.join("\n")), "boom@/src/op.js:3:5\nrecurse@/src/op.js:7:3 (×400)\nprocess@/src/op.js:12:9");
  const wide = Array.from({ length: 20 }, (_, i) => `f${i}@/src/op.js:${i}:1`);
  const shown = shortStack(wide.join("\n")).split("\n");
  assert.equal(shown.length, 13);
  assert.equal(shown[12], "… 8 more frames");
});

test("an error's stack leaves out the SDK and runtime frames that called the plugin", () => {
  const sdk = "/home/me/weir/guest-sdk/js/weir-sdk.js";
  const stack = [
    "parse@/src/op.js:4:15",
    `get@${sdk}:300:9`,
    "process@/src/op.js:9:32",
    `call@${sdk}:1549:7`,
    `guarded@${sdk}:1578:12`,
    "fn@/tmp/e9b3/sources/initializer.js:5322:35",
  ];
  assert.equal(shortStack(stack.join("\n")), stack.slice(0, 3).join("\n"), "the SDK's frames above the plugin's stay");
  const inTheSdk = [`check@${sdk}:10:1`, `call@${sdk}:1549:7`].join("\n");
  assert.equal(shortStack(inTheSdk), inTheSdk, "an error in the SDK keeps its frames");
});

/** `stored-values` of map entries given as [sub-key, value] texts. */
function stored(entries) {
  const parts = (texts) => {
    const bytes = texts.map((text) => utf8.encode(text));
    const offsets = [0];
    for (const b of bytes) offsets.push(offsets[offsets.length - 1] + b.length);
    const data = new Uint8Array(offsets[offsets.length - 1]);
    bytes.forEach((b, i) => data.set(b, offsets[i]));
    return [data, Uint32Array.from(offsets)];
  };
  const [data, offsets] = parts(entries.map(([, value]) => value));
  const [subKeys, subKeyOffsets] = parts(entries.map(([subKey]) => subKey));
  return { data, offsets, subKeys, subKeyOffsets };
}

test("check-state refuses windows stored under another size or slide", () => {
  Windows.tumbling("sums", 1000, SUM);
  assert.equal(checkState("sums", "map-state", stored([["-2000", "[-1000,1.5,false]"]])), null);
  assert.match(
    checkState("sums", "map-state", stored([["1000", "[2000,1,false]"], ["0", "[2000,1.5,false]"]])),
    /^windows `sums` hold the window \[0, 2000\), which tumbling windows of 1000 ms do not have/,
  );
  assert.match(checkState("sums", "map-state", stored([["x", "[2000,1,false]"]])), /is not a window's start and end/);
  Windows.sliding("hops", 1000, 250, SUM);
  assert.equal(checkState("hops", "map-state", stored([["750", "[1750,1,false]"]])), null);
  assert.match(checkState("hops", "map-state", stored([["100", "[1100,1,false]"]])), /sliding windows of 1000 ms every 250 ms/);
  Windows.tumbling("shifted", 1000, SUM, { offset: -700 });
  assert.equal(checkState("shifted", "map-state", stored([["-1700", "[-700,1,false]"]])), null, "-700 ms is 300 ms past each second");
  assert.match(
    checkState("shifted", "map-state", stored([["1000", "[2000,1,false]"]])),
    /\[1000, 2000\), which tumbling windows of 1000 ms offset by 300 ms do not have: their size, slide or offset changed/,
  );
});

test("an offset shifts the windows' starts, as Flink's", () => {
  const tumbling = Windows.tumbling("t", 1000, SUM, { offset: 300 });
  assert.deepEqual(tumbling.assign(299), [[-700, 300]]);
  assert.deepEqual(tumbling.assign(300), [[300, 1300]]);
  assert.deepEqual(tumbling.assign(-701), [[-1700, -700]]);
  const sliding = Windows.sliding("s", 1000, 500, SUM, { offset: 100 });
  assert.deepEqual(sliding.assign(1200), [[600, 1600], [1100, 2100]]);
  assert.deepEqual(sliding.assign(1099), [[100, 1100], [600, 1600]]);
  const hour = 3_600_000;
  const utc8 = Windows.tumbling("d", 24 * hour, SUM, { offset: -8 * hour });
  assert.deepEqual(utc8.assign(5 * 24 * hour + 12 * hour), [[4 * 24 * hour + 16 * hour, 5 * 24 * hour + 16 * hour]]);
  assert.throws(() => Windows.tumbling("bad", 1000, SUM, { offset: 0.5 }), /the offset must be a whole number of ms, not 0.5/);
});

test("check-state covers broadcast states", () => {
  new BroadcastState("limits", { check: (v) => Number.isSafeInteger(v) });
  assert.equal(checkState("limits", "broadcast-map", stored([["a", "5"]])), null);
  assert.match(checkState("limits", "broadcast-map", stored([["a", "true"]])), /^broadcast state `limits`: stored value #0 \(true\)/);
  assert.match(checkState("thresholds", "broadcast-map", stored([["a", "1"]])), /declares no broadcast state `thresholds`/);
});

test("every emitted event keeps its timestamp, however many a call emits", () => {
  class PassThrough extends Operator {
    process(ctx, event) {
      ctx.emit(event.key, event.value);
    }
  }
  const operator = exportOperator(PassThrough);
  operator.init([]);
  const n = 5000;
  const data = utf8.encode("kv".repeat(n));
  const offsets = Uint32Array.from({ length: 2 * n + 1 }, (_, i) => i);
  const timestamps = BigInt64Array.from({ length: n }, (_, i) => BigInt(10_000 + i));
  const batch = { input: 0, events: { data, offsets, timestamps }, keySlots: new Uint32Array(0), watermark: 0n, processingTime: 0n };
  const [out] = operator.process(batch);
  assert.deepEqual(Array.from(out.events.timestamps), Array.from(timestamps));
  assert.equal(out.events.offsets.length, 2 * n + 1);
});
