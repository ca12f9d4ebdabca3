"""Hostile input: generated payloads sent to every method of a live gate.

Each method (hold, release, list, and watch as a streaming RPC) gets
thousands of generated payloads, sent as raw strings (or no payload at
all) and pipelined in batches: wrong types, missing and extra keys, huge
and unicode strings, negative and huge ids and statuses, NaN and
infinities, JSON that is not an object, text that is not JSON.  Every
request must be answered, with a success or an error whose errno is one
of EPROTO, EINVAL, ENOENT, EPERM, ENOSPC and whose message is not empty;
the broker must stay up; and the hold table must only change by what
the successful requests did (so never by a rejected one).
"""

import collections
import errno
import gc
import json
import time

import flux
import flux.constants
import flux.job
import pytest
from flux.core.inner import ffi, raw
from flux.message import Message
from hypothesis import given
from hypothesis import strategies as st
from hypothesis_settings import bounded
from jobs import query, submit, wait_event, wait_inactive
from jsonstrategies import ANY_JSON

from flux_epilog_gate import EpilogGate
from flux_epilog_gate.testing import Instance

SERVICE = "job-manager.epilog-gate"
#: The errors a request may get (EEXIST: the same description held at
#: another point; EMSGSIZE: a payload past 128 KiB, such as a HUGE
#: description).
ALLOWED = {
    errno.EMSGSIZE,
    errno.EPROTO,
    errno.EINVAL,
    errno.ENOENT,
    errno.EPERM,
    errno.ENOSPC,
    errno.EEXIST,
}
#: Requests per method (four methods: at least 10,000 in total).
PER_METHOD = 2500
BATCH = (45, 60)
EXAMPLES = 60
#: The hold that stays active through the whole module: watch requests
#: are answered with it.  Long enough that no fuzzed description hits it.
ACTIVE = "fuzz-baseline-active-hold-0123456789"
POOL = ["a", "b", "bb-teardown", "x.y_z-1", "base", "full-1"]
#: The plugin's max-holds; one job has that many holds already.
MAX_HOLDS = 8

FUZZ = bounded(EXAMPLES)


