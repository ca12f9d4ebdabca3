"""Build a jobtap plugin written in Python: a cffi embedding module
around runtime.c.

:func:`compile_plugin` turns (plugin name, "module:Class") into NAME.so;
``python -m flux_epilog_gate.jobtap.build NAME module:Class [DIR]
[PYTHONPATH...]`` does the same from a shell.  The checks below
(:func:`preflight`) say what a machine lacks before anything is built.
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

HERE = os.path.dirname(os.path.abspath(__file__))

#: The runtime's half of the cffi cdef: what its Python side calls in C and
#: the extern "Python" entry points runtime.c calls.  build.py also turns
#: the extern "Python" lines (of this and of an extension's cdef) into the
#: C prototypes runtime.c needs, so each signature is written once.
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

enum runtime_topic_mode {
    RUNTIME_TOPIC_MARKED, RUNTIME_TOPIC_ALL, RUNTIME_TOPIC_WANTED,
    RUNTIME_TOPIC_SWITCHED, ...
};
enum runtime_plugin_topic { RUNTIME_PLUGIN_CONF, RUNTIME_PLUGIN_QUERY, ... };

extern "Python" void *runtime_py_init (flux_plugin_t *p);
extern "Python" void runtime_py_unload (void *self);
extern "Python" int runtime_py_job (void *self, int topic, flux_jobid_t id,
                                    int state, uint32_t userid,
                                    flux_plugin_arg_t *args);
extern "Python" int runtime_py_plugin (void *self, int topic,
                                       flux_plugin_arg_t *args);
extern "Python" void runtime_py_request (void *self, const flux_msg_t *msg,
                                         int method, uint32_t userid,
                                         uint32_t rolemask,
                                         const char *payload);
extern "Python" void runtime_py_commit (void *self, int64_t cookie,
                                        int errnum, const char *errstr);

const char *runtime_name (void);
void runtime_request_cb (flux_t *h, flux_msg_handler_t *mh,
                         const flux_msg_t *msg, void *arg);
int runtime_seen_jobmanager (flux_plugin_t *p);
uint64_t runtime_jobmanager_id (flux_plugin_t *p);
int runtime_add_topic (flux_plugin_t *p, const char *name, int mode);
int runtime_topic_require (flux_plugin_t *p, int topic, const char *path);
int runtime_set_job_pattern (flux_plugin_t *p, const char *pattern);
int runtime_jobspec_update (flux_plugin_t *p, flux_jobid_t id,
                            const char *update);
int runtime_forward (flux_plugin_t *p, int topic, int on);
int runtime_mark (flux_plugin_t *p, flux_jobid_t id, int events);
void runtime_unmark (flux_plugin_t *p, flux_jobid_t id);
void runtime_unsubscribe (flux_plugin_t *p, flux_jobid_t id);
int runtime_watch_exceptions (flux_plugin_t *p, flux_jobid_t id);
int runtime_want (flux_plugin_t *p, flux_jobid_t id, int topic);
int runtime_post_event (flux_plugin_t *p, flux_jobid_t id, const char *name,
                        const char *context);
int runtime_raise (flux_plugin_t *p, flux_jobid_t id, const char *type,
                   int severity, const char *note);
int runtime_job_lookup (flux_plugin_t *p, flux_jobid_t id, int *state,
                        uint32_t *userid);
char *runtime_job_pick (flux_plugin_t *p, flux_jobid_t id, const char *paths);
int runtime_arg_value (flux_plugin_arg_t *args, const char *path, char **text);
int runtime_job_value (flux_plugin_t *p, flux_jobid_t id, const char *path,
                       char **text);
void runtime_free (void *ptr);
int runtime_service_register (flux_plugin_t *p, const char *name, int index,
                              uint32_t rolemask, size_t max_bytes,
                              flux_msg_handler_f cb);
int runtime_error (flux_plugin_t *p, flux_plugin_arg_t *args,
                   const char *text);
void runtime_log (flux_plugin_t *p, int level, const char *text);
int runtime_kvs_commit (flux_plugin_t *p, const char *key, const char *value,
                        int append, int sync, int64_t cookie);
#define RUNTIME_BENCH_NO_RECORD ...

const flux_msg_t *flux_msg_incref (const flux_msg_t *msg);
void flux_msg_decref (const flux_msg_t *msg);
bool flux_msg_is_streaming (const flux_msg_t *msg);
int flux_msg_get_matchtag (const flux_msg_t *msg, uint32_t *matchtag);
bool flux_disconnect_match (const flux_msg_t *msg1, const flux_msg_t *msg2);
int flux_respond (flux_t *h, const flux_msg_t *request, const char *s);
int flux_respond_error (flux_t *h, const flux_msg_t *request, int errnum,
                        const char *errstr);
flux_t *flux_jobtap_get_flux (flux_plugin_t *p);
flux_plugin_arg_t *flux_jobtap_job_lookup (flux_plugin_t *p, flux_jobid_t id);
void flux_plugin_arg_destroy (flux_plugin_arg_t *args);
int flux_jobtap_job_subscribe (flux_plugin_t *p, flux_jobid_t id);
void flux_jobtap_job_unsubscribe (flux_plugin_t *p, flux_jobid_t id);
int flux_jobtap_dependency_add (flux_plugin_t *p, flux_jobid_t id,
                                const char *description);
int flux_jobtap_dependency_remove (flux_plugin_t *p, flux_jobid_t id,
                                   const char *description);
int flux_jobtap_job_event_posted (flux_plugin_t *p, flux_jobid_t id,
                                  const char *name);
int flux_jobtap_prolog_start (flux_plugin_t *p, const char *description);
int flux_jobtap_prolog_finish (flux_plugin_t *p, flux_jobid_t id,
                               const char *description, int status);
int flux_jobtap_epilog_start (flux_plugin_t *p, const char *description);
int flux_jobtap_epilog_finish (flux_plugin_t *p, flux_jobid_t id,
                               const char *description, int status);
const char *flux_plugin_get_conf (flux_plugin_t *p);
int flux_plugin_arg_get (flux_plugin_arg_t *args, int flags, char **json_str);
int flux_plugin_arg_set (flux_plugin_arg_t *args, int flags,
                         const char *json_str);
"""

