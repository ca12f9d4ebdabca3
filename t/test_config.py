"""Configuration: hold rules from the [epilog-gate] table, config reload,
loading from [job-manager] plugins."""

import time

import flux.job
import pytest
from conftest import reload_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobs import (
    eventlog,
    held_in_cleanup,
    names,
    query,
    submit,
    wait_event,
    wait_inactive,
)

from flux_epilog_gate import EpilogGate

RULES = """
[[epilog-gate.rules]]
attribute = "system.bb"
description = "bb"
timeout = "1m"
"""


@pytest.fixture(scope="module")
def reloaded(plugin):
    """The module's instance, the gate loaded from its config, which the
    tests rewrite and reload (also once for each example of a property)."""
    from flux_epilog_gate.testing import Instance

    with Instance(cores=8, plugin=plugin, config=RULES) as inst:
        yield inst


@pytest.fixture
def ruled(reloaded):
    """The module's instance with RULES in force (put back if a test
    before changed them)."""
    if reloaded.config != RULES:
        assert reload_config(reloaded, RULES).returncode == 0
    return reloaded


@pytest.fixture(scope="module")
def annotated(plugin):
    """An instance of the module's whose gate annotates jobs (each test
    uses jobs of its own)."""
    from flux_epilog_gate.testing import Instance

    with Instance(cores=64, plugin=plugin, plugin_conf={"annotate": True}) as inst:
        yield inst


@pytest.fixture(scope="module")
def bare(plugin):
    """An instance of the module's without the gate; each test that loads
    it removes it again."""
    from flux_epilog_gate.testing import Instance

    with Instance(cores=8) as inst:
        yield inst


def test_plugin_loaded_from_job_manager_plugins_config(instance):
    assert "epilog-gate.so" in instance.flux("jobtap", "list").stdout.split()


def test_rule_holds_a_matching_job_from_submit(ruled):
    handle = ruled.handle()
    jobid = submit(handle, urgency=0, **{"system.bb": {"size": 1}})
    wait_event(handle, jobid, "priority")  # rules apply before it
    assert [h["state"] for h in EpilogGate(handle).list(jobid)] == ["pending"]
    flux.job.cancel(handle, jobid)
    wait_event(handle, jobid, "epilog-start")
    hold = EpilogGate(handle).list(jobid)[0]
    assert (hold["description"], hold["timeout"]) == ("bb", 60.0)
    EpilogGate(handle).release(jobid, "bb")
    wait_inactive(handle, jobid)


def test_rule_leaves_other_jobs_alone(ruled):
    handle = ruled.handle()
    jobid = submit(handle)
    wait_inactive(handle, jobid)
    assert "epilog-start" not in names(eventlog(handle, jobid))


def test_config_reload_applies_new_rules(ruled):
    inst = ruled
    assert reload_config(inst, "").returncode == 0
    assert query(inst)["config"]["rules"] == []
    assert reload_config(inst, RULES).returncode == 0
    assert query(inst)["config"]["rules"][0]["description"] == "bb"
    handle = inst.handle()
    jobid = submit(handle, urgency=0, **{"system.bb": 1})
    wait_event(handle, jobid, "priority")  # rules apply before it
    assert [h["description"] for h in EpilogGate(handle).list(jobid)] == ["bb"]
    EpilogGate(handle).release(jobid, "bb")
    flux.job.cancel(handle, jobid)
    wait_inactive(handle, jobid)


def test_bad_rule_fails_reload_naming_key_and_keeps_old_rules(ruled):
    bad = RULES.replace('description = "bb"', 'description = "b b"')
    result = reload_config(ruled, bad)
    assert result.returncode != 0
    assert "rules[0].description" in result.stderr
    assert query(ruled)["config"]["rules"][0]["description"] == "bb"


def test_config_reload_changes_default_timeout(ruled):
    inst = ruled
    assert reload_config(inst, "[epilog-gate]\ntimeout = '90s'\n").returncode == 0
    assert query(inst)["config"]["timeout"] == 90.0


