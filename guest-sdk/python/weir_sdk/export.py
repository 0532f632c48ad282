"""The component export: adapts an :class:`Operator` subclass to the WIT
interface ``weir:operator/operator`` as componentize-py expects it — a
class named ``Operator`` in the app module, with methods ``init``,
``process``, ``on_timer`` and ``check_state``."""

import os
import sys
import traceback

from . import _host
from .core import Operator, Runtime
from .errors import WeirError
from .state import BROADCAST, MAP, VALUE, check_values, declared_ttl

__all__ = ["export"]

try:
    from ._built_from import MOUNTS as _MOUNTS
except ImportError:
    _MOUNTS = {}

# The instance's operator class and runtime: a component instance is
# single-threaded, so module globals are the instance's.
_exported = {"cls": None, "runtime": None}


def _wit_error(error):
    """An exception as a componentize-py ``Err(operator-error)``."""
    if isinstance(error, WeirError):
        case, message = error.case, error.message
    else:
        # Not an SDK error: a bug or an unexpected input. The traceback goes
        # to stderr, which the host adds to its report.
        _print_traceback(error)
        case, message = "Other", f"{type(error).__name__}: {error}"
    return _host.Err(getattr(_host._types, "OperatorError_" + case)(message))


def _print_traceback(error):
    """The traceback of ``error`` on stderr, naming the files the plugin was
    built from: componentize-py mounted them as ``/0/`` (the SDK) and
    ``/1/`` (the plugin's directory), and the build script records where
    those were (``_built_from``; absent in a plain CPython)."""
    text = "".join(traceback.format_exception(type(error), error, _from_the_plugin(error.__traceback__)))
    for mount, path in _MOUNTS.items():
        text = text.replace(f'File "{mount}', f'File "{path}')
    sys.stderr.write(text)


_SDK_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _from_the_plugin(tb):
    """``tb`` from the plugin's own first frame: the SDK's calls into the
    plugin, which come first, are not what its author looks for. All of it
    if no frame is the plugin's (an error raised in the SDK itself)."""
    first = tb
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_SDK_DIR):
        tb = tb.tb_next
    return tb or first


def _runtime():
    runtime = _exported["runtime"]
    if runtime is None:
        raise _host.Err(_host._types.OperatorError_Other("called before init"))
    return runtime


def _batches(outputs):
    types = _host._types
    return [types.OutputBatch(name, types.EventBatch(data, offsets, ts)) for name, data, offsets, ts in outputs]


class _Exports:
    """What componentize-py calls: the exported ``operator`` interface."""

    def init(self, config):
        try:
            _exported["runtime"] = Runtime(_exported["cls"], config, _host.WitHost)
        except BaseException as e:  # noqa: BLE001 (sys.exit() too: SystemExit, with its traceback)
            raise _wit_error(e) from None

    def process(self, batch):
        runtime = _runtime()
        ev = batch.events
        try:
            outputs = runtime.process(
                batch.input, ev.data, ev.offsets, ev.timestamps, batch.key_slots, batch.watermark, batch.processing_time
            )
        except BaseException as e:  # noqa: BLE001 (sys.exit() too: SystemExit, with its traceback)
            raise _wit_error(e) from None
        return _batches(outputs)

    def on_timer(self, timers):
        runtime = _runtime()
        event_time = _host._types.TimeDomain.EVENT_TIME
        try:
            outputs = runtime.on_timers(
                timers.data,
                timers.offsets,
                timers.timestamps,
                [d == event_time for d in timers.domains],
                timers.key_slots,
                timers.watermark,
                timers.processing_time,
            )
        except BaseException as e:  # noqa: BLE001 (sys.exit() too: SystemExit, with its traceback)
            raise _wit_error(e) from None
        return _batches(outputs)

    def flush(self):
        runtime = _exported["runtime"]
        if runtime is None:  # no init, so nothing held
            return
        try:
            runtime.flush()
        except BaseException as e:  # noqa: BLE001 (as in process)
            raise _wit_error(e) from None

    def check_state(self, name, kind, stored):
        kinds = _host._operator.StateKind
        kind = {kinds.MAP_STATE: MAP, kinds.BROADCAST_MAP: BROADCAST}.get(kind, VALUE)
        values = _parts(stored.data, stored.offsets)
        sub_keys = None if kind == VALUE else _parts(stored.sub_keys, stored.sub_key_offsets)
        # Opened as the plugin will open it, with its time-to-live or
        # without: the host refuses (a trap naming the state) a choice other
        # than the one the state was stored with — before an upgrade stops
        # the job, rather than at the restored job's first event.
        declared, ttl = declared_ttl(name, kind)
        if declared and kind != BROADCAST:
            (_host.WitHost.open_value if kind == VALUE else _host.WitHost.open_map)(name, ttl)
        try:
            check_values(name, kind, values, sub_keys)
        except ValueError as e:
            raise _host.Err(str(e)) from None


def _parts(data, offsets):
    return (data[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1))


def export(cls):
    """Exports ``cls`` (a subclass of :class:`Operator`) as the plugin's
    operator. Call it once, at the end of the app module.

    componentize-py looks for the exported interface's implementation under
    the name ``Operator`` in the app module, so this binds that name in the
    calling module to the SDK's adapter (the base class stays available as
    ``weir_sdk.Operator``). Returns ``cls``, so it also works as a class
    decorator.
    """
    if not (isinstance(cls, type) and issubclass(cls, Operator)):
        raise TypeError(f"export() takes a subclass of weir_sdk.Operator, not {cls!r}")
    if not isinstance(cls.config_keys, (tuple, list, set, frozenset, type(None))):
        raise TypeError(f"{cls.__name__}.config_keys must be a tuple of key names or None")
    _exported["cls"] = cls
    sys._getframe(1).f_globals["Operator"] = _Exports
    return cls