#: Run when the embedded module starts: bind the plugin class to this
#: library's ffi and lib (see plugin.py).
INIT_CODE = """
from {module} import ffi, lib
from flux_epilog_gate.jobtap.plugin import bootstrap
bootstrap(ffi, lib, {target!r})
"""

_EXTERN_PYTHON = re.compile(r'extern\s+"Python"\s+([^;]*;)', re.S)


def python_prototypes(cdef):
    """The C prototypes of the extern "Python" functions of ``cdef``: the C
    source must declare them, static, before it calls them."""
    return "".join(f"static {decl}\n" for decl in _EXTERN_PYTHON.findall(cdef))


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


def module_name(name):
    """The cffi module of plugin ``name`` (one per plugin: each library
    has its own ffi and lib in the one interpreter)."""
    return "_jobtap_" + re.sub(r"[^A-Za-z0-9_]", "_", name)


class Extension:
    """A plugin's own C, compiled into its library after runtime.c.

    ``source``: C text (it may call runtime.c's functions, and name
    runtime_request_cb as the fallback of its own message handlers);
    ``cdef``: what Python calls in it, and its extern "Python" functions;
    ``defines``: name -> value (str: a C string, int: a number), put in
    front of everything, for constants C and Python share.
    """

    def __init__(self, source="", cdef="", defines=None):
        self.source = source
        self.cdef = cdef
        self.defines = dict(defines or {})


def _define(name, value):
    text = c_string(value) if isinstance(value, str) else str(int(value))
    return f"#define {name} {text}\n"


def make_builder(
    name,
    target,
    bindings,
    extension=None,
    site_levels=3,
    pythonpath=(),
    python=None,
):
    """Return a cffi FFI builder for plugin ``name`` whose Python class is
    ``target`` ("module:Class").

    ``site_levels``: how many directories below its site directory the
    library is installed (0: none, as for a library built anywhere);
    ``pythonpath``: more directories for sys.path; ``python``: the
    interpreter whose environment the plugin runs in when it finds none
    of its own (default: the base interpreter of this one).  With
    flux-python the bindings are in the environment's own site-packages,
    so the embedded interpreter needs no extra directory for them.
    """
    extension = extension or Extension()
    cflags = pkg_config("--cflags")
    libdirs = [w[2:] for w in pkg_config("--libs-only-L")]
    pylibdir = sysconfig.get_config_var("LIBDIR")
    cdef = CDEF + extension.cdef
    defines = {
        "RUNTIME_NAME": name,
        "RUNTIME_BUILD_PYTHON": python or base_python(),
        "RUNTIME_FLUX_PYTHONPATH": bindings.path or "",
        "RUNTIME_PYTHONPATH": ":".join(pythonpath),
        "RUNTIME_SITE_LEVELS": site_levels,
        **extension.defines,
    }
    with open(os.path.join(HERE, "runtime.c")) as f:
        runtime = f.read()
    source = (
        "".join(_define(k, v) for k, v in defines.items())
        + "#include <flux/core.h>\n#include <flux/jobtap.h>\n"
        + python_prototypes(cdef)
        + runtime
        + extension.source
    )
    module = module_name(name)
    builder = cffi.FFI()
    builder.cdef(cdef)
    builder.embedding_init_code(INIT_CODE.format(module=module, target=target))
    builder.set_source(
        module,
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


def compile_plugin(outdir, name, target, bindings=None, verbose=False, **options):
    """Compile plugin ``name`` (Python class ``target``, "module:Class")
    into ``outdir``/NAME.so; return its path.  ``options``: those of
    :func:`make_builder`."""
    bindings = bindings or preflight()
    os.makedirs(outdir, exist_ok=True)
    target_path = os.path.join(os.path.abspath(outdir), f"{name}.so")
    with tempfile.TemporaryDirectory() as tmp:
        make_builder(name, target, bindings, **options).compile(
            tmpdir=tmp, target=target_path, verbose=verbose
        )
    return target_path


def main(argv):
    """``python -m flux_epilog_gate.jobtap.build NAME module:Class [DIR]
    [PYTHONPATH...]``: build a plugin whose class is importable from the
    given directories (or the environment) into DIR (default: .)."""
    if len(argv) < 2:
        sys.exit(f"usage: {sys.argv[0]} NAME module:Class [DIR] [PYTHONPATH...]")
    name, target, outdir, *path = [*argv, "."] if len(argv) == 2 else argv
    try:
        print(
            compile_plugin(
                outdir,
                name,
                target,
                site_levels=0,
                pythonpath=[os.path.abspath(d) for d in path],
                python=sys.executable,
            )
        )
    except BuildError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
