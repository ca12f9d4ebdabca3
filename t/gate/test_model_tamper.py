"""The gate model (test_model.py) with one more way down: while the
plugin is removed, another hand unlinks the hold log, or puts other
content in its place (``flux kvs unlink``, ``flux kvs put``), and then
the plugin is loaded again.  The gate carried over knows every hold:
the reload writes the whole log again from them, so a restart or a crash
afterwards finds every acknowledged hold.

The rewrite is a commit like any other: the window between the load and
its commit is the one a log deleted under a running gate cannot avoid,
so the step lets the KVS apply what was sent before the next one.
"""

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import rule
from hypothesis_settings import running, stateful

from flux_epilog_gate.gate.holdlog import KEY
from flux_epilog_gate.gate.holds import EPILOG, PROLOG
from flux_epilog_gate.gate.logentries import format_entry

from .test_model import EXAMPLES, SOAK, STEPS, GateModel, run_steps

#: What another hand leaves at the log's key: nothing, a log of no
#: hold, a line of text that is no entry.
TAMPERS = ["unlink", "empty log", "text"]


def tamper(kvs, how):
    """Another hand's write to the hold log, committed and checkpointed
    (a later sync of anything carries it)."""
    for data in (kvs.data, kvs.checkpoint):
        if how == "unlink":
            data.pop(KEY, None)
        elif how == "empty log":
            data[KEY] = format_entry(1.0)
        else:
            data[KEY] = "not a log line\n"


class TamperModel(GateModel):
    """GateModel, with the log's key written by another hand during a
    reload."""

    @rule(how=st.sampled_from(TAMPERS))
    def reload_after_tamper(self, how):
        """flux jobtap remove, the key unlinked or rewritten, flux jobtap
        load; then the KVS applies what was sent."""
        self.driver.unload()
        self.kvs.apply_all()
        tamper(self.kvs, how)
        self._load(self.driver.state)
        self.kvs.apply_all()


TestTamperModel = stateful(TamperModel, max(EXAMPLES // 4, 10), STEPS, SOAK)


@pytest.fixture
def model():
    yield from running(TamperModel)


@pytest.mark.parametrize("how", TAMPERS)
@pytest.mark.parametrize("down", ["restart", "crash"])
def test_holds_recorded_before_a_tampered_reload_survive_a_restart(model, how, down):
    """Holds acknowledged (their records committed) before the log was
    unlinked or rewritten during a reload are all listed again after a
    restart or a crash: the reload wrote them again."""
    run_steps(
        model,
        ("advance", 0.0),
        ("submit",),
        ("submit",),
        # The jobs' events past submit are checkpointed: a crash keeps
        # them.
        ("flush_events",),
        ("kvs_apply", True),
        ("hold", 0, "a", EPILOG),
        ("hold", 1, "b", PROLOG),
        ("kvs_apply", True),
        ("reload_after_tamper", how),
        (down,),
    )
    while model.jm.reads:
        model.jm.answer_read(0)
    run_steps(model, ("advance", 0.0), ("list_holds",))
    assert model.violations == []
    assert model.lost_expected == set()
    gate = model.driver.gate
    listed = {(jobid, d) for jobid, job in gate.jobs.items() for d in job.holds}
    assert listed == {(model.jobids[0], "a"), (model.jobids[1], "b")}
