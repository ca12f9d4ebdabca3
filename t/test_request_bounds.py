"""What one request can make the broker hold is bounded: the bytes of a
request to the gate (epilog-gate.so's methods and dws.so's ``list``),
and the descriptions of a watch.  And every dws method answers a payload
that is not JSON with EPROTO naming the method, never an internal
error.  One real instance with both plugins loaded."""

import errno
import gc
import json
import os
import time

import flux
import flux.constants
import pytest
from guests import FLUX_ROLE_USER, open_as
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import dmesg, query
from watchload import broker_rss_kib, wait_watchers, watchers

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.gate.protocol import REQUEST_BYTES_MAX, WATCH_DESCRIPTIONS_MAX
from flux_epilog_gate.gate.watchers import WATCHES_PER_USER
from flux_epilog_gate.paths import plugin_path
from flux_epilog_gate.testing import Instance

STREAMING = flux.constants.FLUX_RPC_STREAMING

#: Each method of the gate, with a small payload it answers at once (a
#: watch: an error; a disconnect is never answered).
GATE_METHODS = {
    "epilog-gate.hold": {"id": 1, "description": "bb"},
    "epilog-gate.release": {"id": 1, "description": "bb"},
    "epilog-gate.list": {},
    "epilog-gate.snapshot": {},
    "epilog-gate.watch": {"descriptions": ["bb"], "unknown": 1},
    "epilog-gate.watch-ack": {"matchtag": 1, "count": 0},
    "epilog-gate.disconnect": {},
    "dws.list": {},
}
ANSWERED = sorted(set(GATE_METHODS) - {"epilog-gate.disconnect"})

#: dws.so's methods, each with its name as its error names it.
DWS_METHODS = {
    "dws.list": "list: malformed payload",
    "dws.resource-update": "malformed dws.resource-update RPC",
    "dws.prolog-remove": "malformed dws.prolog-remove RPC",
    "dws.epilog-remove": "malformed dws.epilog-remove RPC",
}


@pytest.fixture(scope="module")
def inst():
    dws = plugin_path("dws")
    with Instance(cores=8, plugin=plugin_path(), plugins=[(dws, {})]) as inst:
        yield inst


@pytest.fixture(scope="module")
def guest(inst):
    """A handle of a user who is not the instance owner."""
    return open_as(inst.uri, os.getuid() + 1, FLUX_ROLE_USER)


def padded(payload, size):
    """The JSON text of ``payload``, padded with spaces to ``size`` bytes
    with the NUL that ends it (what the limit counts)."""
    text = json.dumps(payload)
    return text[:-1] + " " * (size - len(text) - 1) + "}"


def send(handle, topic, text):
    """The answer to request ``topic`` with payload ``text``, or the
    OSError it failed with."""
    method = topic.split(".", 1)[1]
    flags = STREAMING if method == "watch" else 0
    future = handle.rpc(f"job-manager.{topic}", text, flags=flags)
    try:
        future.wait_for(30)
        return future.get()
    except OSError as exc:
        return exc


def answered(future):
    """True if ``future`` has its answer (its handle must look for it)."""
    try:
        future.wait_for(0.01)
    except TimeoutError:
        return False
    return True


def refused_for_size(answer, topic, size):
    method = topic.split(".", 1)[1]
    return (
        isinstance(answer, OSError)
        and answer.errno == errno.EMSGSIZE
        and (
            answer.strerror
            == f"{method}: a payload of {size} bytes is more than the limit of "
            f"{REQUEST_BYTES_MAX}"
        )
    )


@pytest.mark.parametrize("who", ["owner", "guest"])
@pytest.mark.parametrize("topic", GATE_METHODS)
def test_a_request_past_the_limit_is_refused_naming_it(inst, guest, topic, who):
    handle = inst.handle() if who == "owner" else guest
    size = REQUEST_BYTES_MAX + 1
    answer = send(handle, topic, padded(GATE_METHODS[topic], size))
    assert refused_for_size(answer, topic, size), answer
    if topic in ANSWERED:
        # At the limit, the same request is the method's to answer.
        answer = send(handle, topic, padded(GATE_METHODS[topic], REQUEST_BYTES_MAX))
        assert not refused_for_size(answer, topic, REQUEST_BYTES_MAX)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    topic=st.sampled_from(ANSWERED),
    size=st.integers(REQUEST_BYTES_MAX - 64, 4 * REQUEST_BYTES_MAX),
)
def test_a_request_is_refused_for_its_size_exactly_past_the_limit(
    inst, guest, topic, size
):
    answer = send(guest, topic, padded(GATE_METHODS[topic], size))
    assert refused_for_size(answer, topic, size) == (size > REQUEST_BYTES_MAX)


