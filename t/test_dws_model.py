"""A model-based test of dws.so's workflow (hypothesis' stateful testing):
rabbit jobs (some with a jobspec nested deeper than Python decodes) go
through create, setup, run and epilog while the DWS service answers,
fails or lingers, jobs are cancelled, the epilog timeout fires, dws.so
is removed and loaded again, and the job-manager is restarted or the
broker SIGKILLed, in any order.  The plugin is dws.so's own class
(:class:`flux_epilog_gate.dws.plugin.Dws`) on the fake instance of
dwsmodel.py; what it promises (flux-epilog-gate-dws(7)):

- no handler of the plugin fails (the runtime would log it and the job
  would wait on what it did not do);
- the service gets ``dws.create``, ``dws.setup`` and ``dws.post_run``
  once per job (again only after a crash lost the event that started
  the step), and ``dws.post_run`` only once the job's ``dws-setup``
  prolog has ended;
- the job's exceptions are the plugin's (types ``dws-create``,
  ``dws-setup``, ``dws-epilog``, ``dws``, ``exception``,
  ``dws-epilog-timeout``) or the test's ``cancel``, never the gate's
  own (``epilog``, ``dependency``; ``prolog`` only in place of a fatal
  exception a crash lost);
- a job with a fatal exception gets no ``dws_environment`` and its
  ``dws-setup`` ends with a status other than 0;
- once the service has answered everything and every job is cancelled,
  every job goes inactive.

DWS_MODEL_EXAMPLES sets the number of runs (a soak draws new ones).
"""

import itertools
import os
from collections import Counter

import pytest
from dwsmodel import (
    CREATE,
    DEEP,
    POST_RUN,
    SETUP,
    FakeService,
    Jobtap,
    RabbitJobManager,
    Request,
    ServiceCalls,
)
from gate.modeljm import CLEANUP, INACTIVE, RUN, SCHED, Clock, FakeKVS
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from hypothesis_settings import running, stateful

from flux_epilog_gate.dws.plugin import Dws
from flux_epilog_gate.gate.holdlog import MARKER
from flux_epilog_gate.jobtap.plugin import Job, RequestError
from flux_epilog_gate.plugin import driver as glue

SOAK = "DWS_MODEL_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("DWS_MODEL_EXAMPLES", "300"))
STEPS = int(os.environ.get("DWS_MODEL_STEPS", "80"))

MAX_JOBS = 3
#: Removes, restarts and crashes in one run: past them, the run is the
#: workflow's (always allowed, they would take most of its steps).
MAX_DOWNS = 4
USER = 1000
EPILOG_TIMEOUT = 5.0
DW = "#DW jobdw type=xfs capacity=1GiB name=x"
SLOT = [
    {
        "type": "slot",
        "count": 1,
        "label": "task",
        "with": [{"type": "core", "count": 1}],
    }
]

#: Exception types a rabbit job may get (the plugin's, and the test's).
DWS_TYPES = {"cancel", "dws-create", "dws-setup", "dws-epilog", "dws", "exception"}
DWS_TYPES.add("dws-epilog-timeout")

#: The event that starts each step the service is asked for.
STARTS = {
    CREATE: ("dependency-add", "dws-create"),
    SETUP: ("prolog-start", "dws-setup"),
    POST_RUN: ("epilog-start", "dws-epilog"),
}

#: Job-manager ids: each run's are new, as the runtime's (a job-manager's
#: gate is kept by its id, flux_epilog_gate/plugin/host.py).
JMIDS = itertools.count(1)

JOB = st.integers(min_value=0, max_value=MAX_JOBS - 1)
WHICH = st.integers(min_value=0, max_value=20)


class NoFreeze:
    """The collector policy of the broker, left out of the test process."""

    freezes = collections = 0

    def install(self):
        pass

    def freeze(self):
        pass

    def frozen(self):
        return 0


def _opened(job, kind, description):
    """True if the gate's ``kind`` action ``description`` is open in the
    job's eventlog, or in what is posted to it already (events posted
    from a callback wait for the event being processed)."""
    count = 0
    for _, name, context in job.eventlog + job.queue[1:]:
        if context.get("description") != description or not context.get(MARKER):
            continue
        if name == f"{kind}-start":
            count += 1
        elif name == f"{kind}-finish":
            count -= 1
    return count > 0


def _fatal_before(job, index):
    return any(
        name == "exception" and context.get("severity") == 0
        for _, name, context in job.eventlog[:index]
    )


