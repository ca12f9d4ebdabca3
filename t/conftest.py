"""Fixtures: real Flux test instances with the installed plugin loaded."""

import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def skip_unless(condition, reason):
    """Skip the calling test unless ``condition``, for a limit of the
    machine (named in ``reason``); under CI (``CI`` set), whose machine has
    what every test needs, fail instead, so that nothing is skipped
    silently there."""
    if condition:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)


def callgrind_counter():
    """``bench/instructions.py``, which counts a real instance's
    instructions under callgrind, for a test that needs valgrind."""
    skip_unless(
        shutil.which("valgrind"), "valgrind is not installed (apt install valgrind)"
    )
    bench = os.path.join(REPO, "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import instructions

    return instructions


def pytest_sessionstart(session):
    if shutil.which("flux") is None:
        pytest.exit(
            "flux-core is not installed (no 'flux' on PATH): it is a "
            "prerequisite of every test here, see README.md",
            returncode=3,
        )
    import flux_epilog_gate

    where = os.path.dirname(os.path.abspath(flux_epilog_gate.__file__))
    if where.startswith(os.path.join(REPO, "flux_epilog_gate")):
        pytest.exit(
            f"flux_epilog_gate was imported from the source tree ({where}); "
            "tests run against the installed package: use 'make check'",
            returncode=3,
        )


@pytest.fixture(scope="session")
def plugin():
    from flux_epilog_gate import plugin_path

    return plugin_path()


@pytest.fixture(scope="session")
def instance(plugin):
    """One instance for the session: the plugin loaded from the config,
    64 fake cores so jobs never wait for resources."""
    from flux_epilog_gate.testing import Instance

    with Instance(cores=64, plugin=plugin) as inst:
        yield inst


@pytest.fixture(scope="session")
def handle(instance):
    return instance.handle()


@pytest.fixture
def gate(handle):
    from flux_epilog_gate import EpilogGate

    return EpilogGate(handle)


@pytest.fixture
def no_leftover_holds(gate):
    """Release every hold left on the session instance after a test, so a
    failing test cannot leave held jobs behind."""
    from jobs import release_all

    yield
    release_all(gate)


@pytest.fixture
def new_instance(plugin):
    """Factory for instances of a test's own (stopped at teardown)."""
    from flux_epilog_gate.testing import Instance

    made = []

    def make(**kwargs):
        kwargs.setdefault("cores", 64)
        kwargs.setdefault("plugin", plugin)
        inst = Instance(**kwargs)
        made.append(inst)
        inst.start()
        return inst

    yield make
    for inst in made:
        inst.stop()
        inst.cleanup()


@pytest.fixture
def port():
    """A fake job-manager for unit tests of the gate logic (no broker)."""
    from fakeport import FakePort

    return FakePort()


#: The ways a test takes the gate away and brings it back (see
#: :func:`restart`).
RESTARTS = ("jobtap", "module", "instance", "sigkill")


def restart(inst, kind, plugin=None, options=(), dependents=False):
    """Take the plugin ``plugin`` (the gate's by default) away from
    ``inst`` and bring it back, the ``kind`` way; return a new handle.

    ``jobtap``: removed and loaded again (with ``options``, ``key=value``
    words; the plugin must have been loaded by hand, or loading it again
    from the config would be refused).  ``module``: the job-manager
    reloaded (``dependents``: then the modules that talk to it too).
    ``instance``: stopped and started on its state directory.
    ``sigkill``: the whole instance SIGKILLed and started again (an
    instance that is not running is only started)."""
    if plugin is None:
        from flux_epilog_gate import plugin_path

        plugin = plugin_path()
    if kind == "jobtap":
        name = os.path.basename(plugin)
        inst.flux("jobtap", "remove", name)
        assert name not in inst.flux("jobtap", "list").stdout
        inst.flux("jobtap", "load", plugin, *options)
    elif kind == "module":
        inst.flux("module", "reload", "job-manager")
        if dependents:
            inst.flux("module", "reload", "sched-simple")
            inst.flux("module", "reload", "job-exec")
    elif kind in ("instance", "sigkill"):
        if kind == "instance":
            inst.stop()
        else:
            inst.kill()
        assert not inst.alive()
        inst.start()
    else:
        raise ValueError(f"{kind!r}: not one of {RESTARTS}")
    return inst.handle()
