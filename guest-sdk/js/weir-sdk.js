// weir-sdk — write Weir stream operators in JavaScript.
//
// A Weir operator is a WebAssembly component implementing the WIT world
// `weir:operator/plugin@0.5.2` (see wit/ and docs/plugin-guide.md). This
// module hides the component plumbing: subclass `Operator`, export
// `exportOperator(YourClass)` as `operator`, and build the file with
// scripts/build-js-plugin.sh, which bundles this module with the plugin and
// runs componentize-js (a SpiderMonkey engine, the plugin compiled ahead of
// time by Weval).
//
//     import { Operator, ValueState, exportOperator } from "weir-sdk";
//
//     class WordCount extends Operator {
//       init(config) { this.count = new ValueState("count"); }
//       process(ctx, event) {
//         const n = (this.count.get(ctx) ?? 0) + 1;
//         this.count.set(ctx, n);
//         ctx.emit(event.key, String(n));
//       }
//     }
//     export const operator = exportOperator(WordCount);
//
// How it maps to the host (the same as the Rust SDK, guest-sdk/src):
// the host calls the plugin once per *batch*; the SDK calls `process` once
// per event of it. Keyed state is fetched for all keys of the batch on its
// first use in the batch (one `get-all` per state), kept in a local cache
// while the batch is processed, and the changed slots are written back with
// one `set-many` per state when the batch is done; timer changes go in one
// `timers.update`. `Windows` hold their windows between calls instead, and
// write them back by key when the host calls `flush` before a snapshot
// (`WindowCache`). Emitted events are collected in flat buffers and returned
// in one piece. If the operator throws, nothing is written back and the
// host fails the call.
//
// State values are JSON (UTF-8 `JSON.stringify` text), as in the Rust SDK,
// so JavaScript and Rust versions of a plugin read each other's state.

import { MapState as HostMapState, ValueState as HostValueState } from "weir:operator/state@0.5.2";
import { BroadcastMap as HostBroadcastMap } from "weir:operator/broadcast-state@0.5.2";
import { update as updateTimers } from "weir:operator/timers@0.5.2";

/** Timestamp sentinel of the WIT contract: "no timestamp" / "no watermark". */
const NO_TIME = -9223372036854775808n;

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });

// ---------------------------------------------------------------------------
// Errors

/**
 * An error with a kind the host understands. Throw one from `init`,
 * `process` or `onTimer` to fail the call with that kind; any other thrown
 * value fails it as `other` with its message.
 *
 * kind: "invalid-config" | "invalid-input" | "state" | "other".
 */
export class OperatorError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = "OperatorError";
    this.kind = kind;
  }
  /** The configuration is wrong: say which key and why. */
  static invalidConfig(message) { return new OperatorError("invalid-config", message); }
  /** An input event cannot be decoded: say what was expected. */
  static invalidInput(message) { return new OperatorError("invalid-input", message); }
  /** A state access failed. */
  static state(message) { return new OperatorError("state", message); }
  /** Anything else. */
  static other(message) { return new OperatorError("other", message); }
}

const KINDS = new Set(["invalid-config", "invalid-input", "state", "other"]);

/** The WIT `operator-error` for anything thrown by operator code. */
function toWitError(error) {
  if (error instanceof OperatorError && KINDS.has(error.kind)) {
    return { tag: error.kind, val: error.message };
  }
  let message;
  if (error instanceof Error) {
    message = `${error.name}: ${error.message}`;
    if (error.stack) message += `\n${shortStack(sourceStack(error.stack))}`;
  } else {
    message = String(error);
  }
  return { tag: "other", val: message };
}

// ---------------------------------------------------------------------------
// Stacks

/**
 * `stack` with the bundle's positions (`plugin.js:LINE:COLUMN`: the plugin
 * and this SDK bundled into one file, which the build deletes) as the
 * files and lines they came from, by the source map that
 * scripts/build-js-plugin.sh appends to the bundle as
 * `globalThis.__weirSourceMap` ({ sources: absolute paths, mappings }).
 * Without one (a bundle built otherwise), `stack` as it is.
 */
function sourceStack(stack) {
  const map = globalThis.__weirSourceMap;
  if (!map || typeof stack !== "string") return stack;
  return stack.replace(/\bplugin\.js:(\d+):(\d+)/g, (whole, line, column) => {
    const found = originalPosition(map, Number(line) - 1, Number(column) - 1);
    return found ? `${found.source}:${found.line + 1}:${found.column + 1}` : whole;
  });
}

/** Frames of a stack shown at most: a stack overflow's would be hundreds. */
const MAX_FRAMES = 12;

/**
 * Whether a frame is in the machinery that calls the plugin: this SDK, or
 * the runtime jco generated (`sources/initializer.js`).
 */
function callsThePlugin(frame) {
  return /\/weir-sdk\.js:\d+:\d+$/.test(frame) || /\/sources\/initializer\.js:\d+:\d+$/.test(frame);
}

/**
 * `stack` with runs of one repeated frame (a recursion) folded into one
 * line saying how many, and at most `MAX_FRAMES` frames. The frames below
 * the plugin's own, through which the SDK and the runtime called it, are
 * left out: the plugin's author looks for their own lines (an error
 * raised in the SDK itself keeps them all). (Exported for the SDK's tests.)
 */
export function shortStack(stack) {
  if (typeof stack !== "string") return stack;
  let lines = stack.split("\n").filter((line) => line.trim() !== "");
  const lastOwn = lines.findLastIndex((frame) => !callsThePlugin(frame));
  if (lastOwn >= 0) lines = lines.slice(0, lastOwn + 1);
  const frames = [];
  for (const frame of lines) {
    const last = frames[frames.length - 1];
    if (last && last.frame === frame) last.times += 1;
    else frames.push({ frame, times: 1 });
  }
  const shown = frames.slice(0, MAX_FRAMES).map(({ frame, times }) => (times > 1 ? `${frame} (×${times})` : frame));
  const left = frames.slice(MAX_FRAMES).reduce((sum, { times }) => sum + times, 0);
  if (left > 0) shown.push(`… ${left} more frames`);
  return shown.join("\n");
}

/** The source position of a 0-based bundle position, or null. */
function originalPosition(map, line, column) {
  map.decoded ??= decodeMappings(map.mappings);
  const segments = map.decoded[line];
  if (!segments || segments.length === 0) return null;
  let best = segments[0];
  for (const segment of segments) {
    if (segment[0] > column) break;
    best = segment;
  }
  return { source: map.sources[best[1]] ?? "?", line: best[2], column: best[3] };
}

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/**
 * A source map's `mappings` (base64 VLQ, source map v3) as, for each
 * generated line, its segments [column, source, line, column] in order;
 * segments without a source are left out.
 */
function decodeMappings(mappings) {
  const lines = [];
  let source = 0, sourceLine = 0, sourceColumn = 0;
  for (const text of mappings.split(";")) {
    const segments = [];
    let column = 0;
    for (const segment of text.split(",")) {
      if (segment === "") continue;
      const fields = [];
      let value = 0, shift = 0;
      for (const ch of segment) {
        const digit = BASE64.indexOf(ch);
        value += (digit & 31) * 2 ** shift;
        if (digit & 32) {
          shift += 5;
        } else {
          fields.push(value % 2 ? -Math.floor(value / 2) : value / 2);
          value = 0;
          shift = 0;
        }
      }
      column += fields[0];
      if (fields.length >= 4) {
        source += fields[1];
        sourceLine += fields[2];
        sourceColumn += fields[3];
        segments.push([column, source, sourceLine, sourceColumn]);
      }
    }
    lines.push(segments);
  }
  return lines;
}

/**
 * Throws `witError` (an `operator-error` variant) the way componentize-js
 * turns an exception into the `err` case of an exported `result`: the
 * thrown value's `payload` if it has one (as jco's ComponentError), else the
 * thrown value itself — so the object carries both forms.
 */
function failWith(witError) {
  const e = new Error(witError.val);
  e.payload = witError;
  e.tag = witError.tag;
  e.val = witError.val;
  throw e;
}

/** A readable message for a WIT `state-error` thrown by a host call. */
function stateErrorMessage(thrown) {
  const e = thrown && typeof thrown === "object" && "payload" in thrown ? thrown.payload : thrown;
  const tag = e && typeof e === "object" ? e.tag : undefined;
  switch (tag) {
    case "no-current-keys":
      return "state used outside of process";
    case "slot-out-of-range":
      return `slot ${e.val} is outside the current batch`;
    case "not-keyed":
      return "keyed state used on an event without a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state";
    case "malformed-write":
      return `malformed state write: ${e.val}`;
    case "timer-not-keyed":
      return "timers need an event with a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state";
    case "not-broadcast-input":
      return "broadcast state can only be changed while processing an event from a broadcast input (listed under `broadcast` in the job file)";
    default:
      return `state access failed: ${thrown instanceof Error ? thrown.message : String(thrown)}`;
  }
}

// ---------------------------------------------------------------------------
// Configuration

const HOST_PREFIX = "weir.";

/**
 * The operator's `config` table from the job file: a Map of strings (every
 * TOML value arrives as its text). Keys starting with `weir.` are the
 * host's and are in `config.task` instead.
 *
 * Unknown keys are rejected: after `init` returns, any key that the
 * operator never read (with `get`, `has`, `string`, `number`, `boolean`)
 * fails the instance with `invalid-config`, so a typo never silently falls
 * back to a default. Call `allowOnly([...])` to say it explicitly, or
 * `allowAny()` to accept every key.
 */
export class Config extends Map {
  #read = new Set();
  #allowAny = false;

  constructor(pairs = []) {
    super();
    /** { subtask, parallelism, attempt } from the host's `weir.*` keys. */
    this.task = { subtask: 0, parallelism: 1, attempt: 0 };
    const host = {};
    for (const [key, value] of pairs) {
      if (key.startsWith(HOST_PREFIX)) host[key.slice(HOST_PREFIX.length)] = value;
      else super.set(key, String(value));
    }
    for (const name of ["subtask", "parallelism", "attempt"]) {
      const n = Number.parseInt(host[name] ?? "", 10);
      if (Number.isFinite(n)) this.task[name] = n;
    }
    /** Whether the instance starts from restored state (a checkpoint or a
     *  savepoint), from the host's `weir.state`; an older host that does
     *  not say counts as restored, as in the Rust SDK's `is_restored`. */
    this.restored = (host.state ?? "restored") === "restored";
    /** The instance's memory limit in MiB (`weir.memory-limit-mb`), or null. */
    const limit = Number.parseInt(host["memory-limit-mb"] ?? "", 10);
    this.memoryLimitMb = Number.isFinite(limit) ? limit : null;
  }

  /** The value of `key` as text, or undefined when it is not set. */
  get(key) {
    this.#read.add(key);
    return super.get(key);
  }

  has(key) {
    this.#read.add(key);
    return super.has(key);
  }

  /** The value of `key`, or `fallback` when it is not set. */
  string(key, fallback) {
    const text = this.get(key);
    return text === undefined ? fallback : text;
  }

  /** The value of `key` as a finite number, or `fallback` when it is not set. */
  number(key, fallback) {
    const text = this.get(key);
    if (text === undefined) return fallback;
    const n = Number(text);
    if (!DECIMAL.test(text) || !Number.isFinite(n)) {
      throw OperatorError.invalidConfig(`\`${key}\` = ${JSON.stringify(text)} is not a valid number`);
    }
    return n;
  }

