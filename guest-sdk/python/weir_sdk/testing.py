"""Runs an operator natively, without Wasm or the host, for unit tests.

:class:`Harness` drives an :class:`~weir_sdk.Operator` subclass as the host
does — batches with key slots, keyed value and map state, broadcast state,
timers fired by the watermark or the clock — with an in-memory host::

    from weir_sdk.testing import Harness

    h = Harness(WordCount)
    out = h.process([("a", "1"), ("b", "1"), ("a", "1")])
    assert [(e.key, e.value) for e in out] == [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")]
    assert h.state("count", "a") == 2

Errors come out as the SDK's exceptions (``ConfigError``, ``StateError``, …)
rather than WIT values.
"""

from collections import namedtuple

from . import codec
from .core import NO_TIMESTAMP, Runtime
from .errors import StateError
from .state import _NOT_KEYED, _TIMER_NOT_KEYED

__all__ = ["Harness", "Emitted"]

Emitted = namedtuple("Emitted", "output key value timestamp")
Emitted.__doc__ = "An emitted event: output name ('' for the main one), key and value bytes, timestamp or None."


class _Expiries:
    """When the values of states with a time-to-live expire, judged by the
    harness's processing time as the host judges them by its clock. An
    expired value is gone (a host leaves it out of snapshots)."""

    def __init__(self, h):
        self.h = h
        self.at = {}  # (kind, name, key, sub_key) -> expiry

    def _expiry(self, ttl):
        return self.h.processing_time + ttl.millis

    def expired_on_read(self, where, ttl):
        """Whether the value at ``where`` expired (forgetting its expiry); a
        live one read restarts its time if ``ttl`` says so."""
        if ttl is None or where not in self.at:
            return False
        if self.at[where] <= self.h.processing_time:
            del self.at[where]
            return True
        if ttl.refresh_on_read:
            self.at[where] = self._expiry(ttl)
        return False

    def live(self, where):
        """Whether the value at ``where`` is live (a listing: no refresh)."""
        return self.at.get(where, self.h.processing_time + 1) > self.h.processing_time

    def written(self, where, ttl, present):
        if ttl is not None and present:
            self.at[where] = self._expiry(ttl)
        else:
            self.at.pop(where, None)


def _slot_values(values):
    """Stored values (bytes, or ``None`` for none) as the host sends them:
    presence flags, the values back to back, and their offsets."""
    present = [v is not None for v in values]
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + (len(v) if v is not None else 0))
    return present, b"".join(v for v in values if v is not None), offsets


class _Value:
    def __init__(self, h, name, ttl):
        self.h, self.name, self.ttl = h, name, ttl

    def _read(self, key):
        """The stored value of ``key``, or None (an expired one forgotten)."""
        store = self.h._values.setdefault(self.name, {})
        if self.h.expiries.expired_on_read(("v", self.name, key, b""), self.ttl):
            store.pop(key, None)
        return store.get(key)

    def get_all(self):
        h = self.h
        h._check_keyed()
        h.value_fetches += 1
        return _slot_values([self._read(key) for key in h._keys])

    def set_many(self, slots, present, data, offsets):
        h = self.h
        h._check_keyed()
        self._write([h._key(slot) for slot in slots], present, data, offsets)

    def get_many(self, slots):
        h = self.h
        h._check_keyed()
        h.value_fetches += 1
        h.values_fetched += len(slots)
        return _slot_values([self._read(h._key(slot)) for slot in slots])

    def set_keyed(self, keys, key_offsets, present, data, offsets):
        """Writes by key, as the host allows in any call: only keys the
        harness has handed the instance."""
        h = self.h
        keys = [bytes(keys[key_offsets[i] : key_offsets[i + 1]]) for i in range(len(key_offsets) - 1)]
        for key in keys:
            if key not in h._handed:
                raise StateError(f"malformed state write: key {key!r} was never handed to this instance")
        h.keyed_writes += len(keys)
        h.keyed_write_calls += 1
        self._write(keys, present, data, offsets)

    def _write(self, keys, present, data, offsets):
        store = self.h._values.setdefault(self.name, {})
        for i, key in enumerate(keys):
            self.h.expiries.written(("v", self.name, key, b""), self.ttl, present[i])
            if present[i]:
                store[key] = bytes(data[offsets[i] : offsets[i + 1]])
            else:
                store.pop(key, None)


