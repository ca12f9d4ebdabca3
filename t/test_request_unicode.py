"""Strings that JSON can write but flux-core cannot carry, in requests
to dws.so and to the gate, on one real instance with both plugins and
t/dws_service.py.

Python's JSON decoder reads an escaped UTF-16 surrogate without its
pair (``"\\ud800"``), which jansson, and so flux-core and flux-coral2's
plugin, refuse as invalid JSON; such a string used to fail only when it
was encoded for the job-manager: an ``errmsg`` answered as an internal
error, a ``prolog-remove``'s variables or a ``resource-update``'s
resources failing the job they named.  Such a request is now refused
as not JSON (EPROTO) and changes nothing.  A NUL character
(``"\\u0000"``), which flux-core's payloads carry, posts in a
``prolog-remove``'s variables as it came, as flux-coral2's plugin posts
it; in a ``resource-update`` it is refused naming the key, as flux-core's
readers of a jobspec could not decode it."""

import errno
import json

import pytest
from dwsfake import DW, SLOT, FakeDws, listed
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import described, eventlog, named, submit, wait_event, wait_inactive

from flux_epilog_gate.dws.validate import PROPERTY_RESERVED, Malformed, check_update
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

BOUNDED = bounded(60)


class Live:
    """The instance, its handle, the fake service and two rabbit jobs:
    ``depend`` held by dws-create (the service never places its storage)
    and ``run`` with its dws-setup prolog active (nor mounts it)."""

    def __init__(self, inst, service, depend, run):
        self.inst, self.service = inst, service
        self.h = inst.handle()
        self.depend, self.run = depend, run

    def __repr__(self):
        return "Live()"

    def state(self):
        """What no refused request may change: both jobs' eventlogs and
        every hold."""
        return (
            [e.name for e in eventlog(self.h, self.depend)],
            [e.name for e in eventlog(self.h, self.run)],
            listed(self.inst),
        )


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    with Instance(
        cores=8, plugin=plugin_path(), plugins=[(plugin_path("dws"), {})]
    ) as inst:
        service = FakeDws(
            inst, str(tmp_path_factory.mktemp("dws")), "--create-hang", "--setup-hang"
        )
        h = inst.handle()
        depend = submit(h, duration=0.1, **DW)
        wait_event(h, depend, "dependency-add", match=described("dws-create"))
        run = submit(h, duration=0.1, **DW)
        wait_event(h, run, "dependency-add", match=described("dws-create"))
        h.rpc(
            "job-manager.dws.resource-update",
            {"id": run, "resources": SLOT, "exclude": None},
        ).get()
        wait_event(h, run, "prolog-start", match=described("dws-setup"))
        yield Live(inst, service, depend, run)
        service.stop()


#: A string with one surrogate and no other: no character at all.
SURROGATE = st.integers(0xD800, 0xDFFF).map(chr)
LONE = st.builds(
    lambda a, s, b: a + s + b, st.text(max_size=4), SURROGATE, st.text(max_size=4)
)


def dws_requests(live):
    """``(method, payload)``: a request the service could send for one
    of the jobs, with a lone surrogate put in a value or a key."""

    def update(lone, where):
        payload = {"id": live.depend, "resources": json.loads(json.dumps(SLOT))}
        if where == "errmsg":
            payload["errmsg"] = lone
        elif where == "label":
            payload["resources"][0]["label"] = lone
        elif where == "key":
            payload[lone] = 1
        elif where == "value":
            payload["resources"][0]["with"][0]["note"] = lone
        payload["exclude"] = {"properties": [lone]} if where == "exclude" else None
        return "resource-update", payload

    def prolog(lone, where):
        variables = {lone: "x"} if where == "key" else {"DW_JOB_x": lone}
        return "prolog-remove", {"id": live.run, "variables": variables}

    def epilog(lone, where):
        return "epilog-remove", {"id": live.run, lone: where}

    return st.builds(
        lambda make, lone, where: make(lone, where),
        st.sampled_from([update, prolog, epilog]),
        LONE,
        st.sampled_from(["errmsg", "label", "key", "exclude", "value"]),
    )


