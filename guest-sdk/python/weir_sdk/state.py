"""Keyed state over the host's bulk state interface.

The host hands out keyed state per *batch*, addressed by the slots of the
batch's distinct keys. As in the Rust SDK, a :class:`ValueState` without a
time-to-live is held in the instance between calls: a key's value is
fetched from the host the first time a call needs it (``get-many``, for all
of that call's keys not held yet, in one host call), read and written in
the instance's memory from then on, and written back by key
(``set-keyed``) when the host asks before a snapshot (``operator.flush``),
or when the instance holds more than its share of its memory limit.
Crossing the boundary is what a Python operator pays most for (each list
element passes through the bindings one by one), so a count read and
written by every event no longer crosses it twice per event.

A :class:`ValueState` with a time-to-live is fetched per batch (``get-all``,
on its first use in the batch) and written back at the end of the batch
(``set-many``): the host judges expiry on every read. A :class:`MapState`
fetches each (key, sub-key) entry on first use (or all of a batch's at once
with :meth:`MapState.prefetch`) and writes the changed entries back at the
end of the batch. The host takes snapshots between calls, after ``flush``,
so every snapshot sees all of a call's writes or none. A call that fails
fails the task, which restarts from its last checkpoint with new instances:
what a failed call left in the instance is never written back.

Values are stored as JSON (written exactly as the Rust SDK's serde_json
writes them), so a Python and a Rust version of a plugin read each other's
state: a Rust ``ValueState<u64>`` holding 3 stores ``3``, and so does a
Python ``ValueState`` set to ``3``.

Values returned by ``get`` may be cached objects: after changing a list or
dict in place, call ``set`` with it, or the change is lost.
"""

import math
from functools import partial
from itertools import accumulate

from . import codec
from .errors import StateError

__all__ = ["ValueState", "MapState", "BroadcastState"]

_NOT_KEYED = (
    "keyed state used on an event without a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state"
)
_TIMER_NOT_KEYED = "timers need an event with a key: set `key_by = true` for this operator in the job file, or, for an event of a broadcast input, keep what it carries in broadcast state"


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


_UNREAD = _Sentinel("<unread>")  # fetched, not decoded yet
_ABSENT = _Sentinel("<absent>")  # the key has no value
_MISSING = _Sentinel("<missing>")  # not held: the host may have a value

# The kinds of state `check-state` asks about, each a namespace of its own.
VALUE, MAP, BROADCAST = "value state", "map state", "broadcast state"

# States declared by creating handles, for `check-state`:
# (name, kind) -> validate function or None.
_declared = {}
# Their time-to-live (a Ttl or None), by (name, kind): `check-state` opens
# each state so, for the host to refuse one stored with another choice.
_declared_ttls = {}
# Further checks of stored (sub-key bytes, value) entries, by (name, kind):
# each raises ValueError with the refusal (a window's start and end must fit
# the windows' size).
_entry_checks = {}


def _declare(name, kind, validate, ttl=None):
    if not isinstance(name, str) or not name:
        raise ValueError("a state needs a non-empty name")
    _declared[(name, kind)] = validate
    _declared_ttls[(name, kind)] = ttl
    _entry_checks.pop((name, kind), None)


def declared_ttl(name, kind):
    """``(declared, ttl)`` of state ``name`` of ``kind``."""
    return (name, kind) in _declared, _declared_ttls.get((name, kind))


def _constrain(name, kind, check):
    _entry_checks[(name, kind)] = check


