"""`sensor-window` in Python: each sensor's readings summed over tumbling windows,
or over session windows with `gap_ms`.

Input keyed by sensor (`key_by = true`), value a number. Emits, when a
window closes, `(sensor, {"start": ms, "end": ms, "value": sum})` — the same
bytes as the Rust plugins/sensor-window. In event time (the default) windows
close when the watermark passes their end, so the result does not depend on
arrival order or replay speed for events within the source's
`out_of_orderness_ms`; `time = "processing"` windows by the wall
clock instead. Events too late for their window go to the side output
`late`. The state (map state `sums`, one `[end, sum, fired]` per window) is
laid out as the Rust plugin's.

Config: `time` (`event` | `processing`), `size_ms` (1000), `offset_ms` (0:
windows start `offset_ms` after multiples of `size_ms`, as Flink's window
offset), `lateness_ms` (0); or `gap_ms` instead of `size_ms` and
`offset_ms`: session windows, each a sensor's readings until it has been
quiet for `gap_ms` (the value state `sums`, laid out as the Rust plugin's).
"""

from weir_sdk import ConfigError, Operator, TimeDomain, export
from weir_sdk.windows import SUM, Windows


class SensorWindow(Operator):
    config_keys = ("time", "size_ms", "offset_ms", "gap_ms", "lateness_ms")

    def init(self, config):
        time = config.get_choice("time", ("event", "processing"), default="event")
        options = dict(
            lateness=config.get_int("lateness_ms", 0),
            late_output="late",
            domain=TimeDomain.EVENT_TIME if time == "event" else TimeDomain.PROCESSING_TIME,
        )
        if "gap_ms" not in config:
            size = _positive(config, "size_ms", 1000)
            self.windows = Windows.tumbling("sums", size, SUM, offset=config.get_int("offset_ms", 0), **options)
        elif "size_ms" in config or "offset_ms" in config:
            raise ConfigError("`gap_ms` makes session windows, which start at their first reading: drop `size_ms` and `offset_ms`")
        else:
            self.windows = Windows.session("sums", _positive(config, "gap_ms", 1), SUM, **options)

    def process(self, ctx, event):
        reading = event.value_float()
        for updated in self.windows.add(ctx, event, reading):
            # Stamped as the window's firing is (its end - 1), as Flink
            # stamps a late firing, not with the late event's time.
            ctx.emit(event.key, updated, timestamp=updated["end"] - 1)

    def on_timer(self, ctx, timer):
        for result in self.windows.on_timer(ctx, timer):
            ctx.emit(timer.key, result)


def _positive(config, key, default):
    value = config.get_int(key, default)
    if value <= 0:
        raise ConfigError(f"`{key}` must be positive")
    return value


export(SensorWindow)
