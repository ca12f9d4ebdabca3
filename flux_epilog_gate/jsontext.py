"""JSON text as ``json.dumps`` writes it and ``json.loads`` reads it, in
fewer steps of Python.

``json.dumps`` and ``json.loads`` each run several Python functions
around the C encoder and scanner they end in (``encode``,
``iterencode``, the encoder built anew for every call; ``decode``,
``raw_decode``, two regular expressions).  On the job-manager's thread
those steps cost more than the few hundred bytes of a request or an
event they turn into text.  The functions here call the C encoder and
scanner, made once, directly; they return the same values and text, and
leave to ``json`` every case it would refuse or treat specially, so its
errors stay the ones callers see.
"""

import json
from json import encoder as _encoder
from json import scanner as _scanner


def _unencodable(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _c_encoder(item_separator, key_separator):
    """The C encoder of ``json.dumps`` with these separators, or None.

    No cycle check (``json.dumps`` makes one for each call: a shared one
    would keep what a failed call left in it); a value made of decoded
    JSON or of literals has no cycle."""
    make = _encoder.c_make_encoder
    if make is None:
        return None
    try:
        return make(
            None,
            _unencodable,
            _encoder.encode_basestring_ascii,
            None,
            key_separator,
            item_separator,
            False,
            False,
            True,
        )
    except TypeError:
        # Another Python's signature: json's own way, slower.
        return None


def _c_scanner():
    """The C scanner of ``json.loads``, or None."""
    make = _scanner.c_make_scanner
    if make is None:
        return None
    try:
        return make(json.JSONDecoder())
    except TypeError:
        return None


_DEFAULT = _c_encoder(", ", ": ")
_COMPACT = _c_encoder(",", ":")
_SCAN = _c_scanner()


def dumps(value):
    """``json.dumps(value)``."""
    if _DEFAULT is None or type(value) is str:
        return json.dumps(value)
    return "".join(_DEFAULT(value, 0))


def dumps_compact(value):
    """``json.dumps(value, separators=(",", ":"))``."""
    if _COMPACT is None or type(value) is str:
        return json.dumps(value, separators=(",", ":"))
    return "".join(_COMPACT(value, 0))


def loads(text):
    """``json.loads(text)`` of a str or of UTF-8 bytes."""
    if _SCAN is None:
        return json.loads(text)
    string = text
    if type(text) is not str:
        try:
            string = text.decode()
        except UnicodeDecodeError:
            # Another encoding json detects, or lone surrogates it passes.
            return json.loads(text)
    try:
        value, end = _SCAN(string, 0)
    except (StopIteration, ValueError):
        # Leading space, a byte order mark, not JSON, or bytes of another
        # encoding: json's own way, and its error.
        return json.loads(text)
    if end != len(string):
        return json.loads(text)
    return value