class DwsModel(RuleBasedStateMachine):
    """The instance, dws.so, the service and what was asked of them."""

    def __init__(self):
        super().__init__()
        self.saved = glue.FREEZER, glue.GatePort
        glue.FREEZER = NoFreeze()
        # The gate's port of an instance is its fake facade's.
        glue.GatePort = lambda jobtap: jobtap.gate_port
        Dws._collect()
        self.clock = Clock()
        self.kvs = FakeKVS()
        self.service = FakeService()
        self.service.observer = self.requested
        self.violations = []
        self.jobids = []
        self.next_id = 100
        self.sends = Counter()
        self.downs = 0
        self.jmid = next(JMIDS)
        self.jm = self._jm(RabbitJobManager(self.kvs, self.clock, self))
        self.port = self.jobtap = None
        self.plugin = None
        self.load()

    def teardown(self):
        glue.FREEZER, glue.GatePort = self.saved

    def _jm(self, jm):
        jm.failed = self.failed
        return jm

    # What the model watches

    def failed(self, where, exc):
        self.violations.append(f"{where}: {type(exc).__name__}: {exc}")

    def event(self, job, entry, old):
        _, name, context = entry
        if name == "exception":
            kind = context.get("type")
            if kind == "prolog" and not _fatal_before(job, len(job.eventlog) - 1):
                return
            if kind not in DWS_TYPES:
                self.violations.append(f"job {job.id}: the gate's exception {context}")
            if kind == "dws-epilog-timeout" and context.get("note") != (
                "DWS epilog timed out"
            ):
                self.violations.append(f"job {job.id}: {context}")
        elif name == "dws_environment" and _fatal_before(job, len(job.eventlog) - 1):
            self.violations.append(f"job {job.id}: dws_environment after its exception")
        elif (
            name == "prolog-finish"
            and context.get("description") == "dws-setup"
            and context.get("status") == 0
            and _fatal_before(job, len(job.eventlog) - 1)
        ):
            self.violations.append(
                f"job {job.id}: dws-setup ended 0 after its exception"
            )

    def start_request(self, job):
        pass

    def dropped(self, jobid):
        """flux-core did not replay the job (its eventlog had ``submit``
        alone): the job is gone."""

    def requested(self, topic, payload):
        jobid = payload.get("jobid")
        if topic not in STARTS:
            return
        self.sends[(jobid, topic)] += 1
        if self.sends[(jobid, topic)] > 1:
            self.violations.append(f"job {jobid}: {topic} sent again")
        job = self.jm.jobs.get(jobid)
        if (
            topic == POST_RUN
            and job is not None
            and _opened(job, "prolog", "dws-setup")
        ):
            self.violations.append(f"job {jobid}: dws.post_run with dws-setup open")

    # dws.so

    def load(self):
        """flux jobtap load dws.so (or its load from the config)."""
        options = {"epilog-timeout": EPILOG_TIMEOUT}
        jobtap = self.jobtap = Jobtap(self.jm, self.jmid, self.service, options)
        port = self.port = jobtap.gate_port
        self.plugin = port.plugin = Dws(jobtap, ServiceCalls(jobtap, self.service))
        self.plugin.configure(None)
        self.jm.port = port
        if jobtap.marks.forwarded("job.new"):
            for job in self.jm.active():
                self.jm._call(
                    "job.new",
                    self.plugin.on_new,
                    Job(jobtap, "new", job.id, job.state, job.userid, None),
                )
        self.advance(0.0)

    def unload(self):
        self.jobtap.unloading = True
        try:
            self.plugin.unload()
        except Exception as exc:  # noqa: BLE001 - told as a violation
            self.failed("unload", exc)
        self.jobtap.close()
        self.plugin = None

    @precondition(lambda self: self.plugin is not None and self.downs < MAX_DOWNS)
    @rule()
    def remove(self):
        """flux jobtap remove dws.so."""
        self.downs += 1
        self.unload()

    @precondition(lambda self: self.plugin is None)
    @rule()
    def load_again(self):
        self.load()

    @precondition(lambda self: self.downs < MAX_DOWNS)
    @rule()
    def restart(self):
        """flux module reload job-manager (dws.so loaded from the config)."""
        if self.plugin is not None:
            self.unload()
        self.jm.flush()
        self.kvs.apply_all()
        self._restarted()

    @precondition(lambda self: self.downs < MAX_DOWNS)
    @rule()
    def crash(self):
        """SIGKILL of the broker, started again on its state."""
        if self.port is not None:
            self.jobtap.close()
        self.plugin = None
        self.kvs.crash()
        for jobid, topic in list(self.sends):
            if not self._checkpointed(jobid, *STARTS[topic]):
                del self.sends[(jobid, topic)]
        self._restarted()

    def _checkpointed(self, jobid, name, description):
        return any(
            n == name and c.get("description") == description
            for _, n, c in self.kvs.checkpoint.get(f"job.{jobid}.eventlog", ())
        )

    def _restarted(self):
        self.downs += 1
        self.jmid = next(JMIDS)
        self.jm = self._jm(RabbitJobManager.restart(self.kvs, self.clock, self))
        self.load()
        self.jm.restarted()

    # Jobs

    def _job(self, index):
        if not self.jobids:
            return None
        return self.jm.jobs.get(self.jobids[index % len(self.jobids)])

    @precondition(lambda self: len(self.jobids) < MAX_JOBS)
    @rule(deep=st.booleans())
    def submit(self, deep):
        jobid = self.next_id
        self.next_id += 1
        self.jobids.append(jobid)
        attributes = {"system": {"dw": DW}}
        if deep:
            attributes["user"] = {"deep": DEEP}
        self.jm.submit(jobid, USER, {"attributes": attributes, "resources": SLOT})

    @precondition(lambda self: self.jobids)
    @rule(
        index=JOB, what=st.sampled_from(["alloc", "exec_start", "exec_end", "cancel"])
    )
    def progress(self, index, what):
        job = self._job(index)
        if job is None or job.state == INACTIVE:
            return
        if what == "alloc" and job.state == SCHED:
            self.jm.post(job, "alloc")
        elif (
            what == "exec_start"
            and job.state == RUN
            and job.start_pending
            and not job.started
        ):
            self.jm.exec_start(job)
        elif (
            what == "exec_end"
            and job.start_pending
            and (job.started or job.state == CLEANUP)
        ):
            self.jm.exec_end(job)
        elif what == "cancel" and job.state != CLEANUP:
            self.jm.post(
                job, "exception", {"type": "cancel", "severity": 0, "note": ""}
            )

    @precondition(lambda self: self.jobids)
    @rule(index=JOB, steps=st.integers(min_value=1, max_value=4))
    def workflow(self, index, steps=1):
        """Job ``index`` takes its next ``steps`` steps as all goes well:
        the service answers it and sends its request, or the scheduler,
        the exec system or the reactor moves it on."""
        for _ in range(steps):
            self._step(self._job(index))

    def _step(self, job):
        if job is None or job.state == INACTIVE:
            return
        for i, (_, _, payload, _) in enumerate(self.service.pending):
            if payload.get("jobid") == job.id:
                self.service.answer(i)
                return
        for i, (_, payload) in enumerate(self.service.outbox):
            if payload.get("id") == job.id and self.plugin is not None:
                self._send(i)
                return
        if job.state == SCHED:
            self.jm.post(job, "alloc")
        elif job.state == RUN and job.start_pending and not job.started:
            self.jm.exec_start(job)
        elif job.start_pending and job.started:
            self.jm.exec_end(job)
        else:
            self.advance(0.0)

    # The service

    @precondition(lambda self: self.service.pending)
    @rule(which=WHICH, success=st.sampled_from([True, True, True, False]))
    def answer(self, which, success):
        self.service.answer(which % len(self.service.pending), success)

    @precondition(lambda self: self.service.outbox and self.plugin is not None)
    @rule(which=WHICH)
    def service_sends(self, which):
        self._send(which % len(self.service.outbox))

    def _send(self, index):
        method, payload = self.service.outbox.pop(index)
        handler = {
            "resource-update": self.plugin.resource_update,
            "prolog-remove": self.plugin.prolog_remove,
            "epilog-remove": self.plugin.epilog_remove,
        }[method]
        request = Request(method, payload, lambda request, error: None)
        try:
            handler(request)
        except RequestError:
            pass
        except Exception as exc:  # noqa: BLE001 - told as a violation
            self.failed(f"request {method}", exc)

    # The reactor

    @rule()
    def flush_events(self):
        self.jm.flush()

    @precondition(lambda self: self.kvs.queue)
    @rule(every=st.booleans())
    def kvs_apply(self, every):
        if every:
            self.kvs.apply_all()
        else:
            self.kvs.apply_next()

    @precondition(lambda self: self.jm.reads)
    @rule(which=WHICH)
    def answer_read(self, which):
        self.jm.answer_read(which % len(self.jm.reads))

    @rule(seconds=st.sampled_from([0.0, 1.0, EPILOG_TIMEOUT + 1]))
    def advance(self, seconds):
        target = self.clock.now + seconds
        while self.port is not None:
            due = [t for t in self.port.timers if t.armed and t.deadline <= target]
            if not due:
                break
            timer = min(due, key=lambda t: t.deadline)
            self.clock.now = max(self.clock.now, timer.deadline)
            timer.armed = False
            try:
                timer.callback()
            except Exception as exc:  # noqa: BLE001 - the runtime logs it
                self.failed("timer", exc)
        self.clock.now = target

    # Nothing hangs

    @rule()
    def settle(self):
        """The service answers everything, dws.so is loaded, every job is
        cancelled and its processes end: every job goes inactive."""
        if self.plugin is None:
            self.load()
        for job in self.jm.active():
            if job.state != CLEANUP:
                self.jm.post(
                    job, "exception", {"type": "cancel", "severity": 0, "note": ""}
                )
        for _ in range(60):
            before = self._progress()
            while self.jm.reads:
                self.jm.answer_read(0)
            while self.service.pending:
                self.service.answer(0)
            while self.service.outbox:
                self._send(0)
            self.advance(EPILOG_TIMEOUT + 1)
            self.jm.flush()
            self.kvs.apply_all()
            for job in self.jm.active():
                if job.start_pending:
                    self.jm.exec_end(job)
            if self._progress() == before:
                break
        stuck = {job.id: (job.state, job.eventlog[-3:]) for job in self.jm.active()}
        assert not stuck, f"jobs that never go inactive: {stuck}"

    def _progress(self):
        return (
            sum(len(job.eventlog) for job in self.jm.jobs.values()),
            len(self.kvs.queue),
            len(self.jm.reads),
            len(self.service.pending),
            len(self.service.outbox),
        )

    # Invariants

    @invariant()
    def nothing_went_wrong(self):
        logged = [
            text
            for level, text in (self.port.logs if self.port else [])
            if "listener" in text
        ]
        assert not self.violations and not logged, self.violations + logged


