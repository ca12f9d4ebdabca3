"""bench/durable.py's options and figures, and the native reference gate's
synced record (bench/native_gate.c) under a real instance: what the
durable acknowledgements of epilog-gate are compared with."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import durable  # noqa: E402
from client import submit_waiting  # noqa: E402
from common import DESCRIPTION, Plugins, spec_for  # noqa: E402
from observer import Broker  # noqa: E402

MODES = list(durable.MODES)

#: The appends native_gate.c makes before it replaces its key.
APPENDS = 256


def test_modes_are_chosen_by_number_in_the_order_given():
    assert durable.parse_args(["--modes", "3,1"]).modes == [MODES[2], MODES[0]]
    assert durable.parse_args([]).modes == MODES


@pytest.mark.parametrize("modes", ["0", "4", "one", "1,"])
def test_a_bad_mode_is_refused_with_a_message_that_names_the_option(modes, capsys):
    with pytest.raises(SystemExit) as exc:
        durable.parse_args(["--modes", modes])
    assert exc.value.code == 2
    assert "--modes must be numbers from 1 to 3" in capsys.readouterr().err


def test_the_snapshot_baseline_runs_only_when_named():
    assert "native-snapshots" not in durable.parse_args([]).configs
    named = durable.parse_args(["--configs", "gate,native-snapshots"]).configs
    assert named == ["gate", "native-snapshots"]


def test_a_native_synced_config_with_work_per_request_is_named_by_its_microseconds():
    assert durable.config_of("native-synced+9") == (
        "native",
        {**durable.CONFIGS["native-synced"][1], "work": 9},
    )
    named = durable.parse_args(["--configs", "native-synced,native-synced+12"])
    assert named.configs == ["native-synced", "native-synced+12"]


@pytest.mark.parametrize("name", ["native-synced+", "native-synced+x", "gate+9"])
def test_a_malformed_work_config_is_refused_by_name(name, capsys):
    with pytest.raises(SystemExit):
        durable.parse_args(["--configs", name])
    assert f"unknown configuration {name!r}" in capsys.readouterr().err


def test_a_median_row_takes_each_figure_from_the_repetitions_that_have_it():
    # A broker thread may start between two repetitions.
    reps = [{"holds_per_s": 1.0}, {"holds_per_s": 3.0, "t": 5.0}, {"holds_per_s": 2.0}]
    assert durable.median_row(reps) == {"holds_per_s": 2.0, "t": 5.0}


def hold_one_by_one(inst, jobids):
    """One synced hold at a time: each goes in a commit of its own."""
    h = inst.handle()
    topic = f"{Plugins.service('native')}.hold"
    for jobid in jobids:
        h.rpc(topic, {"id": jobid, "description": DESCRIPTION}).get()
    return h


@pytest.mark.parametrize("synced, kept", [(1, "the batches since"), (2, "every hold")])
def test_the_native_synced_gate_replaces_its_key_as_configured(tmp_path, synced, kept):
    """After 256 appends the key is replaced: with synced=1 by the batch
    alone, with synced=2 by a snapshot of every live hold (epilog-gate's
    record), so that only then does the key name every hold."""
    holds = APPENDS + 20
    plugins = Plugins(str(tmp_path))
    inst = plugins.instance("native", 4, {"synced": synced})
    inst.start()
    try:
        jobids = submit_waiting(inst.handle(), holds, spec_for("exception"))
        hold_one_by_one(inst, jobids)
        assert durable.commits(inst, "native") == holds
        text = inst.flux("kvs", "get", "native-gate.holds").stdout
        named = {jobid for jobid in jobids if f'"id":{jobid},' in text}
        if kept == "every hold":
            assert named == set(jobids)
            assert '"name":"native_gate.hold"' in text
        else:
            # The 257th commit put its batch, the rest were appended.
            assert named == set(jobids[APPENDS:])
    finally:
        inst.stop()
        inst.cleanup()


def test_work_per_request_is_spent_on_the_job_managers_thread(tmp_path):
    """native_gate.c's work=N: each hold request costs the job-manager's
    thread at least N µs of CPU more (here 20 ms, far above the noise)."""
    work_us, holds = 20000, 5
    plugins = Plugins(str(tmp_path))
    inst = plugins.instance("native", 4, {"synced": 1, "work": work_us})
    inst.start()
    try:
        jobids = submit_waiting(inst.handle(), holds, spec_for("exception"))
        broker = Broker(inst.handle())
        before = broker.cpu()[0]
        hold_one_by_one(inst, jobids)
        assert broker.cpu()[0] - before >= holds * work_us * 1000
    finally:
        inst.stop()
        inst.cleanup()