class Ref:
    """Stands for one of the real job ids, known only at run time."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Ref({self.name})"


# Strategies

EDGE_INTS = st.sampled_from(
    [
        0,
        1,
        -1,
        2**31 - 1,
        2**31,
        -(2**31),
        -(2**31) - 1,
        2**53,
        2**63 - 1,
        2**63,
        2**64 - 1,
        2**64,
        -(2**64),
        2**100,
        10**30,
    ]
)
HUGE = st.integers(65, 200_000).map(lambda n: "d" * n)
UNICODE = st.text(min_size=1, max_size=80) | st.sampled_from(
    ["\ud800", "a\u0000b", "é", "ß-1", "∂", "💥", "a b", "a/b", "a:b", "\n"]
)
DESCRIPTION = st.one_of(
    st.sampled_from(POOL),
    # A held description, then a NUL: what C reads of it, cut there.
    st.sampled_from(POOL).map(lambda d: d + "\x00"),
    st.from_regex(r"[A-Za-z0-9._-]{1,64}", fullmatch=True),
    st.just(""),
    st.just("x" * 64),
    HUGE,
    UNICODE,
    ANY_JSON,
)
JOB = st.sampled_from(["pend1", "pend2", "full", "gone", "active"]).map(Ref)
JOB_NO_ACTIVE = st.sampled_from(["pend1", "pend2", "full", "gone"]).map(Ref)
ID = st.one_of(JOB, st.integers(-(2**70), 2**70), EDGE_INTS, ANY_JSON)
#: Holds are never fuzzed onto the job with the active baseline hold: one
#: that the gate accepted there would be active at once, and could time
#: out under the test's feet.
HOLD_ID = st.one_of(JOB_NO_ACTIVE, st.integers(-(2**70), 2**70), EDGE_INTS, ANY_JSON)
TIMEOUT = st.one_of(
    st.floats(),
    st.integers(-(2**70), 2**70),
    EDGE_INTS,
    st.sampled_from(["1s", "10m", "", "inf"]),
    ANY_JSON,
)
STATUS = st.one_of(st.integers(-(2**70), 2**70), EDGE_INTS, ANY_JSON)
EXTRA = st.dictionaries(st.text(max_size=10), ANY_JSON, max_size=2)
RAW = st.sampled_from(
    [
        "",
        " ",
        "{",
        "}",
        "[",
        "not json",
        '{"id":',
        "{'id': 1}",
        "nul",
        "\u00ff\u1234",
        "{}}",
        "{} {}",
        "null",
        "true",
        "0",
        "-1",
        '""',
        "[]",
        "[{}]",
        '{"id": 1e999}',
        "NaN",
        "Infinity",
        '{"":{}}',
        "[" * 200 + "]" * 200,
    ]
)


def requests(fields, valid, extra=True):
    """Payloads for one method: objects built from ``fields`` (each key
    present or not, sometimes with extra keys); valid objects (from
    ``valid``), as is or with one field given a hostile value; any JSON at
    all; raw non-JSON text; or no payload."""
    obj = st.fixed_dictionaries({}, optional=fields)
    if extra:
        obj = st.one_of(obj, st.tuples(obj, EXTRA).map(lambda t: {**t[1], **t[0]}))
    mutated = st.builds(
        lambda base, key, value: {**base, key: value},
        valid,
        st.sampled_from(sorted(fields)),
        st.one_of(*fields.values()),
    )
    return st.one_of(
        obj.map(lambda o: ("object", o)),
        valid.map(lambda o: ("object", o)),
        mutated.map(lambda o: ("object", o)),
        ANY_JSON.map(lambda o: ("json", o)),
        RAW.map(lambda s: ("raw", s)),
        st.just(("none", None)),
    )


GOOD_DESCRIPTION = st.sampled_from(POOL) | st.from_regex(
    r"[A-Za-z0-9._-]{1,64}", fullmatch=True
)
GOOD_ID = JOB | st.integers(0, 2**64 - 1)
GOOD_POINT = st.sampled_from(["epilog", "prolog", "depend"])
#: A point as C and Python read it: near misses, names run together
#: (``|`` separates them in fastpath.c's table), any text or JSON.
POINT = st.one_of(
    GOOD_POINT,
    st.lists(GOOD_POINT | st.just(""), min_size=2, max_size=3).map("|".join),
    st.sampled_from(["EPILOG", " epilog", "epilog\u0000"]) | st.text(max_size=12),
    ANY_JSON,
)
HOLD = requests(
    {"id": HOLD_ID, "description": DESCRIPTION, "timeout": TIMEOUT, "point": POINT},
    st.fixed_dictionaries(
        {
            "id": JOB_NO_ACTIVE | st.integers(0, 2**64 - 1),
            "description": GOOD_DESCRIPTION,
        },
        optional={
            "timeout": st.floats(min_value=1e-9, max_value=1e9),
            "point": GOOD_POINT,
        },
    ),
)
RELEASE = requests(
    {"id": ID, "description": DESCRIPTION, "status": STATUS},
    st.fixed_dictionaries(
        {"id": GOOD_ID, "description": GOOD_DESCRIPTION},
        optional={"status": st.integers(-(2**31), 2**31 - 1)},
    ),
)
LIST = requests({"id": ID}, st.fixed_dictionaries({}, optional={"id": GOOD_ID}))
WATCH = requests(
    {"descriptions": st.one_of(st.lists(DESCRIPTION, max_size=4), ANY_JSON)},
    st.fixed_dictionaries(
        {}, optional={"descriptions": st.lists(GOOD_DESCRIPTION, max_size=3)}
    ),
)


#: Outcomes each method's fuzzing must have produced (a check on the
#: strategies: they reach past the payload checks into the gate).
COVERAGE = {
    "hold": {"ok", "EPROTO", "EINVAL", "ENOENT", "ENOSPC"},
    "release": {"ok", "EPROTO", "EINVAL", "ENOENT"},
    "list": {"ok", "EPROTO", "EINVAL"},
    "watch": {"ok", "silent", "EPROTO", "EINVAL"},
}


def batches(strategy):
    return st.lists(strategy, min_size=BATCH[0], max_size=BATCH[1])


# The live instance


@pytest.fixture(scope="module")
def live(plugin):
    with Instance(
        cores=8,
        plugin=plugin,
        plugin_conf={"max-holds": MAX_HOLDS},
        env={"FLUX_DISABLE_JOB_CLEANUP": "1"},
    ) as inst:
        handle = inst.handle()
        gate = EpilogGate(handle)
        ids = {
            "pend1": submit(handle, urgency=0),
            "pend2": submit(handle, urgency=0),
            "full": submit(handle, urgency=0),
            "active": submit(handle, urgency=0),
            "gone": submit(handle, duration=0.01),
        }
        wait_inactive(handle, ids["gone"])
        gate.hold(ids["pend1"], "base")
        gate.hold(ids["pend2"], "base", timeout=5)
        for n in range(MAX_HOLDS):
            gate.hold(ids["full"], f"full-{n}")
        gate.hold(ids["active"], ACTIVE)
        flux.job.cancel(handle, ids["active"])
        wait_event(handle, ids["active"], "epilog-start")
        yield Live(inst, handle, gate, ids)
        gate.release(ids["active"], ACTIVE)


class Live:
    def __init__(self, inst, handle, gate, ids):
        self.inst = inst
        self.handle = handle
        self.gate = gate
        self.ids = ids
        self.sent = {}
        self.outcomes = collections.Counter()
        # Fuzzed requests go out on a handle of their own, used for
        # nothing else (no stray responses to earlier RPCs on it).
        self.fuzz_handle = inst.handle()

    def resolve(self, value):
        if isinstance(value, Ref):
            return self.ids[value.name]
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        return value

    def encode(self, request):
        """Return ``(kind, payload)``: the payload as sent (str or None)."""
        kind, value = request
        if kind in ("object", "json"):
            return kind, json.dumps(self.resolve(value))
        return kind, value

    def table(self):
        """The hold table: every hold's list entry by (id, description)."""
        return {(h["id"], h["description"]): h for h in self.gate.list()}

    def up(self):
        assert self.inst.alive(), "the broker is gone"
        self.handle.rpc("broker.ping", {}).get()


