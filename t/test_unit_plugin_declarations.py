"""How a plugin class's declarations are collected (jobtap/plugin.py):
a subclass may redeclare a handler of its base under the same method
name, with another mode or jobspec key, or drop it."""

import pytest

from flux_epilog_gate.jobtap.plugin import Plugin, job_topic, request


class Base(Plugin):
    @job_topic("job.state.depend", every_job=True)
    def on_depend(self, job):
        pass

    @job_topic("job.state.cleanup", id_only=True)
    def on_cleanup(self, jobid):
        pass

    @request("list", guests=True)
    def list_request(self, request):
        pass

    @request("hold")
    def hold_request(self, request):
        pass


class Derived(Base):
    @job_topic("job.state.depend", every_job=True, requires="attributes.system.dw")
    def on_depend(self, job):
        pass

    def hold_request(self, request):
        """Not a request of the subclass."""


def test_a_subclass_redeclares_and_drops_its_base_handlers():
    Derived._collect()
    assert Derived._job_topics == [
        ("job.state.depend", "every_job", "attributes.system.dw", False, "on_depend"),
        ("job.state.cleanup", "marked", None, True, "on_cleanup"),
    ]
    assert Derived._methods == [("list", True, None, 0, "list_request")]
    Base._collect()
    assert [t[2] for t in Base._job_topics] == [None, None]
    assert [m[0] for m in Base._methods] == ["list", "hold"]


def test_one_topic_under_two_names_is_refused():
    class Twice(Plugin):
        @job_topic("job.state.run")
        def one(self, job):
            pass

        @job_topic("job.state.run")
        def two(self, job):
            pass

    with pytest.raises(ValueError, match="declared twice"):
        Twice._collect()


def test_each_job_topic_calls_its_class_function_with_a_job_or_an_id():
    Derived._collect()
    assert Derived._job_calls == [
        (Derived.on_depend, "job.state.depend"),
        (Base.on_cleanup, None),
    ]
    Base._collect()
    assert Base._job_calls[0] == (Base.on_depend, "job.state.depend")
