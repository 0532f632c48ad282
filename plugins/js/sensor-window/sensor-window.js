// `sensor-window` in JavaScript: each sensor's readings summed over tumbling
// windows — the Rust plugins/sensor-window (and the Python one) on the
// JavaScript SDK's `Windows`.
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
// offset), `lateness_ms` (0).
//
// Build: scripts/build-js-plugin.sh plugins/js/sensor-window/sensor-window.js sensor_window_js.wasm

import { Operator, OperatorError, SUM, TimeDomain, Windows, exportOperator } from "weir-sdk";

class SensorWindow extends Operator {
  init(config) {
    config.allowOnly(["time", "size_ms", "offset_ms", "lateness_ms"]);
    const size = config.number("size_ms", 1000);
    if (!Number.isSafeInteger(size) || size <= 0) throw OperatorError.invalidConfig("`size_ms` must be a positive whole number");
    const time = config.string("time", "event");
    if (time !== "event" && time !== "processing") {
      throw OperatorError.invalidConfig(`\`time\` is "event" or "processing", not ${JSON.stringify(time)}`);
    }
    this.windows = Windows.tumbling("sums", size, SUM, {
      offset: config.number("offset_ms", 0),
      lateness: config.number("lateness_ms", 0),
      lateOutput: "late",
      domain: time === "event" ? TimeDomain.EVENT_TIME : TimeDomain.PROCESSING_TIME,
    });
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

export const operator = exportOperator(SensorWindow);
