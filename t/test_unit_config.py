"""Unit tests of the configuration (flux_epilog_gate.gate.config): durations,
bad keys and values (ConfigError naming the key), and load options taking
precedence over the [epilog-gate] table."""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flux_epilog_gate.gate.config import (
    FAULTS,
    KEYS,
    MAX_HOLDS_LIMIT,
    Config,
    ConfigError,
    Rule,
    parse_duration,
    shown,
)

# Durations


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("30", 30.0),
        (30, 30.0),
        (2.5, 2.5),
        ("90s", 90.0),
        ("10m", 600.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2d", 172800.0),
        ("0.25", 0.25),
        ("1e3", 1000.0),
        (".5m", 30.0),
    ],
)
def test_duration_is_read_in_seconds(value, seconds):
    assert parse_duration(value) == pytest.approx(seconds)


def test_duration_is_a_float():
    assert isinstance(parse_duration(30), float)


@pytest.mark.parametrize(
    "value",
    [0, 0.0, -1, "0", "-5m", "0ms", "", "m", "ms", "abc", "10x", "10 minutes"]
    + [" 10m ", "10 m", "٣", "1_000", "0x10", "+5"],
)
def test_duration_not_greater_than_zero_or_unreadable_is_refused(value):
    with pytest.raises(ConfigError):
        parse_duration(value)


@pytest.mark.parametrize("value", ["inf", "nan", float("inf"), float("nan")])
def test_duration_that_is_not_finite_is_refused(value):
    with pytest.raises(ConfigError):
        parse_duration(value)


@pytest.mark.parametrize("value", [True, None, [30], {"m": 10}])
def test_duration_of_the_wrong_type_is_refused(value):
    with pytest.raises(ConfigError, match="expected a duration"):
        parse_duration(value)


def test_bad_duration_error_names_the_key():
    with pytest.raises(ConfigError, match=r"^timeout: 'soon' "):
        parse_duration("soon", key="timeout")