def annotation(inst, jobid):
    """What flux jobs shows in the documented field."""
    return inst.flux(
        "jobs", "-n", "-o", "{user.epilog_gate}", str(jobid)
    ).stdout.strip()


def annotation_is(inst, jobid, text, timeout=10.0):
    """Wait until flux jobs (job-list, fed by the journal) shows ``text``."""
    deadline = time.time() + timeout
    while annotation(inst, jobid) != text:
        assert time.time() < deadline, f"annotation {annotation(inst, jobid)!r}"
        time.sleep(0.1)
    return True


def test_annotate_shows_holds_of_a_job_in_cleanup_in_flux_jobs(annotated):
    inst = annotated
    jobid = held_in_cleanup(inst, "umount", "bb")
    assert annotation_is(inst, jobid, "bb,umount")


def test_annotation_is_kept_current_as_holds_are_released(annotated):
    inst = annotated
    handle = inst.handle()
    gate = EpilogGate(handle)
    jobid = held_in_cleanup(inst, "bb", "umount", "license")
    assert annotation_is(inst, jobid, "bb,license,umount")
    gate.release(jobid, "umount")
    assert annotation_is(inst, jobid, "bb,license")
    gate.hold(jobid, "late")
    assert annotation_is(inst, jobid, "bb,late,license")
    gate.release(jobid, "bb")
    gate.release(jobid, "late")
    assert annotation_is(inst, jobid, "license")
    gate.release(jobid, "license")
    wait_event(handle, jobid, "clean")
    # No hold left: none named on the inactive job.
    assert annotation_is(inst, jobid, "")
    memos = [e.context for e in eventlog(handle, jobid) if e.name == "memo"]
    assert memos[-1] == {"epilog_gate": None}


def test_annotation_of_a_running_job_appears_at_finish(annotated):
    inst = annotated
    handle = inst.handle()
    gate = EpilogGate(handle)
    # Long enough for `flux jobs` (a few tenths of a second under load)
    # to answer while it runs.
    jobid = submit(handle, duration=4.0)
    gate.hold(jobid, "stage-out")
    wait_event(handle, jobid, "start")
    assert annotation(inst, jobid) == ""
    wait_event(handle, jobid, "epilog-start")
    assert annotation_is(inst, jobid, "stage-out")
    gate.release(jobid, "stage-out")
    wait_event(handle, jobid, "clean")


def test_jobs_are_not_annotated_by_default(ruled):
    inst = ruled
    jobid = held_in_cleanup(inst, "bb")
    # flux jobs prints "" for a missing annotation
    assert annotation(inst, jobid) == ""
    EpilogGate(inst.handle()).release(jobid, "bb")


def test_rule_equals_matches_only_the_same_type_and_value(ruled):
    inst = ruled
    text = (
        '[[epilog-gate.rules]]\nattribute = "user.tier"\n'
        'equals = 1\ndescription = "tier"\ntimeout = "10m"\n'
    )
    assert reload_config(inst, text).returncode == 0
    handle = inst.handle()
    gate = EpilogGate(handle)
    # (1, True and 1.0 are one key in a dict: a list of pairs)
    values = [1, True, 1.0, "1"]
    jobs = [submit(handle, urgency=0, **{"user.tier": v}) for v in values]
    for jobid in jobs:
        wait_event(handle, jobid, "priority")  # rules apply before it
    held = [[h["description"] for h in gate.list(jobid)] for jobid in jobs]
    assert held == [["tier"], [], [], []]
    assert gate.list(jobs[0])[0]["timeout"] == 600.0
    for jobid in jobs:
        flux.job.cancel(handle, jobid)
    gate.release(jobs[0], "tier")


