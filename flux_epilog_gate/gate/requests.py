"""Requests: hold, release and list (validated by
:mod:`flux_epilog_gate.gate.protocol` before they get here), and the holds
that configured rules give new jobs."""

import errno
import syslog
from functools import partial

from ..errors import GateError
from ..jobid import f58
from .holdlog import NotConfirmed
from .holds import ACTIVE, DEPEND, EPILOG, RELEASED, Hold, Reason
from .listing import columns_answer, list_answer
from .states import INACTIVE


class Requests:
    """What clients (and configured rules) ask of the gate.

    Owns how many requests were refused for ``max-pending``
    (``refused_busy``).  Calls the jobs, the hold points (``points``, by
    name: each checks, places and records its new holds), the lifecycle
    (a release ends a hold; a hold whose record failed is withdrawn), the
    annotations, the counters, the hold log and the port's ``now``,
    ``job_info`` and ``log``; asks the shutdown, while there is one,
    whether a hold may still be made.  Called by the gate's ``hold``,
    ``release``, ``list`` and ``apply_rules``.
    """

    def __init__(self, context, jobs, holdlog, lifecycle, points, annotations, stats):
        self.context = context
        self.jobs = jobs
        self.holdlog = holdlog
        self.lifecycle = lifecycle
        self.points = points
        self.annotations = annotations
        self.stats = stats
        self.refused_busy = 0

    def hold(
        self,
        jobid,
        description,
        timeout=None,
        point=EPILOG,
        done=None,
        default_timeout=True,
        known=None,
        stamp=None,
    ):
        """Register a hold; return ``(hold, created)``.

        Holding the same ``(jobid, description)`` again answers the
        existing hold.  ``point`` is where the hold keeps the job: its
        clean (``"epilog"``), its start (``"prolog"``) or in DEPEND
        (``"depend"``).  The hold is in
        force at once; ``done(hold, error)`` is called once its record is
        durable (``error`` None), the moment to answer the request.  If
        the record cannot be committed, a hold this call created is
        withdrawn before ``done`` is told the error.  A ``timeout`` of
        None is the configured one, or with ``default_timeout`` False
        none (an in-process caller with timeouts of its own).  ``known``:
        the job's ``(state, userid)``, given by a caller in the job's own
        callback (its arguments have them), else looked up.  ``stamp``:
        the hold's time as the port's ``stamp()`` gives it, if the caller
        has one (the holds it places together share it).  A refusal
        (GateError) comes before anything takes ``done``, which is then
        never called: the plugin gives back the request it holds.
        """
        if (
            done is not None
            and self.holdlog.waiting() >= self.context.config.max_pending
        ):
            self._refuse_busy("hold")
        if done is not None:
            # Before the hold is in force: placed, it could post its
            # point's start event, then its end when the record fails.
            self._check_log("hold")
        job = self.jobs.get(jobid)
        if job and description in job.holds:
            existing = self._same_hold(job.holds[description], point)
            if done is not None:
                # Answered as the first request is: its record may fail
                # (and withdraw the hold) before a later commit succeeds.
                # The dependency point's barrier: it may hold records back.
                self.points[DEPEND].barrier(partial(_again, existing, done))
            return existing, False
        state, userid = self._check_hold(job, jobid, description, point, known)
        if timeout is None and default_timeout:
            timeout = self.context.config.timeout
        t_hold, t_text = stamp or self.context.port.stamp()
        hold = Hold(jobid, description, userid, t_hold, timeout, point, t_text)
        tracked = job is not None
        job = job or self.jobs.track(jobid, userid)
        where = self.points[point]
        try:
            where.place(job, hold, state)
        except GateError:
            if not tracked:
                self.jobs.untrack(job)
            raise
        job.holds[description] = hold
        if hold.state == ACTIVE:
            self.annotations.update(job)
        self.jobs.gone.discard(jobid, description)
        self.stats["held"] += 1
        where.record(hold, None if done is None else partial(self._held, hold, done))
        return hold, True

    def _refuse_busy(self, method):
        """Refuse a request (one with ``done``, to be answered once
        durable) while ``max-pending`` requests wait for the hold log:
        each holds its message in the broker until then.  (The test is
        the caller's, written out: it is made for every request.)"""
        bound = self.context.config.max_pending
        self.refused_busy += 1
        raise GateError(
            errno.EAGAIN,
            f"{method}: {bound} requests are already waiting for the hold "
            f"log to be committed (max-pending={bound}): try again later",
        )

    def _check_log(self, method):
        """Refuse ``method`` while the hold log is of a newer format than
        this build reads: no hold of it is known, none can be recorded.
        (In-process callers, which keep holds of their own, are not
        asked.)"""
        if self.holdlog.refused is not None:
            raise GateError(errno.EPROTO, f"{method}: {self.holdlog.refused}")

    def _check_hold(self, job, jobid, description, point, known=None):
        """Raise GateError if a new hold cannot be registered; else return
        the job's ``(state, userid)`` (``known``, or looked up)."""
        if self.context.shutdown is not None:
            self.context.shutdown.check_hold(jobid, description)
        state, userid = known or self._job_info(jobid)
        if state == INACTIVE:
            raise GateError(errno.ENOENT, f"job {f58(jobid)} is inactive")
        self.points[point].check(job, jobid, state)
        if job and len(job.holds) >= self.context.config.max_holds:
            raise GateError(
                errno.ENOSPC,
                f"job {f58(jobid)} already has {len(job.holds)} holds "
                f"(max-holds={self.context.config.max_holds})",
            )
        return state, userid

    def _held(self, hold, done, error):
        if error is not None and not isinstance(error, NotConfirmed):
            hold.record_error = error
            self.lifecycle.withdraw(hold)
        done(hold, error)

    def apply_rules(self, jobid, attributes):
        """Register the holds that configured rules give a new job."""
        for rule in self.context.config.rules:
            if rule.matches(attributes):
                try:
                    self._check_log("hold")
                    self.hold(jobid, rule.description, rule.timeout, rule.point)
                except GateError as exc:
                    self.context.port.log(
                        syslog.LOG_ERR,
                        f"{f58(jobid)}: rule {rule.attribute}: {exc.message}",
                    )

    def release(self, jobid, description, status=0, done=None, raised=False):
        """Release a hold; return ``(released, reason)``.

        The release takes effect at once; ``done((released, reason),
        error)`` is called once its record (if it needs one) and every
        record before it are durable.  ``raised``: the caller raised the
        job's fatal exception itself, so a non-zero status raises none
        (an in-process caller with exceptions of its own).  As with
        :meth:`hold`, a refusal never calls ``done``.
        """
        if (
            done is not None
            and self.holdlog.waiting() >= self.context.config.max_pending
        ):
            self._refuse_busy("release")
        if done is not None:
            # The hold may well be in the log: "no such hold" would
            # tell its service that its cleanup is no longer wanted.
            self._check_log("release")
        job = self.jobs.get(jobid)
        hold = job.holds.get(description) if job else None
        if hold is None:
            result = (False, self._why_gone(jobid, description, job))
        else:
            result = (True, None)
        # Bound before anything is recorded: done() may run at once.
        recorded = None if done is None else partial(done, result)
        if hold is None:
            if recorded is not None:
                self.holdlog.barrier(recorded)
        else:
            self.lifecycle.finish(job, hold, status, RELEASED, recorded, raised=raised)
        return result

    def list(self, jobid=None, userid=None):
        """Return list entries of all holds, or of one job's, by job id then
        description; only those of ``userid``'s jobs when it is given, and
        another user's job is then an unknown job (ENOENT), as it is to
        flux-core's job-list."""
        return [hold.to_dict() for hold in self._listed(jobid, userid)]

    def list_json(self, jobid=None, userid=None, columns=False):
        """The answer to ``list`` (``{"holds": [...]}``) as JSON text: of
        :meth:`list`'s entries, written out directly (see
        :mod:`flux_epilog_gate.gate.listing`); with ``columns``, the same
        values by column (``{"columns": {...}}``)."""
        write = columns_answer if columns else list_answer
        return write(self._listed(jobid, userid))

    def _listed(self, jobid, userid):
        if jobid is not None:
            job = self.jobs.get(jobid)
            owner = job.userid if job else self._job_info(jobid)[1]  # or ENOENT
            if userid is not None and owner != userid:
                raise GateError(errno.ENOENT, f"unknown job {f58(jobid)}")
            jobs = [job] if job else []
        else:
            # Ids are given in order, so the table's keys are mostly
            # sorted already: timsort takes them in one pass.
            jobs = map(self.jobs.__getitem__, sorted(self.jobs))
        return (
            hold
            for job in jobs
            if userid is None or job.userid == userid
            # Most jobs have one hold: no call to sort them.
            for hold in (
                job.holds.values() if len(job.holds) < 2 else _by_description(job)
            )
        )

    def _job_info(self, jobid):
        try:
            return self.context.port.job_info(jobid)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise GateError(errno.ENOENT, f"unknown job {f58(jobid)}") from None
            raise GateError.from_oserror(exc, f"looking up job {f58(jobid)}") from None

    def _why_gone(self, jobid, description, job):
        reason = self.jobs.gone.get(jobid, description)
        if reason:
            return reason
        state, _ = self._job_info(jobid)
        if state == INACTIVE:
            return Reason.JOB_INACTIVE
        held = ", ".join(sorted(job.holds)) if job and job.holds else ""
        raise GateError(
            errno.ENOENT,
            f"job {f58(jobid)} has no hold {description}"
            + (f" (it holds: {held})" if held else " (it has no holds)"),
        )

    @staticmethod
    def _same_hold(hold, point):
        """The existing hold asked for again, if at the same point."""
        if hold.point != point:
            raise GateError(
                errno.EEXIST,
                f"job {f58(hold.id)} already has hold {hold.description} "
                f"at its {hold.point} point",
            )
        return hold


def _again(hold, done, error):
    """Answer a repeated hold as its first request is answered."""
    # Bound with partial() (a lambda in Requests.hold would give it cells
    # for every hold, repeated or not).
    done(hold, error or hold.record_error)


def _by_description(job):
    """A job's holds by description."""
    holds = job.holds
    return [holds[description] for description in sorted(holds)]
