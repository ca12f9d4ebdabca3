"""Fixtures: real Flux test instances with the installed plugin loaded."""

import json
import os
import shutil
import sys

import pytest
from hypothesis import settings

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# No per-example deadline by default: the test files run side by side
# (make check), and an example's time then says how busy the machine is,
# not how fast the code is.  A test that means a deadline sets its own.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


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


#: The test files that take longest (a system install each test, many
#: restarts, long timeouts), run first: xdist hands whole files to its
#: workers in the order collected, and a long one last would leave one
#: worker running alone at the end.
LONGEST_FIRST = (
    "test_system_install.py",
    "test_segments.py",
    "test_shutdown.py",
    "test_recovery.py",
    "test_shutdown_restart.py",
    "test_durability.py",
    "test_dws_gate.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


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


def discard(inst):
    """End a test's instance and remove its directory.  Killed: what its
    shutdown does is tested where it matters (test_shutdown*.py), and a
    clean one costs each instance a second of a busy machine."""
    inst.kill()
    inst.cleanup()


@pytest.fixture(scope="session")
def plugin():
    from flux_epilog_gate import plugin_path

    return plugin_path()


@pytest.fixture(scope="session")
def instance(plugin):
    """One instance for the session: the plugin loaded from the config,
    64 fake cores so jobs never wait for resources."""
    from flux_epilog_gate.testing import Instance

    inst = Instance(cores=64, plugin=plugin)
    inst.start()
    yield inst
    discard(inst)


@pytest.fixture(scope="session")
def handle(instance):
    return instance.handle()


@pytest.fixture(scope="module")
def inst(plugin):
    """An instance per test module, for tests with jobs of guests: 8 fake
    cores, and jobs stay in the KVS once inactive (no job cleanup), so a
    guest's view of finished jobs stays checkable.  Modules needing another
    instance define their own ``inst``."""
    from flux_epilog_gate.testing import Instance

    with Instance(
        cores=8, plugin=plugin, env={"FLUX_DISABLE_JOB_CLEANUP": "1"}
    ) as inst:
        yield inst


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
        discard(inst)


@pytest.fixture
def port():
    """A fake job-manager for unit tests of the gate logic (no broker)."""
    from fakeport import FakePort

    return FakePort()


def reload_config(inst, text):
    """Replace the instance's own config text and reload it."""
    inst.config = text
    inst.write_config()
    return inst.flux("config", "reload", check=False)


def _option(word):
    """``(key, value)`` of a ``key=value`` word, the value read as JSON if
    it is (a number, a boolean), as `flux jobtap load` reads it."""
    key, value = word.split("=", 1)
    try:
        return key, json.loads(value)
    except ValueError:
        return key, value


def jobtap_list(handle):
    """The names of the plugins loaded into the job-manager."""
    return handle.rpc("job-manager.jobtap", {"query_only": True}).get()["plugins"]


#: The timeout of a hold that is active across a restart, by kind of
#: restart: the restart begins LEAD seconds after the hold's activation
#: and must end a second before the timeout, with room for a busy machine
#: (a plugin or module reload takes well under a second, an instance's
#: stop and start one or two).  A timer restarted from zero would then
#: fire at least LEAD seconds late, beyond SLACK, the lateness a resumed
#: timer is allowed.
TIMEOUTS = {"jobtap": 4.0, "module": 4.5, "instance": 8.0, "sigkill": 8.0}
LEAD = 2.0
SLACK = 1.0

#: The ways a test takes the gate away and brings it back (see
#: :func:`restart`).
RESTARTS = ("jobtap", "module", "instance", "sigkill")


def restart(inst, kind, plugin=None, options=(), dependents=False):
    """Take the plugin ``plugin`` (the gate's by default) away from
    ``inst`` and bring it back, the ``kind`` way; return a new handle.

    ``jobtap``: removed and loaded again (with ``options``, ``key=value``
    words).  ``module``: the job-manager
    reloaded (``dependents``: then the modules that talk to it too).
    ``instance``: stopped and started on its state directory.
    ``sigkill``: the whole instance SIGKILLed and started again (an
    instance that is not running is only started)."""
    if plugin is None:
        from flux_epilog_gate import plugin_path

        plugin = plugin_path()
    if kind == "jobtap":
        # Through the job-manager's RPC, as `flux jobtap` does: a command
        # costs a second of a busy machine, and the restart must be quick.
        name = os.path.basename(plugin)
        with_handle = inst.handle()
        with_handle.rpc("job-manager.jobtap", {"remove": name}).get()
        assert name not in jobtap_list(with_handle)
        conf = dict(_option(option) for option in options)
        load = {"load": plugin, **({"conf": conf} if conf else {})}
        with_handle.rpc("job-manager.jobtap", load).get()
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


class Restarter:
    """An instance started the way a ``kind`` of :func:`restart` needs
    (for ``jobtap``, the gate loaded by hand; else from the config), with
    ``handle`` and ``gate`` (a client), which :meth:`restart` renews.
    ``kwargs`` go to ``new_instance``."""

    def __init__(self, kind, new_instance, plugin, **kwargs):
        self.kind = kind
        self.plugin = plugin
        kwargs.setdefault("env", {"FLUX_DISABLE_JOB_CLEANUP": "1"})
        if kind == "jobtap":
            # Loaded by hand, so that remove + load is the only way back.
            self.inst = new_instance(plugin=None, **kwargs)
            self.inst.flux("jobtap", "load", plugin)
        else:
            self.inst = new_instance(**kwargs)
        self._connect(self.inst.handle())

    def _connect(self, handle):
        from flux_epilog_gate import EpilogGate

        self.handle = handle
        self.gate = EpilogGate(handle)

    def restart(self, dependents=False):
        """Restart the gate (``dependents``: see :func:`restart`)."""
        self.handle = self.gate = None
        self._connect(restart(self.inst, self.kind, self.plugin, (), dependents))
        assert "epilog-gate.so" in jobtap_list(self.handle)


@pytest.fixture
def restarter(new_instance, plugin):
    """``restarter(kind, **kwargs)``: a :class:`Restarter`."""
    return lambda kind, **kwargs: Restarter(kind, new_instance, plugin, **kwargs)


@pytest.fixture(scope="session")
def dws_so():
    """The dws plugin (a test module may give another build of it)."""
    from flux_epilog_gate.paths import plugin_path

    return plugin_path("dws")


@pytest.fixture
def dws(tmp_path):
    """``dws(inst, *options)``: the fake DWS service started against
    ``inst`` (a :class:`dwsfake.FakeDws`), stopped at teardown."""
    from dwsfake import FakeDws

    made = []

    def start(inst, *options):
        service = FakeDws(inst, str(tmp_path), *options)
        made.append(service)
        return service

    yield start
    for service in made:
        service.stop()


@pytest.fixture
def rabbit_instance(dws_so, new_instance):
    """``rabbit_instance(**conf)``: an instance of 8 cores with the dws
    plugin loaded from its config with options ``conf``."""

    def make(**conf):
        return new_instance(cores=8, plugin=dws_so, plugin_conf=conf)

    return make
