"""The operator, what it sees (events, timers, the context) and the runtime
that drives it over the host's batches."""

import enum
import math
import re
from collections import namedtuple
from itertools import repeat
from operator import itemgetter

from . import codec
from .errors import ConfigError, InputError, StateError
from .state import _TIMER_NOT_KEYED, Store

__all__ = ["Operator", "Config", "TaskInfo", "TimeDomain", "Event", "Timer", "Context", "Batch"]

#: The timestamp that marks "no timestamp" on the wire (the minimum i64).
NO_TIMESTAMP = -(2**63)

_HOST_PREFIX = "weir."


class TimeDomain(enum.Enum):
    """The clock a timer follows."""

    #: Fires when the watermark reaches the timer.
    EVENT_TIME = "event"
    #: Fires once the wall clock has passed the timer (the millisecond after it).
    PROCESSING_TIME = "processing"


def _domain(domain):
    if domain is TimeDomain.EVENT_TIME or domain == "event":
        return True
    if domain is TimeDomain.PROCESSING_TIME or domain == "processing":
        return False
    raise ValueError(f"a time domain is TimeDomain.EVENT_TIME or TimeDomain.PROCESSING_TIME, not {domain!r}")


TaskInfo = namedtuple("TaskInfo", "subtask parallelism attempt")
TaskInfo.__doc__ = """Which instance this is: ``subtask`` (from 0) of ``parallelism``, and
``attempt`` (restarts of the job after failures; for logging and tests only)."""


_INTEGER = re.compile(r"[+-]?[0-9]+")


