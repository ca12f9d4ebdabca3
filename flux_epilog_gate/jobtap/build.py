"""Build epilog-gate.so: a cffi embedding module around entry.c.

``python -m flux_epilog_gate.jobtap.build DIR`` compiles the plugin into
DIR; ``setup.py`` calls :func:`compile_plugin` while building the package.
"""

import glob
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import tempfile

import cffi

MODULE = "flux_epilog_gate.jobtap._entry"
PLUGIN = "epilog-gate.so"
HERE = os.path.dirname(os.path.abspath(__file__))

CDEF = """
typedef ... flux_t;
typedef ... flux_msg_t;
typedef ... flux_msg_handler_t;
typedef ... flux_plugin_t;
typedef ... flux_plugin_arg_t;
typedef uint64_t flux_jobid_t;
typedef void (*flux_msg_handler_f)(flux_t *, flux_msg_handler_t *,
                                   const flux_msg_t *, void *);

#define FLUX_PLUGIN_ARG_IN ...
#define FLUX_PLUGIN_ARG_OUT ...
#define FLUX_ROLE_OWNER ...
#define FLUX_ROLE_USER ...

extern "Python" int gate_py_init (flux_plugin_t *p);
extern "Python" int gate_py_job (flux_plugin_t *p, int what,
                                 const char *topic, flux_jobid_t id,
                                 int state, uint32_t userid,
                                 flux_plugin_arg_t *args);
extern "Python" void gate_py_unload (flux_plugin_t *p);
extern "Python" int gate_py_plugin (flux_plugin_t *p, int what,
                                    flux_plugin_arg_t *args);
extern "Python" void gate_py_request (const flux_msg_t *msg, int method,
                                      uint32_t userid, uint32_t rolemask,
                                      const char *payload);
extern "Python" void gate_py_hold (const flux_msg_t *msg, flux_jobid_t id,
                                   const char *description, double timeout);
extern "Python" void gate_py_release (const flux_msg_t *msg, flux_jobid_t id,
                                      const char *description, int status);
void gate_request_cb (flux_t *h, flux_msg_handler_t *mh,
                      const flux_msg_t *msg, void *arg);
const flux_msg_t *flux_msg_incref (const flux_msg_t *msg);
void flux_msg_decref (const flux_msg_t *msg);
bool flux_msg_is_streaming (const flux_msg_t *msg);
bool flux_disconnect_match (const flux_msg_t *msg1, const flux_msg_t *msg2);
int flux_respond (flux_t *h, const flux_msg_t *request, const char *s);
int flux_respond_error (flux_t *h, const flux_msg_t *request, int errnum,
                        const char *errstr);

int gate_set_forward (flux_plugin_t *p, int flags);
#define GATE_FORWARD_NEW ...
#define GATE_FORWARD_DEPEND ...
int gate_seen_jobmanager (flux_plugin_t *p);
int gate_track (flux_plugin_t *p, flux_jobid_t id, int events);
void gate_untrack (flux_plugin_t *p, flux_jobid_t id);
int gate_epilog_start (flux_plugin_t *p, flux_jobid_t id,
                       const char *description, double timeout);
int gate_epilog_finish (flux_plugin_t *p, flux_jobid_t id,
                        const char *description, int status);
int gate_respond_hold (flux_plugin_t *p, const flux_msg_t *msg,
                       flux_jobid_t id, const char *description,
                       const char *state);
int gate_respond_release (flux_plugin_t *p, const flux_msg_t *msg,
                          int released, const char *reason);
int gate_respond_activation (flux_plugin_t *p, const flux_msg_t *msg,
                             flux_jobid_t id, const char *description,
                             uint32_t userid, int ran);
int gate_memo (flux_plugin_t *p, flux_jobid_t id, const char *text);
int gate_respond_watch (flux_plugin_t *p, const flux_msg_t *msg,
                        flux_jobid_t id, const char *description,
                        uint32_t userid, int ran, const char *point,
                        int aborted);
int gate_prolog_start (flux_plugin_t *p, flux_jobid_t id,
                       const char *description, double timeout);
int gate_prolog_finish (flux_plugin_t *p, flux_jobid_t id,
                        const char *description, int status);
int gate_want_run (flux_plugin_t *p, flux_jobid_t id);
int gate_raise (flux_plugin_t *p, flux_jobid_t id, const char *type,
                int severity, const char *note);
int gate_job_lookup (flux_plugin_t *p, flux_jobid_t id, int *state,
                     uint32_t *userid);
int gate_error (flux_plugin_t *p, flux_plugin_arg_t *args, const char *text);
void gate_log (flux_plugin_t *p, int level, const char *text);

flux_t *flux_jobtap_get_flux (flux_plugin_t *p);
int flux_jobtap_service_register_ex (flux_plugin_t *p, const char *method,
                                     uint32_t rolemask, flux_msg_handler_f cb,
                                     void *arg);
int flux_jobtap_job_event_posted (flux_plugin_t *p, flux_jobid_t id,
                                  const char *name);
const char *flux_plugin_get_conf (flux_plugin_t *p);
int flux_plugin_arg_get (flux_plugin_arg_t *args, int flags, char **json_str);
int flux_plugin_arg_set (flux_plugin_arg_t *args, int flags,
                         const char *json_str);
"""

