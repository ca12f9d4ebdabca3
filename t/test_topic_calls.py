"""The calls flux-core makes on a rabbit job because of dws.so.

flux-core calls a job.state.* topic of a job only when some handler of
some plugin matches it, and each such call packs the job's arguments and
matches the topic against every handler of every plugin; once a plugin
has asked for a job's events, it does the same for every event of the
job that follows (its list of subscribers stays, even empty).  So dws.so
makes flux-core call only the three states it handles and no built-in
plugin does (depend, run, cleanup), not every state its handler's
pattern could match, and asks for none of a rabbit job's events (its
exceptions in the epilog come from the instance's job-exception
events).  Counted under callgrind on the job-manager thread of a real
instance (bench/instructions.py), against the same rabbit jobs without
the plugin.
"""

import tempfile

import pytest
from conftest import callgrind_counter

JOBS = 10


@pytest.mark.slow
def test_dws_makes_flux_core_call_only_what_it_needs():
    instructions = callgrind_counter()
    with tempfile.TemporaryDirectory(prefix="topic-calls-") as tmp:
        bare = instructions.measure("bare", JOBS, tmp, workload="rabbit")
        dws = instructions.measure("dws", JOBS, tmp, workload="rabbit")
    assert bare["topic_calls_per_job"] > 0
    assert dws["topic_calls_per_job"] - bare["topic_calls_per_job"] == 3
    assert bare["event_calls_per_job"] == 0
    assert dws["event_calls_per_job"] == 0
