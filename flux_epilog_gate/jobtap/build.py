"""Build epilog-gate.so: a cffi embedding module around entry.c.

``python -m flux_epilog_gate.jobtap.build DIR`` compiles the plugin into
DIR; ``setup.py`` calls :func:`compile_plugin` while building the package.
"""

import os
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


def pkg_config(*args):
    """Return the words pkg-config prints for flux-core."""
    cmd = ["pkg-config", *args, "flux-core"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RuntimeError(
            "flux-core development files not found "
            f"({' '.join(cmd)} failed: {exc}); install flux-core first"
        ) from exc
    return shlex.split(out.stdout)


def flux_pythonpath():
    """Directory that holds flux-core's Python bindings for this Python."""
    libdir = pkg_config("--variable=fluxlibdir")[0]
    return os.path.join(libdir, f"python{sys.version_info[0]}.{sys.version_info[1]}")


def c_string(value):
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_builder():
    """Return a cffi FFI builder for the plugin."""
    cflags = pkg_config("--cflags")
    libdirs = [w[2:] for w in pkg_config("--libs-only-L")]
    pylibdir = sysconfig.get_config_var("LIBDIR")
    defines = (
        f"#define GATE_BUILD_PYTHON {c_string(sys.executable)}\n"
        f"#define GATE_FLUX_PYTHONPATH {c_string(flux_pythonpath())}\n"
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


def compile_plugin(outdir, verbose=False):
    """Compile the plugin into ``outdir``; return the path of the library."""
    os.makedirs(outdir, exist_ok=True)
    target = os.path.join(os.path.abspath(outdir), PLUGIN)
    with tempfile.TemporaryDirectory() as tmp:
        make_builder().compile(tmpdir=tmp, target=target, verbose=verbose)
    return target


if __name__ == "__main__":
    print(compile_plugin(sys.argv[1] if len(sys.argv) > 1 else HERE, verbose=True))