def _check_error(method, payload, error):
    errnum, text = error
    assert errnum in ALLOWED, f"{method} {payload!r:.300}: errno {errnum} ({text})"
    assert text.strip(), f"{method} {payload!r:.300}: error without a message"


def _must_fail(method, kind, payload):
    """Payloads that can never be accepted by ``method``."""
    if kind in ("raw", "none", "json"):
        try:
            decoded = json.loads(payload) if payload else None
        except ValueError:
            return True
        if method in ("list", "watch"):
            return decoded is not None and not isinstance(decoded, dict)
        return not isinstance(decoded, dict)
    return False


class Exchange:
    """Requests sent as raw messages on one handle, pipelined, and their
    responses matched by matchtag: no futures, so that a client with
    streams still open can simply go away."""

    BARRIER = 0xFFFF0

    def __init__(self, handle):
        self.handle = handle

    def send(self, topic, payload, tag, streaming=False):
        msg = Message(flux.constants.FLUX_MSGTYPE_REQUEST)
        msg.topic = topic
        if payload is not None:
            msg.payload_str = payload
        raw.flux_msg_set_matchtag(msg.handle, tag)
        raw.flux_msg_set_nodeid(msg.handle, raw.FLUX_NODEID_ANY)
        if streaming:
            raw.flux_msg_set_streaming(msg.handle)
        self.handle.send(msg)  # (msg must outlive the call)

    def recv(self, deadline):
        while True:
            try:
                msg = self.handle.recv(
                    type_mask=flux.constants.FLUX_MSGTYPE_RESPONSE,
                    flags=flux.constants.FLUX_O_NONBLOCK,
                )
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise
                msg = None
            if msg is not None:
                break
            assert time.monotonic() < deadline, "a request was never answered"
            time.sleep(0.0005)
        tag = ffi.new("uint32_t *")
        errnum = ffi.new("int *")
        raw.flux_msg_get_matchtag(msg.handle, tag)
        raw.flux_msg_get_errnum(msg.handle, errnum)
        if errnum[0]:
            return tag[0], "error", (errnum[0], msg.payload_str or "")
        text = msg.payload_str
        return tag[0], "ok", json.loads(text) if text else None

    def batch(self, method, payloads, streaming=False, timeout=30.0):
        """Send ``payloads`` to ``method``, then a list request; return
        the first response to each, or None for a stream with none yet
        once the list request is answered."""
        topic = f"{SERVICE}.{method}"
        for tag, payload in enumerate(payloads, start=1):
            self.send(topic, payload, tag, streaming)
        self.send(f"{SERVICE}.list", "{}", self.BARRIER)
        answers = {}
        barrier = False
        deadline = time.monotonic() + timeout
        # Responses come back in the order the requests were handled: once
        # the list request is answered, every response the gate gave at
        # once to the batch is in.  Requests that are not streams must all
        # be answered, however long it takes.
        while not barrier or (not streaming and len(answers) < len(payloads)):
            tag, outcome, value = self.recv(deadline)
            if tag == self.BARRIER:
                barrier = True
            elif 1 <= tag <= len(payloads):
                answers.setdefault(tag, (outcome, value))
            else:
                raise AssertionError(f"response with unknown matchtag {tag}")
        return [answers.get(tag) for tag in range(1, len(payloads) + 1)]