@given(
    st.floats(min_value=0.001, max_value=1e6, allow_nan=False),
    st.sampled_from([("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)]),
)
def test_duration_with_unit_is_number_times_unit(number, unit):
    suffix, scale = unit
    assert parse_duration(f"{number!r}{suffix}") == pytest.approx(number * scale)


# Defaults


def test_no_configuration_gives_the_defaults():
    config = Config.from_sources(None, None)
    assert config.to_dict() == {
        "timeout": None,
        "max-holds": 64,
        "gone-limit": 10000,
        "annotate": False,
        "rules": [],
        "shutdown-timeout": 30.0,
        "shutdown-action": "auto",
        "watch-backlog": 10000,
        "max-pending": 10000,
        "snapshot-chunk": 131072,
        "debug-fault": None,
    }


def test_empty_options_and_table_give_the_defaults():
    assert Config.from_sources({}, {}).to_dict() == Config().to_dict()


# Keys and values


def test_timeout_is_read_as_a_duration():
    assert Config.from_sources({"timeout": "10m"}).timeout == 600.0


def test_max_holds_is_read_as_an_integer():
    assert Config.from_sources({"max-holds": 8}).max_holds == 8


def test_max_holds_given_as_a_digit_string_is_read_as_an_integer():
    assert Config.from_sources({"max-holds": "8"}).max_holds == 8


def test_gone_limit_may_be_zero():
    assert Config.from_sources({"gone-limit": 0}).gone_limit == 0


@pytest.mark.parametrize("fault", FAULTS)
def test_debug_fault_accepts_each_entry_point(fault):
    config = Config.from_sources({"debug-fault": fault})
    assert config.fault == fault and config.to_dict()["debug-fault"] == fault


def test_unknown_option_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^timout: unknown option key"):
        Config.from_sources({"timout": 30})


def test_unknown_table_key_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^maxholds: unknown \[epilog-gate\] key"):
        Config.from_sources(None, {"maxholds": 3})


def test_unknown_key_error_lists_the_known_keys():
    with pytest.raises(ConfigError) as info:
        Config.from_sources({"bogus": 1})
    assert all(key in str(info.value) for key in KEYS)


@pytest.mark.parametrize("table", ["timeout=30", 30, ["timeout"]])
def test_table_that_is_not_a_table_is_refused(table):
    with pytest.raises(ConfigError, match=r"^\[epilog-gate\]: expected a table"):
        Config.from_sources(None, table)


def test_options_that_are_not_a_table_are_refused():
    with pytest.raises(ConfigError, match=r"^option: expected a table"):
        Config.from_sources(["timeout"], None)


@pytest.mark.parametrize("value", [0, -1, "never", True])
def test_bad_timeout_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^timeout: "):
        Config.from_sources({"timeout": value})


@pytest.mark.parametrize("value", [0, -1, MAX_HOLDS_LIMIT + 1, 256])
def test_max_holds_out_of_range_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^max-holds: .* is not between"):
        Config.from_sources({"max-holds": value})


def test_max_holds_limit_itself_is_accepted():
    config = Config.from_sources({"max-holds": MAX_HOLDS_LIMIT})
    assert config.max_holds == MAX_HOLDS_LIMIT


@pytest.mark.parametrize("value", ["many", 2.5, True, None, "-1", [3]])
def test_max_holds_that_is_not_an_integer_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^max-holds: expected an integer"):
        Config.from_sources({"max-holds": value})


@pytest.mark.parametrize("value", [-1, "lots", 1.5])
def test_bad_gone_limit_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^gone-limit: "):
        Config.from_sources(None, {"gone-limit": value})


def test_unknown_debug_fault_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^debug-fault: 'everywhere' is not one"):
        Config.from_sources({"debug-fault": "everywhere"})


def test_bad_table_value_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^timeout: "):
        Config.from_sources({"max-holds": 4}, {"timeout": "soon"})


@given(st.integers(min_value=-1000, max_value=1000))
def test_max_holds_is_accepted_exactly_between_1_and_the_limit(value):
    if 1 <= value <= MAX_HOLDS_LIMIT:
        assert Config.from_sources({"max-holds": value}).max_holds == value
    else:
        with pytest.raises(ConfigError, match=r"^max-holds: "):
            Config.from_sources({"max-holds": value})


# Precedence


def test_table_value_applies_when_no_option_is_given():
    config = Config.from_sources({}, {"timeout": "5m"})
    assert config.timeout == 300.0


def test_option_takes_precedence_over_the_table():
    config = Config.from_sources({"timeout": 30}, {"timeout": "5m"})
    assert config.timeout == 30.0


def test_option_and_table_keys_combine():
    config = Config.from_sources({"max-holds": 4}, {"timeout": "5m"})
    assert (config.max_holds, config.timeout) == (4, 300.0)


def test_every_key_given_as_option_overrides_the_table():
    table = {"timeout": 10, "max-holds": 2, "gone-limit": 5}
    options = {"timeout": 20, "max-holds": 3, "gone-limit": 6}
    config = Config.from_sources(options, table)
    assert (config.timeout, config.max_holds, config.gone_limit) == (20.0, 3, 6)


def test_rules_are_read_from_the_table():
    config = Config.from_sources(
        None,
        {"rules": [{"attribute": "system.bb", "description": "bb", "timeout": "5m"}]},
    )
    assert [rule.to_dict() for rule in config.rules] == [
        {"attribute": "system.bb", "description": "bb", "timeout": 300.0}
    ]


@pytest.mark.parametrize(
    "rules, key",
    [
        ({"attribute": "a"}, "rules"),
        ([{"description": "bb"}], "rules[0].attribute"),
        ([{"attribute": "a..b", "description": "bb"}], "rules[0].attribute"),
        ([{"attribute": "a", "description": "b b"}], "rules[0].description"),
        ([{"attribute": "a", "description": "bb", "timeout": 0}], "rules[0].timeout"),
        ([{"attribute": "a", "description": "bb", "color": 1}], "rules[0].color"),
    ],
)
def test_bad_rule_names_its_key(rules, key):
    with pytest.raises(ConfigError) as exc:
        Config.from_sources(None, {"rules": rules})
    assert str(exc.value).startswith(key)


def test_annotate_accepts_booleans_and_words():
    assert Config.from_sources({"annotate": "false"}).annotate is False
    assert Config.from_sources({"annotate": True}).annotate is True
    with pytest.raises(ConfigError, match="^annotate"):
        Config.from_sources({"annotate": "maybe"})


# Durations read as flux-core reads them; what is wrong, said


@pytest.mark.parametrize(
    "text",
    ["30", "2.5", "90s", "10m", "1.5h", "500ms", "2d", "1e3", "0.001s"],
)
def test_duration_agrees_with_flux_parse_fsd(text):
    from flux.util import parse_fsd

    assert parse_duration(text) == pytest.approx(parse_fsd(text))


@pytest.mark.parametrize(
    "text", ["abc", "10x", "10 minutes", "m", "", "nan", "1e309", "-5m"]
)
def test_duration_refused_by_flux_parse_fsd_is_refused(text):
    from flux.util import parse_fsd

    with pytest.raises(ValueError):
        parse_fsd(text)
    with pytest.raises(ConfigError):
        parse_duration(text)


@pytest.mark.parametrize(
    "value, problem",
    [
        ("nan", "'nan' is not a number"),
        (float("nan"), "nan is not a number"),
        ("inf", "'inf' is infinite"),
        ("1e309", "'1e309' is infinite"),
        (10**400, "is infinite"),
        ("0", "'0' must be greater than 0"),
        (-1, "-1 must be greater than 0"),
        ("soon", "'soon' is not a duration"),
    ],
)
def test_bad_duration_says_what_is_wrong(value, problem):
    # flux.util.parse_fsd reads "inf" as RFC 23's infinity: refused here.
    with pytest.raises(ConfigError, match=f"^timeout: .*{re.escape(problem)}"):
        parse_duration(value)


# Rules: equals is strict


@pytest.mark.parametrize(
    "equals, matching, not_matching",
    [
        (1, [1], [True, 1.0, "1", [1]]),
        (True, [True], [1, 1.0, "true"]),
        (1.0, [1.0], [1, True]),
        ("gold", ["gold"], ["Gold", ["gold"]]),
        ([1, 2], [[1, 2]], [[1.0, 2], [True, 2], [1]]),
        ({"a": 1}, [{"a": 1}], [{"a": True}, {"a": 1, "b": 2}]),
    ],
)
def test_rule_equals_is_equal_in_type_and_value(equals, matching, not_matching):
    rule = Rule.parse(0, {"attribute": "x", "equals": equals, "description": "d"})
    for value in matching:
        assert rule.matches({"x": value}), value
    for value in not_matching:
        assert not rule.matches({"x": value}), value


# Shutdown


def test_shutdown_timeout_is_read_as_a_duration():
    assert Config.from_sources({"shutdown-timeout": "2m"}).shutdown_timeout == 120.0


def test_shutdown_timeout_default_fits_inside_the_system_units_timeouts():
    # flux.service: broker.cleanup-timeout=45, TimeoutStopSec=90.
    assert 0 < Config().shutdown_timeout < 45


@pytest.mark.parametrize("value", ["0", -1, "soon", True])
def test_bad_shutdown_timeout_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match="^shutdown-timeout: "):
        Config.from_sources(None, {"shutdown-timeout": value})


@pytest.mark.parametrize("action", ["auto", "keep", "finish"])
def test_shutdown_action_accepts_each_action(action):
    config = Config.from_sources({"shutdown-action": action})
    assert config.to_dict()["shutdown-action"] == action


@pytest.mark.parametrize("value", ["drop", "", 1, ["keep"]])
def test_bad_shutdown_action_is_refused_naming_the_key_and_the_actions(value):
    with pytest.raises(ConfigError, match="^shutdown-action: ") as info:
        Config.from_sources(None, {"shutdown-action": value})
    assert "'keep'" in str(info.value) and "'finish'" in str(info.value)


# Rules: one description per rule


@pytest.mark.parametrize(
    "second",
    [
        {"attribute": "system.other", "description": "bb"},
        {"attribute": "system.bb", "description": "bb", "timeout": "5m"},
        {"attribute": "system.bb", "description": "bb", "point": "prolog"},
    ],
)
def test_rules_of_the_same_description_are_refused_naming_the_key(second):
    """Twice at one point the second rule would be ignored (its timeout
    lost); at both points it would be refused on every job."""
    first = {"attribute": "system.bb", "description": "bb"}
    with pytest.raises(ConfigError) as exc:
        Config.from_sources(None, {"rules": [first, second]})
    message = str(exc.value)
    assert message.startswith("rules[1].description: 'bb'")
    assert "rules[0]" in message


def test_rules_of_distinct_descriptions_are_accepted():
    rules = [
        {"attribute": "system.bb", "description": "bb"},
        {"attribute": "system.bb", "description": "bb-setup", "point": "prolog"},
    ]
    config = Config.from_sources(None, {"rules": rules})
    assert [rule.to_dict() for rule in config.rules] == rules


#: Rules as they may be configured, well or badly: a few names, so that
#: duplicates are frequent.
_rule_tables = st.fixed_dictionaries(
    {
        "attribute": st.sampled_from(["system.bb", "user.a.b", "x", "a..b"]),
        "description": st.sampled_from(["bb", "bb-2", "mount", "b b", ""]),
    },
    optional={
        "point": st.sampled_from(["epilog", "prolog", "never"]),
        "timeout": st.sampled_from([60, "10m", 0, "soon"]),
        "equals": st.sampled_from([1, "x", True]),
    },
)


def expected_rule_error(rules):
    """The key the first problem of ``rules`` is named by, or None: the
    first rule that is bad in itself, else the first repeated description."""
    for index, rule in enumerate(rules):
        if rule["attribute"] == "a..b":
            return f"rules[{index}].attribute"
        if rule["description"] in ("b b", ""):
            return f"rules[{index}].description"
        if rule.get("timeout") in (0, "soon"):
            return f"rules[{index}].timeout"
        if rule.get("point") == "never":
            return f"rules[{index}].point"
    seen = set()
    for index, rule in enumerate(rules):
        if rule["description"] in seen:
            return f"rules[{index}].description"
        seen.add(rule["description"])
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(_rule_tables, max_size=6))
def test_rules_are_accepted_exactly_when_each_is_good_and_descriptions_unique(
    rules,
):
    key = expected_rule_error(rules)
    if key is None:
        config = Config.from_sources(None, {"rules": rules})
        assert [r.description for r in config.rules] == [
            r["description"] for r in rules
        ]
        # What the plugin shows reads back as the same rules.
        again = Config.from_sources(None, {"rules": config.to_dict()["rules"]})
        assert [r.to_dict() for r in again.rules] == config.to_dict()["rules"]
    else:
        with pytest.raises(ConfigError) as exc:
            Config.from_sources(None, {"rules": rules})
        assert str(exc.value).startswith(key + ":"), (str(exc.value), key)


def _rules(count):
    return [{"attribute": f"a{i}", "description": f"d{i}"} for i in range(count)]


@pytest.mark.parametrize("count, max_holds", [(3, 2), (65, None), (2, 1)])
def test_more_rules_than_max_holds_are_refused_naming_both(count, max_holds):
    table = {"rules": _rules(count)}
    if max_holds is not None:
        table["max-holds"] = max_holds
    with pytest.raises(ConfigError) as info:
        Config.from_sources(None, table)
    message = str(info.value)
    assert message.startswith(f"rules: {count} rules but max-holds is ")
    assert str(max_holds or 64) in message


@pytest.mark.parametrize("count, max_holds", [(2, 2), (64, None), (1, 1)])
def test_as_many_rules_as_max_holds_are_accepted(count, max_holds):
    options = {} if max_holds is None else {"max-holds": max_holds}
    config = Config.from_sources(options, {"rules": _rules(count)})
    assert len(config.rules) == count


@given(st.integers(1, 80), st.integers(1, 80))
def test_rules_are_accepted_exactly_when_they_fit_max_holds(count, max_holds):
    table = {"rules": _rules(count), "max-holds": max_holds}
    if count > max_holds:
        with pytest.raises(ConfigError, match="^rules: "):
            Config.from_sources(None, table)
    else:
        assert len(Config.from_sources(None, table).rules) == count


# snapshot-chunk (the hold log's snapshots in parts)


def test_snapshot_chunk_is_read_as_an_integer_and_shown():
    config = Config.from_sources({"snapshot-chunk": "4096"})
    assert config.snapshot_chunk == 4096
    assert config.to_dict()["snapshot-chunk"] == 4096
    assert Config.from_sources(None, {"snapshot-chunk": 1024}).snapshot_chunk == 1024


def test_snapshot_chunk_defaults_to_the_hold_logs():
    from flux_epilog_gate.gate.holdlog import CHUNK_BYTES

    assert Config().snapshot_chunk == CHUNK_BYTES


@pytest.mark.parametrize("value", [0, 1023, 2**30 + 1, -5, "big", 1.5, True])
def test_bad_snapshot_chunk_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^snapshot-chunk: "):
        Config.from_sources({"snapshot-chunk": value})


def test_snapshot_chunk_reaches_the_hold_log(port):
    from flux_epilog_gate.gate import Gate

    gate = Gate(port)
    gate.reconfigure(Config.from_sources({"snapshot-chunk": 2048}))
    assert gate.holdlog.chunk == 2048


# Exact forms only: counts, switches and durations


#: Each count key and its range.
COUNTS = {
    "max-holds": (1, MAX_HOLDS_LIMIT),
    "gone-limit": (0, 10_000_000),
    "watch-backlog": (1, 10_000_000),
    "max-pending": (1, 10_000_000),
    "snapshot-chunk": (1024, 2**30),
}

#: Text close to what a count or a duration accepts: ASCII and other
#: scripts' digits, spaces, signs, separators, units and words.
_near_text = st.lists(
    st.sampled_from(list("0123456789 \t\n+-_.eExmshd٣７²") + ["inf", "nan"]),
    max_size=8,
).map("".join)

#: Any JSON value a table or an option may carry.
_any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    _near_text,
    st.text(max_size=6),
    st.lists(st.integers(0, 9), max_size=2),
)


