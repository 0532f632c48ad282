"""Tumbling and sliding windows over event time or processing time, built on
keyed map state and timers — a port of the fixed-size windows of the Rust
SDK's ``weir_sdk::windows``, with the same state layout, so a Rust and a
Python window operator of the same configuration read each other's state.

Each (key, window start) has one map-state entry ``start -> [end, acc,
fired]`` (the start as decimal text, the entry as a JSON array), and a timer
at the window's end - 1. When the timer fires — in event time, when the
watermark passes the end — :meth:`Windows.on_timer` returns the window's
result. With allowed lateness a window is kept that much longer; an event
arriving late but within it updates the window and its result is returned
again at once. An event later than that is dropped, or sent to a side
output.

::

    from weir_sdk.windows import Windows, SUM

    class Sums(Operator):
        def init(self, config):
            self.windows = Windows.tumbling("sums", 1000, SUM, late_output="late")
        def process(self, ctx, event):
            for result in self.windows.add(ctx, event, event.value_float()):
                # {"start":…,"end":…,"value":…}, at the window's end - 1
                ctx.emit(event.key, result, timestamp=result["end"] - 1)
        def on_timer(self, ctx, timer):
            for result in self.windows.on_timer(ctx, timer):
                ctx.emit(timer.key, result)

:class:`Windows` hold their windows in the instance between calls, by key,
as the Rust SDK does (:class:`_HeldWindows`): a key's windows are read
from the host (one listing) the first time a call needs the key — never in
an instance whose state started empty — and written back by key when the
host asks before a snapshot (``operator.flush``); a window opened and fired
between two snapshots never crosses into the host. ``prefetch`` has
nothing left to fetch and is kept for plugins that call it.

Windows start at multiples of their size (slide) from the epoch, as Flink's;
``offset`` shifts them, as Flink's window offset does: with a size of one
day, ``offset=-8 * 3_600_000`` gives days from midnight in UTC+8.

Session windows — a window per burst of a key's events, closed after
``gap`` ms without one, merging when an event bridges two — are
:meth:`Windows.session`: a key's sessions live in the value state ``name``
as ``[[start, end, acc, fired], …]``, the Rust SDK's layout, and an
aggregate for them needs ``merge``.
"""

from collections import namedtuple

from itertools import accumulate

from .core import NO_TIMESTAMP, TimeDomain, _domain
from .errors import InputError, StateError
from .state import (
    _ABSENT,
    _LIST_PAGE,
    _WRITE_BACK_ENTRIES,
    MAP,
    MapState,
    ValueState,
    _constrain,
    _decode,
    _encode,
    _slot,
    _slot_values,
)

__all__ = ["Aggregate", "SUM", "COUNT", "Windows", "SessionWindows"]

Aggregate = namedtuple("Aggregate", "create add result merge", defaults=(None,))
Aggregate.__doc__ = """How a window folds its events: ``create()`` makes an empty
accumulator, ``add(acc, input)`` returns the new one, ``result(acc)`` the
window's value, and ``merge(acc, other)`` (needed by session windows only)
the accumulator of two merged sessions. Accumulators must be JSON values
(they live in state)."""

#: The sum of float inputs (stored as a JSON float, like the Rust ``Sum``).
SUM = Aggregate(lambda: 0.0, lambda acc, x: acc + x, lambda acc: acc, lambda acc, other: acc + other)
#: The number of inputs (the input is ignored).
COUNT = Aggregate(lambda: 0, lambda acc, _: acc + 1, lambda acc: acc, lambda acc, other: acc + other)


def _set_options(windows, aggregate, lateness, late_output, domain):
    """What fixed and session windows take alike."""
    windows.aggregate = aggregate
    windows.event_time = _domain(domain)
    windows.domain = TimeDomain.EVENT_TIME if windows.event_time else TimeDomain.PROCESSING_TIME
    windows.lateness = max(0, int(lateness))
    windows.late_output = late_output


def _valid_entry(entry):
    return isinstance(entry, list) and len(entry) == 3 and type(entry[0]) is int and type(entry[2]) is bool


