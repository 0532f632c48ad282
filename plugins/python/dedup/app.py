"""`dedup` in Python: passes an event the first time its key is seen and
drops repeats for a time-to-live.

The twin of the Rust plugins/dedup, with the same config, output and state
(value state `seen`, `true` per id seen, expiring `ttl_ms` of processing
time after it was written; `ttl_ms = 0` remembers for ever).
"""

from weir_sdk import Operator, Ttl, ValueState, export

#: One hour.
DEFAULT_TTL_MS = 3_600_000


class Dedup(Operator):
    config_keys = ("ttl_ms",)

    def init(self, config):
        ttl_ms = config.get_int("ttl_ms", DEFAULT_TTL_MS)
        self.seen = ValueState("seen", ttl=Ttl(ttl_ms) if ttl_ms else None)

    def process(self, ctx, event):
        if self.seen.get(ctx) is None:
            self.seen.set(ctx, True)
            ctx.emit(event.key, event.value)


export(Dedup)
