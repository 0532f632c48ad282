"""The host's imports, behind a small interface the runtime uses.

In a component built by componentize-py the generated ``wit_world`` package
provides them (:class:`WitHost`); in native tests ``weir_sdk.testing`` puts
an in-memory host in its place. Everything is imported here, at module
import, because componentize-py snapshots the interpreter after importing
the app: a module first imported at run time would have to be found on a
file system, and the host gives plugins none.
"""

from .errors import StateError

try:  # Only inside a component (or when componentize-py's stubs are on the path).
    from componentize_py_types import Err
    from wit_world.imports import broadcast_state as _broadcast
    from wit_world.imports import state as _state
    from wit_world.imports import timers as _timers
    from wit_world.imports import types as _types
    from wit_world.exports import operator as _operator

    AVAILABLE = True
except ImportError:  # pragma: no cover - native Python
    AVAILABLE = False


_NOT_KEYED = (
    "keyed state used on an event without a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state"
)


def state_error_message(error):
    """The message for a WIT ``state-error`` value (like the Rust SDK's)."""
    name = type(error).__name__.split("_", 1)[-1]
    if name == "NoCurrentKeys":
        return "state used outside of process"
    if name == "SlotOutOfRange":
        return f"slot {error.value} is outside the current batch"
    if name == "NotKeyed":
        return _NOT_KEYED
    if name == "MalformedWrite":
        return f"malformed state write: {error.value}"
    if name == "TimerNotKeyed":
        return "timers need an event with a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state"
    if name == "NotBroadcastInput":
        return (
            "broadcast state can only be changed while processing an event from a broadcast input "
            "(listed under `broadcast` in the job file)"
        )
    return str(error)


if AVAILABLE:

    def _wit_ttl(ttl):
        return _state.TimeToLive(millis=ttl.millis, refresh_on_read=ttl.refresh_on_read)

    def _call(f, *args):
        try:
            return f(*args)
        except Err as e:
            raise StateError(state_error_message(e.value)) from None

    class _Value:
        __slots__ = ("res",)

        def __init__(self, name, ttl=None):
            if ttl is None:
                self.res = _state.ValueState(name)
            else:
                self.res = _state.ValueState.open_expiring(name, _wit_ttl(ttl))

        def get_all(self):
            v = _call(self.res.get_all)
            return v.present, v.data, v.offsets

        def set_many(self, slots, present, data, offsets):
            _call(self.res.set_many, slots, _state.SlotValues(present, data, offsets))

        def get_many(self, slots):
            v = _call(self.res.get_many, slots)
            return v.present, v.data, v.offsets

        def set_keyed(self, keys, key_offsets, present, data, offsets):
            _call(self.res.set_keyed, keys, key_offsets, _state.SlotValues(present, data, offsets))

    class _Map:
        __slots__ = ("res",)

        def __init__(self, name, ttl=None):
            if ttl is None:
                self.res = _state.MapState(name)
            else:
                self.res = _state.MapState.open_expiring(name, _wit_ttl(ttl))

        def get(self, slot, sub_key):
            return _call(self.res.get, slot, sub_key)

        def get_many(self, slots, sub_keys, offsets):
            v = _call(self.res.get_many, slots, sub_keys, offsets)
            return v.present, v.data, v.offsets

        def set_many(self, slots, sub_keys, sub_key_offsets, present, data, offsets):
            _call(self.res.set_many, slots, sub_keys, sub_key_offsets, _state.SlotValues(present, data, offsets))

        def set_keyed(self, keys, key_offsets, sub_keys, sub_key_offsets, present, data, offsets):
            _call(self.res.set_keyed, keys, key_offsets, sub_keys, sub_key_offsets, _state.SlotValues(present, data, offsets))

        def entries(self, slot, after, limit):
            """Up to ``limit`` (sub-key, value) pairs of the slot's key after
            sub-key ``after`` (``None``: from the first), and whether more follow."""
            page = _call(self.res.entries, slot, after, limit)
            keys, koffs, data, offs = page.sub_keys, page.sub_key_offsets, page.data, page.offsets
            pairs = [(keys[koffs[i] : koffs[i + 1]], data[offs[i] : offs[i + 1]]) for i in range(len(offs) - 1)]
            return pairs, page.more

        def clear(self, slots):
            _call(self.res.clear, slots)

    class _Broadcast:
        __slots__ = ("res",)

        def __init__(self, name):
            self.res = _broadcast.BroadcastMap(name)

        def entries(self):
            return self.res.entries()

        def set(self, key, value):
            _call(self.res.set, key, value)

        def remove(self, key):
            _call(self.res.remove, key)

    _DOMAINS = (_types.TimeDomain.EVENT_TIME, _types.TimeDomain.PROCESSING_TIME)

    class WitHost:
        """The real host, through componentize-py's generated bindings."""

        open_value = staticmethod(_Value)
        open_map = staticmethod(_Map)
        open_broadcast = staticmethod(_Broadcast)

        @staticmethod
        def update_timers(changes):
            """``changes``: (slot, timestamp, event_time: bool, delete) tuples."""
            _call(
                _timers.update,
                [_timers.TimerChange(s, t, _DOMAINS[0] if ev else _DOMAINS[1], d) for s, t, ev, d in changes],
            )