def refused(h, topic, payload):
    """``(errno, message)`` of the error ``payload`` is answered with, or
    None if it succeeded.  Not the OSError: its traceback would keep the
    future, and libflux aborts a client with many futures alive."""
    future = h.rpc(topic, json.dumps(payload))
    try:
        future.get()
    except OSError as exc:
        return exc.errno, exc.strerror
    finally:
        del future
    return None


def test_a_lone_surrogate_is_not_json_to_dws_and_changes_nothing(live):
    before = live.state()

    @BOUNDED
    @given(request=st.data())
    def run(request):
        method, payload = request.draw(dws_requests(live))
        error = refused(live.h, f"job-manager.dws.{method}", payload)
        assert error is not None and error[0] == errno.EPROTO, (payload, error)
        assert f"malformed dws.{method} RPC: payload is not JSON" in error[1]
        assert "surrogate" in error[1]

    run()
    assert live.state() == before
    log = live.inst.flux("dmesg").stdout
    assert "internal error" not in log and "Traceback" not in log


GATE = {
    "hold": lambda jobid, lone: {"id": jobid, "description": "ok", "point": lone},
    "release": lambda jobid, lone: {"id": jobid, "description": lone},
    "list": lambda jobid, lone: {"id": jobid, lone: True},
}


@BOUNDED
@given(method=st.sampled_from(sorted(GATE)), lone=LONE)
def test_a_lone_surrogate_is_not_json_to_the_gate(live, method, lone):
    payload = GATE[method](live.depend, lone)
    error = refused(live.h, f"job-manager.epilog-gate.{method}", payload)
    assert error is not None and error[0] == errno.EPROTO, (payload, error)
    assert "malformed payload" in error[1] and "surrogate" in error[1]


#: Where a NUL goes in a well-formed update, and where the error names.
NUL_PLACES = {
    "label": "resources[0].label",
    "type": "resources[0].with[0].type",
    "unit": "resources[0].with[0].unit",
    "key": "resources[0].with[0]: a key",
    "property": "exclude.not[0].properties[0]",
}


@BOUNDED
@given(
    # Text every place takes (a property's reserved characters are
    # refused before any NUL is looked for).
    text=st.text(
        st.characters(blacklist_characters="\0" + PROPERTY_RESERVED), max_size=4
    ),
    at=st.integers(0, 4),
    place=st.sampled_from(sorted(NUL_PLACES)),
)
def test_a_nul_in_any_string_of_an_update_is_malformed(text, at, place):
    nul = text[:at] + "\0" + text[at:]
    resources = json.loads(json.dumps(SLOT))
    exclude = {"not": [{"properties": ["ssd"]}]}
    check_update(resources, exclude)  # well-formed before the NUL
    core = resources[0]["with"][0]
    if place == "label":
        resources[0]["label"] = nul
    elif place == "type":
        core["type"] = nul
    elif place == "unit":
        core["unit"] = nul
    elif place == "key":
        core[nul] = 1
    else:
        exclude["not"][0]["properties"][0] = nul
    with pytest.raises(Malformed) as info:
        check_update(resources, exclude)
    assert str(info.value).startswith(NUL_PLACES[place])
    assert "NUL character" in str(info.value)


def test_a_nul_in_a_resource_update_is_refused_naming_the_key(live):
    h = live.h
    resources = json.loads(json.dumps(SLOT))
    resources[0]["with"][0]["type"] = "co\u0000re"
    error = refused(
        h,
        "job-manager.dws.resource-update",
        {"id": live.depend, "resources": resources, "exclude": None},
    )
    assert error[0] == errno.EPROTO
    assert "resources[0].with[0].type: holds a NUL character" in error[1]
    # A malformed update fails its job, as flux-coral2's plugin does; its
    # jobspec is not touched.
    wait_inactive(h, live.depend)
    events = eventlog(h, live.depend)
    assert not named(events, "jobspec-update")
    assert named(events, "exception")[0].context["type"] == "exception"


def test_a_nul_in_prolog_variables_is_posted_as_it_came(live):
    h = live.h
    variables = {"DW_JOB_x": "a\u0000b"}
    h.rpc(
        "job-manager.dws.prolog-remove", {"id": live.run, "variables": variables}
    ).get()
    wait_event(h, live.run, "start")
    events = eventlog(h, live.run)
    assert named(events, "dws_environment")[0].context["variables"] == variables
    assert not named(events, "exception")
