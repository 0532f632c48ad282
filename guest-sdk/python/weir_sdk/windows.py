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
        def prepare(self, batch):
            self.windows.prefetch(batch)          # one host call per batch
        def process(self, ctx, event):
            for result in self.windows.add(ctx, event, event.value_float()):
                # {"start":…,"end":…,"value":…}, at the window's end - 1
                ctx.emit(event.key, result, timestamp=result["end"] - 1)
        def on_timer(self, ctx, timer):
            for result in self.windows.on_timer(ctx, timer):
                ctx.emit(timer.key, result)

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

from .core import NO_TIMESTAMP, TimeDomain, _domain
from .errors import InputError
from .state import MAP, MapState, ValueState, _constrain

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
        """Fetches the accumulators of every window the batch's events fall
        in, in one host call: call it from ``Operator.prepare``."""
        wanted = {}  # (slot, start), without repeats
        for slot, event in batch.events():
            if self.event_time:
                if event.timestamp is None:
                    continue  # `add` reports it
                t = event.timestamp
            else:
                t = batch.processing_time
            for start, _ in self.assign(t):
                wanted[(slot, start)] = None
        self.state.prefetch(batch, wanted)

    def add(self, ctx, event, input):
        """Adds ``event`` (with ``input`` for the aggregate) to its windows.
        Returns the updated results of windows that had already fired (a
        late event within the allowed lateness), as dicts ``{"start",
        "end", "value"}``."""
        timestamp = self._time(ctx, event.timestamp)
        watermark = ctx._watermark if self.event_time else NO_TIMESTAMP
        aggregate, state = self.aggregate, self.state
        updated = []
        placed = False
        # Latest start first, as Flink assigns sliding windows: a late event
        # re-fires the windows it updates in that order.
        for start, end in reversed(self.assign(timestamp)):
            if self.event_time and end - 1 + self.lateness <= watermark:
                continue  # its window is gone
            placed = True
            entry = state.get(ctx, start)
            if entry is None:
                self._register_timers(ctx, end)
                acc, fired = aggregate.create(), False
            else:
                acc, fired = entry[1], entry[2]
            acc = aggregate.add(acc, input)
            if end - 1 <= watermark:
                # Late, within the allowed lateness: the result changes now.
                fired = True
                updated.append({"start": start, "end": end, "value": aggregate.result(acc)})
            state.set(ctx, start, [end, acc, fired])
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
        state, size = self.state, self.size
        results = []
        start = time + 1 - size
        entry = state.get(ctx, start)
        if entry is not None and entry[0] - 1 == time and not entry[2]:
            end, acc = entry[0], entry[1]
            results.append({"start": start, "end": end, "value": self.aggregate.result(acc)})
            if lateness == 0:
                state.remove(ctx, start)
            else:
                state.set(ctx, start, [end, acc, True])
                # Again: a window opened before an upgrade that raised the
                # lateness has no timer to forget it by (one per key and time).
                ctx.register_timer(end - 1 + lateness, self.domain)
        if lateness > 0:
            expired = time + 1 - lateness - size
            entry = state.get(ctx, expired)
            if entry is not None and entry[0] - 1 + lateness == time:
                state.remove(ctx, expired)
        return results


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