def _sent(live, method, batch, handle=None, streaming=False):
    """Send a batch; return ``[(kind, payload, answer)]``."""
    encoded = [live.encode(request) for request in batch]
    answers = Exchange(handle or live.fuzz_handle).batch(
        method, [payload for _, payload in encoded], streaming=streaming
    )
    live.sent[method] = live.sent.get(method, 0) + len(encoded)
    for answer in answers:
        if answer is None:
            live.outcomes[(method, "silent")] += 1
        elif answer[0] == "ok":
            live.outcomes[(method, "ok")] += 1
        else:
            live.outcomes[
                (method, errno.errorcode.get(answer[1][0], answer[1][0]))
            ] += 1
    return [
        (kind, payload, answer) for (kind, payload), answer in zip(encoded, answers)
    ]


def _fuzz_writes(live, method, batch):
    before = live.table()
    expected = dict(before)  # new holds: only their state is known
    for kind, payload, (outcome, value) in _sent(live, method, batch):
        if outcome == "error":
            _check_error(method, payload, value)
            continue
        assert not _must_fail(method, kind, payload), (method, payload, value)
        request = json.loads(payload)
        key = (request["id"], request["description"])
        if method == "hold":
            assert set(value) == {"id", "description", "state"}, value
            assert (value["id"], value["description"]) == key
            assert value["state"] in ("pending", "active")
            expected.setdefault(key, {"state": value["state"]})
        else:
            assert isinstance(value.get("released"), bool), value
            if value["released"]:
                assert expected.pop(key, None) is not None, (key, value)
            else:
                assert isinstance(value.get("reason"), str) and value["reason"]
                assert key not in expected
    live.up()
    after = live.table()
    assert set(after) == set(expected)
    for key, entry in after.items():
        if key in before:
            assert entry == before[key], key
        else:
            assert entry["state"] == expected[key]["state"], key


def _fuzz_reads(live, method, batch):
    before = live.table()
    streaming = method == "watch"
    # Every watch batch from a client of its own, which goes away
    # afterwards with its streams open: its watchers must be dropped.
    handle = live.inst.handle() if streaming else None
    for kind, payload, answer in _sent(live, method, batch, handle, streaming):
        if answer is None:
            # A valid watch for descriptions that are not active: nothing
            # to say yet.
            assert streaming and not _must_fail(method, kind, payload), payload
            continue
        outcome, value = answer
        if outcome == "error":
            _check_error(method, payload, value)
            continue
        assert not _must_fail(method, kind, payload), (method, payload, value)
        if method == "list":
            assert isinstance(value.get("holds"), list), value
            keys = {(h["id"], h["description"]) for h in value["holds"]}
            assert keys <= set(before), (payload, keys)
        else:
            assert value == {
                "id": live.ids["active"],
                "description": ACTIVE,
                "userid": value["userid"],
                "ran": False,
                "point": "epilog",
            }, value
    live.up()
    assert live.table() == before


@pytest.mark.parametrize(
    "method,strategy",
    [("hold", HOLD), ("release", RELEASE), ("list", LIST), ("watch", WATCH)],
)
def test_fuzz(live, method, strategy):
    if method == "release":
        # Something to release, pending (a release of an active hold with
        # a fuzzed status would raise exceptions on our baseline job).  The
        # hold fuzz may have left a description held at another point
        # (EEXIST): it is as good to release.
        for jobid in (live.ids["pend1"], live.ids["pend2"]):
            for description in POOL:
                try:
                    live.gate.hold(jobid, description)
                except OSError as exc:
                    if exc.errno == errno.EEXIST:
                        continue
                    assert exc.errno == errno.ENOSPC
                    break
    fuzz = _fuzz_writes if method in ("hold", "release") else _fuzz_reads

    @FUZZ
    @given(batches(strategy))
    def run(batch):
        fuzz(live, method, batch)

    run()
    assert live.sent[method] >= PER_METHOD, live.sent
    seen = {k[1]: n for k, n in live.outcomes.items() if k[0] == method}
    print(method, live.sent[method], seen)
    assert set(seen) >= COVERAGE[method], seen
    if method == "watch":
        gc.collect()
        time.sleep(0.2)
        counters = query(live.inst)["counters"]
        assert counters["watchers"] == 0, counters


def test_deeply_nested_payload_is_a_protocol_error(live):
    """JSON nested deeper than the Python parser's recursion limit is as
    malformed as any other: EPROTO, not an internal error."""
    before = live.table()
    errnums = []
    for method in ("hold", "release", "list", "watch"):
        flags = flux.constants.FLUX_RPC_STREAMING if method == "watch" else 0
        with pytest.raises(OSError) as info:
            live.handle.rpc(f"{SERVICE}.{method}", "[" * 100_000, flags=flags).get()
        errnums.append(info.value.errno)
    live.up()
    assert live.table() == before
    assert errnums == [errno.EPROTO] * 4, errnums