def check_values(name, kind, values, sub_keys=None):
    """Raises ``ValueError`` with a message unless every value (bytes) of
    state ``name`` of ``kind`` (VALUE, MAP or BROADCAST) can be read by the
    states this plugin declares. ``sub_keys``: a map state's entries'
    sub-keys, or a broadcast state's keys (bytes), beside ``values``."""
    if (name, kind) not in _declared:
        raise ValueError(
            f"this plugin declares no {kind} `{name}` (its stored entries would be lost); keep the state's "
            "name, or keep declaring the old state beside the new one (its entries are then carried along unused)"
        )
    validate = _declared[(name, kind)]
    entry_check = _entry_checks.get((name, kind))
    sub_keys = iter(sub_keys) if sub_keys is not None else None
    for i, raw in enumerate(values):
        sub_key = next(sub_keys, b"") if sub_keys is not None else b""
        try:
            value = codec.loads(raw)
            if validate is not None and validate(value) is False:
                raise ValueError("rejected by its validate function")
        except Exception as e:  # noqa: BLE001 - every failure refuses the value
            preview = bytes(raw).decode("utf-8", "replace")
            if len(preview) > 60:
                preview = preview[:60] + "…"
            raise ValueError(
                f"{kind} `{name}`: stored value #{i} ({preview}) cannot be read by this plugin: "
                f"{type(e).__name__}: {e}"
            ) from None
        if entry_check is not None:
            entry_check(bytes(sub_key), value)


def _decode(kind, name, raw):
    try:
        return codec.loads(raw)
    except ValueError as e:  # (UnicodeDecodeError is one)
        raise StateError(f"{kind} `{name}` holds a value this plugin cannot read ({e})") from None


def _encode(kind, name, value):
    try:
        return codec.dumps(value, finite=True).encode()
    except (TypeError, ValueError, RecursionError) as e:
        raise StateError(f"cannot encode {kind} `{name}`: {e}") from None


def _slot_values(values, encode):
    """``values`` (a list; ``_ABSENT`` for none) as the WIT ``slot-values``:
    presence flags, the values ``encode`` gives back to back, and their
    offsets. Built with comprehensions and ``accumulate`` (loops in C, not
    in the interpreter): a checkpoint writes back every value held and
    changed since the last one."""
    encoded = [b"" if value is _ABSENT else encode(value) for value in values]
    present = [value is not _ABSENT for value in values]
    return present, b"".join(encoded), list(accumulate(map(len, encoded), initial=0))


class Store:
    """The states of the operator instance and their caches for the current
    call. One per instance (a component instance is single-threaded)."""

    def __init__(self, host, restored=True, memory_limit_mb=None):
        self.host = host
        self.batch = 0  # counts calls; a cache is valid for one
        self.touched = []  # caches used in this call, to flush
        self.timers = {}  # (slot, timestamp, event_time) -> delete
        self.values = {}
        self.maps = {}
        self.mirrors = {}
        self.held_windows = {}  # Windows -> its windows held between calls
        # Whether the host may hold values this instance has not seen: a
        # fresh instance's keys have none until it writes them back.
        self.restored = restored
        self.held_entries = held_entries_of(memory_limit_mb)
        self._call_keys = None  # (data, offsets, key slots, offsets per key)
        self._slot_keys = None

    def begin(self, data=b"", offsets=(), key_slots=(), stride=2):
        """Starts a call over keys ``data[offsets[stride * i] : offsets[stride
        * i + 1]]``, whose slots are ``key_slots``."""
        self.batch += 1
        self.touched = []
        self.timers = {}
        self._call_keys = (data, offsets, key_slots, stride)
        self._slot_keys = None

    def slot_keys(self):
        """The call's distinct keys (bytes), by slot: slots number a call's
        keys in order of first appearance."""
        keys = self._slot_keys
        if keys is None:
            data, offsets, key_slots, stride = self._call_keys
            keys = []
            for i, slot in enumerate(key_slots):
                if slot >= len(keys):
                    if slot > len(keys):
                        raise StateError(f"the host numbered key slots out of order (slot {slot} at #{i}, expected {len(keys)})")
                    keys.append(data[offsets[stride * i] : offsets[stride * i + 1]])
            self._slot_keys = keys
        return keys

    def flush(self):
        """Ends a call: writes back what the call's caches changed (and the
        held values past their bound) and the timers it set."""
        for cache in self.touched:
            cache.flush()
        self.touched = []
        if self.timers:
            changes = [(s, t, ev, d) for (s, t, ev), d in self.timers.items()]
            self.timers = {}
            self.host.update_timers(changes)
        held = [cache for cache in self.values.values() if type(cache) is _HeldValues]
        if sum(len(cache.held) for cache in held) > self.held_entries:
            for cache in held:
                cache.evict_half()
        for windows in self.held_windows.values():
            windows.end_call()

    def write_back_held(self):
        """Writes back every held value the host does not have yet (before a
        snapshot: ``operator.flush``)."""
        for cache in self.values.values():
            if type(cache) is _HeldValues:
                cache.write_back()
        for windows in self.held_windows.values():
            windows.write_back()

    def discard(self):
        """Forgets the writes of a failed call. A failed call fails the task,
        which restarts from its last checkpoint with new instances, so the
        values held since the last flush go too: none of them may reach the
        host after the failure."""
        for cache in self.touched:
            cache.discard()
        self.touched = []
        self.timers = {}
        self.batch += 1
        for cache in self.values.values():
            if type(cache) is _HeldValues:
                cache.forget()
        for windows in self.held_windows.values():
            windows.forget()

    def value_cache(self, name, ttl=None):
        cache = self.values.get(name)
        if cache is None:
            cache = self.values[name] = _ValueCache(self, name, ttl) if ttl is not None else _HeldValues(self, name)
        return cache

    def windows_held(self, windows, make):
        """What ``windows`` hold between calls (``make(store)`` the first time:
        see ``weir_sdk.windows``)."""
        held = self.held_windows.get(windows)
        if held is None:
            held = self.held_windows[windows] = make(self)
        return held

    def map_cache(self, name, ttl=None):
        """The cache of map state ``name`` (the first opening's ``ttl``
        holds for every handle on the name)."""
        cache = self.maps.get(name)
        if cache is None:
            cache = self.maps[name] = _MapCache(self, name, ttl)
        return cache

    def mirror(self, name):
        mirror = self.mirrors.get(name)
        if mirror is None:
            mirror = self.mirrors[name] = _Mirror(self.host.open_broadcast(name))
        return mirror