TestDwsModel = stateful(DwsModel, EXAMPLES, STEPS, SOAK)


# Sequences the machine found, kept as examples.


@pytest.fixture
def model():
    yield from running(DwsModel)


#: A created job's storage set up, its run started and ended.
RUN_THROUGH = (
    ("answer", 0, True),
    ("service_sends", 0),
    ("progress", 0, "exec_start"),
    ("progress", 0, "exec_end"),
)


def _steps(model, *steps):
    for name, *args in steps:
        getattr(model, name)(*args)
        model.nothing_went_wrong()


def _running(model, deep=False):
    """A rabbit job through create and into its dws-setup prolog, whose
    dws.setup waits on the service."""
    _steps(
        model,
        ("submit", deep),
        ("answer", 0, True),
        ("service_sends", 0),
        ("progress", 0, "alloc"),
        ("advance", 0.0),
    )
    assert [topic for topic, _ in model.service.received] == [CREATE, SETUP]


def test_a_deep_jobspec_goes_through_every_step(model):
    """A jobspec nested deeper than Python decodes: the plugin read all of
    it when dws-setup became active, and the listener died."""
    _running(model, deep=True)
    _steps(
        model,
        *RUN_THROUGH,
        ("settle",),
    )
    assert [topic for topic, _ in model.service.received] == [CREATE, SETUP, POST_RUN]


def test_a_crash_after_the_epilog_timeout_keeps_its_exception(model):
    """The end of dws-epilog recorded, its exception and epilog-finish not
    checkpointed: the restart raised the gate's own epilog exception."""
    _running(model)
    _steps(
        model,
        *RUN_THROUGH,
        ("flush_events",),
        ("kvs_apply", True),
        ("advance", EPILOG_TIMEOUT + 1),
        ("kvs_apply", True),
        ("crash",),
        ("settle",),
    )
    types = [
        c.get("type")
        for _, n, c in model.kvs.data[f"job.{model.jobids[0]}.eventlog"]
        if n == "exception"
    ]
    assert "dws-epilog-timeout" in types and "epilog" not in types


def test_a_cancel_while_dws_is_removed_ends_dws_setup(model):
    """Cancelled in dws-setup while dws.so was removed: its load sent
    dws.post_run with the prolog still open."""
    _running(model)
    _steps(
        model,
        ("remove",),
        ("progress", 0, "cancel"),
        ("load_again",),
        ("settle",),
    )