class _Map:
    def __init__(self, h, name, ttl):
        self.h, self.name, self.ttl = h, name, ttl

    def _lookup(self, entry):
        store = self.h.maps.setdefault(self.name, {})
        if self.h.expiries.expired_on_read(("m", self.name) + entry, self.ttl):
            store.pop(entry, None)
        return store.get(entry)

    def get(self, slot, sub_key):
        h = self.h
        h._check_keyed()
        return self._lookup((h._key(slot), bytes(sub_key)))

    def get_many(self, slots, sub_keys, offsets):
        h = self.h
        h._check_keyed()
        h.map_fetches += 1
        entries = [(h._key(slot), bytes(sub_keys[offsets[i] : offsets[i + 1]])) for i, slot in enumerate(slots)]
        return _slot_values([self._lookup(entry) for entry in entries])

    def set_many(self, slots, sub_keys, sub_offsets, present, data, offsets):
        h = self.h
        h._check_keyed()
        store = h.maps.setdefault(self.name, {})
        for i, slot in enumerate(slots):
            entry = (h._key(slot), bytes(sub_keys[sub_offsets[i] : sub_offsets[i + 1]]))
            h.expiries.written(("m", self.name) + entry, self.ttl, present[i])
            if present[i]:
                store[entry] = bytes(data[offsets[i] : offsets[i + 1]])
            else:
                store.pop(entry, None)

    def set_keyed(self, keys, key_offsets, sub_keys, sub_offsets, present, data, offsets):
        """Writes by key, as the host allows in any call: only keys the
        harness has handed the instance."""
        h = self.h
        store = h.maps.setdefault(self.name, {})
        h.keyed_write_calls += 1
        for i in range(len(key_offsets) - 1):
            key = bytes(keys[key_offsets[i] : key_offsets[i + 1]])
            if key not in h._handed:
                raise StateError(f"malformed state write: key {key!r} was never handed to this instance")
            h.keyed_writes += 1
            entry = (key, bytes(sub_keys[sub_offsets[i] : sub_offsets[i + 1]]))
            h.expiries.written(("m", self.name) + entry, self.ttl, present[i])
            if present[i]:
                store[entry] = bytes(data[offsets[i] : offsets[i + 1]])
            else:
                store.pop(entry, None)

    def entries(self, slot, after, limit):
        h = self.h
        h._check_keyed()
        key = h._key(slot)
        h.map_listings += 1
        listed = sorted(
            (sub_key, value)
            for (k, sub_key), value in h.maps.setdefault(self.name, {}).items()
            if k == key and (after is None or sub_key > bytes(after)) and h.expiries.live(("m", self.name, k, sub_key))
        )
        return listed[:limit], len(listed) > limit

    def clear(self, slots):
        h = self.h
        h._check_keyed()
        keys = {h._key(slot) for slot in slots}
        store = h.maps.setdefault(self.name, {})
        for entry in [e for e in store if e[0] in keys]:
            del store[entry]


class _Broadcast:
    def __init__(self, h, name):
        self.h, self.name = h, name

    def entries(self):
        return list(self.h.broadcast.setdefault(self.name, {}).items())

    def set(self, key, value):
        self.h._check_broadcast()
        self.h.broadcast.setdefault(self.name, {})[bytes(key)] = bytes(value)

    def remove(self, key):
        self.h._check_broadcast()
        self.h.broadcast.setdefault(self.name, {}).pop(bytes(key), None)


class _FakeHost:
    def __init__(self, h):
        self.h = h

    def open_value(self, name, ttl=None):
        return _Value(self.h, name, ttl)

    def open_map(self, name, ttl=None):
        return _Map(self.h, name, ttl)

    def open_broadcast(self, name):
        return _Broadcast(self.h, name)

    def update_timers(self, changes):
        h = self.h
        if h._keys is None:
            raise StateError(_TIMER_NOT_KEYED)
        for slot, timestamp, event_time, delete in changes:
            timer = (h._key(slot), timestamp, event_time)
            if delete:
                h.timers.discard(timer)
            else:
                h.timers.add(timer)


