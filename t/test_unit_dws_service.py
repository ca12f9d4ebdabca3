"""dws.so's calls to the DWS service (dws/service.py's Service): the real
one (DwsService, service.c's functions bound to the plugin instance)
and the model's (dwsmodel.py's ServiceCalls) each have every call of
the protocol, the real one calls the C function of that name with the
instance first, the C prototypes take what the protocol passes, and
the workflow calls nothing of its service that the protocol does not
name."""

import ast
import inspect
import pathlib
import re

import pytest
from attrcalls import attributes_taken
from dwsmodel import ServiceCalls

import flux_epilog_gate.dws
from flux_epilog_gate.dws.service import DwsService, Service
from flux_epilog_gate.plugin.cbuild import DWS_CDEF

MEMBERS = sorted(
    name
    for name, value in vars(Service).items()
    if not name.startswith("_") and inspect.isfunction(value)
)

#: The C function of each call (errno is read of the ffi; close rebinds).
C_NAMES = {name: f"dws_{name}" for name in MEMBERS if name not in ("errno", "close")}


def _positional(function):
    """The names of the parameters a caller passes (``self`` left out)."""
    params = list(inspect.signature(function).parameters.values())[1:]
    return [p.name for p in params]


def _prototypes():
    """C function name: its number of parameters, from DWS_CDEF."""
    found = {}
    for name, params in re.findall(r"int (dws_\w+) \(([^)]*)\);", DWS_CDEF):
        found[name] = len(params.split(","))
    return found


class _Lib:
    """A library whose every function records its call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def function(*args):
            self.calls.append((name, args))
            return 0

        return function


class _Ffi:
    NULL = object()
    errno = 42


class _Jobtap:
    def __init__(self):
        self.p = object()
        self.lib = _Lib()
        self.ffi = _Ffi()


def test_the_protocol_names_service_c():
    assert MEMBERS == [
        "check_args",
        "close",
        "create",
        "errno",
        "is_rabbit",
        "post_environment",
        "post_run",
        "setup",
    ]


@pytest.mark.parametrize("name", MEMBERS)
def test_the_fake_has_the_call(name):
    function = getattr(ServiceCalls, name, None)
    assert inspect.isfunction(function), name
    assert _positional(function) == _positional(getattr(Service, name))


@pytest.mark.parametrize("name", sorted(C_NAMES))
def test_the_real_one_is_the_c_call(name):
    jobtap = _Jobtap()
    service = DwsService(jobtap)
    args = [object() for _ in _positional(getattr(Service, name))]
    assert getattr(service, name)(*args) == 0
    assert jobtap.lib.calls == [(C_NAMES[name], (jobtap.p, *args))]


@pytest.mark.parametrize("name", sorted(C_NAMES))
def test_the_c_prototype_takes_the_call(name):
    wanted = len(_positional(getattr(Service, name))) + 1
    assert _prototypes().get(C_NAMES[name]) == wanted


@pytest.mark.parametrize("name", sorted(C_NAMES))
def test_a_closed_one_passes_null(name):
    # service.c refuses a NULL instance: a late call never reaches the
    # freed one.
    jobtap = _Jobtap()
    service = DwsService(jobtap)
    service.close()
    args = [object() for _ in _positional(getattr(Service, name))]
    getattr(service, name)(*args)
    assert jobtap.lib.calls == [(C_NAMES[name], (_Ffi.NULL, *args))]


def test_no_args_and_errno_are_the_ffis():
    jobtap = _Jobtap()
    service = DwsService(jobtap)
    assert service.NO_ARGS is _Ffi.NULL
    assert service.errno() == 42
    assert ServiceCalls.NO_ARGS is None


def test_the_workflow_calls_only_the_protocol():
    package = pathlib.Path(flux_epilog_gate.dws.__file__).parent
    allowed = set(MEMBERS) | {"NO_ARGS"}
    outside = []
    seen = set()
    for path in sorted(package.glob("*.py")):
        if path.name == "service.py":
            continue
        for name, line in attributes_taken(ast.parse(path.read_text()), "service"):
            seen.add(name)
            if name not in allowed:
                outside.append(f"{path.name}:{line}: service.{name}")
    assert outside == []
    # The scan sees the calls the workflow makes.
    assert {"check_args", "create", "setup", "post_run", "is_rabbit"} <= seen