def test_a_watch_of_more_descriptions_than_the_limit_is_refused(inst, guest):
    names = [f"d{i}" for i in range(WATCH_DESCRIPTIONS_MAX + 1)]
    answer = send(guest, "epilog-gate.watch", json.dumps({"descriptions": names}))
    assert isinstance(answer, OSError) and answer.errno == errno.EINVAL
    assert answer.strerror == (
        f"watch: {WATCH_DESCRIPTIONS_MAX + 1} descriptions, more than the "
        f"limit of {WATCH_DESCRIPTIONS_MAX}"
    )


def test_a_watch_of_the_most_descriptions_of_the_longest_kind_is_taken(inst):
    """The largest request a client needs fits the byte limit."""
    names = [f"{i:04d}".ljust(64, "x") for i in range(WATCH_DESCRIPTIONS_MAX)]
    text = json.dumps({"descriptions": names})
    assert len(text) < REQUEST_BYTES_MAX
    handle = flux.Flux(inst.uri)
    before = query(inst)["counters"]["watchers"]
    future = handle.rpc("job-manager.epilog-gate.watch", text, flags=STREAMING)
    wait_watchers(inst, before + 1)
    del future, handle  # the stream ends with its connection
    wait_watchers(inst, before)


def test_a_guest_has_so_many_watch_streams_at_most(inst):
    """And so many times a request's bytes in the broker; the owner has
    no such limit."""
    before = watchers(inst)
    userid = os.getuid() + 2
    handle = open_as(inst.uri, userid, FLUX_ROLE_USER)
    gate = EpilogGate(handle)
    streams = [gate.watch_async(["bb"]) for _ in range(WATCHES_PER_USER)]
    wait_watchers(inst, before + WATCHES_PER_USER)
    with pytest.raises(OSError) as info:
        gate.watch_async(["bb"]).get()
    assert info.value.errno == errno.EMFILE
    assert info.value.strerror == (
        f"watch: user {userid} has {WATCHES_PER_USER} watch streams already, "
        "the limit: end one first"
    )
    # Another guest, and the owner, are not counted with this one.
    other = EpilogGate(open_as(inst.uri, userid + 1, FLUX_ROLE_USER))
    owner = EpilogGate(flux.Flux(inst.uri))
    more = [other.watch_async(["bb"]), owner.watch_async(["bb"])]
    wait_watchers(inst, before + WATCHES_PER_USER + 2)
    # The streams end with their connections, closed once Python frees
    # the handles (the futures, clients and the error refer to them).
    del streams, more, gate, handle, other, owner, info
    gc.collect()
    wait_watchers(inst, before)


def test_forty_guest_watches_of_8_mb_leave_the_broker_small(inst):
    """Each held its 8 MB payload in the broker for as long as its stream
    lasted: 40 of them grew it by some 480 MiB."""
    names = [f"{i:07d}".ljust(64, "x") for i in range(8 * 2**20 // 67)]
    text = json.dumps({"descriptions": names})
    rss, before = broker_rss_kib(inst), watchers(inst)
    handles = [open_as(inst.uri, os.getuid() + 1, FLUX_ROLE_USER) for _ in range(40)]
    futures = [
        h.rpc("job-manager.epilog-gate.watch", text, flags=STREAMING) for h in handles
    ]
    # Each is refused, or (unbounded) a stream the broker keeps.
    deadline = time.monotonic() + 300
    while sum(map(answered, futures)) + watchers(inst) - before < len(futures):
        assert time.monotonic() < deadline, "the watches were not all handled"
        time.sleep(0.1)
    growth_mib = (broker_rss_kib(inst) - rss) / 1024
    assert growth_mib < 100, growth_mib
    assert watchers(inst) == before
    for future in futures:
        with pytest.raises(OSError) as info:
            future.get()
        assert info.value.errno == errno.EMSGSIZE


@pytest.mark.parametrize("topic", DWS_METHODS)
@pytest.mark.parametrize("text", ["not json", "{", '{"id": 1'])
def test_a_dws_request_that_is_not_json_is_eproto_naming_the_method(inst, topic, text):
    answer = send(inst.handle(), topic, text)
    assert isinstance(answer, OSError) and answer.errno == errno.EPROTO, answer
    assert DWS_METHODS[topic] in answer.strerror
    assert not dmesg(inst, "Traceback") and not dmesg(inst, "internal error")
