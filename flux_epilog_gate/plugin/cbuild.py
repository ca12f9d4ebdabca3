"""Build epilog-gate.so: the runtime (jobtap/) with the gate as its plugin.

The gate's C (stamp.c and fastpath.c, beside this file) is the runtime's
extension: its cdef below is the one statement of the signatures C and
Python share, and the constants C needs are taken from the Python
modules that own them (gate/logentries.py's MARKER, gate/holds.py's
description grammar and stamp range), so nothing is copied by hand.
setup.py calls :func:`compile_gate` while building the package; it runs
before the package's dependencies are installed, so this module imports
nothing of flux and loads holds.py and logentries.py on their own.
"""

import importlib
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(PACKAGE, "jobtap"))
import build as runtime_build  # noqa: E402

sys.path.pop(0)

NAME = "epilog-gate"
TARGET = "flux_epilog_gate.plugin:EpilogGatePlugin"

#: The user annotation (``user.epilog_gate``) naming a job's active holds.
ANNOTATION = "epilog_gate"

#: stamp.c: what Python calls there (also compiled alone by the tests).
STAMP_CDEF = """
double gate_stamp_us (long long us, char *text);
double gate_stamp (char *text);
"""

CDEF = """
extern "Python" void gate_py_hold (void *self, const flux_msg_t *msg,
                                   flux_jobid_t id, const char *description,
                                   double timeout, int point);
extern "Python" void gate_py_release (void *self, const flux_msg_t *msg,
                                      flux_jobid_t id,
                                      const char *description, int status);
void gate_hold_cb (flux_t *h, flux_msg_handler_t *mh, const flux_msg_t *msg,
                   void *arg);
void gate_release_cb (flux_t *h, flux_msg_handler_t *mh,
                      const flux_msg_t *msg, void *arg);
int gate_post_start (flux_plugin_t *p, flux_jobid_t id, const char *name,
                     const char *description, double timeout);
int gate_post_finish (flux_plugin_t *p, flux_jobid_t id, const char *name,
                      const char *description, int status);
int gate_post_marked (flux_plugin_t *p, flux_jobid_t id, const char *name,
                      const char *description);
int gate_memo (flux_plugin_t *p, flux_jobid_t id, const char *text);
int gate_answer_hold (flux_t *h, const flux_msg_t *msg, flux_jobid_t id,
                      const char *description, const char *state);
int gate_answer_release (flux_t *h, const flux_msg_t *msg, int released,
                         const char *reason);
int gate_answer_error (flux_t *h, const flux_msg_t *msg, int errnum,
                       const char *text);
int gate_respond_watch (flux_t *h, const flux_msg_t *msg, flux_jobid_t id,
                        const char *description, uint32_t userid, int ran,
                        const char *point, int aborted);
""" + STAMP_CDEF


def _gate_module(name):
    """Module ``name`` of the gate package, imported without the
    packages' __init__ (which need flux)."""
    package = "_flux_epilog_gate_build"
    if package not in sys.modules:
        stub = types.ModuleType(package)
        stub.__path__ = [os.path.join(PACKAGE, "gate")]
        sys.modules[package] = stub
    return importlib.import_module(f"{package}.{name}")


def shared_constants():
    """The constants fastpath.c shares with Python, from their owners."""
    holds = _gate_module("holds")
    logentries = _gate_module("logentries")
    allowed = "".join(
        chr(c) for c in range(1, 128) if holds.description_error(chr(c)) is None
    )
    return {
        "GATE_MARKER": logentries.MARKER,
        "GATE_ANNOTATION": ANNOTATION,
        "GATE_DESCRIPTION_MAX": holds.DESCRIPTION_MAX,
        "GATE_DESCRIPTION_CHARS": allowed,
        "GATE_POINTS": "|" + "|".join(holds.POINTS) + "|",
        **stamp_constants(holds),
    }


def stamp_constants(holds):
    """The constants stamp.c shares with holds.stamp."""
    return {
        "GATE_STAMP_MIN": holds.STAMP_FIXED[0],
        "GATE_STAMP_MAX": holds.STAMP_FIXED[1],
    }


def stamp_source():
    """stamp.c's text."""
    with open(os.path.join(HERE, "stamp.c")) as f:
        return f.read()


def extension():
    with open(os.path.join(HERE, "fastpath.c")) as f:
        source = f.read()
    return runtime_build.Extension(stamp_source() + source, CDEF, shared_constants())


def compile_gate(outdir, bindings=None, verbose=False):
    """Compile epilog-gate.so into ``outdir``; return its path."""
    return runtime_build.compile_plugin(
        outdir, NAME, TARGET, bindings, verbose=verbose, extension=extension()
    )


#: The dws plugin (flux-coral2's rabbits): a plugin of the gate, with the
#: gate's C, since it may drive the gate (post its marked events), and its
#: own (dws/service.c: the DWS service's requests).
DWS_NAME = "dws"
DWS_TARGET = "flux_epilog_gate.dws.plugin:Dws"

#: dws/service.c: what Python calls there, and what it calls in Python.
DWS_CDEF = """
extern "Python" void dws_py_failed (void *self, flux_jobid_t id, int kind,
                                    int errnum, const char *errstr);
int dws_check_args (flux_plugin_t *p, flux_plugin_arg_t *args);
int dws_create (flux_plugin_t *p, flux_jobid_t id, flux_plugin_arg_t *args);
int dws_setup (flux_plugin_t *p, flux_jobid_t id);
int dws_post_run (flux_plugin_t *p, flux_jobid_t id, int run_started);
int dws_is_rabbit (flux_plugin_t *p, flux_jobid_t id);
int dws_post_environment (flux_plugin_t *p, flux_jobid_t id,
                          const flux_msg_t *msg);
extern "Python" int dws_py_remove (void *self, const flux_msg_t *msg,
                                   int kind, flux_jobid_t id,
                                   uint32_t userid, uint32_t rolemask,
                                   const char *text);
void dws_prolog_remove_cb (flux_t *h, flux_msg_handler_t *mh,
                           const flux_msg_t *msg, void *arg);
void dws_epilog_remove_cb (flux_t *h, flux_msg_handler_t *mh,
                           const flux_msg_t *msg, void *arg);
"""


def dws_extension():
    """The gate's C and dws.so's own."""
    gate = extension()
    with open(os.path.join(PACKAGE, "dws", "service.c")) as f:
        source = f.read()
    return runtime_build.Extension(
        gate.source + source, gate.cdef + DWS_CDEF, gate.defines
    )


def compile_dws(outdir, bindings=None, verbose=False):
    """Compile dws.so into ``outdir``; return its path."""
    return runtime_build.compile_plugin(
        outdir,
        DWS_NAME,
        DWS_TARGET,
        bindings,
        verbose=verbose,
        extension=dws_extension(),
    )


if __name__ == "__main__":
    print(compile_gate(sys.argv[1] if len(sys.argv) > 1 else HERE, verbose=True))