class _ValueCache:
    __slots__ = ("store", "name", "raw", "batch", "encoded", "values", "dirty")

    def __init__(self, store, name, ttl):
        self.store = store
        self.name = name
        self.raw = store.host.open_value(name, ttl)
        self.batch = -1
        self.encoded = []
        self.values = []
        self.dirty = {}

    def load(self):
        present, data, offsets = self.raw.get_all()
        if len(offsets) != len(present) + 1:
            raise StateError(f"host sent malformed values for state `{self.name}`")
        self.encoded = [data[offsets[i] : offsets[i + 1]] if p else None for i, p in enumerate(present)]
        self.values = [_UNREAD] * len(present)
        self.dirty = {}
        self.batch = self.store.batch
        self.store.touched.append(self)

    def read(self, slot):
        value = self.values[slot]
        if value is _UNREAD:
            raw = self.encoded[slot]
            value = _ABSENT if raw is None else _decode("value state", self.name, raw)
            self.values[slot] = value
        return value

    def write(self, slot, value):
        self.values[slot] = value
        self.dirty[slot] = None

    def flush(self):
        if not self.dirty:
            return
        slots = list(self.dirty)
        values = [self.values[slot] for slot in slots]
        present, data, offsets = _slot_values(values, lambda value: _encode("value state", self.name, value))
        self.dirty = {}
        self.raw.set_many(slots, present, data, offsets)

    def discard(self):
        self.dirty = {}
        self.batch = -1


# What a held value is reckoned to take in the instance — a dict slot, the
# key's and the value's objects — for the bound on how many it holds: a
# short key and a number take ~150 bytes in CPython; a value held encoded
# (below) is at most _HELD_ENCODED bytes more.
_HELD_ENTRY_BYTES = 512
_HELD_ENCODED = 256

# Entries written back in one host call, as the Rust SDK does: the lists a
# call builds (and the bindings convert) stay small beside what is held.
_WRITE_BACK_ENTRIES = 16384

# The instance's memory limit when the host does not say (the host's default).
_DEFAULT_MEMORY_LIMIT_MB = 512


