"""Errors an operator raises; each becomes one case of the WIT ``operator-error``.

Raise :class:`ConfigError` from ``init`` for bad configuration,
:class:`InputError` for an event that cannot be decoded. Any other exception
escaping ``process`` or ``on_timer`` fails the call as ``other``, with its
type, message and traceback (the traceback goes to stderr, which the host
includes in its error report).
"""

__all__ = ["WeirError", "ConfigError", "InputError", "StateError", "OperatorError"]


class WeirError(Exception):
    """Base class of the errors that map to a case of ``operator-error``."""

    #: The case of the WIT variant ``operator-error`` (its Python class name
    #: in the generated bindings is ``OperatorError_<case>``).
    case = "Other"

    @property
    def message(self):
        return str(self.args[0]) if self.args else type(self).__name__


class ConfigError(WeirError):
    """The configuration given to ``init`` is wrong (``invalid-config``)."""

    case = "InvalidConfig"


class InputError(WeirError):
    """An input event cannot be decoded (``invalid-input``)."""

    case = "InvalidInput"


class StateError(WeirError):
    """A state access failed (``state``)."""

    case = "State"


class OperatorError(WeirError):
    """Anything else (``other``)."""

    case = "Other"
