// `sensor-window` in JavaScript: each sensor's readings summed over tumbling
// windows, or over session windows with `gap_ms` — the Rust
// plugins/sensor-window (and the Python one) on the JavaScript SDK's
// `Windows`.
//
// Input keyed by sensor (`key_by = true`), value a number. Emits, when a
// window closes, `(sensor, {"start": ms, "end": ms, "value": sum})`. In
// event time (the default) windows close when the watermark passes their
// end, so the result does not depend on arrival order or replay speed
// for events within the source's `out_of_orderness_ms`;
// `time = "processing"` windows by the wall clock instead. Events too late
// for their window go to the side output `late`. The state (map state
// `sums`, one `[end, sum, fired]` per window) is laid out as the Rust
// plugin's.
//
// Config: `time` (`event` | `processing`), `size_ms` (1000), `offset_ms` (0:
// windows start `offset_ms` after multiples of `size_ms`, as Flink's window
// offset), `lateness_ms` (0); or `gap_ms` instead of `size_ms` and
// `offset_ms`: session windows, each a sensor's readings until it has been
// quiet for `gap_ms` (the value state `sums`, laid out as the Rust plugin's).
//
// Build: scripts/build-js-plugin.sh plugins/js/sensor-window/sensor-window.js sensor_window_js.wasm

import { Operator, OperatorError, SUM, TimeDomain, Windows, exportOperator } from "weir-sdk";

class SensorWindow extends Operator {
  init(config) {
    config.allowOnly(["time", "size_ms", "offset_ms", "gap_ms", "lateness_ms"]);
    const time = config.string("time", "event");
    if (time !== "event" && time !== "processing") {
      throw OperatorError.invalidConfig(`\`time\` is "event" or "processing", not ${JSON.stringify(time)}`);
    }
    const options = {
      lateness: config.number("lateness_ms", 0),
      lateOutput: "late",
      domain: time === "event" ? TimeDomain.EVENT_TIME : TimeDomain.PROCESSING_TIME,
    };
    if (!config.has("gap_ms")) {
      const size = positive(config, "size_ms", 1000);
      this.windows = Windows.tumbling("sums", size, SUM, { ...options, offset: config.number("offset_ms", 0) });
    } else if (config.has("size_ms") || config.has("offset_ms")) {
      throw OperatorError.invalidConfig("`gap_ms` makes session windows, which start at their first reading: drop `size_ms` and `offset_ms`");
    } else {
      this.windows = Windows.session("sums", positive(config, "gap_ms", 1), SUM, options);
    }
  }

  process(ctx, event) {
    const reading = event.valueNumber();
    // Stamped as the window's firing is (its end - 1), as Flink stamps a
    // late firing, not with the late event's time.
    for (const updated of this.windows.add(ctx, event, reading)) ctx.emitAt(event.key, updated, updated.end - 1);
  }

  onTimer(ctx, timer) {
    for (const result of this.windows.onTimer(ctx, timer)) ctx.emit(timer.key, result);
  }
}

function positive(config, key, fallback) {
  const value = config.number(key, fallback);
  if (!Number.isSafeInteger(value) || value <= 0) throw OperatorError.invalidConfig(`\`${key}\` must be a positive whole number`);
  return value;
}

export const operator = exportOperator(SensorWindow);