def test_annotation_stays_current_across_a_restart(new_instance):
    inst = new_instance(
        plugin_conf={"annotate": True}, env={"FLUX_DISABLE_JOB_CLEANUP": "1"}
    )
    jobid = held_in_cleanup(inst, "bb", "umount")
    assert annotation_is(inst, jobid, "bb,umount")
    inst.stop()
    inst.start()
    # The job-manager restores it from the job's memo events.
    assert annotation_is(inst, jobid, "bb,umount")
    handle = inst.handle()
    gate = EpilogGate(handle)
    gate.release(jobid, "bb")
    assert annotation_is(inst, jobid, "umount")
    gate.release(jobid, "umount")
    wait_event(handle, jobid, "clean")
    assert annotation_is(inst, jobid, "")


# Rules of one description


TWICE = (
    RULES + '\n[[epilog-gate.rules]]\nattribute = "system.other"\ndescription = "bb"\n'
)
BOTH_POINTS = (
    RULES + '\n[[epilog-gate.rules]]\nattribute = "system.bb"\ndescription = "bb"\n'
    'point = "prolog"\n'
)


@pytest.mark.parametrize("text", [TWICE, BOTH_POINTS], ids=["twice", "both-points"])
def test_rules_of_one_description_fail_reload_naming_key(ruled, text):
    """Accepted, they used to fail on every job both matched (or drop the
    second rule's timeout)."""
    result = reload_config(ruled, text)
    assert result.returncode != 0
    assert "rules[1].description" in result.stderr
    assert [r["description"] for r in query(ruled)["config"]["rules"]] == ["bb"]


def test_rules_of_one_description_fail_the_load_naming_key(bare, plugin):
    inst = bare
    rules = (
        '[{"attribute":"a","description":"bb"},{"attribute":"b","description":"bb"}]'
    )
    result = inst.flux("jobtap", "load", plugin, f"rules={rules}", check=False)
    assert result.returncode != 0
    assert "rules[1].description" in result.stderr
    assert "epilog-gate.so" not in inst.flux("jobtap", "list").stdout.split()


def rules_toml(rules):
    text = ""
    for rule in rules:
        text += "\n[[epilog-gate.rules]]\n"
        text += "".join(f'{key} = "{value}"\n' for key, value in rule.items())
    return text


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"attribute": st.sampled_from(["system.bb", "user.x"])},
            optional={"point": st.sampled_from(["epilog", "prolog"])},
        ).flatmap(
            lambda rule: st.sampled_from(["bb", "mnt", "lic"]).map(
                lambda description: dict(rule, description=description)
            )
        ),
        min_size=1,
        max_size=4,
    )
)
def test_reload_takes_rules_exactly_when_descriptions_are_unique(reloaded, rules):
    """A bounded check through a real `flux config reload`: a set of rules
    is taken whole, or refused naming the first repeated description and
    the rules in force are kept."""
    before = query(reloaded)["config"]["rules"]
    result = reload_config(reloaded, rules_toml(rules))
    descriptions = [rule["description"] for rule in rules]
    repeated = [i for i, d in enumerate(descriptions) if d in descriptions[:i]]
    now = query(reloaded)["config"]["rules"]
    if repeated:
        assert result.returncode != 0
        assert f"rules[{repeated[0]}].description" in result.stderr
        assert now == before
    else:
        assert result.returncode == 0, result.stderr
        assert [(r["description"], r.get("point", "epilog")) for r in now] == [
            (r["description"], r.get("point", "epilog")) for r in rules
        ]


def test_more_rules_than_max_holds_fail_reload_and_keep_the_rules(ruled):
    """Accepted, each matching job used to log one error per rule beyond
    max-holds."""
    text = "[epilog-gate]\nmax-holds = 2\n" + "".join(
        f'[[epilog-gate.rules]]\nattribute = "system.a{i}"\ndescription = "d{i}"\n'
        for i in range(3)
    )
    result = reload_config(ruled, text)
    assert result.returncode != 0
    assert "rules: 3 rules but max-holds is 2" in result.stderr
    config = query(ruled)["config"]
    assert [r["description"] for r in config["rules"]] == ["bb"]
    assert config["max-holds"] == 64


# A bad [epilog-gate] table while the instance starts