class Harness:
    """An operator instance driven natively.

    ``broadcast_inputs`` lists the input indices that are broadcast inputs
    (their batches may write broadcast state).
    """

    def __init__(self, cls, config=(), broadcast_inputs=()):
        self._values = {}  # state name -> {key: bytes}
        self.maps = {}  # state name -> {(key, sub-key): bytes}
        self.broadcast = {}  # map name -> {key: bytes}
        self.timers = set()  # (key, timestamp, event_time)
        self.expiries = _Expiries(self)
        self.watermark = NO_TIMESTAMP
        self.processing_time = 0
        self.value_fetches = 0  # host calls that read value state
        self.values_fetched = 0  # values they read by slot (get-many)
        self.keyed_writes = 0  # values written back by key (set-keyed)
        self.keyed_write_calls = 0
        self._handed = set()  # every key handed to the instance
        self.map_fetches = 0  # map-state get-many calls
        self.map_listings = 0  # map-state entries calls
        self.broadcast_inputs = set(broadcast_inputs)
        self._keys = None
        self._input = 0
        pairs = sorted(dict(config).items()) if isinstance(config, dict) else sorted(config)
        self.runtime = Runtime(cls, [(str(k), str(v)) for k, v in pairs], _FakeHost(self))

    # -- what the fake host checks --------------------------------------
    def _check_keyed(self):
        if self._keys is None:
            raise StateError(_NOT_KEYED)

    def _check_broadcast(self):
        if self._input not in self.broadcast_inputs:
            raise StateError("broadcast state can only be changed while processing an event from a broadcast input")

    def _key(self, slot):
        if slot >= len(self._keys):
            raise StateError(f"slot {slot} is outside the current batch")
        return self._keys[slot]

    @property
    def values(self):
        """Value state as the host holds it — state name -> {key: bytes} —
        after the instance wrote back what it held, as before a snapshot."""
        self.flush()
        return self._values

    def flush(self):
        """Has the instance write back the state it holds between calls, as
        the host does before every snapshot (``operator.flush``)."""
        self.runtime.flush()

    # -- driving the operator --------------------------------------------
    def process(self, events, input=0, keyed=True):
        """Processes one batch. ``events``: ``(key, value)`` or ``(key,
        value, timestamp)`` tuples (keys and values encoded as the SDK
        encodes them). With ``keyed=False`` the events have no key slots."""
        data, offsets, timestamps, slots, keys, index = bytearray(), [0], [], [], [], {}
        any_ts = False
        for e in events:
            key, value = codec.encode(e[0]), codec.encode(e[1])
            ts = e[2] if len(e) > 2 else None
            data += key
            offsets.append(len(data))
            data += value
            offsets.append(len(data))
            timestamps.append(NO_TIMESTAMP if ts is None else ts)
            any_ts |= ts is not None
            if keyed:
                if key not in index:
                    index[key] = len(keys)
                    keys.append(key)
                slots.append(index[key])
        self._keys = keys if keyed else None
        self._handed.update(keys)
        self._input = input
        try:
            out = self.runtime.process(
                input, bytes(data), offsets, timestamps if any_ts else [], slots, self.watermark, self.processing_time
            )
        finally:
            self._keys = None
        return _emitted(out)

    def advance_watermark(self, watermark):
        """Moves the watermark and fires the event-time timers it reaches, as
        the host does: only if it moves forward."""
        if watermark <= self.watermark:
            return []
        self.watermark = watermark
        return self._fire(True, self.watermark)

    def advance_processing_time(self, time):
        """Moves the clock and fires the processing-time timers it has
        passed: as in the host, a timer fires once the clock is past its
        millisecond (a timer for 5999 fires at 6000)."""
        self.processing_time = max(self.processing_time, time)
        return self._fire(False, self.processing_time - 1)

    def _fire(self, event_time, until):
        """Fires the due timers as the host does: in (time, key) order, one
        timer per key a call, until none is due — timers set in ``on_timer``
        for a time already reached fire in the same advance."""
        emitted = []
        while True:
            due = sorted((t for t in self.timers if t[2] == event_time and t[1] <= until), key=lambda t: (t[1], t[0]))
            batch, keys_in_batch = [], set()
            for t in due:
                if t[0] in keys_in_batch:
                    break
                keys_in_batch.add(t[0])
                batch.append(t)
            if not batch:
                return emitted
            emitted += self._fire_batch(event_time, batch)

    def _fire_batch(self, event_time, due):
        for t in due:
            self.timers.discard(t)
        keys, data, offsets = [], bytearray(), [0]
        for key, _, _ in due:
            keys.append(key)
            data += key
            offsets.append(len(data))
        self._keys = keys
        self._handed.update(keys)
        try:
            out = self.runtime.on_timers(
                bytes(data),
                offsets,
                [t[1] for t in due],
                [event_time] * len(due),
                list(range(len(due))),
                self.watermark,
                self.processing_time,
            )
        finally:
            self._keys = None
        return _emitted(out)

    # -- looking at state -------------------------------------------------
    def state(self, name, key):
        """The decoded value of value state ``name`` for ``key``, or None."""
        raw = self.raw_state(name, key)
        return None if raw is None else codec.loads(raw)

    def raw_state(self, name, key):
        """The stored bytes of value state ``name`` for ``key``, or None
        (after a flush, as a snapshot would hold them)."""
        return self.values.get(name, {}).get(codec.encode(key))

    def map_entry(self, name, key, sub_key):
        raw = self.maps.get(name, {}).get((codec.encode(key), codec.encode(sub_key)))
        return None if raw is None else codec.loads(raw)

    def check_state(self, name, values, is_map=False, sub_keys=None, broadcast=False):
        """Runs ``check-state`` on values (encoded as the SDK stores them),
        with a map state's ``sub_keys`` (or a broadcast state's keys) beside
        them; raises ``ValueError`` if refused."""
        from .state import BROADCAST, MAP, VALUE, check_values

        kind = BROADCAST if broadcast else MAP if is_map else VALUE
        encoded = None if sub_keys is None else [codec.encode(k) for k in sub_keys]
        check_values(name, kind, [codec.encode(v) for v in values], encoded)


def _emitted(outputs):
    result = []
    for name, data, offsets, timestamps in outputs:
        for i in range((len(offsets) - 1) // 2):
            ts = timestamps[i] if timestamps else NO_TIMESTAMP
            result.append(
                Emitted(
                    name,
                    data[offsets[2 * i] : offsets[2 * i + 1]],
                    data[offsets[2 * i + 1] : offsets[2 * i + 2]],
                    None if ts == NO_TIMESTAMP else ts,
                )
            )
    return result
