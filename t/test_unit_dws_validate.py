"""The dws plugin's check of a resource-update (flux_epilog_gate.dws.validate),
over generated payloads, without an instance: every well-formed
``resources``/``exclude`` is accepted and is read by the instance's
scheduler without error; every malformed one is refused with
:class:`Malformed`, whose text names where the problem is; and no value
at all makes the check fail otherwise."""

import copy
import json
import re

import pytest
from flux.resource.Rv1Pool import ResourceRequest
from flux.resource.Rv1Set import Rv1Set
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jsonstrategies import any_json

from flux_epilog_gate.dws.constraints import combine
from flux_epilog_gate.dws.validate import (
    IDSET_LIMIT,
    MAX_DEPTH,
    Malformed,
    check_constraint,
    check_no_nul,
    check_resources,
    check_update,
)

BOUNDED = bounded(150)

#: What the scheduler of a 4-node instance matches constraints against.
R = {
    "version": 1,
    "execution": {
        "R_lite": [{"rank": "0-3", "children": {"core": "0-1"}}],
        "nodelist": ["node[0-3]"],
        "properties": {"rabbit": "0", "ssd": "1-2"},
        "starttime": 0,
        "expiration": 0,
    },
}

ANY_JSON = any_json(
    st.sampled_from(["type", "count", "with", "label", "and", "not", "x"])
    | st.text(max_size=6),
    max_leaves=8,
)

# Well-formed values

#: Counts of real requests: the scheduler expands a stepped count scaled
#: by the counts above it, which for counts of billions takes it minutes
#: (a cost of its own, whoever sends such a jobspec).
POSITIVE = st.integers(1, 1024)


@st.composite
def count_objects(draw):
    """RFC 14 count objects: a range, maybe stepped."""
    low = draw(st.integers(2, 64))
    count = {"min": low}
    step = draw(st.sampled_from([None, ("+", 1), ("+", 3), ("*", 2), ("^", 2)]))
    if step is not None or draw(st.booleans()):
        count["max"] = draw(st.integers(low, 256))
    if step is not None:
        count["operator"], count["operand"] = step
    return count


COUNT = POSITIVE | count_objects()
TYPES = st.sampled_from(["node", "socket", "core", "gpu", "ssd", "rabbit", "chassis"])
OPTIONAL = st.fixed_dictionaries(
    {},
    optional={
        "unit": st.text(st.characters(blacklist_characters="\0"), max_size=4),
        "exclusive": st.booleans(),
    },
)


def vertex(rtype, count, options, children=None):
    made = {"type": rtype, "count": count, **options}
    if children:
        made["with"] = children
    return made