def held_entries_of(memory_limit_mb):
    """How many values an instance holds between calls under a memory limit
    of ``memory_limit_mb``: a quarter of the limit's worth (the interpreter,
    the call's batches and a write-back take their part): 262 144 at the
    host's default of 512 MiB."""
    limit = (memory_limit_mb or _DEFAULT_MEMORY_LIMIT_MB) << 20
    return max(1024, limit // 4 // _HELD_ENTRY_BYTES)


class _Stored:
    """A value held as the host stores it (JSON bytes), decoded on reading:
    one fetched and not read yet, or a container set by the plugin (held
    encoded, so that what it takes is known and bounded)."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw


class _HeldValues:
    """A value state without a time-to-live, held in the instance between
    calls by key: ``held`` maps a key's bytes to its value, ``_ABSENT``, or
    a :class:`_Stored` one; ``changed`` lists (as an ordered set) the keys
    whose held value the host does not have yet."""

    __slots__ = ("store", "name", "raw", "held", "changed", "fetched", "host_may_have", "long")

    def __init__(self, store, name):
        self.store = store
        self.name = name
        self.raw = store.host.open_value(name, None)
        self.held = {}
        self.changed = {}
        self.fetched = -1  # the call whose keys were fetched
        # Whether the host may hold a value of a key not held: after a
        # restore, or once held values were evicted.
        self.host_may_have = store.restored
        self.long = []  # keys set to long values in this call

    def resolve(self, key, value):
        """The value of ``key`` whose held entry is ``value`` (``_MISSING``
        or ``_Stored``): fetched or decoded; ``_ABSENT`` for none."""
        if value is _MISSING:
            value = self.fetch(key)
        if type(value) is _Stored:
            value = _decode("value state", self.name, value.raw)
            if type(value) in _SCALARS:
                self.held[key] = value
        return value

    def fetch(self, key):
        """Fetches the values of the call's keys not held (one host call,
        once a call) and returns ``key``'s held entry."""
        held = self.held
        store = self.store
        if not self.host_may_have:
            held[key] = _ABSENT
            return _ABSENT
        if self.fetched != store.batch:
            self.fetched = store.batch
            keys = store.slot_keys()
            slots = [slot for slot, k in enumerate(keys) if k not in held]
            if slots:
                present, data, offsets = self.raw.get_many(slots)
                if len(present) != len(slots) or len(offsets) != len(slots) + 1:
                    raise StateError(f"host sent malformed values for state `{self.name}`")
                for i, slot in enumerate(slots):
                    held[keys[slot]] = _Stored(data[offsets[i] : offsets[i + 1]]) if present[i] else _ABSENT
        return held.get(key, _ABSENT)

    def write(self, key, value):
        """Holds ``value`` (``_ABSENT``: none) as ``key``'s, to write back.
        A value that is not a number, a boolean, ``None`` or a short ASCII
        string is encoded now, so that one the host cannot store fails the
        call that set it; held encoded if short, else written back at the
        end of the call (:meth:`flush`) and not held."""
        t = type(value)
        if t is float:
            if not math.isfinite(value):
                _encode("value state", self.name, value)  # refused, naming the state
        elif value is not _ABSENT and (
            t not in _SCALARS or t is str and (len(value) > _HELD_ENCODED or not value.isascii())
        ):
            value = _Stored(_encode("value state", self.name, value))
            if len(value.raw) > _HELD_ENCODED:
                if not self.long:
                    self.store.touched.append(self)
                self.long.append(key)
        self.held[key] = value
        self.changed[key] = None

    def flush(self):
        """Ends a call that set long values: writes those still long back,
        no longer held, so that the instance's memory stays bounded."""
        held = self.held
        long = [k for k in dict.fromkeys(self.long) if type(held[k]) is _Stored and len(held[k].raw) > _HELD_ENCODED]
        self.long = []
        self.write_back(long)
        for key in long:
            del held[key]
        if long:
            self.host_may_have = True

    def discard(self):
        pass  # (see Store.discard)

    def forget(self):
        """Forgets every held value, written back or not."""
        self.held = {}
        self.changed = {}
        self.long = []
        self.host_may_have = True

    def write_back(self, keys=None):
        """Writes back ``keys`` (every changed one if ``None``) by key, in
        host calls of at most ``_WRITE_BACK_ENTRIES``."""
        if keys is None:
            keys = list(self.changed)
        for start in range(0, len(keys), _WRITE_BACK_ENTRIES):
            self._write_back(keys[start : start + _WRITE_BACK_ENTRIES])

    def _write_back(self, keys):
        values = [self.held[key] for key in keys]
        present, data, offsets = _slot_values(values, partial(_held_encoded, self.name))
        key_offsets = list(accumulate(map(len, keys), initial=0))
        self.raw.set_keyed(b"".join(keys), key_offsets, present, data, offsets)
        changed = self.changed
        for key in keys:
            del changed[key]

    def evict_half(self):
        """Writes back the changed values and forgets the half of the held
        ones held longest: a key evicted is fetched again when next used."""
        self.write_back()
        held = self.held
        for key in list(held)[: len(held) // 2]:
            del held[key]
        self.host_may_have = True


def _held_encoded(name, value):
    """A held value (not ``_ABSENT``) as the host stores it."""
    t = type(value)
    if t is int:  # (a count: the most common value, written out here)
        return str(value).encode()
    if t is _Stored:
        return value.raw
    return _encode("value state", name, value)


# Values held as they are: immutable, so a plugin cannot change them behind
# the state's back, and small (a string's length aside).
_SCALARS = frozenset((int, float, str, bool, type(None)))


_LIST_PAGE = 4096


def _sub_key(raw):
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


class _MapCache:
    __slots__ = ("store", "name", "raw", "batch", "entries", "dirty")

    def __init__(self, store, name, ttl):
        self.store = store
        self.name = name
        self.raw = store.host.open_map(name, ttl)
        self.batch = -1
        self.entries = {}  # (slot, sub-key bytes) -> value or _ABSENT
        self.dirty = {}

    def begin(self):
        self.entries = {}
        self.dirty = {}
        self.batch = self.store.batch
        self.store.touched.append(self)

    def read(self, slot, sub_key):
        entry = (slot, sub_key)
        value = self.entries.get(entry, _UNREAD)
        if value is _UNREAD:
            raw = self.raw.get(slot, sub_key)
            value = _ABSENT if raw is None else _decode("map state", self.name, raw)
            self.entries[entry] = value
        return value

    def prefetch(self, wanted):
        slots, sub_keys, sub_offsets, keys = [], [], [0], []
        pos = 0
        entries = self.entries
        for slot, sub_key in wanted:
            entry = (slot, sub_key)
            if entry in entries:
                continue
            entries[entry] = _UNREAD
            slots.append(slot)
            sub_keys.append(sub_key)
            pos += len(sub_key)
            sub_offsets.append(pos)
            keys.append(entry)
        if not keys:
            return
        present, data, offsets = self.raw.get_many(slots, b"".join(sub_keys), sub_offsets)
        for i, entry in enumerate(keys):
            entries[entry] = (
                _decode("map state", self.name, data[offsets[i] : offsets[i + 1]]) if present[i] else _ABSENT
            )

    def write(self, slot, sub_key, value):
        entry = (slot, sub_key)
        self.entries[entry] = value
        self.dirty[entry] = None

    def flush(self):
        if not self.dirty:
            return
        entries = list(self.dirty)
        slots = [slot for slot, _ in entries]
        sub_keys, sub_offsets, spos = [], [0], 0
        for _, sub_key in entries:
            sub_keys.append(sub_key)
            spos += len(sub_key)
            sub_offsets.append(spos)
        values = [self.entries[e] for e in entries]
        present, data, offsets = _slot_values(values, lambda value: _encode("map state", self.name, value))
        self.dirty = {}
        self.raw.set_many(slots, b"".join(sub_keys), sub_offsets, present, data, offsets)

    def listing(self, slot):
        """The slot's entries, {sub-key bytes: value}, in sub-key order: the
        host's, a page at a time, with this call's unsent writes over them."""
        listed, after = {}, None
        while True:
            pairs, more = self.raw.entries(slot, after, _LIST_PAGE)
            for sub_key, raw in pairs:
                listed[bytes(sub_key)] = _decode("map state", self.name, raw)
            if not more or not pairs:
                break
            after = bytes(pairs[-1][0])
        for (s, sub_key) in self.dirty:
            if s == slot:
                value = self.entries[(s, sub_key)]
                if value is _ABSENT:
                    listed.pop(sub_key, None)
                else:
                    listed[sub_key] = value
        return {k: listed[k] for k in sorted(listed)}

    def is_empty(self, slot):
        """Whether the slot has no entry: none written in this call, and none
        on the host but those removed in it (one host call for a few)."""
        removed = set()
        for s, sub_key in self.dirty:
            if s == slot:
                if self.entries[(s, sub_key)] is not _ABSENT:
                    return False
                removed.add(sub_key)
        pairs, more = self.raw.entries(slot, None, len(removed) + 1)
        if any(bytes(sub_key) not in removed for sub_key, _ in pairs):
            return False
        # More only when the host sent fewer than asked (it bounds a page).
        return not more or not self.listing(slot)

    def clear_key(self, slot):
        """Clears the slot's map on the host; this call's entries of it are
        absent from then on, and its unsent writes to them dropped."""
        self.raw.clear([slot])
        for entry in [e for e in self.entries if e[0] == slot]:
            self.entries[entry] = _ABSENT
            self.dirty.pop(entry, None)

    def discard(self):
        self.entries = {}
        self.dirty = {}
        self.batch = -1


class _Mirror:
    """A full copy of a broadcast map: only this instance writes it."""

    __slots__ = ("raw", "entries")

    def __init__(self, raw):
        self.raw = raw
        self.entries = dict(raw.entries())


def _slot(ctx):
    slot = ctx._slot
    if slot is None:
        raise StateError(_NOT_KEYED)
    return slot


class Ttl:
    """A time-to-live for a state's values (Flink's ``StateTtlConfig``): a
    value expires ``millis`` of processing time — the host's wall clock —
    after it was last written, or read too with ``refresh_on_read``. An
    expired value reads as absent; the host removes expired values from
    its storage and snapshots in the background. The time a value expires
    at is stored with it, so it holds across restores; a state keeps the
    choice it was first opened with (with or without a time-to-live) for as
    long as its snapshots last. As in the Rust SDK."""

    __slots__ = ("millis", "refresh_on_read")

    def __init__(self, millis, refresh_on_read=False):
        if type(millis) is not int or millis < 1:
            raise ValueError(f"a time-to-live is a whole number of milliseconds, at least 1, not {millis!r}")
        self.millis = millis
        self.refresh_on_read = refresh_on_read

    def __repr__(self):
        return f"Ttl({self.millis}, refresh_on_read={self.refresh_on_read})"


class ValueState:
    """A keyed value state: at most one JSON value per key.

    Create it in ``init`` (or at class level) with a name that stays the
    same across versions of the plugin: snapshots store state by that name.
    ``validate``, if given, is called with each decoded value when the host
    asks (before an upgrade) whether this plugin can read another version's
    values: it rejects a value by raising or returning ``False``. ``ttl``
    (a :class:`Ttl`), if given, makes values expire.
    """

    __slots__ = ("name", "_ttl", "_store", "_cache")

    def __init__(self, name, validate=None, ttl=None):
        _declare(name, VALUE, validate, ttl)
        self.name = name
        self._ttl = ttl
        self._store = None
        self._cache = None

    def _loaded(self, ctx):
        store = ctx._store
        if self._store is not store:
            self._cache = store.value_cache(self.name, self._ttl)
            self._store = store
        cache = self._cache
        if cache.batch != store.batch:
            cache.load()
        return cache

    def _held(self, ctx):
        """The instance's held values of this state (no time-to-live)."""
        if ctx._slot is None:
            raise StateError(_NOT_KEYED)
        store = ctx._store
        if self._store is not store:
            self._cache = store.value_cache(self.name, self._ttl)
            self._store = store
        return self._cache

    # `get` and `set` run for every event: a held value's path is written
    # out in them rather than in calls, which cost the interpreter most.
    def get(self, ctx, default=None):
        """The current key's value, or ``default`` if it has none."""
        if self._ttl is None:
            cache = self._cache
            if self._store is not ctx._store or ctx._slot is None:
                cache = self._held(ctx)
            value = cache.held.get(ctx.key, _MISSING)
            if type(value) is _Stored or value is _MISSING:
                value = cache.resolve(ctx.key, value)
            return default if value is _ABSENT else value
        slot = ctx._slot
        if slot is None:
            raise StateError(_NOT_KEYED)
        cache = self._cache
        if self._store is not ctx._store or cache.batch != ctx._store.batch:
            cache = self._loaded(ctx)
        value = cache.values[slot]
        if value is _UNREAD:
            value = cache.read(slot)
        return default if value is _ABSENT else value

    def set(self, ctx, value):
        """Sets the current key's value (any JSON-encodable value; ``None``
        is stored as JSON ``null``, use :meth:`clear` to remove)."""
        if self._ttl is None:
            cache = self._cache
            if self._store is not ctx._store or ctx._slot is None:
                cache = self._held(ctx)
            if type(value) is int:
                key = ctx.key
                cache.held[key] = value
                cache.changed[key] = None
            else:
                cache.write(ctx.key, value)
            return
        slot = ctx._slot
        if slot is None:
            raise StateError(_NOT_KEYED)
        cache = self._cache
        if self._store is not ctx._store or cache.batch != ctx._store.batch:
            cache = self._loaded(ctx)
        cache.values[slot] = value
        cache.dirty[slot] = None

    def clear(self, ctx):
        """Removes the current key's value."""
        if self._ttl is None:
            self._held(ctx).write(ctx.key, _ABSENT)
            return
        self._loaded(ctx).write(_slot(ctx), _ABSENT)

    def update(self, ctx, f, default=None):
        """Sets the current key's value to ``f(old value or default)`` and
        returns it."""
        value = f(self.get(ctx, default))
        self.set(ctx, value)
        return value

    def __repr__(self):
        return f"ValueState({self.name!r})"


class MapState:
    """A keyed map state: for the current key, JSON values by sub-key — for
    keys with many entries of which an event touches few (one accumulator
    per window, say). Sub-keys are encoded like event keys (``int`` as
    decimal text, ``str`` as UTF-8, ``bytes`` as they are), as in the Rust
    SDK.

    An entry is fetched from the host on its first use in a call, one host
    call each; :meth:`prefetch` (from ``Operator.prepare``) fetches a whole
    batch's entries in one. ``ttl`` (a :class:`Ttl`), if given, makes each
    entry expire: an expired entry reads as absent and is not listed.
    """

    __slots__ = ("name", "_ttl", "_store", "_cache")

    def __init__(self, name, validate=None, ttl=None):
        _declare(name, MAP, validate, ttl)
        self.name = name
        self._ttl = ttl
        self._store = None
        self._cache = None

    def _cached(self, store):
        if self._store is not store:
            self._cache = store.map_cache(self.name, self._ttl)
            self._store = store
        cache = self._cache
        if cache.batch != store.batch:
            cache.begin()
        return cache

    def get(self, ctx, sub_key, default=None):
        """The current key's value under ``sub_key``, or ``default``."""
        value = self._cached(ctx._store).read(_slot(ctx), codec.encode(sub_key))
        return default if value is _ABSENT else value

    def set(self, ctx, sub_key, value):
        """Sets the current key's value under ``sub_key``."""
        self._cached(ctx._store).write(_slot(ctx), codec.encode(sub_key), value)

    def remove(self, ctx, sub_key):
        """Removes the current key's entry ``sub_key``."""
        self._cached(ctx._store).write(_slot(ctx), codec.encode(sub_key), _ABSENT)

    def entries(self, ctx):
        """The current key's ``(sub_key, value)`` pairs, in byte order of the
        encoded sub-keys (an ``int`` is decimal text: ``10`` sorts before
        ``9``). Sub-keys come back as ``str`` (``bytes`` where they are not
        UTF-8): pass an ``int`` one to ``int()``."""
        listed = self._cached(ctx._store).listing(_slot(ctx))
        return [(_sub_key(k), v) for k, v in listed.items()]

    def keys(self, ctx):
        """The current key's sub-keys, in the order of :meth:`entries`."""
        return [_sub_key(k) for k in self._cached(ctx._store).listing(_slot(ctx))]

    def is_empty(self, ctx):
        """Whether the current key has no entry (without listing its map)."""
        return self._cached(ctx._store).is_empty(_slot(ctx))

    def clear(self, ctx):
        """Removes every entry of the current key, whatever its sub-key —
        how a key's map is dropped when it is done with."""
        self._cached(ctx._store).clear_key(_slot(ctx))

    def prefetch(self, batch, entries):
        """Fetches the entries ``(slot, sub_key)`` a batch will use in one
        host call; entries already fetched in this call are not fetched again."""
        if batch._slots is None:
            raise StateError(_NOT_KEYED)
        self._cached(batch._store).prefetch((slot, codec.encode(k)) for slot, k in entries)

    def __repr__(self):
        return f"MapState({self.name!r})"


class ListState:
    """A keyed list state: for the current key, a list of JSON values that
    grows by appending — to buffer a key's events until a timer or a count
    says what to do with them. Stored as the Rust SDK's ``ListState`` stores
    it (map state ``name``, item ``i`` under sub-key ``i`` as 20 digits, and
    value state ``name#next``, the list's length), so either reads what the
    other wrote. Appending does not read the list. With a ``ttl``, each item
    expires on its own and is left out of :meth:`get`; :meth:`len` counts
    the items added since the list was last emptied until the last of them
    expires."""

    __slots__ = ("_items", "_next")

    def __init__(self, name, validate=None, ttl=None):
        self._items = MapState(name, validate, ttl)
        self._next = ValueState(name + "#next", validate=lambda n: type(n) is int and n >= 0, ttl=ttl)

    def add(self, ctx, value):
        """Appends ``value`` to the current key's list."""
        index = self._next.get(ctx, 0)
        self._items.set(ctx, f"{index:020d}", value)
        self._next.set(ctx, index + 1)

    def add_all(self, ctx, values):
        """Appends every value of ``values``, in order."""
        for value in values:
            self.add(ctx, value)

    def get(self, ctx):
        """The current key's list, in the order its items were added."""
        return [value for _, value in self._items.entries(ctx)]

    def update(self, ctx, values):
        """Replaces the current key's list by ``values``."""
        self.clear(ctx)
        self.add_all(ctx, values)

    def clear(self, ctx):
        """Empties the current key's list."""
        self._items.clear(ctx)
        self._next.clear(ctx)

    def len(self, ctx):
        """How many items the current key's list holds (without reading them)."""
        return self._next.get(ctx, 0)

    def __repr__(self):
        return f"ListState({self._items.name!r})"


class BroadcastState:
    """A broadcast map: JSON values by key (encoded like event keys), held
    in full by every subtask. Any call may read it; only a call processing a
    batch from a broadcast input (``broadcast = [...]`` in the job file) may
    change it. Read from a local mirror, loaded on first use."""

    __slots__ = ("name",)

    def __init__(self, name, validate=None):
        _declare(name, BROADCAST, validate)
        self.name = name

    def get(self, ctx, key, default=None):
        raw = ctx._store.mirror(self.name).entries.get(codec.encode(key))
        return default if raw is None else _decode("broadcast state", self.name, raw)

    def set(self, ctx, key, value):
        key = codec.encode(key)
        encoded = _encode("broadcast state", self.name, value)
        mirror = ctx._store.mirror(self.name)
        mirror.raw.set(key, encoded)
        mirror.entries[key] = encoded

    def remove(self, ctx, key):
        key = codec.encode(key)
        mirror = ctx._store.mirror(self.name)
        mirror.raw.remove(key)
        mirror.entries.pop(key, None)

    def items(self, ctx):
        """Every entry as ``(key bytes, value)``, in no particular order."""
        return [(k, _decode("broadcast state", self.name, v)) for k, v in ctx._store.mirror(self.name).entries.items()]

    def __repr__(self):
        return f"BroadcastState({self.name!r})"