INIT_CODE = """
import flux_epilog_gate.jobtap.host  # defines the extern "Python" functions
"""


class BuildError(Exception):
    """An install that cannot work; the message says what to do."""


def pkg_config(*args):
    """Return the words pkg-config prints for flux-core."""
    cmd = ["pkg-config", *args, "flux-core"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        why = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines()[0]
        raise BuildError(
            "flux-core's development files were not found "
            f"({' '.join(cmd)}: {why}): install flux-core with them "
            "(e.g. Debian's flux-core-dev, or flux-core built from source), "
            "or point PKG_CONFIG_PATH at the directory of its flux-core.pc"
        ) from exc
    return shlex.split(out.stdout)


def python_version():
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def flux_libdir():
    return pkg_config("--variable=fluxlibdir")[0]


def own_bindings_dirs():
    """flux-core's own bindings, one directory per Python it was built for."""
    return sorted(glob.glob(os.path.join(flux_libdir(), "python[0-9]*.*[0-9]")))


# Run by the Python being installed into: can it load the compiled part
# of flux-core's own bindings from the directory given as argv[1]?  (A
# directory for another Python, or a build against another ABI, fails
# here, not at run time.  The pure-Python part needs the package's runtime
# dependencies, which are not installed yet.)
_IMPORT_CHECK = """
import os, sys
sys.path.insert(0, sys.argv[1])
import _flux._core
mine = os.path.realpath(os.path.join(sys.argv[1], "_flux"))
if os.path.dirname(os.path.realpath(_flux._core.__file__)) != mine:
    sys.exit("_flux._core was found elsewhere: " + _flux._core.__file__)
"""


def own_bindings_fit(path):
    """Return None if flux-core's bindings in ``path`` import in this
    Python, else why not."""
    if not os.path.isfile(os.path.join(path, "flux", "__init__.py")):
        return f"{path}/flux does not exist"
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT_CHECK, path],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["(no output)"]
        return f"importing them fails: {lines[-1]}"
    return None


class Bindings:
    """Which flux-core Python bindings the package uses.

    ``kind`` is "flux-core" (flux-core's own, from ``path``) or
    "flux-python" (the wheel on PyPI, ``requirement``).
    """

    def __init__(self, kind, path=None, requirement=None):
        self.kind = kind
        self.path = path
        self.requirement = requirement

    def __repr__(self):
        return f"Bindings({self.kind!r}, {self.path or self.requirement!r})"


def flux_python_requirement(why_not_own):
    """The flux-python release that matches the installed flux-core."""
    version = pkg_config("--modversion")[0]
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*", version):
        raise BuildError(
            f"flux-core's own Python bindings do not fit Python "
            f"{python_version()} ({sys.executable}): {why_not_own}; and "
            f"flux-core {version} is not a release, so no flux-python "
            "matches it.  Install with a Python that flux-core was built for "
            f"({_own_pythons()}), or rebuild flux-core for this Python "
            "(./configure PYTHON=...)"
        )
    return f"flux-python=={version}"


def _own_pythons():
    names = [os.path.basename(d) for d in own_bindings_dirs()]
    return ", ".join(names) or "none found"