class Windows:
    """Fixed-size windows with one aggregate, for every key of the operator.

    ``size`` and ``slide`` are in ms; ``offset`` (ms, taken modulo the
    slide) starts windows that long after multiples of the slide, and
    cannot change while windows are open (``check-state`` refuses it, as
    it does a new size); ``lateness`` keeps windows open that
    much longer after the watermark passed their end (event time only);
    ``late_output`` names the side output for events too late for every
    window (dropped when ``None``); ``domain`` is event time (default) or
    processing time. The state is the map state ``name``.
    """

    def __init__(
        self, name, size, aggregate, slide=None, offset=0, lateness=0, late_output=None, domain=TimeDomain.EVENT_TIME
    ):
        if size <= 0 or (slide is not None and slide <= 0):
            raise ValueError(f"windows `{name}`: the size and slide must be above 0 ms, not size={size}, slide={slide}")
        self.size = int(size)
        self.slide = int(slide) if slide is not None else self.size
        self.offset = int(offset) % self.slide
        _set_options(self, aggregate, lateness, late_output, domain)
        self.state = MapState(name, validate=_valid_entry)
        _constrain(name, MAP, self._check_stored)

    def _check_stored(self, sub_key, entry):
        """``check-state`` of a stored window (sub-key: its start; value:
        ``[end, accumulator, fired]``): one these windows would have. A
        window is found by the start the size and slide give now, so windows
        stored under other ones would never fire: refused, naming one."""
        try:
            start = int(sub_key.decode())
        except ValueError:
            raise ValueError(
                f"windows `{self.state.name}`: a stored window (sub-key {sub_key!r}) is not a window's start and "
                "end; was the state written by other windows, or by a map state of the same name?"
            ) from None
        end = entry[0]
        if end - start == self.size and start % self.slide == self.offset:
            return
        what = (
            f"tumbling windows of {self.size} ms"
            if self.slide == self.size
            else f"sliding windows of {self.size} ms every {self.slide} ms"
        )
        if self.offset:
            what += f" offset by {self.offset} ms"
        raise ValueError(
            f"windows `{self.state.name}` hold the window [{start}, {end}), which {what} do not have: their size, "
            "slide or offset changed since it was stored, and windows stored under the old ones would never fire "
            "(they are found by the start the new ones give). Keep the old size, slide and offset until the stored "
            "windows have fired — stop the job with a savepoint once the watermark has passed their ends, or let "
            "a bounded input finish — or give the changed windows a new name and keep the old windows beside them "
            "until they have fired"
        )

    @classmethod
    def tumbling(cls, name, size, aggregate, **options):
        return cls(name, size, aggregate, **options)

    @classmethod
    def sliding(cls, name, size, slide, aggregate, **options):
        return cls(name, size, aggregate, slide=slide, **options)

    @staticmethod
    def session(name, gap, aggregate, **options):
        """Session windows closed after ``gap`` ms without an event (see
        :class:`SessionWindows`; ``options`` as for fixed windows, but the
        offset and slide)."""
        return SessionWindows(name, gap, aggregate, **options)

    def assign(self, timestamp):
        """The windows an event at ``timestamp`` belongs to, as (start, end)
        in start order."""
        slide, size, offset = self.slide, self.size, self.offset
        shifted = timestamp - offset
        if slide == size:  # tumbling: one window
            start = shifted // size * size + offset
            return [(start, start + size)]
        last = shifted // slide * slide + offset
        first = (shifted - size) // slide * slide + slide + offset
        return [(s, s + size) for s in range(first, last + 1, slide)]

    def _time(self, ctx, timestamp):
        if not self.event_time:
            return ctx.processing_time
        if timestamp is None:
            raise InputError("event-time windows need events with timestamps")
        return timestamp

    def prefetch(self, batch):
        """Nothing: the windows are held between calls, and a key's are read
        from the host the first time it is used. (Plugins written when
        windows were fetched per batch call this from ``Operator.prepare``.)"""

    def _held(self, ctx):
        """The windows held for these windows in the instance's state."""
        return ctx._store.windows_held(self, self._hold)

    def _hold(self, store):
        return _HeldWindows(store, self)

    def add(self, ctx, event, input):
        """Adds ``event`` (with ``input`` for the aggregate) to its windows.
        Returns the updated results of windows that had already fired (a
        late event within the allowed lateness), as dicts ``{"start",
        "end", "value"}``."""
        timestamp = self._time(ctx, event.timestamp)
        watermark = ctx._watermark if self.event_time else NO_TIMESTAMP
        aggregate = self.aggregate
        held = self._held(ctx)
        key, windows = held.key(_slot(ctx))
        updated = []
        placed = False
        # Latest start first, as Flink assigns sliding windows: a late event
        # re-fires the windows it updates in that order.
        for start, end in reversed(self.assign(timestamp)):
            if self.event_time and end - 1 + self.lateness <= watermark:
                continue  # its window is gone
            placed = True
            window = windows.get(start)
            if window is None:
                self._register_timers(ctx, end)
                window = held.open(windows, start, end, aggregate.create())
            window[1] = aggregate.add(window[1], input)
            if end - 1 <= watermark:
                # Late, within the allowed lateness: the result changes now.
                window[2] = True
                updated.append({"start": start, "end": end, "value": aggregate.result(window[1])})
            held.changed[(key, start)] = None
        # An event in no window (between hopping windows) is not late
        # unless the watermark has passed it: it is dropped, as in time.
        if not placed and self.late_output and self.event_time and timestamp + self.lateness <= watermark:
            ctx.emit(event.key, event.value, output=self.late_output)
        return updated

    def _register_timers(self, ctx, end):
        ctx.register_timer(end - 1, self.domain)
        if self.lateness > 0 and self.event_time:
            ctx.register_timer(end - 1 + self.lateness, self.domain)

    def on_timer(self, ctx, timer):
        """Handles a fired timer: returns the results of the key's windows
        that end with it and forgets windows past their allowed lateness.
        Timers that are not these windows' are ignored."""
        if timer.domain is not self.domain:
            return []
        time = timer.timestamp
        lateness = self.lateness if self.event_time else 0
        held = self._held(ctx)
        key, windows = held.key(_slot(ctx))
        results = []
        start = time + 1 - self.size
        window = windows.get(start)
        if window is not None and window[0] - 1 == time and not window[2]:
            end = window[0]
            results.append({"start": start, "end": end, "value": self.aggregate.result(window[1])})
            if lateness == 0:
                held.remove(key, windows, start)
            else:
                window[2] = True
                held.changed[(key, start)] = None
                # Again: a window opened before an upgrade that raised the
                # lateness has no timer to forget it by (one per key and time).
                ctx.register_timer(end - 1 + lateness, self.domain)
        if lateness > 0:
            expired = time + 1 - lateness - self.size
            window = windows.get(expired)
            if window is not None and window[0] - 1 + lateness == time:
                held.remove(key, windows, expired)
        return results


