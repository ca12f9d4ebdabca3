"""The hypothesis settings the suite's property and model tests share.

A property driven against a live instance (or a unit as costly) runs a
bounded number of examples, the same ones at every run (derandomized, no
example database), with no deadline and no health check: the shared
instance behind a fixture and the time each example takes are meant.
A stateful model runs ``examples`` sequences of up to ``steps`` steps,
derandomized unless it is soaked (its examples raised from the
environment to search longer)."""

from hypothesis import HealthCheck, settings


def bounded(max_examples):
    """Settings of a property test on a live instance: ``max_examples``
    examples, the same at every run."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def stateful(machine, examples, steps, soak):
    """Give state machine class ``machine`` its settings; return its
    TestCase (what pytest collects)."""
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=not soak,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    return machine.TestCase


def running(machine):
    """A fixture's body: an instance of state machine class ``machine``
    for a test to drive step by step, torn down after it."""
    instance = machine()
    try:
        yield instance
    finally:
        instance.teardown()
