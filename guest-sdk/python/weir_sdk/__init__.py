"""weir_sdk — write Weir stream operators in Python.

A Weir operator is a WebAssembly component that the Weir host feeds with
batches of events. This package hides the component plumbing: subclass
:class:`Operator`, call :func:`export` once, and build the module with
componentize-py (``scripts/build-python-plugin.sh SRC_DIR OUT.wasm``)::

    from weir_sdk import Operator, ValueState, export

    class WordCount(Operator):
        def init(self, config):
            self.count = ValueState("count")

        def process(self, ctx, event):
            n = self.count.get(ctx, 0) + 1
            self.count.set(ctx, n)
            ctx.emit(event.key, str(n).encode())

    export(WordCount)

The host calls the plugin once per *batch*; the SDK calls
:meth:`Operator.process` once per event of it. Keyed state is fetched for
all keys of the batch on first use (one host call per state), kept while the
batch is processed, and the changed values are written back in one call at
the end — exactly like the Rust SDK, whose JSON encoding it shares, so
Python and Rust versions of a plugin read each other's state.
"""

from .codec import dumps, encode, format_float, loads
from .core import Batch, Config, Context, Event, Operator, TaskInfo, TimeDomain, Timer
from .errors import ConfigError, InputError, OperatorError, StateError, WeirError
from .export import export
from .state import BroadcastState, ListState, MapState, Ttl, ValueState

__version__ = "0.5.2"

#: Shorthands for the two time domains.
EVENT_TIME = TimeDomain.EVENT_TIME
PROCESSING_TIME = TimeDomain.PROCESSING_TIME

__all__ = [
    "Operator",
    "export",
    "Config",
    "TaskInfo",
    "Context",
    "Event",
    "Timer",
    "Batch",
    "TimeDomain",
    "EVENT_TIME",
    "PROCESSING_TIME",
    "ValueState",
    "ListState",
    "MapState",
    "BroadcastState",
    "Ttl",
    "WeirError",
    "ConfigError",
    "InputError",
    "StateError",
    "OperatorError",
    "encode",
    "dumps",
    "loads",
    "format_float",
]
