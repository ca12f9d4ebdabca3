"""What the loaded plugin costs a job that has no holds: nothing that
flux-core's jobtap dispatch can see.

flux-core matches every jobtap call of every job against every handler
of every loaded plugin with fnmatch(), which in a UTF-8 locale costs over
a thousand instructions each time; a plugin with no job to care about
must keep no handler registered.  Counted under callgrind on the
job-manager thread of a real instance (bench/instructions.py), against
the same workload without the plugin.  The second test makes sure the
handler does come back when flux-core needs it.
"""

import json
import tempfile

import pytest
from conftest import callgrind_counter

JOBS = 40


@pytest.mark.slow
def test_an_idle_plugin_adds_no_fnmatch_and_no_python_to_a_job():
    instructions = callgrind_counter()
    with tempfile.TemporaryDirectory(prefix="idle-cost-") as tmp:
        bare = instructions.measure("bare", JOBS, tmp)
        idle = instructions.measure("gate-idle", JOBS, tmp)
    assert bare["fnmatch_per_job"] > 0
    assert idle["fnmatch_per_job"] - bare["fnmatch_per_job"] < 0.5
    assert idle["python_per_job"] == 0


def test_config_reload_and_query_reach_the_idle_plugin_every_time(new_instance):
    # The handler of conf.update and plugin.query is registered only while
    # flux-core handles a reload or a query: each in turn, repeatedly, and
    # with queries of other plugins and a refused reload in between, must
    # still reach the plugin, which was loaded from the config.
    inst = new_instance()
    for minutes in (7, 8, 9):
        inst.flux("jobtap", "query", ".priority-default")
        inst.config = f'[epilog-gate]\ntimeout = "{minutes}m"\n'
        inst.write_config()
        inst.flux("config", "reload")
        query = json.loads(inst.flux("jobtap", "query", "epilog-gate.so").stdout)
        assert query["config"]["timeout"] == minutes * 60
        inst.config = '[epilog-gate]\ntimeout = "soon"\n'
        inst.write_config()
        assert inst.flux("config", "reload", check=False).returncode != 0
