"""The gate's port (gate/port.py): the real one (plugin/port.py's
GatePort) and the unit tests' (t/fakeport.py's FakePort) each have every
call of the Port protocol with a signature it can be called by, and the
gate calls nothing of a port that the protocol does not name."""

import ast
import inspect
import pathlib

import pytest
from attrcalls import attributes_taken
from fakeport import FakePort

import flux_epilog_gate.gate
from flux_epilog_gate.gate.port import Port
from flux_epilog_gate.jobtap.broker import Broker
from flux_epilog_gate.jobtap.facade import Jobtap
from flux_epilog_gate.jobtap.jobs import Jobs
from flux_epilog_gate.jobtap.kvs import Kvs
from flux_epilog_gate.jobtap.marks import Marks
from flux_epilog_gate.jobtap.messages import Messages
from flux_epilog_gate.plugin.port import SERVED, GatePort

MEMBERS = sorted(
    name
    for name, value in vars(Port).items()
    if not name.startswith("_") and inspect.isfunction(value)
)

#: The class of each of Jobtap's services, by attribute.
SERVICES = {
    "jobs": Jobs,
    "marks": Marks,
    "kvs": Kvs,
    "broker": Broker,
    "messages": Messages,
}

#: Jobtap's attributes that are builtins (no signature to read).
BUILTINS = {"now"}


def _parameters(function, bound):
    """The parameters a caller passes: ``self`` left out unless ``bound``."""
    params = list(inspect.signature(function).parameters.values())
    return params if bound else params[1:]


def _compatible(wanted, given):
    """A call made as ``wanted`` declares fits ``given``: the same
    positional parameters (by number), and each keyword with a default
    in ``wanted`` has one, of the same name, in ``given``."""
    positional = [p for p in given if p.kind is not p.KEYWORD_ONLY]
    if len(positional) != len(wanted) and not any(
        p.kind is p.VAR_POSITIONAL for p in given
    ):
        return False
    names = {p.name: p for p in given}
    for param in wanted:
        if param.default is not param.empty:
            other = names.get(param.name)
            if other is None or other.default is other.empty:
                return False
    required_wanted = sum(p.default is p.empty for p in wanted)
    required_given = sum(
        p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD for p in given
    )
    return required_given <= required_wanted


def _served(path):
    """The function of the Jobtap service at ``path`` (``kvs.commit``),
    and whether it is bound already (a builtin is None)."""
    if "." not in path:
        if path in BUILTINS:
            return None
        return getattr(Jobtap, path)
    service, name = path.split(".")
    return getattr(SERVICES[service], name)


def test_the_protocol_names_the_calls_the_gate_documents():
    assert len(MEMBERS) >= 30
    assert {"job_info", "kvs_commit", "track", "timer", "epilog_start"} <= set(MEMBERS)


@pytest.mark.parametrize("name", MEMBERS)
def test_fakeport_has_the_call(name):
    assert callable(getattr(FakePort, name, None)), name
    wanted = _parameters(getattr(Port, name), bound=False)
    given = _parameters(getattr(FakePort, name), bound=False)
    assert _compatible(wanted, given), (name, wanted, given)


@pytest.mark.parametrize("name", MEMBERS)
def test_gateport_has_the_call(name):
    wanted = _parameters(getattr(Port, name), bound=False)
    if name in SERVED:
        assert name not in vars(GatePort), f"{name}: served and defined"
        function = _served(SERVED[name])
        if function is None:
            assert wanted == [], name
            return
        given = _parameters(function, bound=False)
    else:
        assert inspect.isfunction(vars(GatePort).get(name)), name
        given = _parameters(getattr(GatePort, name), bound=False)
    assert _compatible(wanted, given), (name, wanted, given)


def test_gateport_serves_only_calls_of_the_protocol():
    assert set(SERVED) <= set(MEMBERS)


#: GatePort's calls that are the plugin's, not the gate's: the bare
#: references of the requests it answers, and their answers.
PLUGIN_SIDE = {
    "own_request",
    "drop_request",
    "answer_hold",
    "answer_release",
    "answer_error",
}


def test_gateport_offers_the_gate_nothing_else():
    public = {name for name in vars(GatePort) if not name.startswith("_")}
    assert public - set(MEMBERS) - PLUGIN_SIDE == set()


def test_the_gate_calls_only_the_protocol():
    package = pathlib.Path(flux_epilog_gate.gate.__file__).parent
    outside = []
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text())
        for name, line in attributes_taken(tree, "port"):
            if name not in MEMBERS:
                outside.append(f"{path.name}:{line}: port.{name}")
    assert outside == []


def test_the_scan_sees_the_ports_of_the_gates_parts():
    tree = ast.parse("self.context.port.job_info(1)\nport.log(0, '')\nx.port.now()")
    assert sorted(name for name, _ in attributes_taken(tree, "port")) == [
        "job_info",
        "log",
        "now",
    ]