def _decimal_int(text):
    """An integer as Rust's parser reads an ``i64``: not Python's ``1_000``,
    padding with spaces or more than 64 bits, so that a job file means the
    same to every SDK."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(text)
    n = int(text)
    if not -(2**63) <= n < 2**63:
        raise ValueError(text)
    return n


def _decimal_float(text):
    """A finite number as Rust's ``f64`` parser reads it (see
    :func:`_decimal_int`): ASCII only, not Python's other digits
    (``float("１２")`` is 12.0); not ``inf``, ``nan`` or one too large for
    a double (``1e999``), as the JavaScript SDK refuses them."""
    if "_" in text or text != text.strip() or not text.isascii():
        raise ValueError(text)
    x = float(text)
    if not math.isfinite(x):
        raise ValueError(text)
    return x


class Config(dict):
    """The operator's ``config`` table from the job file: a ``dict`` of
    ``str`` to ``str``. The host's ``weir.*`` keys are not in it but in
    :attr:`task`.

    The typed getters raise :class:`ConfigError` (``invalid-config``) naming
    the key when a value does not parse.
    """

    def __init__(self, pairs=()):
        pairs = dict(pairs)
        host = {k[len(_HOST_PREFIX) :]: pairs.pop(k) for k in list(pairs) if k.startswith(_HOST_PREFIX)}
        super().__init__(pairs)

        def number(name, default=0):
            try:
                return int(host[name])
            except (KeyError, ValueError):
                return default

        #: :class:`TaskInfo` from the host's ``weir.subtask``, ``weir.parallelism``, ``weir.attempt``.
        self.task = TaskInfo(number("subtask"), number("parallelism", 1), number("attempt"))
        #: Whether the instance starts from restored state (a checkpoint or a
        #: savepoint), from the host's ``weir.state``; an older host that does
        #: not say counts as restored, as in the Rust SDK's ``is_restored``.
        self.restored = host.get("state", "restored") == "restored"
        #: The instance's memory limit in MiB (``weir.memory-limit-mb``), or ``None``.
        self.memory_limit_mb = number("memory-limit-mb", None)

    def allow_only(self, *known):
        """Raises :class:`ConfigError` naming the first key not in ``known``."""
        for key in sorted(self):
            if key not in known:
                understood = ", ".join(known) if known else "no keys"
                raise ConfigError(f"unknown key `{key}`; this operator understands: {understood}")

    def _parse(self, key, default, parse, what):
        text = self.get(key)
        if text is None:
            return default
        try:
            return parse(text)
        except ValueError:
            raise ConfigError(f"`{key}` = {text!r} is not a valid {what}") from None

    def get_int(self, key, default=None):
        return self._parse(key, default, _decimal_int, "integer (64-bit)")

    def get_float(self, key, default=None):
        return self._parse(key, default, _decimal_float, "finite number")

    def get_bool(self, key, default=None):
        def parse(text):
            if text in ("true", "false"):
                return text == "true"
            raise ValueError(text)

        return self._parse(key, default, parse, "boolean (true or false)")

    def get_choice(self, key, choices, default=None):
        """The value of ``key``, which must be one of ``choices``."""
        text = self.get(key, default)
        if text not in choices:
            raise ConfigError(f"`{key}` is one of {', '.join(map(repr, choices))}, not {text!r}")
        return text


class Event(tuple):
    """One input event, a named tuple ``(key, value, timestamp, input)``:
    ``key`` and ``value`` are ``bytes`` (``key`` is empty when the event is
    not keyed), ``timestamp`` is milliseconds since the epoch or ``None``,
    ``input`` the index of the input it arrived on (its position in the
    operator's ``inputs`` in the job file, then ``broadcast``)."""

    __slots__ = ()

    def __new__(cls, key, value, timestamp=None, input=0):
        return tuple.__new__(cls, (key, value, timestamp, input))

    key = property(itemgetter(0), doc="The key's bytes; empty when the event is not keyed.")
    value = property(itemgetter(1), doc="The value's bytes.")
    timestamp = property(itemgetter(2), doc="The event timestamp in ms since the epoch, or None.")
    input = property(itemgetter(3), doc="Which input the event arrived on.")

    def key_str(self):
        """The key as UTF-8 text (:class:`InputError` if it is not)."""
        return _text(self[0], "key")

    def value_str(self):
        """The value as UTF-8 text (:class:`InputError` if it is not)."""
        return _text(self[1], "value")

    def value_int(self):
        """The value as an integer written in decimal."""
        try:
            return int(self[1])
        except ValueError:
            raise InputError(f"expected an integer, got {_preview(self[1])}") from None

    def value_float(self):
        """The value as a number written in decimal."""
        try:
            return float(self[1])
        except ValueError:
            raise InputError(f"expected a number, got {_preview(self[1])}") from None

    def value_json(self):
        """The value decoded as JSON."""
        try:
            return codec.loads(self[1])
        except ValueError as e:
            raise InputError(f"expected JSON: {e}") from None

    def __repr__(self):
        return f"Event(key={self[0]!r}, value={self[1]!r}, timestamp={self[2]!r}, input={self[3]!r})"


def _text(b, what):
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise InputError(f"expected a UTF-8 {what}") from None


def _preview(b):
    return repr(b.decode("utf-8", "replace")[:60])


class Timer:
    """A timer that fired, for ``key`` (bytes), at ``timestamp`` (ms) in
    ``domain`` (:class:`TimeDomain`)."""

    __slots__ = ("key", "timestamp", "domain")

    def __init__(self, key, timestamp, domain):
        self.key = key
        self.timestamp = timestamp
        self.domain = domain

    def __repr__(self):
        return f"Timer(key={self.key!r}, timestamp={self.timestamp}, domain={self.domain})"


class _Output:
    """Events being emitted to one output, in the wire layout."""

    __slots__ = ("data", "offsets", "timestamps", "any_timestamp")

    def __init__(self):
        self.data = bytearray()
        self.offsets = [0]
        self.timestamps = []
        self.any_timestamp = False


_SAME = object()


def _whole_ms(t, what):
    """``t`` as the whole number of ms the host takes (a 64-bit time, above
    the "none" sentinel); a clear error for anything else, raised where the
    plugin gave it (the bindings would fail later, naming no line of it)."""
    if type(t) is float and t.is_integer():
        t = int(t)
    if type(t) is int and NO_TIMESTAMP < t < 2**63:
        return t
    raise TypeError(f"{what} must be a whole number of ms within 64 bits, got {t!r}")


class Context:
    """What an operator can do while it handles one event or timer: emit
    events, use the current key's state, register timers, read the clocks.

    The context is valid only during the call it is given to.
    """

    __slots__ = ("_store", "_slot", "_outputs", "_main", "key", "timestamp", "input", "_watermark", "processing_time")

    def __init__(self, store, outputs, watermark, processing_time, input=0):
        self._store = store
        self._outputs = outputs
        self._main = outputs[""]
        self._slot = None
        #: The current event's (or timer's) key, bytes.
        self.key = b""
        #: The current event's timestamp (ms) or ``None``; a timer's time in ``on_timer``.
        self.timestamp = None
        #: The input the batch arrived on.
        self.input = input
        self._watermark = watermark
        #: The wall-clock time of the call (ms since the epoch).
        self.processing_time = processing_time

    @property
    def watermark(self):
        """The operator's event-time watermark (ms): no event at or below it
        is expected any more. ``None`` before the first watermark."""
        return None if self._watermark == NO_TIMESTAMP else self._watermark

    def is_late(self, timestamp):
        """Whether an event at ``timestamp`` is late: at or below the watermark."""
        return timestamp <= self._watermark

    def emit(self, key, value, output="", timestamp=_SAME):
        """Emits an event to the main output, or to the side output
        ``output`` (wired in the job file as ``<operator uid>.<output>``).

        ``key`` and ``value`` are ``bytes``, ``str`` (UTF-8), ``int`` or
        ``float`` (decimal text), or anything else JSON can encode. The
        event gets the current event's timestamp unless ``timestamp`` (ms or
        ``None``) is given.
        """
        if output:
            out = self._outputs.get(output)
            if out is None:
                if type(output) is not str:
                    raise TypeError(f"a side output's name must be a str, got {output!r}")
                out = self._outputs[output] = _Output()
        else:
            out = self._main
        data = out.data
        data += key if type(key) is bytes else codec.encode(key)
        offsets = out.offsets
        offsets.append(len(data))
        data += value if type(value) is bytes else codec.encode(value)
        offsets.append(len(data))
        if timestamp is _SAME:
            timestamp = self.timestamp
        elif timestamp is not None:
            timestamp = _whole_ms(timestamp, "an event's timestamp")
        if timestamp is None:
            out.timestamps.append(NO_TIMESTAMP)
        else:
            out.timestamps.append(timestamp)
            out.any_timestamp = True

    def register_timer(self, timestamp, domain=TimeDomain.EVENT_TIME):
        """Registers a timer for the current key; ``Operator.on_timer`` is
        called when it fires. At most one timer exists per (key, timestamp,
        domain). Sent to the host in one call at the end of the call."""
        slot = self._slot
        if slot is None:
            raise StateError(_TIMER_NOT_KEYED)
        self._store.timers[(slot, _whole_ms(timestamp, "a timer's timestamp"), _domain(domain))] = False

    def delete_timer(self, timestamp, domain=TimeDomain.EVENT_TIME):
        """Deletes a timer of the current key, if it is registered."""
        slot = self._slot
        if slot is None:
            raise StateError(_TIMER_NOT_KEYED)
        self._store.timers[(slot, _whole_ms(timestamp, "a timer's timestamp"), _domain(domain))] = True


class Batch:
    """A keyed batch about to be processed, for ``Operator.prepare``: its
    events with their key slots, to prefetch state for (see
    :meth:`weir_sdk.MapState.prefetch`)."""

    __slots__ = ("_store", "_slots", "_events", "watermark", "processing_time", "input")

    def __init__(self, store, slots, events, watermark, processing_time, input):
        self._store = store
        self._slots = slots
        self._events = events
        #: The watermark before the batch (the minimum i64 before any).
        self.watermark = watermark
        self.processing_time = processing_time
        self.input = input

    def events(self):
        """``(slot, Event)`` for every event of the batch."""
        return zip(self._slots, self._events)


class Operator:
    """Base class of a Weir operator written in Python.

    Subclass it, override :meth:`process` (and :meth:`init`,
    :meth:`on_timer`, :meth:`prepare` as needed), and call
    ``weir_sdk.export(YourOperator)`` once at the end of the module. The
    host creates one instance per parallel subtask; the class is
    instantiated without arguments, then :meth:`init` is called.
    """

    #: The config keys :meth:`init` understands. Any other key (except the
    #: host's ``weir.*``) fails ``init`` with ``invalid-config`` before
    #: :meth:`init` runs. ``None`` accepts every key.
    config_keys = ()

    def init(self, config):
        """Called once with the :class:`Config`. Create states here."""
        if not isinstance(config, Config):
            # Called by componentize-py with the host's config: the app
            # module never called export(), so its `Operator` is this class.
            raise TypeError(
                "the plugin's app module does not export its operator: call weir_sdk.export(YourOperator) "
                "once, at the end of app.py (componentize-py found weir_sdk's own Operator class instead)"
            )

    def prepare(self, batch):
        """Called before the events of a keyed batch are processed, to
        prefetch state for all of them at once (optional)."""

    def process(self, ctx, event):
        """Handles one event (:class:`Event`) with its :class:`Context`."""
        raise NotImplementedError(f"{type(self).__name__} does not implement process(self, ctx, event)")

    def on_timer(self, ctx, timer):
        """Handles a fired :class:`Timer`; ``ctx`` has the timer's key."""


_EVENT_DOMAINS = (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)


class Runtime:
    """One operator instance with its state caches and output buffers."""

    def __init__(self, cls, pairs, host):
        config = Config(pairs)
        if cls.config_keys is not None:
            config.allow_only(*cls.config_keys)
        self.store = Store(host, config.restored, config.memory_limit_mb)
        self.operator = cls()
        self.operator.init(config)
        self.prepares = type(self.operator).prepare is not Operator.prepare

    def _outputs(self):
        return {"": _Output()}

    def process(self, input, data, offsets, timestamps, key_slots, watermark, processing_time):
        """Runs the operator over a batch; returns the outputs (name ->
        (data, offsets, timestamps))."""
        store = self.store
        store.begin(data, offsets, key_slots, 2)
        outputs = self._outputs()
        ctx = Context(store, outputs, watermark, processing_time, input)
        process = self.operator.process
        n = (len(offsets) - 1) // 2
        new = tuple.__new__
        try:
            if key_slots and self.prepares:
                events = []
                append = events.append
                for o, t in zip(range(0, 2 * n, 2), timestamps or repeat(None, n)):
                    b = offsets[o + 1]
                    if t == NO_TIMESTAMP:
                        t = None
                    append(new(Event, (data[offsets[o] : b], data[b : offsets[o + 2]], t, input)))
                self.operator.prepare(Batch(store, key_slots, events, watermark, processing_time, input))
                for slot, event in zip(key_slots, events):
                    ctx._slot = slot
                    ctx.key = event[0]
                    ctx.timestamp = event[2]
                    process(ctx, event)
            else:
                for o, slot, t in zip(range(0, 2 * n, 2), key_slots or repeat(None, n), timestamps or repeat(None, n)):
                    b = offsets[o + 1]
                    key = data[offsets[o] : b]
                    if t == NO_TIMESTAMP:
                        t = None
                    ctx._slot = slot
                    ctx.key = key
                    ctx.timestamp = t
                    process(ctx, new(Event, (key, data[b : offsets[o + 2]], t, input)))
            store.flush()
        except BaseException:
            store.discard()
            raise
        return _drain(outputs)

    def on_timers(self, data, offsets, timestamps, event_time, key_slots, watermark, processing_time):
        """Runs ``on_timer`` for each fired timer; ``event_time[i]`` says
        whether timer ``i`` is an event-time one."""
        store = self.store
        store.begin(data, offsets, key_slots, 1)
        outputs = self._outputs()
        ctx = Context(store, outputs, watermark, processing_time)
        on_timer = self.operator.on_timer
        try:
            for i, timestamp in enumerate(timestamps):
                key = data[offsets[i] : offsets[i + 1]]
                ctx._slot = key_slots[i]
                ctx.key = key
                ctx.timestamp = timestamp
                on_timer(ctx, Timer(key, timestamp, _EVENT_DOMAINS[0] if event_time[i] else _EVENT_DOMAINS[1]))
            store.flush()
        except BaseException:
            store.discard()
            raise
        return _drain(outputs)

    def flush(self):
        """Writes back the state held between calls (before a snapshot)."""
        self.store.write_back_held()


def _drain(outputs):
    return [
        (name, bytes(out.data), out.offsets, out.timestamps if out.any_timestamp else [])
        for name, out in outputs.items()
        if len(out.offsets) > 1
    ]