def _refused_naming(key, source):
    with pytest.raises(ConfigError) as info:
        Config.from_sources(*source)
    assert str(info.value).startswith(f"{key}: "), str(info.value)
    return str(info.value)


@pytest.mark.parametrize("key", COUNTS)
@given(value=_any_value)
def test_table_count_is_accepted_only_as_an_integer_in_range(key, value):
    """The [epilog-gate] table is TOML: a count is a TOML integer, never
    text (``"٣"``, ``" 7 "``, ``"7"``), a float or a boolean."""
    low, high = COUNTS[key]
    exact = type(value) is int and low <= value <= high
    if exact:
        config = Config.from_sources(None, {key: value}).to_dict()
        assert config[key] == value
        # What the query shows reads back as the same value.
        assert Config.from_sources(None, {key: config[key]}).to_dict()[key] == value
    else:
        message = _refused_naming(key, (None, {key: value}))
        assert shown(value) in message


@pytest.mark.parametrize("key", COUNTS)
@given(value=_any_value)
def test_option_count_is_accepted_only_as_an_integer_or_ascii_digits(key, value):
    """A load option given as KEY=VALUE text may also be ASCII decimal
    digits, and nothing else: no spaces, signs, or other scripts'
    digits."""
    low, high = COUNTS[key]
    digits = isinstance(value, str) and re.fullmatch("[0-9]+", value)
    number = int(value) if digits else value
    if type(number) is int and low <= number <= high:
        assert Config.from_sources({key: value}).to_dict()[key] == number
    else:
        _refused_naming(key, ({key: value},))