BAD_TABLE = '[epilog-gate]\ntimeout = "10 minutes"\n'


def error_lines(inst, text):
    """The broker's log lines at level error that contain ``text``."""
    lines = inst.flux("dmesg").stdout.splitlines()
    return [line for line in lines if ".err[" in line and text in line]


def test_instance_with_a_bad_table_starts_with_the_gate_loaded_with_defaults(
    new_instance,
):
    """Loaded from [job-manager] plugins, a refused table used to stop
    the job-manager, and rc1 with it: the instance did not start."""
    inst = new_instance(config=BAD_TABLE)
    assert "epilog-gate.so" in inst.flux("jobtap", "list").stdout.split()
    answer = query(inst)
    assert answer["config"]["timeout"] is None
    assert answer["config_error"].startswith("timeout: '10 minutes' is not")
    assert "defaults" in answer["config_error"]
    logged = error_lines(inst, "timeout: '10 minutes'")
    assert len(logged) == 1 and "defaults" in logged[0]


def test_holds_recorded_before_a_restart_survive_a_restart_with_a_bad_table(
    new_instance,
):
    inst = new_instance()
    jobid = held_in_cleanup(inst, "bb", "umount")
    inst.stop()
    inst.config = BAD_TABLE
    inst.start()
    assert query(inst)["config_error"] is not None
    handle = inst.handle()
    gate = EpilogGate(handle)
    assert [(h["description"], h["state"]) for h in gate.list(jobid)] == [
        ("bb", "active"),
        ("umount", "active"),
    ]
    gate.release(jobid, "bb")
    gate.release(jobid, "umount")
    wait_event(handle, jobid, "clean")


def test_reload_of_a_fixed_table_ends_the_config_error(new_instance):
    inst = new_instance(config=BAD_TABLE)
    assert reload_config(inst, "[epilog-gate]\ntimeout = '10m'\n").returncode == 0
    answer = query(inst)
    assert (answer["config"]["timeout"], answer["config_error"]) == (600.0, None)


def test_reload_of_another_bad_table_after_a_bad_start_is_refused(new_instance):
    inst = new_instance(config=BAD_TABLE)
    result = reload_config(inst, "[epilog-gate]\nmax-holds = 0\n")
    assert result.returncode != 0 and "max-holds: 0" in result.stderr
    assert query(inst)["config"]["max-holds"] == 64


def test_explicit_load_of_a_running_instance_refuses_a_bad_table(bare, plugin):
    """An admin's flux jobtap load sees the error: nothing is loaded."""
    inst = bare
    assert reload_config(inst, BAD_TABLE).returncode == 0
    try:
        result = inst.flux("jobtap", "load", plugin, check=False)
        assert result.returncode != 0
        assert "timeout: '10 minutes'" in result.stderr
        assert "epilog-gate.so" not in inst.flux("jobtap", "list").stdout.split()
    finally:
        assert reload_config(inst, "").returncode == 0


# The table is checked whole when a load option overrides a key


def test_config_load_refuses_a_bad_value_of_a_key_a_load_option_overrides(bare, plugin):
    """It used to be accepted, and to fail the next load without the
    option."""
    inst = bare
    inst.flux("jobtap", "load", plugin, "max-holds=10", "timeout=1h")
    result = reload_config(inst, '[epilog-gate]\nmax-holds = 0\ntimeout = "abc"\n')
    assert result.returncode != 0
    assert "max-holds: 0 is not between 1 and 200" in result.stderr
    assert "[epilog-gate]" in result.stderr
    assert inst.flux("config", "get", "epilog-gate", check=False).returncode != 0
    inst.flux("jobtap", "remove", "epilog-gate.so")
    inst.flux("jobtap", "load", plugin)
    inst.flux("jobtap", "remove", "epilog-gate.so")


def test_query_shows_snapshot_chunk_and_debug_fault_when_not_set(instance):
    config = query(instance)["config"]
    assert (config["snapshot-chunk"], config["debug-fault"]) == (131072, None)