VERTICES = st.recursive(
    st.builds(vertex, TYPES, COUNT, OPTIONAL),
    lambda children: st.builds(
        vertex, TYPES, COUNT, OPTIONAL, st.lists(children, min_size=1, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def resources(draw):
    """RFC 14 resources: a slot of cores (and more), maybe inside a node
    or chassis, beside other vertices."""
    below = [vertex("core", draw(COUNT), {})] + draw(st.lists(VERTICES, max_size=2))
    slot = vertex("slot", draw(COUNT), {"label": "task"}, below)
    top = draw(st.sampled_from([None, "node", "chassis"]))
    if top is not None:
        slot = vertex(top, draw(COUNT), draw(OPTIONAL), [slot])
    siblings = draw(st.lists(VERTICES, max_size=2))
    return siblings[: len(siblings) // 2] + [slot] + siblings[len(siblings) // 2 :]


PROPERTY = st.text(
    st.characters(blacklist_characters="!&'\"`|()\0", blacklist_categories=["Cs"]),
    max_size=8,
)
HOSTLIST = st.sampled_from(["node0", "node[0-3]", "node[1,3]", "x[0-9]y[1-2]", ""])


@st.composite
def ranks(draw):
    """The values of a ``ranks`` constraint as flux-core writes them: one
    RFC 22 idset (ids and ranges ascending and apart, below IDSET_LIMIT),
    maybe in brackets, or split in several."""
    items, position = [], 0
    for gap, length in draw(
        st.lists(st.tuples(st.integers(0, 2**10), st.integers(0, 5)), max_size=4)
    ):
        first = position + gap
        last = first + length
        items.append(str(first) if first == last else f"{first}-{last}")
        position = last + 1
    if len(items) > 1 and sorted(items) == items and draw(st.booleans()):
        # The list is read as one idset, its items sorted as text.
        return items
    text = ",".join(items)
    return [f"[{text}]" if draw(st.booleans()) else text]


LEAF = (
    st.builds(lambda v: {"properties": v}, st.lists(PROPERTY, max_size=3))
    | st.builds(lambda v: {"hostlist": v}, st.lists(HOSTLIST, max_size=2))
    | st.builds(lambda v: {"ranks": v}, ranks())
)
CONSTRAINTS = st.recursive(
    LEAF,
    lambda children: st.builds(lambda v: {"not": [v]}, children)
    | st.builds(lambda v: {"and": v}, st.lists(children, min_size=1, max_size=3))
    | st.builds(lambda v: {"or": v}, st.lists(children, min_size=1, max_size=3)),
    max_leaves=6,
)


def scheduler_reads(resources_, constraint, denied_ok=False):
    """What the instance's scheduler does with an updated jobspec: parse
    its request, match its constraint; raises if it cannot.  With
    ``denied_ok``, a request it parses and denies (ValueError: no cores,
    say) passes: that fails the job, not the scheduler."""
    system = {"duration": 0}
    if constraint is not None:
        system["constraints"] = constraint
    jobspec = {"version": 1, "resources": resources_, "attributes": {"system": system}}
    try:
        ResourceRequest.from_jobspec(jobspec)
    except ValueError:
        if not denied_ok:
            raise
    if constraint is not None:
        # Not guarded by the scheduler: an error here stops it.
        Rv1Set(R).copy_constraint(constraint)


@BOUNDED
@given(res=resources(), exclude=st.none() | CONSTRAINTS)
def test_well_formed_updates_are_accepted_and_the_scheduler_reads_them(res, exclude):
    check_update(res, exclude)
    scheduler_reads(res, exclude)


@BOUNDED
@given(exclude=CONSTRAINTS, old=st.none() | CONSTRAINTS, allow=st.booleans())
def test_a_well_formed_exclude_combined_with_well_formed_constraints_is_accepted(
    exclude, old, allow
):
    system = {"allow_rabbits": allow}
    if old is not None:
        system["constraints"] = old
    combined = combine(system, exclude)
    check_constraint(combined, "attributes.system.constraints")
    Rv1Set(R).copy_constraint(combined)


# Malformed values: a well-formed one with one thing wrong at a place.


def vertex_paths(res, where="resources"):
    """(path, vertex) of every vertex of ``res``."""
    for index, node in enumerate(res):
        path = f"{where}[{index}]"
        yield path, node
        yield from vertex_paths(node.get("with", []), f"{path}.with")


def constraint_paths(constraint, where="exclude"):
    """(path, constraint) of every constraint within ``constraint``."""
    yield where, constraint
    ((operator, values),) = constraint.items()
    if operator in ("and", "or", "not"):
        for index, value in enumerate(values):
            yield from constraint_paths(value, f"{where}.{operator}[{index}]")


#: (what it breaks, key it names, how) for one vertex.
VERTEX_BREAKS = [
    ("", lambda v: 5),
    ("", lambda v: ["type", "slot"]),
    (".type", lambda v: {**v, "type": 7}),
    (".type", lambda v: {**v, "type": ""}),
    (".type", lambda v: {k: x for k, x in v.items() if k != "type"}),
    (".count", lambda v: {k: x for k, x in v.items() if k != "count"}),
    (".count", lambda v: {**v, "count": 0}),
    (".count", lambda v: {**v, "count": -3}),
    (".count", lambda v: {**v, "count": True}),
    (".count", lambda v: {**v, "count": 1.5}),
    (".count", lambda v: {**v, "count": "2"}),
    (".count", lambda v: {**v, "count": {"max": 3}}),
    (".count", lambda v: {**v, "count": {"min": 2, "max": 1}}),
    (".count", lambda v: {**v, "count": {"min": 2, "max": 9, "operator": "/"}}),
    (
        ".count",
        lambda v: {**v, "count": {"min": 2, "max": 9, "operator": "-", "operand": 2}},
    ),
    (".count", lambda v: {**v, "count": {"min": 2, "operator": "*", "operand": 2}}),
    (".count", lambda v: {**v, "count": {"min": 1, "size": 2}}),
    (".with", lambda v: {**v, "with": []}),
    (".with", lambda v: {**v, "with": {"type": "core", "count": 1}}),
    (".label", lambda v: {**v, "label": 3}),
    (".unit", lambda v: {**v, "unit": ["GB"]}),
    (".exclusive", lambda v: {**v, "exclusive": "yes"}),
]

#: (key it names, how) for one constraint.
CONSTRAINT_BREAKS = [
    ("", lambda c: 5),
    ("", lambda c: "properties"),
    ("", lambda c: [c]),
    ("", lambda c: {}),
    ("", lambda c: {**c, "x-extra": []} if "x-extra" not in c else {}),
    ("", lambda c: {"prop": ["a"]}),
    (".properties", lambda c: {"properties": "a"}),
    (".properties[0]", lambda c: {"properties": [3]}),
    (".properties[1]", lambda c: {"properties": ["a", "b|c"]}),
    (".properties[0]", lambda c: {"properties": ["(x)"]}),
    (".hostlist[0]", lambda c: {"hostlist": ["node[0-"]}),
    (".hostlist[0]", lambda c: {"hostlist": [{"host": "a"}]}),
    (".hostlist", lambda c: {"hostlist": "node0"}),
    (".ranks[0]", lambda c: {"ranks": ["3-1"]}),
    (".ranks[0]", lambda c: {"ranks": ["0-5,5"]}),
    (".ranks[1]", lambda c: {"ranks": ["1", "4,2"]}),
    (".ranks: the idsets joined", lambda c: {"ranks": ["2", "10"]}),
    (".ranks: the idsets joined", lambda c: {"ranks": ["0-5", "3"]}),
    (".ranks: the idsets joined", lambda c: {"ranks": ["[1]", "[2]"]}),
    (".ranks[0]", lambda c: {"ranks": ["07"]}),
    (".ranks[0]", lambda c: {"ranks": ["x"]}),
    (".ranks[0]", lambda c: {"ranks": [str(IDSET_LIMIT)]}),
    (".ranks[0]", lambda c: {"ranks": [f"0-{IDSET_LIMIT}"]}),
    (".ranks[0]", lambda c: {"ranks": [5]}),
    (".and", lambda c: {"and": []}),
    (".or", lambda c: {"or": []}),
    (".or", lambda c: {"or": c}),
    (".not", lambda c: {"not": []}),
    (".not", lambda c: {"not": [c, c]}),
    (".not", lambda c: {"not": c}),
    (".and[0]", lambda c: {"and": [5, c]}),
]


def replaced(value, path, new, where):
    """A copy of JSON ``value`` (reached as ``where``) with the node at
    ``path`` replaced by ``new``."""
    if path == where:
        return new
    value = copy.deepcopy(value)
    rest = path[len(where) :]
    parent, key = _walk(value, rest)
    parent[key] = new
    return value


def _walk(value, rest):
    """The container and key of the node at ``rest`` (``[0].with[1]`` or
    ``.and[0]``) within ``value``."""
    steps = []
    token = ""
    for char in rest:
        if char in ".[":
            if token:
                steps.append(token)
            token = ""
        elif char == "]":
            steps.append(int(token))
            token = ""
        else:
            token += char
    if token:
        steps.append(token)
    for step in steps[:-1]:
        value = value[step]
    return value, steps[-1]


def broken(paths, pick, breaks, value, root):
    """``value`` (under ``root``) with the node at one of its ``paths``
    (``pick``) broken by ``breaks``; ``(path, broken value)``."""
    paths = list(paths)
    path, node = paths[pick % len(paths)]
    return path, replaced(value, path, breaks[1](node), root)


def assert_refused_at(check, where):
    """``check()`` refuses its request, naming ``where`` first."""
    with pytest.raises(Malformed) as info:
        check()
    assert str(info.value).startswith(where), (str(info.value), where)


@BOUNDED
@given(
    res=resources(),
    pick=st.integers(0, 10**6),
    breaks=st.sampled_from(VERTEX_BREAKS),
)
def test_a_malformed_vertex_is_refused_naming_where(res, pick, breaks):
    path, bad = broken(vertex_paths(res), pick, breaks, res, "resources")
    assert_refused_at(lambda: check_update(bad, None), path + breaks[0])


@BOUNDED
@given(
    exclude=CONSTRAINTS,
    pick=st.integers(0, 10**6),
    breaks=st.sampled_from(CONSTRAINT_BREAKS),
    res=resources(),
)
@example(
    exclude={"properties": ["a"]},
    pick=0,
    breaks=CONSTRAINT_BREAKS[0],
    res=[
        {
            "type": "slot",
            "count": 1,
            "label": "t",
            "with": [{"type": "core", "count": 1}],
        }
    ],
)
def test_a_malformed_constraint_is_refused_naming_where(exclude, pick, breaks, res):
    path, bad = broken(constraint_paths(exclude), pick, breaks, exclude, "exclude")
    assert_refused_at(lambda: check_update(res, bad), path + breaks[0])


@pytest.mark.parametrize(
    "value, problem",
    [
        (5, "resources: must be an array"),
        ("garbage", "resources: must be an array"),
        ({"type": "slot"}, "resources: must be an array"),
        ([], "resources: must not be empty"),
        ([{"type": "core", "count": 1}], "resources: has no slot"),
        (
            [{"type": "slot", "count": 1, "with": [{"type": "core", "count": 1}]}],
            "resources[0].label: a slot must have",
        ),
    ],
)
def test_resources_of_the_wrong_shape_are_refused(value, problem):
    with pytest.raises(Malformed, match=re.escape(problem)):
        check_resources(value)


def nested(depth, leaf, wrap):
    value = leaf
    for _ in range(depth - 1):
        value = wrap(value)
    return value


def test_nesting_is_bounded_so_no_value_exhausts_the_stack():
    core = {"type": "core", "count": 1}
    deep = nested(MAX_DEPTH + 1, core, lambda v: {"type": "x", "count": 1, "with": [v]})
    slot = {"type": "slot", "count": 1, "label": "t", "with": [deep]}
    with pytest.raises(Malformed, match="nested deeper"):
        check_resources([slot])
    leaf = {"properties": ["a"]}
    with pytest.raises(Malformed, match="nested deeper"):
        check_constraint(nested(MAX_DEPTH + 1, leaf, lambda v: {"not": [v]}), "exclude")
    check_constraint(nested(MAX_DEPTH, leaf, lambda v: {"not": [v]}), "exclude")
    for depth in (10**4, 10**5):
        with pytest.raises(Malformed):
            check_constraint(nested(depth, leaf, lambda v: {"and": [v]}), "exclude")


@BOUNDED
@given(res=ANY_JSON, exclude=ANY_JSON)
@example(
    res=[
        {
            "type": "slot",
            "count": 1,
            "label": "t",
            "with": [{"type": "core", "count": 1}],
        }
    ],
    exclude=5,
)
@example(res=5, exclude=None)
@example(res="garbage", exclude=None)
def test_any_value_is_accepted_or_refused_and_what_is_accepted_is_readable(
    res, exclude
):
    try:
        check_update(res, exclude)
    except Malformed as exc:
        assert str(exc).startswith(("resources", "exclude")), str(exc)
        return
    scheduler_reads(res, exclude, denied_ok=True)


#: Text of characters that make a NUL, its escape and look-alikes of it.
NUL_TEXT = st.text(alphabet="a\0\\u0", max_size=4)


def _has_nul(value):
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    if isinstance(value, dict):
        return any("\0" in key or _has_nul(item) for key, item in value.items())
    return False


@BOUNDED
@given(
    value=st.recursive(
        st.none() | st.integers() | st.floats() | NUL_TEXT,
        lambda children: st.lists(children, max_size=3)
        | st.dictionaries(NUL_TEXT, children, max_size=3),
        max_leaves=8,
    )
)
def test_a_nul_anywhere_is_refused_and_nothing_else(value):
    """A NUL in any string or key is refused, naming where; a value
    without one (a backslash and "u0000" as text among them) passes."""
    if _has_nul(value):
        with pytest.raises(Malformed, match="NUL character"):
            check_no_nul(value, "resources")
    else:
        check_no_nul(value, "resources")


@pytest.mark.parametrize("leaf", ["\0", "ok"])
def test_a_nul_nested_deeper_than_json_encodes_is_found(leaf):
    value = leaf
    for _ in range(5000):
        value = [value]
    if leaf == "ok":
        check_no_nul(value, "exclude")
    else:
        with pytest.raises(Malformed, match="NUL character"):
            check_no_nul(value, "exclude")


def _outcome(check):
    try:
        check()
    except Malformed as exc:
        return str(exc)
    return None


@BOUNDED
@given(
    res=resources(),
    note=st.none() | NUL_TEXT,
    exclude=st.none()
    | CONSTRAINTS
    | st.builds(lambda value: {"properties": [value]}, NUL_TEXT),
    ascii_only=st.booleans(),
)
@example(
    res=[{"type": "slot", "count": 1, "label": "t"}],
    note="\0",
    exclude=None,
    ascii_only=True,
)
@example(
    res=[{"type": "slot", "count": 1, "label": "t"}],
    note="\\u0000",
    exclude={"properties": ["a\0"]},
    ascii_only=False,
)
def test_the_request_text_changes_no_outcome(res, note, exclude, ascii_only):
    """Given the request's JSON text, the check skips the walk for NULs
    when the text has no NUL escape, and refuses or accepts exactly as
    without it (a NUL, or a backslash and "u0000" as text, in a key the
    check leaves to readers or in a property)."""
    if note is not None:
        res = copy.deepcopy(res)
        res[0]["note"] = note
    text = json.dumps(
        {"id": 1, "resources": res, "exclude": exclude}, ensure_ascii=ascii_only
    ).encode()
    assert _outcome(lambda: check_update(res, exclude, text)) == _outcome(
        lambda: check_update(res, exclude)
    )
