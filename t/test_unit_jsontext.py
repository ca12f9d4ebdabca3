"""flux_epilog_gate.jsontext writes and reads JSON exactly as json.dumps
and json.loads do: the same text, the same values, the same errors."""

import json

from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jsonstrategies import ANY_JSON

from flux_epilog_gate import jsontext

#: What json.dumps refuses, somewhere inside a value.
UNENCODABLE = st.sampled_from([b"x", {1, 2}, object(), 1j])


def outcome(function, *args, **kwargs):
    """What ``function(*args, **kwargs)`` does: its value's repr (NaN
    equals NaN there), or its exception's type and text."""
    try:
        return "value", repr(function(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        return type(exc).__name__, str(exc)


@bounded(500)
@given(ANY_JSON)
def test_dumps_writes_what_json_dumps_writes(value):
    assert outcome(jsontext.dumps, value) == outcome(json.dumps, value)


@bounded(500)
@given(ANY_JSON)
def test_dumps_compact_writes_what_json_dumps_writes(value):
    expected = outcome(json.dumps, value, separators=(",", ":"))
    assert outcome(jsontext.dumps_compact, value) == expected


@bounded(200)
@given(st.lists(ANY_JSON, max_size=2), UNENCODABLE, st.booleans())
def test_dumps_refuses_what_json_dumps_refuses(values, bad, keyed):
    value = {"k": [*values, bad]} if keyed else [*values, bad]
    assert outcome(jsontext.dumps, value)[0] == "TypeError"
    assert outcome(jsontext.dumps, value) == outcome(json.dumps, value)
    # The next call is not disturbed by the refused one.
    assert jsontext.dumps(values) == json.dumps(values)


#: Text around a JSON value: nothing, spaces, a byte order mark, junk.
AROUND = st.sampled_from(["", " ", "\n\t", "\ufeff", "x", "}", "0"])


@bounded(500)
@given(ANY_JSON, AROUND, AROUND)
def test_loads_reads_what_json_loads_reads(value, before, after):
    text = before + json.dumps(value) + after
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)
    data = text.encode()
    assert outcome(jsontext.loads, data) == outcome(json.loads, data)


@bounded(500)
@given(st.text(max_size=40) | st.binary(max_size=40))
def test_loads_of_any_text_or_bytes_is_json_loads(text):
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)


@bounded(100)
@given(ANY_JSON, st.sampled_from(["utf-16", "utf-16-le", "utf-32", "utf-8-sig"]))
def test_loads_of_bytes_in_another_encoding_is_json_loads(value, encoding):
    data = json.dumps(value).encode(encoding)
    assert outcome(jsontext.loads, data) == outcome(json.loads, data)


def test_loads_of_a_number_past_the_digit_bound_is_json_loads():
    text = "[" + "9" * 5000 + "]"
    assert outcome(jsontext.loads, text) == outcome(json.loads, text)
    assert outcome(jsontext.loads, text)[0] == "ValueError"


def test_nesting_past_the_recursion_limit_is_a_recursion_error_both_ways():
    deep = "[" * 100000 + "]" * 100000
    assert outcome(jsontext.loads, deep)[0] == "RecursionError"
    assert outcome(json.loads, deep)[0] == "RecursionError"


def test_without_the_c_encoder_and_scanner_json_itself_is_used(monkeypatch):
    # What another Python, whose C helpers are missing or differ, gets.
    monkeypatch.setattr(jsontext, "_DEFAULT", None)
    monkeypatch.setattr(jsontext, "_COMPACT", None)
    monkeypatch.setattr(jsontext, "_SCAN", None)
    value = {"a": [1, 2.5, None, "é"]}
    assert jsontext.dumps(value) == json.dumps(value)
    assert jsontext.dumps_compact(value) == json.dumps(value, separators=(",", ":"))
    assert jsontext.loads(json.dumps(value)) == value


def test_a_c_helper_of_another_signature_is_left_out(monkeypatch):
    def other(*args):
        raise TypeError("takes other arguments")

    monkeypatch.setattr(json.encoder, "c_make_encoder", other)
    monkeypatch.setattr(json.scanner, "c_make_scanner", other)
    assert jsontext._c_encoder(",", ":") is None
    assert jsontext._c_scanner() is None
