"""Unit test of what epilog-gate.so's rules read of a new job's jobspec
(plugin/driver.py, rule_attributes): each rule's key alone, so that a
value nested deeper than Python decodes elsewhere in the jobspec, or
under the key itself, never fails the job's depend callback."""

from flux_epilog_gate.gate.config import Rule
from flux_epilog_gate.plugin.driver import UNDECODABLE, rule_attributes


class Job:
    """A job callback's arguments, read key by key (Job.get)."""

    def __init__(self, values):
        self.values = values
        self.asked = []

    def get(self, path, default=None):
        self.asked.append(path)
        value = self.values.get(path, default)
        if value is UNDECODABLE:
            raise ValueError("nested too deep to be decoded")
        return value


def test_each_rule_reads_its_key_alone():
    rules = [Rule("system.bb", "bb"), Rule("user.tier", "t", equals="gold")]
    job = Job({"jobspec.attributes.user.tier": "gold"})
    attributes = rule_attributes(job, rules)
    assert attributes == {"user": {"tier": "gold"}}
    assert job.asked == ["jobspec.attributes.system.bb", "jobspec.attributes.user.tier"]
    assert not rules[0].matches(attributes) and rules[1].matches(attributes)


def test_an_undecodable_value_is_there_and_equal_to_nothing():
    rules = [Rule("user.deep", "d"), Rule("user.deep", "e", equals=[])]
    attributes = rule_attributes(
        Job({"jobspec.attributes.user.deep": UNDECODABLE}), rules
    )
    assert rules[0].matches(attributes)
    assert not rules[1].matches(attributes)