class _HeldWindows:
    """The windows of one :class:`Windows`, held in the instance between
    calls by key, as the Rust SDK holds them: ``by_key`` maps a key's bytes
    to all its windows, ``{start: [end, acc, fired, stored]}`` (``stored``:
    the host may have it). A key's windows are listed from the host the
    first time a call needs the key — not at all while the host cannot have
    any (an instance whose state started empty, until it forgets) — and
    changed in place from then on; ``changed`` lists (as an ordered set) the
    ``(key, start)`` whose latest state the host lacks, written back by key
    (``set-keyed``) when the host asks before a snapshot, or at the end of
    a call once more than the instance's share of its memory limit is held
    (then every key is forgotten, and read again as it comes). A window
    opened and removed between two write-backs never reaches the host.
    Crossing into the host is what a Python operator pays most for (each
    list element through the bindings), and reading and writing each
    window every batch was most of a window operator's time.

    A failed call fails the task, which restarts from its last checkpoint
    with new instances: what was held is forgotten, never written back."""

    __slots__ = ("store", "windows", "map", "by_key", "held", "changed", "host_may_have", "batch", "slot_keys")

    def __init__(self, store, windows):
        self.store = store
        self.windows = windows
        self.map = store.map_cache(windows.state.name)  # its `raw`: the host's map state
        self.by_key = {}
        self.held = 0  # keys and windows, against `store.held_entries`
        self.changed = {}
        self.host_may_have = store.restored
        self.batch = -1
        self.slot_keys = {}  # this call's slot -> (key, its windows)

    def key(self, slot):
        """``(key, windows)`` of the key in ``slot`` of this call."""
        store = self.store
        if self.batch != store.batch:
            self.batch = store.batch
            self.slot_keys = {}
        found = self.slot_keys.get(slot)
        if found is None:
            key = bytes(store.slot_keys()[slot])
            windows = self.by_key.get(key)
            if windows is None:
                windows = self._read(slot) if self.host_may_have else {}
                self.by_key[key] = windows
                self.held += 1 + len(windows)
            found = self.slot_keys[slot] = (key, windows)
        return found

    def _read(self, slot):
        """Every window of the key in ``slot``, from the host, a page at a time."""
        name = self.windows.state.name
        windows, after = {}, None
        while True:
            pairs, more = self.map.raw.entries(slot, after, _LIST_PAGE)
            for sub_key, raw in pairs:
                entry = _decode("map state", name, raw)
                try:
                    start = int(bytes(sub_key).decode())
                except ValueError:
                    start = None
                if start is None or not _valid_entry(entry):
                    raise StateError(f"map state `{name}` holds an entry that is not a window's (sub-key {bytes(sub_key)!r})")
                windows[start] = [entry[0], entry[1], entry[2], True]
            if not more or not pairs:
                break
            after = bytes(pairs[-1][0])
        return windows

    def open(self, windows, start, end, acc):
        """Opens the window ``start`` (to ``end``) in a key's ``windows``."""
        window = windows[start] = [end, acc, False, False]
        self.held += 1
        return window

    def remove(self, key, windows, start):
        """Removes a window: written back as absent if the host may have it,
        else forgotten at once."""
        window = windows.pop(start)
        self.held -= 1
        if window[3]:
            self.changed[(key, start)] = None
        else:
            self.changed.pop((key, start), None)

    def end_call(self):
        """Past the bound, writes everything back and forgets it."""
        if self.held > self.store.held_entries:
            self.write_back()
            self.forget()

    def write_back(self):
        """Writes the changed windows back by key, in host calls of at most
        ``_WRITE_BACK_ENTRIES``. A failure leaves them all changed (sent
        again by the next write-back; the snapshot is abandoned)."""
        changed = list(self.changed)
        for first in range(0, len(changed), _WRITE_BACK_ENTRIES):
            self._write_keyed(changed[first : first + _WRITE_BACK_ENTRIES])
        by_key = self.by_key
        for key, start in changed:
            window = by_key[key].get(start)
            if window is not None:
                window[3] = True
        self.changed = {}

    def _write_keyed(self, changed):
        name = self.windows.state.name
        by_key = self.by_key
        keys = [key for key, _ in changed]
        sub_keys = [str(start).encode() for _, start in changed]
        values = []
        for key, start in changed:
            window = by_key[key].get(start)
            values.append(_ABSENT if window is None else window[:3])
        present, data, offsets = _slot_values(values, lambda value: _encode("map state", name, value))
        key_offsets = list(accumulate(map(len, keys), initial=0))
        sub_offsets = list(accumulate(map(len, sub_keys), initial=0))
        self.map.raw.set_keyed(b"".join(keys), key_offsets, b"".join(sub_keys), sub_offsets, present, data, offsets)

    def forget(self):
        """Forgets every held window, written back or not."""
        self.by_key = {}
        self.held = 0
        self.changed = {}
        self.slot_keys = {}
        self.host_may_have = True