def choose_bindings():
    """flux-core's own bindings if they fit this Python, else the matching
    flux-python.  FLUX_EPILOG_GATE_BINDINGS=flux-core|flux-python forces
    one."""
    forced = os.environ.get("FLUX_EPILOG_GATE_BINDINGS", "")
    if forced not in ("", "flux-core", "flux-python"):
        raise BuildError(
            f"FLUX_EPILOG_GATE_BINDINGS={forced!r}: say flux-core or flux-python"
        )
    path = os.path.join(flux_libdir(), f"python{python_version()}")
    if forced == "flux-python":
        why = "FLUX_EPILOG_GATE_BINDINGS=flux-python"
    else:
        why = own_bindings_fit(path)
        if why is None:
            return Bindings("flux-core", path=path)
        if forced == "flux-core":
            raise BuildError(
                f"flux-core's own Python bindings do not fit Python "
                f"{python_version()} ({sys.executable}): {why}; they exist "
                f"for: {_own_pythons()}"
            )
    return Bindings("flux-python", requirement=flux_python_requirement(why))


def check_headers():
    """flux-core's headers are where pkg-config says."""
    dirs = [w[2:] for w in pkg_config("--cflags") if w.startswith("-I")]
    # pkg-config leaves out the compiler's own include directory.
    for d in dirs or ["/usr/include"]:
        if os.path.exists(os.path.join(d, "flux", "jobtap.h")):
            return
    raise BuildError(
        "flux-core's headers (flux/jobtap.h) were not found in "
        f"{' '.join(dirs) or 'the default include path'}: install flux-core's "
        "development files (e.g. Debian's flux-core-dev)"
    )


def check_libpython():
    """The plugin embeds this Python in the job-manager: it needs a shared
    libpython."""
    var = sysconfig.get_config_var
    name = var("INSTSONAME") or var("LDLIBRARY") or ""
    dirs = [
        var("LIBDIR") or "",
        os.path.join(var("LIBDIR") or "", var("MULTIARCH") or ""),
    ]
    if var("Py_ENABLE_SHARED") and any(
        os.path.exists(os.path.join(d, name)) for d in dirs if d
    ):
        return
    raise BuildError(
        f"Python {python_version()} ({sys.executable}) has no shared "
        f"libpython ({name or 'libpython'} not found in {var('LIBDIR')}): the "
        "plugin embeds Python in the job-manager.  Use a Python built with "
        "--enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared "
        "pyenv install VERSION; Debian: libpython3-dev)"
    )


def preflight():
    """Everything an install needs, checked before building anything;
    return the bindings to use."""
    check_headers()
    check_libpython()
    return choose_bindings()


def base_python():
    """The interpreter the plugin falls back to when it does not find its
    environment's own: the base interpreter of a virtual environment, which
    outlives it, and never a path under a staging directory (DESTDIR)."""
    base = getattr(sys, "_base_executable", None)
    if base and os.access(base, os.X_OK):
        return base
    return sys.executable


def c_string(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_builder(bindings):
    """Return a cffi FFI builder for the plugin.  With flux-python the
    bindings are in the environment's own site-packages, so the embedded
    interpreter needs no extra directory for them."""
    cflags = pkg_config("--cflags")
    libdirs = [w[2:] for w in pkg_config("--libs-only-L")]
    pylibdir = sysconfig.get_config_var("LIBDIR")
    defines = (
        f"#define GATE_BUILD_PYTHON {c_string(base_python())}\n"
        f"#define GATE_FLUX_PYTHONPATH {c_string(bindings.path or '')}\n"
    )
    with open(os.path.join(HERE, "entry.c")) as f:
        source = defines + f.read()

    builder = cffi.FFI()
    builder.cdef(CDEF)
    builder.embedding_init_code(INIT_CODE)
    builder.set_source(
        MODULE,
        source,
        libraries=["flux-core", "jansson", "dl"],
        include_dirs=[w[2:] for w in cflags if w.startswith("-I")],
        library_dirs=libdirs,
        extra_compile_args=["-Wall", "-Wno-unused-parameter"],
        extra_link_args=[
            # The interpreter started here can never be unloaded safely.
            "-Wl,-z,nodelete",
            *(f"-Wl,-rpath,{d}" for d in [pylibdir, *libdirs] if d),
        ],
    )
    return builder


def compile_plugin(outdir, bindings=None, verbose=False):
    """Compile the plugin into ``outdir``; return the path of the library."""
    bindings = bindings or preflight()
    os.makedirs(outdir, exist_ok=True)
    target = os.path.join(os.path.abspath(outdir), PLUGIN)
    with tempfile.TemporaryDirectory() as tmp:
        make_builder(bindings).compile(tmpdir=tmp, target=target, verbose=verbose)
    return target


if __name__ == "__main__":
    print(compile_plugin(sys.argv[1] if len(sys.argv) > 1 else HERE, verbose=True))
