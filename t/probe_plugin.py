"""probe: a jobtap plugin on the runtime that exercises its whole API.

Built by t/test_jobtap_api.py with the runtime's build helper.  Jobs whose
jobspec has ``attributes.system.probe`` are held in DEPEND by dependency
``probe`` until ``job-manager.probe.release``; every other call of the
runtime is reached through one RPC method of its own, so that the test
drives each from outside and sees what it did.
"""

import errno
import gc
import weakref

from flux_epilog_gate.jobtap.plugin import (
    Plugin,
    RequestError,
    job_topic,
    plugin_topic,
    request,
)

PROBE = "attributes.system.probe"


class Probe(Plugin):
    """Record what reaches Python; act on request."""

    def __init__(self, jobtap):
        super().__init__(jobtap)
        self.entered = []
        self.depend_calls = []
        self.events = {}
        self.answers = {}
        self.kept = set()
        #: How many times each commit's callback ran, by its number.
        self.commit_calls = {}

    @plugin_topic("conf.update")
    def configure(self, args):
        self.jobtap.marks.forward("job.state.depend")

    @plugin_topic("plugin.query")
    def query(self, args):
        return {"depend_calls": len(self.depend_calls)}

    @job_topic("job.state.depend", every_job=True, requires=PROBE)
    def depend(self, job):
        self.entered.append(job.id)
        spec = job.jobspec
        self.depend_calls.append(
            {
                "id": job.id,
                "userid": job.userid,
                "probe": spec["attributes"]["system"]["probe"],
                "keys": sorted(job.input),
            }
        )
        self.jobtap.jobs.dependency_add(job.id, "probe")
        self.jobtap.marks.subscribe(job.id)

    @job_topic("job.event.exception")
    def exception(self, job):
        self.record(job)

    @job_topic("job.event.probe-note")
    def note(self, job):
        self.record(job)

    @job_topic("job.event.probe-switched", switched=True)
    def switched(self, job):
        self.record(job)

    def record(self, job):
        entry = job.input["entry"]
        self.events.setdefault(str(job.id), []).append(
            {"name": entry["name"], "context": entry.get("context", {})}
        )

    @request("calls")
    def calls(self, request):
        request.respond(
            {
                "entered": self.entered,
                "depend": self.depend_calls,
                "events": self.events,
            }
        )

    @request("release")
    def release(self, request):
        """``{id, update?}``: apply ``update`` to the jobspec, then remove
        the dependency."""
        payload = request.payload
        try:
            if payload.get("update"):
                self.jobtap.jobs.jobspec_update(payload["id"], payload["update"])
            self.jobtap.jobs.dependency_remove(payload["id"], "probe")
        except OSError as exc:
            raise RequestError(exc.errno, f"release: {exc.strerror}") from None
        request.respond(None)

    @request("jobmanager-id")
    def jobmanager_id(self, request):
        request.respond({"id": self.jobtap.marks.jobmanager_id()})

    @request("lookup")
    def lookup(self, request):
        try:
            job = self.jobtap.jobs.lookup(request.payload["id"])
        except OSError as exc:
            raise RequestError(exc.errno, f"lookup: {exc.strerror}") from None
        request.respond(
            {"state": job["state"], "userid": job["userid"], "jobspec": job["jobspec"]}
        )

    @request("post")
    def post(self, request):
        payload = request.payload
        # Subscribe again, as a plugin that subscribes on each state does:
        # each event must still come once.
        self.jobtap.marks.subscribe(payload["id"])
        self.jobtap.jobs.post_event(
            payload["id"], payload["name"], payload.get("context")
        )
        request.respond(None)

    @request("raise")
    def raise_exception(self, request):
        p = request.payload
        self.jobtap.jobs.raise_exception(p["id"], p["type"], p["severity"], p["note"])
        request.respond(None)

    @request("echo")
    def echo(self, request):
        request.respond({"echo": request.payload})

    @request("call")
    def call(self, request):
        """``{topic, payload}``: send that request and answer ours with its
        answer once it comes (the continuation runs in Python later)."""
        msg = request.keep()
        self.kept.add(msg)

        def answered(future):
            self.kept.discard(msg)
            try:
                answer = future.get()
            except OSError as exc:
                self.jobtap.messages.respond_error(
                    msg, exc.errno, f"call: {exc.strerror}"
                )
                return
            self.jobtap.messages.send(msg, {"answer": answer})

        payload = request.payload
        self.jobtap.messages.rpc(payload["topic"], payload.get("payload"), answered)

    @request("call-and-fail")
    def call_and_fail(self, request):
        """Send ``{topic}``; the continuation raises, then records that
        the plugin still works."""

        topic = request.payload["topic"]

        def answered(future):
            self.answers[topic] = "reached"
            raise RuntimeError("continuation fails on purpose")

        self.jobtap.messages.rpc(topic, {}, answered)
        request.respond(None)

    @request("let-go")
    def let_go(self, request):
        """``{topic, key}``: with the cyclic collector off, send request
        ``topic`` and look up KVS ``key``, keeping weak references to
        their futures only (``gone`` tells which were freed)."""
        gc.disable()
        payload = request.payload
        self.jobtap.messages.rpc(
            payload["topic"], {}, lambda f: self.let_go_answered("rpc")
        )
        self.jobtap.kvs.read(
            payload["key"], lambda data, err: self.let_go_answered("lookup")
        )
        (lookup,) = self.jobtap.kvs._lookups
        self.weak = {"lookup": weakref.ref(lookup)}
        (rpc,) = self.jobtap.messages._rpcs
        self.weak["rpc"] = weakref.ref(rpc)
        del lookup, rpc
        request.respond(None)

    def let_go_answered(self, name):
        self.answers[f"let-go {name}"] = "answered"

    @request("gone")
    def gone(self, request):
        """Which futures of ``let-go`` were freed; the collector is on
        again."""
        gone = {name: ref() is None for name, ref in self.weak.items()}
        gc.enable()
        request.respond(gone)

    @request("answers")
    def answered(self, request):
        request.respond(self.answers)

    @request("switch")
    def switch(self, request):
        """``{on}``: send job.event.probe-switched of marked jobs, or stop."""
        self.jobtap.marks.forward(
            "job.event.probe-switched", bool(request.payload["on"])
        )
        request.respond(None)

    @request("commit")
    def commit(self, request):
        """``{n, key, value, append?, sync?, fail?}``: write with
        ``kvs_commit``; answer once its callback ran: ``{}``, or
        ``{errno, text}`` of the error it was given.  With ``fail`` the
        callback raises instead (and answers nothing)."""
        payload = request.payload
        msg = request.keep()
        self.kept.add(msg)
        number = payload["n"]
        self.commit_calls[number] = 0

        def committed(error):
            self.commit_calls[number] += 1
            self.kept.discard(msg)
            if payload.get("fail"):
                raise RuntimeError("commit callback fails on purpose")
            if error is None:
                self.jobtap.messages.send(msg, {})
            else:
                self.jobtap.messages.send(
                    msg, {"errno": error.errno, "text": error.strerror}
                )

        try:
            self.jobtap.kvs.commit(
                payload["key"],
                payload["value"],
                payload.get("append", False),
                committed,
                sync=payload.get("sync", False),
            )
        except OSError as exc:
            self.kept.discard(msg)
            raise RequestError(exc.errno, f"commit: {exc.strerror}") from None

    @request("commit-calls")
    def commit_counts(self, request):
        request.respond({str(n): count for n, count in self.commit_calls.items()})

    @request("missing")
    def missing(self, request):
        raise RequestError(errno.ENOENT, "nothing here")