def _valid_sessions(sessions):
    return isinstance(sessions, list) and all(
        isinstance(s, list) and len(s) == 4 and type(s[0]) is int and type(s[1]) is int and type(s[3]) is bool
        for s in sessions
    )


def _touches(session, start, end):
    """Whether ``session`` overlaps or touches ``[start, end)``: sessions that
    touch merge, as in Flink, so that events ``gap`` ms apart are in one."""
    return session[0] <= end and start <= session[1]


class SessionWindows:
    """A window per burst of a key's events: an event at ``t`` opens
    ``[t, t + gap)``, which merges with every session it overlaps or touches
    — the Rust SDK's ``Windows::session``, with its state layout (the value
    state ``name`` holds a key's sessions as ``[[start, end, acc, fired],
    …]``), so a Rust and a Python session operator read each other's state.

    Lateness follows Flink's: an event whose own session has passed the
    watermark and the allowed ``lateness`` still joins an open session it
    overlaps (extending it back); one that overlaps none is late. A session
    grown past the watermark fires again at its new end; a late event within
    the lateness returns the changed result at once.
    """

    def __init__(self, name, gap, aggregate, lateness=0, late_output=None, domain=TimeDomain.EVENT_TIME):
        if gap <= 0:
            raise ValueError(f"windows `{name}`: the gap must be above 0 ms, not {gap}")
        if aggregate.merge is None:
            raise ValueError(f"windows `{name}`: session windows merge, so their aggregate needs a `merge`")
        self.gap = int(gap)
        _set_options(self, aggregate, lateness, late_output, domain)
        self.state = ValueState(name, validate=_valid_sessions)

    def assign(self, timestamp):
        """The window an event at ``timestamp`` opens, before merging."""
        return [(timestamp, timestamp + self.gap)]

    def prefetch(self, batch):
        """Nothing to fetch: a key's sessions are one value, read with the batch's."""

    def _gone(self, end, watermark):
        return self.event_time and end - 1 + self.lateness <= watermark

    def add(self, ctx, event, input):
        """Adds ``event`` (with ``input`` for the aggregate) to its session.
        Returns the changed results of sessions that had already fired (a
        late event within the allowed lateness), as dicts ``{"start", "end",
        "value"}``."""
        if self.event_time:
            if event.timestamp is None:
                raise InputError("event-time windows need events with timestamps")
            timestamp, watermark = event.timestamp, ctx._watermark
        else:
            timestamp, watermark = ctx.processing_time, NO_TIMESTAMP
        start, end = timestamp, timestamp + self.gap
        sessions = self.state.get(ctx) or []
        joins_open = any(_touches(s, start, end) and not self._gone(s[1], watermark) for s in sessions)
        if self._gone(end, watermark) and not joins_open:
            if self.late_output:
                ctx.emit(event.key, event.value, output=self.late_output)
            return []
        aggregate = self.aggregate
        session = [start, end, aggregate.add(aggregate.create(), input), False]
        # A merged session may reach further ones: repeat until none touches.
        while True:
            other = next((s for s in sessions if _touches(s, session[0], session[1])), None)
            if other is None:
                break
            sessions.remove(other)
            # Its timers stay (one per key and time): when they fire, no
            # session ends there any more, and `on_timer` passes them by.
            session = [min(session[0], other[0]), max(session[1], other[1]), aggregate.merge(session[2], other[2]), session[3] or other[3]]
        ctx.register_timer(session[1] - 1, self.domain)
        if self.lateness > 0 and self.event_time:
            ctx.register_timer(session[1] - 1 + self.lateness, self.domain)
        updated = []
        if session[1] - 1 <= watermark:
            # Late, within the allowed lateness: the result changes now.
            session[3] = True
            updated.append({"start": session[0], "end": session[1], "value": aggregate.result(session[2])})
        else:
            session[3] = False  # grown past the watermark: fires again at its new end
        sessions.append(session)
        self.state.set(ctx, sessions)
        return updated

    def on_timer(self, ctx, timer):
        """Handles a fired timer: returns the results of the key's sessions
        that end with it, in start order, and forgets sessions past their
        allowed lateness. Timers that are not these windows' are ignored."""
        if timer.domain is not self.domain:
            return []
        sessions = self.state.get(ctx)
        if not sessions:
            return []
        time = timer.timestamp
        results = []
        for session in sessions:
            if session[1] - 1 == time and not session[3]:
                session[3] = True
                results.append({"start": session[0], "end": session[1], "value": self.aggregate.result(session[2])})
        lateness = self.lateness if self.event_time else 0
        kept = [s for s in sessions if s[1] - 1 + lateness > time]
        if not kept:
            self.state.clear(ctx)
        elif len(kept) != len(sessions) or results:
            self.state.set(ctx, kept)
        results.sort(key=lambda r: r["start"])
        return results