@given(value=_any_value)
def test_annotate_is_true_or_false_and_as_an_option_also_those_words(value):
    """``annotate = 1`` is no switch (nor ``0``, ``"yes"``, ``"1"``)."""
    if isinstance(value, bool):
        assert Config.from_sources(None, {"annotate": value}).annotate is value
    else:
        _refused_naming("annotate", (None, {"annotate": value}))
    if isinstance(value, bool) or value in ("true", "false"):
        expected = value if isinstance(value, bool) else value == "true"
        assert Config.from_sources({"annotate": value}).annotate is expected
    else:
        _refused_naming("annotate", ({"annotate": value},))


#: The exact form of a duration's text (RFC 23 with ASCII digits).
_EXACT_DURATION = re.compile(
    r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?:ms|s|m|h|d)?"
)


@pytest.mark.parametrize("key", ["timeout", "shutdown-timeout"])
@given(text=_near_text)
def test_duration_text_is_accepted_only_in_its_exact_form(key, text):
    """Other scripts' digits, ``_``, spaces (``" 10m "``, ``"10 m"``)
    are refused, naming the key and the value; an accepted duration
    reads back as the same number of seconds."""
    seconds = None
    if _EXACT_DURATION.fullmatch(text):
        match = re.fullmatch(r"(.*?)(ms|s|m|h|d)?", text)
        unit = {"ms": 0.001, "m": 60, "h": 3600, "d": 86400}.get(match[2], 1)
        seconds = float(match[1]) * unit
    if seconds is not None and 0 < seconds < float("inf"):
        config = Config.from_sources(None, {key: text}).to_dict()
        assert config[key] == pytest.approx(seconds)
        assert Config.from_sources(None, {key: config[key]}).to_dict() == config
    else:
        message = _refused_naming(key, (None, {key: text}))
        assert shown(text) in message


