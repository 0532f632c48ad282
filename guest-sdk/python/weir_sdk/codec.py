"""How Python values become the bytes of events and of state.

Weir's SDKs agree on encodings so that plugins in different languages read
each other's events and state:

* event keys and values: ``bytes`` as they are, ``str`` as UTF-8, ``int`` as
  decimal text, ``float`` as decimal text like Rust's ``Display`` (``20``,
  ``0.25``, never an exponent), anything else as JSON;
* state values: JSON, written exactly as the Rust SDK's ``serde_json`` writes
  them (compact, floats in the shortest round-trip form such as ``20.0``,
  ``1e-7``, ``1.5e20``), so that a Python and a Rust version of a plugin
  store byte-identical state.
"""

import json
import math

__all__ = ["encode", "dumps", "loads", "format_float"]

# Strings in JSON: escaped like serde_json (", \\ and control characters),
# other characters as UTF-8.
_json_str = json.encoder.encode_basestring

_decode_str = json.JSONDecoder().decode


def loads(raw):
    """Decodes JSON from ``bytes`` (or ``str``); ``ValueError`` if it is not
    JSON. Non-negative integers, the commonest state, take a fast path."""
    if type(raw) is str:
        return _decode_str(raw)
    if raw.isdigit() and (raw[0] != 48 or len(raw) == 1):  # 48: b"0"; JSON has no leading zeros
        return int(raw)
    return _decode_str(raw.decode())


def _digits(x):
    """``x`` (finite, non-zero, positive) as shortest digits ``d`` and an
    exponent ``e`` with ``x == int(d) * 10**e``, ``d`` without trailing zeros."""
    text = repr(x)
    mantissa, _, exponent = text.partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    exp = (int(exponent) if exponent else 0) - len(fraction)
    stripped = digits.rstrip("0")
    return stripped, exp + len(digits) - len(stripped)


def _json_float(x):
    """A float as serde_json (ryu) writes it."""
    text = repr(x)
    if "e" not in text and "n" not in text:
        # Python writes 1e-4 <= |x| < 1e16 without an exponent, with the
        # same shortest digits as ryu, and ryu does too (down to 1e-5).
        return text
    if x != x or x in (math.inf, -math.inf):
        return "null"  # serde_json writes non-finite floats as null
    if x == 0.0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    sign = "-" if x < 0 else ""
    digits, k = _digits(abs(x))
    n = len(digits)
    kk = n + k  # the decimal point sits after kk digits
    if 0 <= k and kk <= 16:
        return sign + digits + "0" * k + ".0"
    if 0 < kk <= 16:
        return sign + digits[:kk] + "." + digits[kk:]
    if -5 < kk <= 0:
        return sign + "0." + "0" * -kk + digits
    if n == 1:
        return f"{sign}{digits}e{kk - 1}"
    return f"{sign}{digits[0]}.{digits[1:]}e{kk - 1}"


def format_float(x):
    """A float as decimal text, as Rust's ``Display`` writes an ``f64``:
    ``20``, ``0.25``, ``0.0000001`` — never an exponent."""
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "inf" if x > 0 else "-inf"
    if x == 0.0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign = "-" if x < 0 else ""
    digits, k = _digits(abs(x))
    if k >= 0:
        return sign + digits + "0" * k
    kk = len(digits) + k
    if kk > 0:
        return sign + digits[:kk] + "." + digits[kk:]
    return sign + "0." + "0" * -kk + digits


def dumps(value, finite=False):
    """``value`` as compact JSON text, written as the Rust SDK writes it.

    Supports ``None``, ``bool``, ``int``, ``float``, ``str``, lists, tuples
    (as arrays) and dicts with string keys. A NaN or infinity is written
    as ``null``, as serde_json does — or, with ``finite`` (state, which the
    Rust SDK keeps only finite), refused with ``ValueError``.
    """
    t = type(value)
    if t is int:
        return str(value)
    if t is float:
        if finite and not math.isfinite(value):
            raise ValueError(f"{value} is not a finite number, and state keeps only finite ones (JSON has no NaN)")
        return _json_float(value)
    if t is str:
        return _json_str(value)
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    if t is list or t is tuple:
        return "[" + ",".join([dumps(v, finite) for v in value]) + "]"
    if t is dict:
        return "{" + ",".join([_json_str(_key(k)) + ":" + dumps(v, finite) for k, v in value.items()]) + "}"
    # Subclasses (IntEnum, OrderedDict, namedtuple, ...) by their base type.
    for base, convert in ((bool, bool), (int, int), (float, float), (str, str), (dict, dict), (list, list), (tuple, list)):
        if isinstance(value, base):
            return dumps(convert(value), finite)
    raise TypeError(f"cannot encode a {t.__name__} as JSON")


def _key(k):
    if type(k) is str:
        return k
    if isinstance(k, (int, float, bool)) or k is None:
        return dumps(k)  # as json.dumps does for non-string keys
    raise TypeError(f"JSON object keys must be strings, not {type(k).__name__}")


def encode(value):
    """The bytes of an event key or value (see the module's doc)."""
    t = type(value)
    if t is bytes:
        return value
    if t is str:
        return value.encode()
    if t is int:
        return str(value).encode()
    if t is float:
        return format_float(value).encode()
    if t is bytearray or t is memoryview:
        return bytes(value)
    return dumps(value).encode()