  /** The value of `key` as `true`/`false`, or `fallback` when it is not set. */
  boolean(key, fallback) {
    const text = this.get(key);
    if (text === undefined) return fallback;
    if (text === "true") return true;
    if (text === "false") return false;
    throw OperatorError.invalidConfig(`\`${key}\` = ${JSON.stringify(text)} is not a valid boolean`);
  }

  /** The entries as a plain object (does not count as reading them). */
  toObject() {
    return Object.fromEntries(super.entries());
  }

  /** Fails with `invalid-config` if the table has a key not in `known`. */
  allowOnly(known) {
    for (const key of super.keys()) {
      if (!known.includes(key)) {
        throw OperatorError.invalidConfig(
          `unknown key \`${key}\`; this operator understands: ${known.length ? known.join(", ") : "no keys"}`,
        );
      }
    }
    for (const key of known) this.#read.add(key);
  }

  /** Accepts every key (for operators that pass configuration on). */
  allowAny() {
    this.#allowAny = true;
  }

  /** Called by the SDK after `init`: rejects keys the operator never read. */
  _rejectUnread() {
    if (this.#allowAny) return;
    const unknown = [...super.keys()].filter((key) => !this.#read.has(key));
    if (unknown.length) {
      const known = [...this.#read].filter((key) => !key.startsWith(HOST_PREFIX));
      throw OperatorError.invalidConfig(
        `unknown key${unknown.length > 1 ? "s" : ""} ${unknown.map((k) => `\`${k}\``).join(", ")}; ` +
          `this operator understands: ${known.length ? known.join(", ") : "no keys"}`,
      );
    }
  }
}

// ---------------------------------------------------------------------------
// Events and timers

/** Decodes UTF-8 bytes, failing with `invalid-input` if they are not. */
function decodeUtf8(bytes, what) {
  try {
    return utf8Decoder.decode(bytes);
  } catch {
    throw OperatorError.invalidInput(`expected a UTF-8 ${what}`);
  }
}

/** Decimal text as a number, failing with `invalid-input` otherwise. */
/** Decimal text as Rust's `f64` parser reads it (`12`, `-0.5`, `.5`,
 *  `1e3`): not JavaScript's hex, octal, binary or padding with spaces. */
const DECIMAL = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/** Exact powers of ten, for `readDecimal`. */
const POWERS_OF_TEN = Array.from({ length: 16 }, (_, k) => 10 ** k);

/**
 * `data[start, end)` as `decodeNumber` reads it, without making a string for
 * the common case — an optional sign, digits, an optional point and digits,
 * 15 digits at most — which is read as an integer divided by a power of
 * ten: both exact in a double, so the quotient is rounded once, exactly as
 * `Number` rounds the text. Anything else goes through `decodeNumber`.
 */
function readDecimal(data, start, end, what) {
  let i = start;
  let negative = false;
  if (i < end && (data[i] === 45 || data[i] === 43)) negative = data[i++] === 45; // '-' or '+'
  let mantissa = 0;
  let digits = 0;
  let point = -1; // digits seen when the point came
  for (; i < end; i++) {
    const d = data[i] - 48;
    if (d >= 0 && d <= 9) {
      mantissa = mantissa * 10 + d;
      digits++;
    } else if (d === -2 && point < 0) {
      point = digits; // '.'
    } else {
      break;
    }
  }
  if (i !== end || digits === 0 || digits > 15) return decodeNumber(data.subarray(start, end), what);
  const value = point < 0 ? mantissa : mantissa / POWERS_OF_TEN[digits - point];
  return negative ? -value : value;
}

function decodeNumber(bytes, what) {
  const text = decodeUtf8(bytes, what);
  const n = Number(text);
  if (!DECIMAL.test(text) || !Number.isFinite(n)) {
    throw OperatorError.invalidInput(`expected a number as ${what}, got ${JSON.stringify(text.slice(0, 60))}`);
  }
  return n;
}

/** JSON text as a value, failing with `invalid-input` otherwise. */
function decodeJson(bytes, what) {
  const text = decodeUtf8(bytes, what);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw OperatorError.invalidInput(`expected JSON as ${what}: ${e.message}`);
  }
}

/**
 * One input event. `key` and `value` are Uint8Array views into the batch.
 *
 * The SDK reuses one Event object for all events of a call, and the views
 * point into the host's buffer: both are valid only until `process`
 * returns. Copy what you keep (`event.key.slice()`, or better: keep it in
 * state). An event without a key (a line of a text file) has the empty
 * key, which behind a `key_by` edge is a key like any other.
 */
export class Event {
  constructor(data, offsets, input) {
    this._data = data;
    this._offsets = offsets;
    this._i = 0;
    /** Its timestamp (ms since the epoch, a number), or null. */
    this.timestamp = null;
    /** Which input it arrived on (its index in the job file's `inputs`, then `broadcast`). */
    this.input = input;
  }
  /** The key's bytes. */
  get key() {
    const o = this._offsets, i = 2 * this._i;
    return this._data.subarray(o[i], o[i + 1]);
  }
  /** The value's bytes. */
  get value() {
    const o = this._offsets, i = 2 * this._i;
    return this._data.subarray(o[i + 1], o[i + 2]);
  }
  /** The key as UTF-8 text (`invalid-input` if it is not). */
  keyString() { return decodeUtf8(this.key, "key"); }
  /** The value as UTF-8 text (`invalid-input` if it is not). */
  valueString() { return decodeUtf8(this.value, "value"); }
  /** The value as a number written in decimal text. */
  valueNumber() {
    const o = this._offsets, i = 2 * this._i;
    return readDecimal(this._data, o[i + 1], o[i + 2], "value");
  }
  /** The key as a number written in decimal text. */
  keyNumber() {
    const o = this._offsets, i = 2 * this._i;
    return readDecimal(this._data, o[i], o[i + 1], "key");
  }
  /** The value parsed as JSON. */
  valueJson() { return decodeJson(this.value, "value"); }
}

/** A timer that fired: its key (bytes), timestamp (ms, a number) and domain. */
export class Timer {
  constructor(key, timestamp, domain) {
    this.key = key;
    this.timestamp = timestamp;
    /** "event-time" or "processing-time". */
    this.domain = domain;
  }
  keyString() { return decodeUtf8(this.key, "key"); }
}

/** The time domains of timers. */
export const TimeDomain = Object.freeze({ EVENT_TIME: "event-time", PROCESSING_TIME: "processing-time" });

/** ms as a WIT s64, from a number or a bigint. */
function toS64(ms, what) {
  if (typeof ms === "bigint") return ms;
  if (typeof ms !== "number" || !Number.isSafeInteger(ms)) {
    throw new TypeError(`${what} must be an integer number of ms (or a bigint), got ${String(ms)}`);
  }
  return BigInt(ms);
}

/** A number as decimal text, as Rust's `Display` writes an f64 (and the
 *  Python SDK): `20`, `0.25`, `0.0000001`, `1000000000000000000000`, `-0` —
 *  never an exponent, so that plugins in different languages agree.
 *  (`toExponential()` gives the shortest digits that read back the same.) */
function formatNumber(x) {
  if (Number.isNaN(x)) return "NaN";
  if (x === Infinity) return "inf";
  if (x === -Infinity) return "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exponent] = Math.abs(x).toExponential().split("e");
  const digits = mantissa.replace(".", "");
  const zeros = Number(exponent) - (digits.length - 1);
  if (zeros >= 0) return sign + digits + "0".repeat(zeros);
  const whole = digits.length + zeros;
  if (whole > 0) return `${sign}${digits.slice(0, whole)}.${digits.slice(whole)}`;
  return `${sign}0.${"0".repeat(-whole)}${digits}`;
}

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Writes the 32-bit integer `v` as decimal digits into `data` at `at`
 *  (room for 11 bytes), returning where they end. */
function writeInt32(data, at, v) {
  if (v < 0) {
    data[at++] = 45; // '-'
    v = -v; // -2^31 becomes 2^31: still exact, and `/ 10 | 0` still right
  }
  if (v < 10) {
    data[at] = 48 + v;
    return at + 1;
  }
  let end = at + 1;
  for (let rest = v; rest >= 10; rest = (rest / 10) | 0) end++;
  let i = end;
  do {
    const q = (v / 10) | 0;
    data[--i] = 48 + v - 10 * q;
    v = q;
  } while (v > 0);
  return end;
}

/** Writes the safe integer `v` (not -0) as decimal digits into `data` at
 *  `at` (room for 17 bytes), returning where they end. */
function writeSafeInteger(data, at, v) {
  if (v < 0) {
    data[at++] = 45; // '-'
    v = -v;
  }
  let end = at + 1;
  for (let rest = v; rest >= 10; rest = (rest - (rest % 10)) / 10) end++;
  let i = end;
  do {
    const digit = v % 10;
    data[--i] = 48 + digit;
    v = (v - digit) / 10;
  } while (v > 0);
  return end;
}

/** A `BigInt64Array` of times as 32-bit halves (low, high: Wasm is
 *  little-endian): an element of the `BigInt64Array` is made a bigint when
 *  read, an allocation per event; its halves are plain numbers. */
function int64Halves(times) {
  return new Int32Array(times.buffer, times.byteOffset, 2 * times.length);
}

/** Time `i` of `int64Halves(times)` as a number (rounded past 2^53, as
 *  `Number` rounds a bigint), or null for the WIT's "no time" (i64::MIN). */
function timeAt(halves, i) {
  const low = halves[2 * i], high = halves[2 * i + 1];
  return high === -2147483648 && low === 0 ? null : high * 4294967296 + (low >>> 0);
}

/** A WIT s64 time as a number, or null for the sentinel. (jco hands a
 *  scalar s64 over as its 64 bits read unsigned — i64::MIN, the host's "no
 *  watermark", as 2^63 — so it is read back as signed first.) */
function fromS64(t) {
  const signed = BigInt.asIntN(64, BigInt(t));
  return signed === NO_TIME ? null : Number(signed);
}

// ---------------------------------------------------------------------------
// Output buffers: one flat buffer per output, as the host wants them.

class OutputBuffer {
  constructor(name) {
    this.name = name;
    this.reset();
  }
  reset() {
    this.data = new Uint8Array(4096);
    this.len = 0;
    this.offsets = new Uint32Array(257);
    this.count = 0; // events
    this.times = new Float64Array(128); // NaN: no timestamp
    this.anyTime = false;
  }
  _reserve(extra) {
    if (this.len + extra > this.data.length) {
      let size = this.data.length * 2;
      while (size < this.len + extra) size *= 2;
      const grown = new Uint8Array(size);
      grown.set(this.data.subarray(0, this.len));
      this.data = grown;
    }
  }
  // The hot path of every emit. The JS engine runs as an interpreter inside
  // Wasm (compiled ahead of time, but still paying for every operation and
  // every call): the common cases — small integers, short byte keys, short
  // ASCII strings — are tested first and written without allocations or
  // calls; integers a double holds exactly (timestamps, window starts) are
  // written as digits too.
  _write(x) {
    if (typeof x === "number") {
      // Integers of 32 bits (-0 is not one: it is written "-0").
      if ((x | 0) === x && (x !== 0 || 1 / x > 0)) {
        if (this.len + 11 > this.data.length) this._reserve(11);
        this.len = writeInt32(this.data, this.len, x);
        return;
      }
      if (x % 1 === 0 && x <= MAX_SAFE && x >= -MAX_SAFE && x !== 0) {
        this._reserve(17);
        this.len = writeSafeInteger(this.data, this.len, x);
        return;
      }
      return this._writeText(formatNumber(x));
    }
    if (x instanceof Uint8Array) {
      const n = x.length;
      if (this.len + n > this.data.length) this._reserve(n);
      const data = this.data;
      let len = this.len;
      if (n <= 16) {
        // A loop beats `set`, a call into the engine, for a short key.
        for (let i = 0; i < n; i++) data[len++] = x[i];
        this.len = len;
      } else {
        data.set(x, len);
        this.len = len + n;
      }
      return;
    }
    if (typeof x === "string") return this._writeText(x);
    if (typeof x === "bigint" || typeof x === "boolean") return this._writeText(String(x));
    if (x === undefined || x === null) return; // empty bytes
    if (ArrayBuffer.isView(x)) return this._write(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
    if (x instanceof ArrayBuffer) return this._write(new Uint8Array(x));
    return this._writeText(JSON.stringify(x));
  }
  _writeText(text) {
    const n = text.length;
    // UTF-8 takes at most 3 bytes per UTF-16 unit.
    if (this.len + 3 * n > this.data.length) this._reserve(3 * n);
    if (n <= 16) {
      const data = this.data;
      let len = this.len;
      let i = 0;
      for (; i < n; i++) {
        const c = text.charCodeAt(i);
        if (c >= 0x80) break;
        data[len++] = c;
      }
      if (i === n) {
        this.len = len;
        return;
      }
    }
    this.len += utf8Encoder.encodeInto(text, this.data.subarray(this.len)).written;
  }
  push(key, value, timestamp) {
    // Checked first, where the plugin gave it ("abc" went out as no
    // timestamp), and before anything is written.
    let time = NaN;
    if (typeof timestamp === "number" && timestamp % 1 === 0 && timestamp <= MAX_SAFE && timestamp >= -MAX_SAFE) {
      time = timestamp;
    } else if (timestamp !== null && timestamp !== undefined) {
      time = Number(toS64(timestamp, "an event's timestamp"));
    }
    const n = this.count;
    if (n === this.times.length) this._grow();
    this._write(key);
    const offsets = this.offsets;
    offsets[2 * n + 1] = this.len;
    this._write(value);
    offsets[2 * n + 2] = this.len;
    this.times[n] = time;
    if (time === time) this.anyTime = true; // not NaN
    this.count = n + 1;
  }
  /** Room for twice as many events: their times and their 2n + 1 offsets
   *  together (sized apart, the times ran out first, at the 513th event,
   *  whose time was lost). */
  _grow() {
    const n = this.count;
    const times = new Float64Array(2 * n);
    times.set(this.times);
    this.times = times;
    const grown = new Uint32Array(2 * times.length + 1);
    grown.set(this.offsets);
    this.offsets = grown;
  }
  /** The WIT `output-batch`, or null when nothing was emitted; resets. */
  take() {
    if (this.count === 0) return null;
    const n = this.count;
    let timestamps;
    if (this.anyTime) {
      timestamps = new BigInt64Array(n);
      for (let i = 0; i < n; i++) {
        const t = this.times[i];
        timestamps[i] = Number.isNaN(t) ? NO_TIME : BigInt(t);
      }
    } else {
      timestamps = new BigInt64Array(0);
    }
    const batch = {
      output: this.name,
      events: {
        data: this.data.slice(0, this.len),
        offsets: this.offsets.slice(0, 2 * n + 1),
        timestamps,
      },
    };
    // Keep the (grown) buffers for the next call.
    this.len = 0;
    this.count = 0;
    this.anyTime = false;
    return batch;
  }
}

class Outputs {
  constructor() {
    this.main = new OutputBuffer("");
    this.named = new Map();
  }
  side(name) {
    if (name === "") return this.main;
    let buffer = this.named.get(name);
    if (!buffer) {
      buffer = new OutputBuffer(name);
      this.named.set(name, buffer);
    }
    return buffer;
  }
  drain() {
    const batches = [];
    const main = this.main.take();
    if (main) batches.push(main);
    for (const buffer of this.named.values()) {
      const batch = buffer.take();
      if (batch) batches.push(batch);
    }
    return batches;
  }
  discard() {
    this.main.take();
    for (const buffer of this.named.values()) buffer.take();
  }
}

// ---------------------------------------------------------------------------
// Keyed value state

/** Declared states (name -> ValueState, MapState or BroadcastState), for `check-state`. */
const declared = new Map();
const declaredMaps = new Map();
const declaredBroadcasts = new Map();

/** The runtime of the instance (set by `exportOperator`'s init). */
let runtime = null;

const ABSENT = 0; // slot has no value
const RAW = 1; // slot has the host's bytes, not parsed yet
const TEXT = 2; // slot has JSON text, `texts[slot]` (objects: parsed on every get)
const PRIM = 3; // slot has a primitive value, `prims[slot]` (encoded at flush)

/**
 * One value state's cache for the slots of the current batch.
 *
 * Like the Rust SDK's: loaded with one `get-all` on first use in a batch,
 * written back with one `set-many` of the changed slots at its end. Values
 * keep the host's bytes until read; primitives (numbers, strings, booleans,
 * null) are kept parsed, objects as JSON text, parsed on every `get`, so
 * that a `get` returns a copy (changing it without `set` changes nothing).
 */
class SlotCache {
  constructor(name, store, ttl) {
    this.name = name;
    this.what = `value state \`${name}\``;
    this.store = store;
    this.ttl = ttl;
    this.host = null; // the host's value-state resource, opened on first use
    this.batch = -1; // the batch the cache was loaded for
    this.slots = 0;
    this.kind = new Uint8Array(0);
    this.texts = [];
    this.prims = [];
    this.raw = null;
    this.rawOffsets = null;
    this.dirty = new Uint8Array(0);
    this.dirtySlots = [];
    this.out = new OutputBuffer("");
  }

  load(batch) {
    if (this.host === null) this.host = openHost(HostValueState, this.name, this.ttl);
    let fetched;
    try {
      fetched = this.host.getAll();
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
    const { present, data, offsets } = fetched;
    const n = present.length;
    if (offsets.length !== n + 1) {
      throw OperatorError.state(`host sent malformed values for state \`${this.name}\``);
    }
    if (this.kind.length < n) {
      this.kind = new Uint8Array(Math.max(n, 2 * this.kind.length));
      this.dirty = new Uint8Array(this.kind.length);
    }
    const kind = this.kind;
    for (let i = 0; i < n; i++) kind[i] = present[i] ? RAW : ABSENT;
    this.raw = data;
    this.rawOffsets = offsets;
    this.slots = n;
    this.batch = batch;
  }

  get(slot) {
    if (slot >= this.slots) throw OperatorError.state(`slot ${slot} is outside the current batch`);
    switch (this.kind[slot]) {
      case PRIM:
        return this.prims[slot];
      case ABSENT:
        return undefined;
      case RAW:
        return this.parseRaw(slot);
      default:
        return this.parseText(slot, this.texts[slot]);
    }
  }

  /** Parses the host's bytes for `slot`: small integers directly, the rest as JSON. */
  parseRaw(slot) {
    const raw = this.raw;
    const start = this.rawOffsets[slot], end = this.rawOffsets[slot + 1];
    if (end > start && end - start <= 15) {
      let v = 0;
      let i = start;
      for (; i < end; i++) {
        const d = raw[i] - 48;
        if (d < 0 || d > 9) break;
        v = v * 10 + d;
      }
      // Plain digits, and no leading zero unless "0" (JSON's rule).
      if (i === end && (raw[start] !== 48 || end - start === 1)) {
        this.kind[slot] = PRIM;
        this.prims[slot] = v;
        return v;
      }
    }
    const text = decodeState(raw.subarray(start, end), this.what);
    this.kind[slot] = TEXT;
    this.texts[slot] = text;
    return this.parseText(slot, text);
  }

  parseText(slot, text) {
    const value = parseState(text, this.what);
    if (value === null || typeof value !== "object") {
      this.kind[slot] = PRIM;
      this.prims[slot] = value;
    }
    return value;
  }

  set(slot, value) {
    if (slot >= this.slots) throw OperatorError.state(`slot ${slot} is outside the current batch`);
    const type = typeof value;
    if (type === "number") {
      if (!Number.isFinite(value)) {
        throw new TypeError(`${this.what}: ${value} cannot be stored as JSON`);
      }
      this.kind[slot] = PRIM;
      this.prims[slot] = value;
    } else if (type === "string" || type === "boolean" || value === null) {
      this.kind[slot] = PRIM;
      this.prims[slot] = value;
    } else {
      // Objects are encoded now: later changes to them must not leak in.
      const text = type === "object" ? JSON.stringify(value) : undefined;
      if (text === undefined) {
        throw new TypeError(`${this.what}: a ${type} cannot be stored as JSON; use clear() to remove a value`);
      }
      this.kind[slot] = TEXT;
      this.texts[slot] = text;
    }
    if (this.dirty[slot] === 0) {
      this.dirty[slot] = 1;
      this.dirtySlots.push(slot);
    }
  }

  clear(slot) {
    if (slot >= this.slots) throw OperatorError.state(`slot ${slot} is outside the current batch`);
    this.kind[slot] = ABSENT;
    if (this.dirty[slot] === 0) {
      this.dirty[slot] = 1;
      this.dirtySlots.push(slot);
    }
  }

  /** Writes the changed slots back with one `set-many`. */
  flush() {
    const count = this.dirtySlots.length;
    if (count === 0) return;
    const out = this.out; // its JSON/number writer, and its room, reused
    out.len = 0;
    const slots = new Uint32Array(count);
    const present = new Array(count);
    const offsets = new Uint32Array(count + 1);
    for (let i = 0; i < count; i++) {
      const slot = this.dirtySlots[i];
      slots[i] = slot;
      this.dirty[slot] = 0;
      const kind = this.kind[slot];
      present[i] = kind !== ABSENT;
      if (kind === PRIM) {
        const v = this.prims[slot];
        if (typeof v === "number") out._write(v); // integers as digits, others via String()
        else out._write(JSON.stringify(v));
      } else if (kind === TEXT) {
        out._write(this.texts[slot]);
      }
      offsets[i + 1] = out.len;
    }
    this.dirtySlots.length = 0;
    try {
      this.host.setMany(slots, { present, data: out.data.subarray(0, out.len), offsets });
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
  }

  /** Forgets the batch's unwritten changes (the call failed). */
  abort() {
    for (const slot of this.dirtySlots) this.dirty[slot] = 0;
    this.dirtySlots.length = 0;
    this.batch = -1;
  }
}

/** Stored bytes as text; `what` names the state in errors. */
function decodeState(bytes, what) {
  try {
    return utf8Decoder.decode(bytes);
  } catch {
    throw OperatorError.state(`${what} holds a value that is not UTF-8 JSON`);
  }
}

/** Stored JSON text as a value; `what` names the state in errors. */
function parseState(text, what) {
  try {
    return JSON.parse(text);
  } catch (e) {
    throw OperatorError.state(`${what} holds a value this plugin cannot read (${e.message}): ${preview(text)}`);
  }
}

function preview(text) {
  return text.length > 60 ? `${text.slice(0, 60)}…` : text;
}

/**
 * A keyed value state: at most one JSON value per key, read and written for
 * the key of the event (or timer) being processed.
 *
 * Create it in `init` with a name that stays the same across versions of
 * the plugin: snapshots store state by that name. Values are stored as JSON
 * text, so numbers, strings, booleans, null, arrays and plain objects
 * round-trip (bigints, Maps, Dates and class instances do not; numbers
 * beyond 2^53 lose precision).
 *
 * `options.check(value)`, if given, is called by `check-state` (before an
 * upgrade) on every stored value after it parses: return false or throw to
 * refuse the upgrade. `options.ttl`, if given, makes values expire (see
 * `checkedTtl`).
 */
export class ValueState {
  constructor(name, options = {}) {
    if (typeof name !== "string" || name === "") throw new TypeError("a ValueState needs a non-empty name");
    this.name = name;
    this.ttl = checkedTtl(options.ttl, `value state \`${name}\``);
    this.checkValue = options.check ?? null;
    this.cache = null;
    declared.set(name, this);
  }

  _loaded(ctx) {
    const store = ctx._states;
    let cache = this.cache;
    if (cache === null || cache.store !== store) {
      cache = store.cache(this.name, this.ttl);
      this.cache = cache;
    }
    if (cache.batch !== store.batch) cache.load(store.batch);
    return cache;
  }

  // `get` and `set` first test inline whether the cache is loaded for this
  // call and holds the current key's slot, and serve the common cases
  // there: in the interpreter each call costs about as much as the work.

  /** The current key's value, or undefined when it has none. */
  get(ctx) {
    const cache = this.cache, store = ctx._states, slot = ctx.slot;
    if (cache !== null && cache.store === store && cache.batch === store.batch && slot >= 0 && slot < cache.slots) {
      const kind = cache.kind[slot];
      if (kind === PRIM) return cache.prims[slot];
      if (kind === RAW) return cache.parseRaw(slot);
    }
    return this._loaded(ctx).get(ctx._slot());
  }

  /** Sets the current key's value (anything `JSON.stringify` accepts). */
  set(ctx, value) {
    const cache = this.cache, store = ctx._states, slot = ctx.slot;
    // A finite number into a loaded slot: the common case, inline.
    if (typeof value === "number" && value - value === 0 && cache !== null && cache.store === store && cache.batch === store.batch && slot >= 0 && slot < cache.slots) {
      cache.kind[slot] = PRIM;
      cache.prims[slot] = value;
      if (cache.dirty[slot] === 0) {
        cache.dirty[slot] = 1;
        cache.dirtySlots.push(slot);
      }
      return;
    }
    this._loaded(ctx).set(ctx._slot(), value);
  }

  /** Removes the current key's value. */
  clear(ctx) {
    this._loaded(ctx).clear(ctx._slot());
  }

  /** Sets the current key's value to `f(old value)` and returns it. */
  update(ctx, f) {
    const cache = this._loaded(ctx);
    const slot = ctx._slot();
    const value = f(cache.get(slot));
    cache.set(slot, value);
    return value;
  }
}

/**
 * A state's time-to-live, checked: `{ millis, refreshOnRead }` (Flink's
 * `StateTtlConfig`), or null for none. A value expires `millis` of
 * processing time — the host's wall clock — after it was last written (or
 * read too, with `refreshOnRead`); an expired value reads as absent, and
 * the host removes expired values from its storage and snapshots in the
 * background. The time a value expires at is stored with it, so it holds
 * across restores; a state keeps the choice it was first opened with (with
 * or without a time-to-live). As in the Rust SDK.
 */
function checkedTtl(ttl, what) {
  if (ttl === undefined || ttl === null) return null;
  if (!Number.isSafeInteger(ttl.millis) || ttl.millis < 1) {
    throw new TypeError(`${what}: a time-to-live's millis is a whole number of milliseconds, at least 1, not ${ttl.millis}`);
  }
  return { millis: ttl.millis, refreshOnRead: Boolean(ttl.refreshOnRead) };
}

/** Opens the host's state resource `name` of class `Resource`, expiring as `ttl` says. */
function openHost(Resource, name, ttl) {
  if (ttl === null) return new Resource(name);
  return Resource.openExpiring(name, { millis: BigInt(ttl.millis), refreshOnRead: ttl.refreshOnRead });
}

/** What `map` holds under `name`, made with `make()` the first time. */
function getOrMake(map, name, make) {
  let value = map.get(name);
  if (value === undefined) {
    value = make();
    map.set(name, value);
  }
  return value;
}

/** The states of one instance and their per-batch caches. */
class StateStore {
  /** `restored`: whether the host may hold state this instance has not
   *  seen (config's `restored`); `memoryLimitMb`: the instance's limit, or
   *  null (the host's default). */
  constructor(restored = true, memoryLimitMb = null) {
    this.restored = restored;
    this.heldBound = heldWindowsOf(memoryLimitMb);
    this.caches = new Map();
    this.maps = new Map();
    this.mirrors = new Map();
    this.windowCaches = new Map(); // Windows -> WindowCache
    this.batch = 0;
    this.timerChanges = new Map();
  }
  cache(name, ttl) {
    return getOrMake(this.caches, name, () => new SlotCache(name, this, ttl));
  }
  /** The cache of map state `name` (the first opening's `ttl` holds for every handle on the name). */
  mapCache(name, ttl) {
    return getOrMake(this.maps, name, () => new MapCache(name, this, ttl));
  }
  mirror(name) {
    return getOrMake(this.mirrors, name, () => new Mirror(name));
  }
  /** The windows `windows` holds. */
  windowCache(windows) {
    return getOrMake(this.windowCaches, windows, () => new WindowCache(windows, this));
  }
  begin() {
    this.batch += 1; // caches loaded for an earlier batch reload on use
    this.timerChanges.clear();
  }
  timer(slot, timestamp, domain, del) {
    const key = `${slot}:${timestamp}:${domain}`;
    this.timerChanges.delete(key); // the last change of a timer wins, in order
    this.timerChanges.set(key, { slot, timestamp, domain, delete: del });
  }
  flush() {
    for (const windows of this.windowCaches.values()) windows.endCall();
    for (const cache of this.caches.values()) {
      if (cache.batch === this.batch) cache.flush();
    }
    for (const cache of this.maps.values()) {
      if (cache.batch === this.batch) cache.flush();
    }
    if (this.timerChanges.size > 0) {
      const changes = [...this.timerChanges.values()];
      this.timerChanges.clear();
      try {
        updateTimers(changes);
      } catch (e) {
        throw OperatorError.state(stateErrorMessage(e));
      }
    }
  }
  /** Writes back what is held between calls (`operator.flush`, before a snapshot). */
  writeBackHeld() {
    for (const windows of this.windowCaches.values()) windows.writeBack();
  }
  abort() {
    for (const cache of this.caches.values()) cache.abort();
    for (const cache of this.maps.values()) cache.abort();
    for (const windows of this.windowCaches.values()) windows.forget();
    this.timerChanges.clear();
  }
}

// ---------------------------------------------------------------------------
// Keyed map state and broadcast state

/** A writer that encodes keys and state values (its buffer is reused). */
const scratch = new OutputBuffer("");

/** `key` as bytes, encoded as `ctx.emit` encodes event keys. */
function encodeKey(key) {
  scratch.len = 0;
  scratch._write(key);
  return scratch.data.slice(0, scratch.len);
}

/** `value` as the JSON bytes state holds (numbers written as Rust writes
 *  them, as for a `ValueState`); `what` names the state in errors. */
function encodeValue(value, what) {
  const type = typeof value;
  scratch.len = 0;
  if (type === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`${what}: ${value} cannot be stored as JSON`);
    scratch._write(value);
  } else {
    const text = type === "object" || type === "string" || type === "boolean" ? JSON.stringify(value) : undefined;
    if (text === undefined) {
      throw new TypeError(`${what}: a ${type} cannot be stored as JSON; use remove() to remove a value`);
    }
    scratch._write(text);
  }
  return scratch.data.slice(0, scratch.len);
}

/** Stored JSON bytes as a value; `what` names the state in errors. */
function decodeValue(bytes, what) {
  return parseState(decodeState(bytes, what), what);
}

/** Bytes as a string that can key a JS Map (one char per byte). */
function bytesKey(bytes) {
  return bytesKeyOf(bytes, 0, bytes.length);
}

/**
 * What `WindowCache.byKey` keys `data[from..to]` by: a key of up to six
 * bytes as a number (its bytes in base 256 after a leading 1, so that
 * lengths differ too: exact below 2^53), made without an allocation; a
 * longer one as a string of one char per byte, made in one call. A key's
 * name is made for each call that sees the key, so over many keys these
 * are most of what a held window operator allocates.
 */
function heldKeyOf(data, from, to) {
  if (to - from <= 6) {
    let name = 1;
    for (let i = from; i < to; i++) name = name * 256 + data[i];
    return name;
  }
  // (A call's arguments are bounded: a long key char by char.)
  return to - from <= 4096 ? String.fromCharCode.apply(null, data.subarray(from, to)) : bytesKeyOf(data, from, to);
}

/** `bytesKey` of `data[from..to]`, without a view of it. */
function bytesKeyOf(data, from, to) {
  let key = "";
  for (let i = from; i < to; i++) key += String.fromCharCode(data[i]);
  return key;
}

/** How a map cache names the entry of `slot` under `subKey` (bytes). */
function entryId(slot, subKey) {
  return `${slot}:${bytesKey(subKey)}`;
}

/** Concatenated byte strings and their offsets, as the WIT lists take them. */
function flatten(parts) {
  const offsets = new Uint32Array(parts.length + 1);
  let len = 0;
  for (let i = 0; i < parts.length; i++) {
    len += parts[i].length;
    offsets[i + 1] = len;
  }
  const data = new Uint8Array(len);
  for (let i = 0; i < parts.length; i++) data.set(parts[i], offsets[i]);
  return { data, offsets };
}

/**
 * One map state's entries used in the current call: each fetched with one
 * `get` on its first use, the changed ones written back with one
 * `set-many` when the call is done.
 */
class MapCache {
  constructor(name, store, ttl) {
    this.name = name;
    this.what = `map state \`${name}\``;
    this.store = store;
    this.ttl = ttl;
    this.host = null;
    this.batch = -1;
    this.entries = new Map(); // "slot:sub-key" -> { slot, subKey, bytes (null: absent), dirty }
  }

  begin() {
    if (this.host === null) this.host = openHost(HostMapState, this.name, this.ttl);
    this.entries.clear();
    this.batch = this.store.batch;
  }

  entry(slot, subKey) {
    const id = entryId(slot, subKey);
    let entry = this.entries.get(id);
    if (!entry) {
      let bytes;
      try {
        bytes = this.host.get(slot, subKey);
      } catch (e) {
        throw OperatorError.state(stateErrorMessage(e));
      }
      entry = { slot, subKey, bytes: bytes ?? null, dirty: false };
      this.entries.set(id, entry);
    }
    return entry;
  }

  get(slot, subKey) {
    const { bytes } = this.entry(slot, subKey);
    return bytes === null ? undefined : decodeValue(bytes, this.what);
  }

  put(slot, subKey, bytes) {
    const id = entryId(slot, subKey);
    this.entries.set(id, { slot, subKey, bytes, dirty: true });
  }

  flush() {
    const changed = [...this.entries.values()].filter((entry) => entry.dirty);
    if (changed.length === 0) return;
    const subKeys = flatten(changed.map((entry) => entry.subKey));
    const values = flatten(changed.map((entry) => entry.bytes ?? new Uint8Array(0)));
    const present = changed.map((entry) => entry.bytes !== null);
    const slots = Uint32Array.from(changed, (entry) => entry.slot);
    for (const entry of changed) entry.dirty = false;
    try {
      this.host.setMany(slots, subKeys.data, subKeys.offsets, { present, data: values.data, offsets: values.offsets });
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
  }

  /** The slot's entries, [sub-key bytes, value bytes] in sub-key order: the
   *  host's, a page at a time, with this call's unsent writes over them. */
  list(slot) {
    const listed = new Map(); // bytesKey(sub-key) -> [sub-key, value bytes]
    let after;
    for (;;) {
      const { entries, more } = this.page(slot, after, LIST_PAGE);
      for (const entry of entries) listed.set(bytesKey(entry[0]), entry);
      if (!more || entries.length === 0) break;
      after = entries[entries.length - 1][0];
    }
    for (const entry of this.entries.values()) {
      if (entry.slot !== slot || !entry.dirty) continue;
      if (entry.bytes === null) listed.delete(bytesKey(entry.subKey));
      else listed.set(bytesKey(entry.subKey), [entry.subKey, entry.bytes]);
    }
    // bytesKey has one char per byte: its order is the bytes' order.
    return [...listed.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, entry]) => entry);
  }

  /** Whether the slot has no entry: none written in this call, and none on
   *  the host but those removed in it (one host call for a few). */
  isEmpty(slot) {
    const removed = new Set();
    for (const entry of this.entries.values()) {
      if (entry.slot !== slot || !entry.dirty) continue;
      if (entry.bytes !== null) return false;
      removed.add(bytesKey(entry.subKey));
    }
    const { entries, more } = this.page(slot, undefined, removed.size + 1);
    if (entries.some(([subKey]) => !removed.has(bytesKey(subKey)))) return false;
    // More only when the host sent fewer than asked (it bounds a page).
    return !more || this.list(slot).length === 0;
  }

  /** Up to `limit` of the slot's entries on the host after sub-key `after`,
   *  as [sub-key, value bytes] pairs, and whether more follow. */
  page(slot, after, limit) {
    let page;
    try {
      page = this.host.entries(slot, after, limit);
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
    const entries = [];
    for (let i = 0; i + 1 < page.offsets.length; i++) {
      const subKey = page.subKeys.slice(page.subKeyOffsets[i], page.subKeyOffsets[i + 1]);
      entries.push([subKey, page.data.slice(page.offsets[i], page.offsets[i + 1])]);
    }
    return { entries, more: page.more };
  }

  /** Clears the slot's map on the host; this call's entries of it are
   *  absent from then on, and its unsent writes to them dropped. */
  clearKey(slot) {
    try {
      this.host.clear(Uint32Array.of(slot));
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
    for (const entry of this.entries.values()) {
      if (entry.slot !== slot) continue;
      entry.bytes = null;
      entry.dirty = false;
    }
  }

  abort() {
    this.entries.clear();
    this.batch = -1;
  }
}

/** How many entries a listing asks the host for at a time. */
const LIST_PAGE = 4096;

/** A stored sub-key as a string, or its bytes where they are not UTF-8. */
function decodeSubKey(bytes) {
  try {
    return utf8Decoder.decode(bytes);
  } catch {
    return bytes;
  }
}

/**
 * A keyed map state: for the current key, JSON values by sub-key — for keys
 * with many entries of which an event touches few (one accumulator per
 * window, say). Sub-keys are encoded as event keys are (strings as UTF-8,
 * numbers as decimal text, Uint8Arrays as they are).
 *
 * Create it in `init` with a name that stays the same across versions of the
 * plugin. An entry is fetched from the host on its first use in a call (one
 * host call each) and written back with the call's other changes when it
 * ends. `options.check(value)` is called by `check-state`, as for a
 * `ValueState`.
 */
export class MapState {
  constructor(name, options = {}) {
    if (typeof name !== "string" || name === "") throw new TypeError("a MapState needs a non-empty name");
    this.name = name;
    this.what = `map state \`${name}\``;
    this.ttl = checkedTtl(options.ttl, this.what);
    this.checkValue = options.check ?? null;
    /** A further check of each stored (sub-key bytes, value) entry: null, or why it is refused. */
    this.checkEntry = null;
    declaredMaps.set(name, this);
  }

  _cache(ctx) {
    const store = ctx._states;
    const cache = store.mapCache(this.name, this.ttl);
    if (cache.batch !== store.batch) cache.begin();
    return cache;
  }

  /** The current key's value under `subKey`, or undefined when it has none. */
  get(ctx, subKey) {
    return this._cache(ctx).get(ctx._slot(), encodeKey(subKey));
  }

  /** Sets the current key's value under `subKey` (anything `JSON.stringify` accepts). */
  set(ctx, subKey, value) {
    const slot = ctx._slot();
    this._cache(ctx).put(slot, encodeKey(subKey), encodeValue(value, this.what));
  }

  /** Removes the current key's entry under `subKey`. */
  remove(ctx, subKey) {
    const slot = ctx._slot();
    this._cache(ctx).put(slot, encodeKey(subKey), null);
  }

  /**
   * The current key's [subKey, value] pairs, in byte order of the encoded
   * sub-keys (a number is decimal text: 10 sorts before 9). Sub-keys come
   * back as strings (Uint8Arrays where they are not UTF-8).
   */
  entries(ctx) {
    const listed = this._cache(ctx).list(ctx._slot());
    return listed.map(([subKey, bytes]) => [decodeSubKey(subKey), decodeValue(bytes, this.what)]);
  }

  /** The current key's sub-keys, in the order of `entries`. */
  keys(ctx) {
    return this._cache(ctx).list(ctx._slot()).map(([subKey]) => decodeSubKey(subKey));
  }

  /** Whether the current key has no entry (without listing its map). */
  isEmpty(ctx) {
    return this._cache(ctx).isEmpty(ctx._slot());
  }

  /** Removes every entry of the current key, whatever its sub-key — how a
   *  key's map is dropped when it is done with. */
  clear(ctx) {
    this._cache(ctx).clearKey(ctx._slot());
  }
}

/**
 * A keyed list state: for the current key, a list of JSON values that grows
 * by appending — to buffer a key's events until a timer or a count says
 * what to do with them. Stored as the Rust SDK's `ListState` stores it (map
 * state `name`, item `i` under sub-key `i` as 20 digits, and value state
 * `name#next`, the list's length), so either reads what the other wrote.
 * Appending does not read the list. `options.check(value)` is called on
 * every stored item by `check-state`, as for a `MapState`. With
 * `options.ttl`, each item expires on its own and is left out of `get`;
 * `length` counts the items added since the list was last emptied until
 * the last of them expires.
 */
export class ListState {
  constructor(name, options = {}) {
    this.items = new MapState(name, options);
    this.next = new ValueState(`${name}#next`, { check: (n) => Number.isSafeInteger(n) && n >= 0, ttl: options.ttl });
  }

  /** Appends `value` to the current key's list. */
  add(ctx, value) {
    const index = this.length(ctx);
    this.items.set(ctx, String(index).padStart(20, "0"), value);
    this.next.set(ctx, index + 1);
  }

  /** Appends every value of `values`, in order. */
  addAll(ctx, values) {
    for (const value of values) this.add(ctx, value);
  }

  /** The current key's list, in the order its items were added. */
  get(ctx) {
    return this.items.entries(ctx).map(([, value]) => value);
  }

  /** Replaces the current key's list by `values`. */
  update(ctx, values) {
    this.clear(ctx);
    this.addAll(ctx, values);
  }

  /** Empties the current key's list. */
  clear(ctx) {
    this.items.clear(ctx);
    this.next.clear(ctx);
  }

  /** How many items the current key's list holds (without reading them). */
  length(ctx) {
    return this.next.get(ctx) ?? 0;
  }
}

/** A full copy of a broadcast map, loaded on first use: only this instance writes it. */
class Mirror {
  constructor(name) {
    this.host = new HostBroadcastMap(name);
    this.entries = new Map(); // bytesKey(key) -> [key bytes, value bytes]
    for (const [key, value] of this.host.entries()) this.entries.set(bytesKey(key), [key, value]);
  }
}

/**
 * A broadcast map: JSON values by key (keys encoded as event keys are), held
 * in full by every subtask of the operator. Any call may read it; only a
 * call processing an event of a broadcast input (`broadcast = [...]` in the
 * job file) may change it — so that every subtask applies the same changes.
 * The pattern for rules or lookup tables that apply to all keys.
 */
export class BroadcastState {
  /** `options.check(value)`, if given, is called by `check-state`, as for a `ValueState`. */
  constructor(name, options = {}) {
    if (typeof name !== "string" || name === "") throw new TypeError("a BroadcastState needs a non-empty name");
    this.name = name;
    this.what = `broadcast state \`${name}\``;
    this.checkValue = options.check ?? null;
    declaredBroadcasts.set(name, this);
  }

  /** The value under `key`, or undefined when there is none. */
  get(ctx, key) {
    const entry = ctx._states.mirror(this.name).entries.get(bytesKey(encodeKey(key)));
    return entry === undefined ? undefined : decodeValue(entry[1], this.what);
  }

  /** Stores `value` under `key` (from a broadcast input only). */
  set(ctx, key, value) {
    const keyBytes = encodeKey(key);
    const bytes = encodeValue(value, this.what);
    const mirror = ctx._states.mirror(this.name);
    try {
      mirror.host.set(keyBytes, bytes);
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
    mirror.entries.set(bytesKey(keyBytes), [keyBytes, bytes]);
  }

  /** Removes `key` (from a broadcast input only). */
  remove(ctx, key) {
    const keyBytes = encodeKey(key);
    const mirror = ctx._states.mirror(this.name);
    try {
      mirror.host.remove(keyBytes);
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
    mirror.entries.delete(bytesKey(keyBytes));
  }

  /** Every entry as [key bytes, value], in no particular order. */
  entries(ctx) {
    return [...ctx._states.mirror(this.name).entries.values()].map(([key, bytes]) => [key, decodeValue(bytes, this.what)]);
  }
}

// ---------------------------------------------------------------------------
// The context of one event or timer

const NOT_KEYED_MESSAGE =
  "keyed state used on an event without a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state";

/**
 * What an operator can do while it processes one event or timer: emit
 * events, read and write the state of the current key (through
 * `ValueState`), register timers, and read the clocks.
 */
export class Context {
  constructor(states, outputs, watermark, processingTime) {
    this._states = states;
    this._outputs = outputs;
    this.slot = -1; // the current key's slot, -1 when not keyed
    this.timestamp = null;
    /** The event-time watermark (ms), or null before the first one. */
    this.watermark = watermark;
    /** The wall-clock time of the call (ms since the epoch). */
    this.processingTime = processingTime;
  }

  _slot() {
    if (this.slot < 0) throw OperatorError.state(NOT_KEYED_MESSAGE);
    return this.slot;
  }

  /**
   * Emits (key, value) to the main output with the timestamp of the event
   * (or timer) being processed. Keys and values may be Uint8Arrays (bytes),
   * strings (UTF-8), numbers, bigints or booleans (decimal text), null
   * (empty) or other objects (JSON).
   */
  emit(key, value) {
    this._outputs.main.push(key, value, this.timestamp);
  }

  /** Emits to the main output with an explicit timestamp (ms, or null for none). */
  emitAt(key, value, timestamp) {
    this._outputs.main.push(key, value, timestamp);
  }

  /**
   * Emits to the side output `output` (wired in the job file as
   * `<operator uid>.<output>`), with the current timestamp unless one is given.
   */
  emitTo(output, key, value, timestamp = this.timestamp) {
    this._outputs.side(String(output)).push(key, value, timestamp);
  }

  /** Whether an event with this timestamp is late: at or below the watermark. */
  isLate(timestamp) {
    return this.watermark !== null && timestamp !== null && timestamp !== undefined && timestamp <= this.watermark;
  }

  /**
   * Registers a timer for the current key at `timestamp` (ms) in `domain`
   * ("event-time", the default, or "processing-time"); the operator's
   * `onTimer` is called when it fires. At most one timer per (key,
   * timestamp, domain).
   */
  registerTimer(timestamp, domain = TimeDomain.EVENT_TIME) {
    this._states.timer(this._slot(), toS64(timestamp, "a timer's timestamp"), checkDomain(domain), false);
  }

  /** Deletes a timer of the current key, if it is registered. */
  deleteTimer(timestamp, domain = TimeDomain.EVENT_TIME) {
    this._states.timer(this._slot(), toS64(timestamp, "a timer's timestamp"), checkDomain(domain), true);
  }
}

function checkDomain(domain) {
  if (domain !== "event-time" && domain !== "processing-time") {
    throw new TypeError(`a timer's domain is "event-time" or "processing-time", not ${JSON.stringify(domain)}`);
  }
  return domain;
}

// ---------------------------------------------------------------------------
// Windows

// An aggregate says how a window folds its events: `create()` makes an
// empty accumulator, `add(acc, input)` returns the new one, `result(acc)`
// the window's value, and `merge(acc, other)` (session windows only) the
// accumulator of two merged sessions. Accumulators must be JSON values
// (they live in state).

/** The sum of number inputs, as the Rust and Python SDKs' `SUM`. */
export const SUM = Object.freeze({ create: () => 0, add: (acc, x) => acc + x, result: (acc) => acc, merge: (acc, other) => acc + other });
/** The number of inputs (the input is ignored). */
export const COUNT = Object.freeze({ create: () => 0, add: (acc) => acc + 1, result: (acc) => acc, merge: (acc, other) => acc + other });

/** `t` modulo `m`, between 0 and m - 1 also for negative `t` (exact for safe integers). */
function floorMod(t, m) {
  return ((t % m) + m) % m;
}

function validEntry(entry) {
  return Array.isArray(entry) && entry.length === 3 && Number.isInteger(entry[0]) && typeof entry[2] === "boolean";
}

/**
 * Tumbling and sliding windows over event time or processing time, built on
 * a map state and timers — the fixed-size windows of the Rust SDK's
 * `weir_sdk::windows` and the Python SDK's `weir_sdk.windows`, with the same
 * state layout, so window operators of the same configuration in any of the
 * three languages read each other's state.
 *
 * Each (key, window start) has one map-state entry `start -> [end, acc,
 * fired]` and a timer at the window's end - 1. When the timer fires — in
 * event time, when the watermark passes the end — `onTimer` returns the
 * window's result. With `lateness` a window is kept that much longer; an
 * event late but within it updates the window and its result is returned
 * again at once. An event later than that is dropped, or sent to the side
 * output `lateOutput`.
 *
 *     this.windows = Windows.tumbling("sums", 1000, SUM, { lateOutput: "late" });
 *     process(ctx, event) {
 *       // A late event's update, at the window's end - 1 as an on-time result is.
 *       for (const result of this.windows.add(ctx, event, event.valueNumber())) ctx.emitAt(event.key, result, result.end - 1);
 *     }
 *     onTimer(ctx, timer) {
 *       for (const result of this.windows.onTimer(ctx, timer)) ctx.emit(timer.key, result);
 *     }
 *
 * Results are `{ start, end, value }` (ms, and the aggregate's result).
 * Windows start at multiples of their size (slide) from the epoch, as
 * Flink's; `offset` shifts them, as Flink's window offset does: with a size
 * of one day, `{ offset: -8 * 3_600_000 }` gives days from midnight in UTC+8.
 *
 * Session windows, which merge, are `Windows.session` (`SessionWindows`).
 */
export class Windows {
  /**
   * Windows of `size` ms every `options.slide` ms (default: `size`,
   * tumbling), with one `aggregate`, kept in the map state `name`.
   * Options: `slide`, `offset` (ms after multiples of the slide where
   * windows start, taken modulo it; it cannot change while windows are
   * open, as the size cannot), `lateness` (ms, event time only),
   * `lateOutput` (a side output's name), `domain` ("event-time", the
   * default, or "processing-time").
   */
  constructor(name, size, aggregate, options = {}) {
    const { slide = size, offset = 0, lateness = 0, lateOutput = null, domain = TimeDomain.EVENT_TIME } = options;
    if (!Number.isSafeInteger(size) || size <= 0 || !Number.isSafeInteger(slide) || slide <= 0) {
      throw new RangeError(
        `windows \`${name}\`: the size and slide must be whole numbers of ms above 0, not size=${size}, slide=${slide}`,
      );
    }
    if (!Number.isSafeInteger(offset)) {
      throw new RangeError(`windows \`${name}\`: the offset must be a whole number of ms, not ${offset}`);
    }
    this.size = size;
    this.slide = slide;
    this.offset = floorMod(offset, slide);
    this.aggregate = aggregate;
    this.domain = checkDomain(domain);
    this.eventTime = this.domain === TimeDomain.EVENT_TIME;
    this.lateness = this.eventTime ? Math.max(0, Math.trunc(lateness)) : 0;
    this.lateOutput = lateOutput;
    this.state = new MapState(name, { check: validEntry });
    this.state.checkEntry = (subKey, entry) => this._checkStored(subKey, entry);
    this._open = null; // its WindowCache in the instance's state store
  }

  /** The windows held for these `Windows` (kept here: a lookup in the
   *  store per event would make a closure each time). */
  _held(ctx) {
    const store = ctx._states;
    let open = this._open;
    if (open === null || open.store !== store) {
      open = store.windowCache(this);
      this._open = open;
    }
    return open;
  }

  /**
   * `check-state` of a stored window (sub-key: its start; value: `[end,
   * accumulator, fired]`): null if these windows would have it, else why
   * not. A window is found by the start the size and slide give now, so
   * windows stored under other ones would never fire.
   */
  _checkStored(subKey, entry) {
    const name = this.state.name;
    const text = utf8Decoder.decode(subKey);
    if (!/^-?[0-9]+$/.test(text)) {
      return (
        `windows \`${name}\`: a stored window (sub-key ${JSON.stringify(text)}) is not a window's start and end; ` +
        "was the state written by other windows, or by a map state of the same name?"
      );
    }
    const start = Number(text);
    const end = entry[0];
    if (end - start === this.size && floorMod(start, this.slide) === this.offset) return null;
    const what =
      (this.slide === this.size
        ? `tumbling windows of ${this.size} ms`
        : `sliding windows of ${this.size} ms every ${this.slide} ms`) +
      (this.offset === 0 ? "" : ` offset by ${this.offset} ms`);
    return (
      `windows \`${name}\` hold the window [${start}, ${end}), which ${what} do not have: their size, slide or ` +
      "offset changed since it was stored, and windows stored under the old ones would never fire (they are " +
      "found by the start the new ones give). Keep the old size, slide and offset until the stored windows have " +
      "fired — stop the job with a savepoint once the watermark has passed their ends, or let a bounded input " +
      "finish — or give the changed windows a new name and keep the old windows beside them until they have fired"
    );
  }

  static tumbling(name, size, aggregate, options = {}) {
    return new Windows(name, size, aggregate, { ...options, slide: size });
  }

  static sliding(name, size, slide, aggregate, options = {}) {
    return new Windows(name, size, aggregate, { ...options, slide });
  }

  /** Session windows closed after `gap` ms without an event (see `SessionWindows`). */
  static session(name, gap, aggregate, options = {}) {
    return new SessionWindows(name, gap, aggregate, options);
  }

  /** The windows an event at `timestamp` belongs to, as [start, end] in start order. */
  assign(timestamp) {
    const { size, slide, offset } = this;
    if (slide === size) {
      const start = timestamp - floorMod(timestamp - offset, size);
      return [[start, start + size]];
    }
    const last = timestamp - floorMod(timestamp - offset, slide);
    const first = timestamp - size - floorMod(timestamp - size - offset, slide) + slide;
    const windows = [];
    for (let start = first; start <= last; start += slide) windows.push([start, start + size]);
    return windows;
  }

  _time(ctx, event) {
    return windowTime(this, ctx, event);
  }

  /**
   * Adds `event` (with `input` for the aggregate) to its windows. Returns
   * the updated results of windows that had already fired (a late event
   * within the allowed lateness).
   */
  add(ctx, event, input) {
    const timestamp = this._time(ctx, event);
    const watermark = this.eventTime && ctx.watermark !== null ? ctx.watermark : -Infinity;
    const { size, slide, offset } = this;
    const open = this._held(ctx);
    const offsets = event._offsets, i = 2 * event._i;
    const key = open.key(ctx._slot(), event._data, offsets[i], offsets[i + 1]);
    if (slide === size) {
      // Tumbling: one window, found without making arrays (every object
      // costs in an interpreter).
      const start = timestamp - floorMod(timestamp - offset, size);
      if (this.eventTime && start + size - 1 + this.lateness <= watermark) {
        this._late(ctx, event, timestamp, watermark);
        return NONE_UPDATED;
      }
      return this._addTo(ctx, open, open.window(key, start), input, watermark, NONE_UPDATED);
    }
    let updated = NONE_UPDATED;
    let placed = false;
    // Latest start first, as Flink assigns sliding windows: a late event
    // re-fires the windows it updates in that order.
    const windows = this.assign(timestamp);
    for (let i = windows.length - 1; i >= 0; i--) {
      const [start, end] = windows[i];
      if (this.eventTime && end - 1 + this.lateness <= watermark) continue; // its window is gone
      placed = true;
      updated = this._addTo(ctx, open, open.window(key, start), input, watermark, updated);
    }
    if (!placed) this._late(ctx, event, timestamp, watermark);
    return updated;
  }

  /** Adds `input` to `window`; returns `updated`, with the window's new
   *  result added when it had fired already (a late event). */
  _addTo(ctx, open, window, input, watermark, updated) {
    const aggregate = this.aggregate;
    if (!window.present) {
      this._registerTimers(ctx, window.end);
      window.acc = aggregate.create();
      window.fired = false;
      window.present = true;
    }
    window.acc = aggregate.add(window.acc, input);
    open.changedWindow(window);
    if (window.end - 1 > watermark) return updated;
    // Late, within the allowed lateness: the result changes now.
    window.fired = true;
    const result = { start: window.start, end: window.end, value: aggregate.result(window.acc) };
    if (updated === NONE_UPDATED) return [result];
    updated.push(result);
    return updated;
  }

  /** An event in no window: sent to the late output if the watermark has
   *  passed it (between hopping windows it is dropped, as in time). */
  _late(ctx, event, timestamp, watermark) {
    if (this.lateOutput !== null && this.eventTime && timestamp + this.lateness <= watermark) {
      ctx.emitTo(this.lateOutput, event.key, event.value);
    }
  }

  _registerTimers(ctx, end) {
    ctx.registerTimer(end - 1, this.domain);
    if (this.lateness > 0) ctx.registerTimer(end - 1 + this.lateness, this.domain);
  }

  /** The start of the window a timer at `time` fires (its end - 1). */
  _firedStart(time) {
    return time + 1 - this.size;
  }

  /** The start of the window a timer at `time` forgets (its end - 1 + the lateness). */
  _expiredStart(time) {
    return time + 1 - this.lateness - this.size;
  }

  /**
   * Handles a fired timer: returns the results of the key's windows that
   * end with it and forgets windows past their allowed lateness. Timers
   * that are not these windows' are ignored.
   */
  onTimer(ctx, timer) {
    if (timer.domain !== this.domain) return [];
    const time = timer.timestamp;
    const lateness = this.lateness;
    const open = this._held(ctx);
    const key = open.key(ctx._slot(), timer.key, 0, timer.key.length);
    const results = [];
    const window = key.windows.get(this._firedStart(time));
    if (window !== undefined && window.present && window.end - 1 === time && !window.fired) {
      results.push({ start: window.start, end: window.end, value: this.aggregate.result(window.acc) });
      if (lateness === 0) open.remove(window);
      else {
        window.fired = true;
        open.changedWindow(window);
        // Again: a window opened before an upgrade that raised the lateness
        // has no timer to forget it by (one per key and time).
        ctx.registerTimer(window.end - 1 + lateness, this.domain);
      }
    }
    if (lateness > 0) {
      const old = key.windows.get(this._expiredStart(time));
      if (old !== undefined && old.present && old.end - 1 + lateness === time) open.remove(old);
    }
    return results;
  }
}

/** The iterator of `NONE_UPDATED`: already done, and shared. */
const DONE = Object.freeze({ done: true, value: undefined });
const NOTHING_LEFT = Object.freeze({ next: () => DONE, [Symbol.iterator]() { return this; } });

/**
 * What `Windows.add` returns when no fired window changed — nearly always:
 * an empty array, frozen, whose own iterator is one shared object. A plugin
 * iterates over it for every event (`for (const r of windows.add(…))`), and
 * the engine's array iterator, made afresh and run as interpreted code of
 * its own, cost ~0.9 µs an event.
 */
const NONE_UPDATED = Object.freeze(Object.defineProperty([], Symbol.iterator, { value: () => NOTHING_LEFT }));

/** One window of a key, as `WindowCache` holds it. */
class OpenWindow {
  constructor(key, start, end, stored) {
    this.key = key; // its HeldKey
    this.start = start;
    this.present = stored !== undefined;
    this.end = this.present ? stored[0] : end;
    this.acc = this.present ? stored[1] : undefined;
    this.fired = this.present ? stored[2] : false;
    /** Whether the host may have it (read from it, or written back). */
    this.stored = this.present;
    /** Whether the host lacks its latest state (listed in `changed`). */
    this.changed = false;
  }
}

/** A key whose windows are held: all of them, by start. */
class HeldKey {
  constructor(name, bytes) {
    this.name = name; // its key in `WindowCache.byKey` (`heldKeyOf`)
    this.bytes = bytes;
    this.windows = new Map(); // start -> OpenWindow
    this.listed = true; // in `WindowCache.byKey`
  }
}

/** Windows (and keys) held per instance when the host does not say its
 *  memory limit: a quarter of the host's default of 512 MiB, at ~512 bytes
 *  each (a window object, its accumulator and its map entry). */
const HELD_WINDOW_BYTES = 512;
/** Windows written back in one host call: the lists a call builds (and the
 *  bindings convert element by element) stay small. */
const WRITE_BACK_WINDOWS = 16384;

/** How many windows and keys an instance holds under a memory limit of
 *  `memoryLimitMb` (null: the host's default, 512): a quarter of it. */
function heldWindowsOf(memoryLimitMb) {
  return Math.max(1024, Math.floor(((memoryLimitMb ?? 512) * 1048576) / 4 / HELD_WINDOW_BYTES));
}

/**
 * The windows of one `Windows`, held in the instance between calls by key,
 * as the Rust SDK holds them: each key's windows are read from the map
 * state (one listing) the first time a call needs the key — not at all in
 * an instance whose state started empty, until it evicts — and changed in
 * place from then on. The host gets them back by key (`set-keyed`) when it
 * asks before a snapshot (`operator.flush`), or when the instance holds
 * more than its memory limit allows (then it forgets them all and reads
 * keys again as they come). A window opened and removed between two
 * snapshots never reaches the host. Crossing into the host costs the
 * interpreter microseconds per value (the bindings convert lists element by
 * element), and reading each window and writing it back every call was
 * most of a window operator's time.
 *
 * A call that fails fails the task, which restarts from its last
 * checkpoint with new instances: what this one held is forgotten, never
 * written back.
 */
class WindowCache {
  constructor(windows, store) {
    this.windows = windows;
    this.store = store;
    this.byKey = new Map(); // heldKeyOf(key) -> HeldKey
    this.held = 0; // keys and windows held, against `store.heldBound`
    this.changed = new Set(); // OpenWindows whose latest state the host lacks
    // Whether the host may have windows of a key not held: after a
    // restore, or once held keys were forgotten.
    this.hostMayHave = store.restored;
    this.batch = -1;
    this.slotKeys = []; // this call's key slot -> HeldKey
    this.keys = new OutputBuffer(""); // reused by writeBack
    this.subKeys = new OutputBuffer("");
    this.values = new OutputBuffer("");
  }

  /** The held key in `slot` of this call, whose bytes are
   *  `data[from..to]`: read from the host the first time it is needed. */
  key(slot, data, from, to) {
    if (this.batch !== this.store.batch) {
      this.slotKeys.length = 0;
      this.batch = this.store.batch;
    }
    let held = this.slotKeys[slot];
    if (held === undefined) {
      const name = heldKeyOf(data, from, to);
      held = this.byKey.get(name);
      if (held === undefined) {
        held = new HeldKey(name, data.slice(from, to));
        if (this.hostMayHave) this._read(slot, held);
        this.byKey.set(name, held);
        this.held += 1 + held.windows.size;
      }
      this.slotKeys[slot] = held;
    }
    return held;
  }

  /** Reads every window of the key in `slot` from the host, a page at a time. */
  _read(slot, held) {
    const cache = this._mapCache();
    const what = cache.what;
    let after;
    for (;;) {
      const { entries, more } = cache.page(slot, after, LIST_PAGE);
      for (const [subKey, bytes] of entries) {
        const start = Number(decodeState(subKey, what));
        const stored = decodeValue(bytes, what);
        if (!Number.isSafeInteger(start) || !validEntry(stored)) {
          throw OperatorError.state(`${what} holds an entry that is not a window's (sub-key ${preview(decodeState(subKey, what))})`);
        }
        held.windows.set(start, new OpenWindow(held, start, start + this.windows.size, stored));
      }
      if (!more || entries.length === 0) break;
      after = entries[entries.length - 1][0];
    }
  }

  /** The window of `held` starting at `start`, opened (absent) if it has none. */
  window(held, start) {
    let window = held.windows.get(start);
    if (window === undefined) {
      window = new OpenWindow(held, start, start + this.windows.size, undefined);
      held.windows.set(start, window);
      this.held += 1;
      if (!held.listed) this._relist(held);
    }
    return window;
  }

  /** Holds again a key let go of while this call still had it by slot. */
  _relist(held) {
    held.listed = true;
    this.byKey.set(held.name, held);
    this.held += 1;
  }

  /** Marks `window` as changed: the host gets it at the next write-back. */
  changedWindow(window) {
    if (!window.changed) {
      window.changed = true;
      this.changed.add(window);
    }
  }

  /** Removes `window`: written back as absent if the host may have it,
   *  else dropped at once. */
  remove(window) {
    window.present = false;
    window.acc = undefined;
    if (window.stored) {
      this.changedWindow(window);
    } else {
      this._drop(window);
      if (window.changed) {
        window.changed = false;
        this.changed.delete(window);
      }
    }
  }

  _drop(window) {
    const held = window.key;
    held.windows.delete(window.start);
    this.held -= 1;
    // A key left without windows is let go of when the host has none of it
    // either (an instance that started empty and never forgot): a key seen
    // once a window would otherwise stay held until the bound.
    if (held.windows.size === 0 && !this.hostMayHave && held.listed) {
      held.listed = false;
      this.byKey.delete(held.name);
      this.held -= 1;
    }
  }

  _mapCache() {
    const state = this.windows.state;
    const cache = this.store.mapCache(state.name, state.ttl);
    if (cache.batch !== this.store.batch) cache.begin();
    return cache;
  }

  /** Ends a call: past the bound, writes back and forgets every key. */
  endCall() {
    if (this.held <= this.store.heldBound) return;
    this.writeBack();
    this.forget();
  }

  /** Writes the changed windows back by key (`set-keyed`), in host calls of
   *  at most `WRITE_BACK_WINDOWS`; their starts and `[end, acc, fired]`
   *  straight into reused buffers. A failure leaves them all changed (the
   *  next write-back sends them again; the snapshot is abandoned). */
  writeBack() {
    if (this.changed.size === 0) return;
    const windows = [...this.changed];
    for (let from = 0; from < windows.length; from += WRITE_BACK_WINDOWS) {
      this._writeKeyed(windows.slice(from, from + WRITE_BACK_WINDOWS));
    }
    for (const window of windows) {
      window.changed = false;
      if (window.present) window.stored = true;
      else this._drop(window);
    }
    this.changed.clear();
  }

  _writeKeyed(windows) {
    const { keys, subKeys, values } = this;
    keys.len = subKeys.len = values.len = 0;
    const n = windows.length;
    const keyOffsets = new Uint32Array(n + 1), subKeyOffsets = new Uint32Array(n + 1), valueOffsets = new Uint32Array(n + 1);
    const present = new Array(n);
    for (let i = 0; i < n; i++) {
      const window = windows[i];
      keys._write(window.key.bytes);
      keyOffsets[i + 1] = keys.len;
      subKeys._write(window.start);
      subKeyOffsets[i + 1] = subKeys.len;
      present[i] = window.present;
      if (window.present) this._writeEntry(window);
      valueOffsets[i + 1] = values.len;
    }
    const host = this._mapCache().host;
    try {
      host.setKeyed(keys.data.subarray(0, keys.len), keyOffsets, subKeys.data.subarray(0, subKeys.len), subKeyOffsets, {
        present,
        data: values.data.subarray(0, values.len),
        offsets: valueOffsets,
      });
    } catch (e) {
      throw OperatorError.state(stateErrorMessage(e));
    }
  }

  /** `[end, acc, fired]` as JSON into `values`: a finite number as Rust
   *  writes it (as `ValueState` stores numbers), anything else as
   *  `JSON.stringify` writes it. */
  _writeEntry(window) {
    const values = this.values;
    const acc = window.acc;
    values._write("[");
    values._write(window.end);
    values._write(",");
    // `null` where JSON has no value (undefined, NaN), as in an array.
    if (typeof acc === "number" && Number.isFinite(acc)) values._write(acc);
    else values._write(JSON.stringify(acc) ?? "null");
    values._write(window.fired ? ",true]" : ",false]");
  }

  /** Forgets every held key and window, written back or not. */
  forget() {
    this.byKey.clear();
    this.held = 0;
    this.changed.clear();
    this.slotKeys.length = 0;
    this.hostMayHave = true;
  }
}

/** The time `windows` place `event` by: its timestamp, or the clock. */
function windowTime(windows, ctx, event) {
  if (!windows.eventTime) return ctx.processingTime;
  if (event.timestamp === null) throw OperatorError.invalidInput("event-time windows need events with timestamps");
  return event.timestamp;
}

function validSessions(sessions) {
  return (
    Array.isArray(sessions) &&
    sessions.every((s) => Array.isArray(s) && s.length === 4 && Number.isInteger(s[0]) && Number.isInteger(s[1]) && typeof s[3] === "boolean")
  );
}

/** Whether `session` overlaps or touches `[start, end)`: sessions that touch merge, as in Flink. */
function touches(session, start, end) {
  return session[0] <= end && start <= session[1];
}

/**
 * A window per burst of a key's events: an event at `t` opens `[t, t +
 * gap)`, which merges with every session it overlaps or touches — the Rust
 * and Python SDKs' session windows, with their state layout (the value
 * state `name` holds a key's sessions as `[[start, end, acc, fired], …]`).
 * Lateness follows Flink's: an event whose own session has passed the
 * watermark and the allowed lateness still joins an open session it
 * overlaps; one that overlaps none is late. A session grown past the
 * watermark fires again at its new end. Options: `lateness`, `lateOutput`,
 * `domain`, as for `Windows`; the aggregate needs a `merge`.
 */
export class SessionWindows {
  constructor(name, gap, aggregate, options = {}) {
    const { lateness = 0, lateOutput = null, domain = TimeDomain.EVENT_TIME } = options;
    if (!Number.isSafeInteger(gap) || gap <= 0) {
      throw new RangeError(`windows \`${name}\`: the gap must be a whole number of ms above 0, not ${gap}`);
    }
    if (typeof aggregate.merge !== "function") {
      throw new TypeError(`windows \`${name}\`: session windows merge, so their aggregate needs a \`merge\``);
    }
    this.gap = gap;
    this.aggregate = aggregate;
    this.domain = checkDomain(domain);
    this.eventTime = this.domain === TimeDomain.EVENT_TIME;
    this.lateness = this.eventTime ? Math.max(0, Math.trunc(lateness)) : 0;
    this.lateOutput = lateOutput;
    this.state = new ValueState(name, { check: validSessions });
  }

  /** The window an event at `timestamp` opens, before merging. */
  assign(timestamp) {
    return [[timestamp, timestamp + this.gap]];
  }

  _gone(end, watermark) {
    return this.eventTime && end - 1 + this.lateness <= watermark;
  }

  /**
   * Adds `event` (with `input` for the aggregate) to its session. Returns
   * the changed results of sessions that had already fired (a late event
   * within the allowed lateness).
   */
  add(ctx, event, input) {
    const timestamp = windowTime(this, ctx, event);
    const watermark = this.eventTime && ctx.watermark !== null ? ctx.watermark : -Infinity;
    const [start, end] = [timestamp, timestamp + this.gap];
    const sessions = this.state.get(ctx) ?? [];
    const joinsOpen = sessions.some((s) => touches(s, start, end) && !this._gone(s[1], watermark));
    if (this._gone(end, watermark) && !joinsOpen) {
      if (this.lateOutput !== null) ctx.emitTo(this.lateOutput, event.key, event.value);
      return [];
    }
    const aggregate = this.aggregate;
    let session = [start, end, aggregate.add(aggregate.create(), input), false];
    // A merged session may reach further ones: repeat until none touches.
    for (;;) {
      const i = sessions.findIndex((s) => touches(s, session[0], session[1]));
      if (i < 0) break;
      const [other] = sessions.splice(i, 1);
      // Its timers stay (one per key and time): when they fire, no session
      // ends there any more, and `onTimer` passes them by.
      session = [Math.min(session[0], other[0]), Math.max(session[1], other[1]), aggregate.merge(session[2], other[2]), session[3] || other[3]];
    }
    ctx.registerTimer(session[1] - 1, this.domain);
    if (this.lateness > 0) ctx.registerTimer(session[1] - 1 + this.lateness, this.domain);
    const updated = [];
    // Late, within the allowed lateness: the result changes now; grown past
    // the watermark: it fires again at its new end.
    session[3] = session[1] - 1 <= watermark;
    if (session[3]) updated.push({ start: session[0], end: session[1], value: aggregate.result(session[2]) });
    sessions.push(session);
    this.state.set(ctx, sessions);
    return updated;
  }

  /**
   * Handles a fired timer: returns the results of the key's sessions that
   * end with it, in start order, and forgets sessions past their allowed
   * lateness. Timers that are not these windows' are ignored.
   */
  onTimer(ctx, timer) {
    if (timer.domain !== this.domain) return [];
    const sessions = this.state.get(ctx);
    if (!sessions || sessions.length === 0) return [];
    const time = timer.timestamp;
    const results = [];
    for (const session of sessions) {
      if (session[1] - 1 === time && !session[3]) {
        session[3] = true;
        results.push({ start: session[0], end: session[1], value: this.aggregate.result(session[2]) });
      }
    }
    const kept = sessions.filter((s) => s[1] - 1 + this.lateness > time);
    if (kept.length === 0) this.state.clear(ctx);
    else if (kept.length !== sessions.length || results.length > 0) this.state.set(ctx, kept);
    return results.sort((a, b) => a.start - b.start);
  }
}

// ---------------------------------------------------------------------------
// The operator and its export

/**
 * Base class of operators. Subclass it and override:
 *
 * - `init(config)`: called once per instance with the job file's `config`
 *   table (a `Config`, a Map of strings); create your `ValueState`s here.
 *   Keys you never read are rejected as unknown after it returns.
 * - `process(ctx, event)`: called for every event.
 * - `onTimer(ctx, timer)`: called for every timer that fires (optional).
 *
 * Whatever the operator keeps in its own fields is lost on failure, upgrade
 * or rescale: results must depend only on events and keyed state.
 */
export class Operator {
  init(config) {}
  process(ctx, event) {
    throw OperatorError.other(`${this.constructor.name} does not implement process(ctx, event)`);
  }
  onTimer(ctx, timer) {}
}

/** Runs one operator instance over batches. */
class Runtime {
  constructor(operator, config) {
    this.operator = operator;
    this.states = new StateStore(config.restored, config.memoryLimitMb);
    this.outputs = new Outputs();
  }

  process(batch) {
    const states = this.states;
    const { data, offsets, timestamps } = batch.events;
    const keySlots = batch.keySlots;
    const keyed = keySlots.length > 0;
    const n = (offsets.length - 1) >> 1;
    const stamped = timestamps.length > 0;
    const input = batch.input;
    const op = this.operator;
    const ctx = new Context(states, this.outputs, fromS64(batch.watermark), fromS64(batch.processingTime));
    return this.call(() => {
      if (offsets.length !== 2 * n + 1 || (keyed && keySlots.length !== n) || (stamped && timestamps.length !== n)) {
        throw OperatorError.invalidInput("the host sent a malformed batch");
      }
      const event = new Event(data, offsets, input);
      const times = stamped ? int64Halves(timestamps) : null;
      for (let i = 0; i < n; i++) {
        if (stamped) {
          // As `timeAt` reads it, inline: a call per event costs.
          const low = times[2 * i], high = times[2 * i + 1];
          ctx.timestamp = event.timestamp = high === -2147483648 && low === 0 ? null : high * 4294967296 + (low >>> 0);
        }
        if (keyed) ctx.slot = keySlots[i];
        event._i = i;
        op.process(ctx, event);
      }
    });
  }

  /** Runs one host call's work: state written back and outputs returned
   *  if it succeeds, both dropped if it throws. */
  call(work) {
    this.states.begin();
    try {
      work();
      this.states.flush();
    } catch (e) {
      this.states.abort();
      this.outputs.discard();
      throw e;
    }
    return this.outputs.drain();
  }

  onTimer(timers) {
    const states = this.states;
    const { data, offsets, timestamps, domains, keySlots } = timers;
    const op = this.operator;
    const ctx = new Context(states, this.outputs, fromS64(timers.watermark), fromS64(timers.processingTime));
    return this.call(() => {
      const times = int64Halves(timestamps);
      for (let i = 0; i < timestamps.length; i++) {
        const timestamp = timeAt(times, i);
        ctx.slot = keySlots[i];
        ctx.timestamp = timestamp;
        op.onTimer(ctx, new Timer(data.subarray(offsets[i], offsets[i + 1]), timestamp, domains[i]));
      }
    });
  }
}

/** Runs `call`, turning anything it throws into the WIT error. */
function guarded(call) {
  try {
    return call();
  } catch (e) {
    failWith(toWitError(e));
  }
}

/**
 * Implements the exported WIT interface `operator` with instances of
 * `OperatorClass` (a subclass of `Operator`). Export the result as
 * `operator`:
 *
 *     export const operator = exportOperator(MyOperator);
 */
export function exportOperator(OperatorClass) {
  if (typeof OperatorClass !== "function") throw new TypeError("exportOperator needs an Operator class");
  return {
    init(pairs) {
      guarded(() => {
        declared.clear();
        declaredMaps.clear();
        declaredBroadcasts.clear();
        const config = new Config(pairs);
        const op = new OperatorClass();
        op.init(config);
        config._rejectUnread();
        runtime = new Runtime(op, config);
      });
    },
    process(batch) {
      return guarded(() => {
        if (runtime === null) throw OperatorError.other("process called before init");
        return runtime.process(batch);
      });
    },
    onTimer(timers) {
      return guarded(() => {
        if (runtime === null) throw OperatorError.other("on-timer called before init");
        return runtime.onTimer(timers);
      });
    },
    // Windows are held between calls; everything else is written back at
    // the end of each call.
    flush() {
      guarded(() => {
        if (runtime !== null) runtime.states.writeBackHeld();
      });
    },
    checkState(name, kind, stored) {
      // Opened as the plugin will open it, with its time-to-live or
      // without: the host refuses (a trap naming the state) a choice other
      // than the one the state was stored with — before an upgrade stops
      // the job, rather than at the restored job's first event.
      const state = kind === "map-state" ? declaredMaps.get(name) : kind === "value-state" ? declared.get(name) : null;
      if (state) openHost(kind === "map-state" ? HostMapState : HostValueState, name, state.ttl);
      const message = checkState(name, kind, stored);
      if (message !== null) {
        const e = new Error(message);
        e.payload = message;
        throw e;
      }
    },
  };
}

/**
 * `check-state`: null if every stored value (`stored`: the WIT's
 * `stored-values`, a map state's sub-keys beside its values) can be read,
 * else why not. Exported for the SDK's unit tests.
 */
export function checkState(name, kind, stored) {
  const { data, offsets, subKeys, subKeyOffsets } = stored;
  const map = kind === "map-state";
  const [state, what] =
    kind === "broadcast-map"
      ? [declaredBroadcasts.get(name), "broadcast state"]
      : map
        ? [declaredMaps.get(name), "map state"]
        : [declared.get(name), "value state"];
  if (!state) {
    return (
      `this plugin declares no ${what} \`${name}\` (its stored entries would be lost); keep the state's name, ` +
      "or keep declaring the old state beside the new one (its entries are then carried along unused)"
    );
  }
  for (let i = 0; i + 1 < offsets.length; i++) {
    const bytes = data.subarray(offsets[i], offsets[i + 1]);
    let text;
    try {
      text = utf8Decoder.decode(bytes);
    } catch {
      return `${what} \`${name}\`: stored value #${i} is not UTF-8 text, so not JSON`;
    }
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return `${what} \`${name}\`: stored value #${i} (${preview(text)}) cannot be read by this plugin: ${e.message}`;
    }
    if (state.checkValue) {
      let ok;
      try {
        ok = state.checkValue(value);
      } catch (e) {
        return `${what} \`${name}\`: stored value #${i} (${preview(text)}) is refused: ${e instanceof Error ? e.message : e}`;
      }
      if (ok === false) {
        return `${what} \`${name}\`: stored value #${i} (${preview(text)}) is refused by its check`;
      }
    }
    if (map && state.checkEntry) {
      const subKey = subKeys.subarray(subKeyOffsets[i], subKeyOffsets[i + 1]);
      const refused = state.checkEntry(subKey, value);
      if (refused !== null) return refused;
    }
  }
  return null;
}