@pytest.mark.parametrize(
    "key, value",
    [
        ("max-holds", "٣"),
        ("gone-limit", "  7 "),
        ("max-holds", "7"),
        ("max-pending", "1_000"),
        ("snapshot-chunk", "２０４８"),
        ("annotate", 1),
        ("annotate", 0),
        ("annotate", "1"),
        ("timeout", " 10m "),
        ("timeout", "10 m"),
        ("timeout", "٣m"),
        ("timeout", "1_0s"),
        ("shutdown-action", ["keep"]),
    ],
)
def test_loose_table_value_is_refused_naming_key_and_value(key, value):
    message = _refused_naming(key, (None, {key: value}))
    assert shown(value) in message


@pytest.mark.parametrize(
    "key, value", [("max-holds", "٣"), ("gone-limit", " 7"), ("annotate", 1)]
)
def test_loose_option_value_is_refused_naming_key_and_value(key, value):
    message = _refused_naming(key, ({key: value},))
    assert shown(value) in message


def test_count_of_many_digits_is_refused_as_out_of_range():
    _refused_naming("max-pending", ({"max-pending": "9" * 5000},))


# The table is checked whole, also where a load option overrides it


@pytest.mark.parametrize(
    "options, table, key",
    [
        ({"max-holds": 10}, {"max-holds": 0}, "max-holds"),
        ({"timeout": "1h"}, {"timeout": "abc"}, "timeout"),
        ({"annotate": True}, {"annotate": 1}, "annotate"),
    ],
)
def test_bad_table_value_is_refused_even_when_an_option_overrides_it(
    options, table, key
):
    message = _refused_naming(key, (options, table))
    assert "[epilog-gate]" in message


def test_table_rules_must_fit_the_tables_own_max_holds_whatever_the_option():
    table = {"max-holds": 1, "rules": _rules(2)}
    with pytest.raises(ConfigError, match="^rules: 2 rules but max-holds is 1"):
        Config.from_sources({"max-holds": 5}, table)


def test_table_rules_may_rely_on_the_max_holds_option():
    config = Config.from_sources({"max-holds": 70}, {"rules": _rules(65)})
    assert len(config.rules) == 65


def test_query_shows_every_key_with_its_effective_value():
    assert set(Config().to_dict()) == set(KEYS)
