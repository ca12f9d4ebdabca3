/* The C entry point of epilog-gate.so.
 *
 * The job-manager dlopen()s this library RTLD_LOCAL from its own thread
 * and calls flux_plugin_init().  Everything interesting happens in Python
 * (flux_epilog_gate.jobtap.host); this file only
 *
 *  - makes libpython's symbols visible to extension modules imported later,
 *  - starts the interpreter of the environment the package is installed in,
 *  - forwards jobtap callbacks to Python, but only for jobs the gate cares
 *    about, so that unheld jobs never pay for a trip into the interpreter,
 *  - offers a few fixed-signature wrappers around variadic flux calls.
 *
 * It is compiled as the C source of a cffi embedding module (see build.py),
 * which supplies Python.h and the extern "Python" prototypes.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <flux/core.h>
#include <flux/jobtap.h>

/* Implemented in Python (host.py) as cffi extern "Python" functions. */
static int gate_py_init (flux_plugin_t *p);
static void gate_py_unload (flux_plugin_t *p);
static int gate_py_job (flux_plugin_t *p, int what, const char *topic,
                        flux_jobid_t id, int state, uint32_t userid,
                        flux_plugin_arg_t *args);
static int gate_py_plugin (flux_plugin_t *p, int what,
                           flux_plugin_arg_t *args);
static void gate_py_request (const flux_msg_t *msg, int method,
                             uint32_t userid, uint32_t rolemask,
                             const char *payload);
static void gate_py_hold (const flux_msg_t *msg, flux_jobid_t id,
                          const char *description, double timeout);
static void gate_py_release (const flux_msg_t *msg, flux_jobid_t id,
                             const char *description, int status);

#define GATE_NAME "epilog-gate"
#define GATE_AUX "epilog-gate::held"
#define GATE_RUN_AUX "epilog-gate::prolog" /* also forward job.state.run */

/* The value of GATE_RUN_AUX: only its presence matters, never written. */
static char gate_run_mark;
#define GATE_JOB_TOPICS "job.[se][tv][ae][tn][et].*" /* job.state.*, job.event.* */
#define GATE_JM_AUX "epilog-gate::job-manager"
#define GATE_MARKER "epilog_gate" /* holdlog.MARKER */

enum gate_job_topic {
    GATE_JOB_NEW = 0,
    GATE_JOB_CLEANUP = 1,
    GATE_JOB_INACTIVE = 2,
    GATE_JOB_EVENT = 3,
    GATE_JOB_DEPEND = 4,
    GATE_JOB_RUN = 5,
};

/* Indexes of the RPC methods (host.METHODS). */
enum gate_method {
    GATE_METHOD_HOLD = 0,
    GATE_METHOD_RELEASE = 1,
};

enum gate_plugin_topic {
    GATE_PLUGIN_CONF = 0,
    GATE_PLUGIN_QUERY = 1,
};

/* Set from Python: GATE_FORWARD_NEW forwards every job.new (recovery
 * after a load), GATE_FORWARD_DEPEND every job.state.depend (configured
 * hold rules).  Otherwise only marked jobs reach Python.
 */
#define GATE_FORWARD_NEW 1
#define GATE_FORWARD_DEPEND 2

/* The state of one plugin instance, hung on its flux_plugin_t.  The
 * statics of this library are shared by every flux_plugin_t the
 * job-manager makes of it, and a load that fails or is refused creates
 * one too (flux_plugin_init runs before the job-manager checks the name
 * and the config): that instance must leave the loaded one's state alone.
 */
struct gate_ctx {
    flux_plugin_t *p;
    int forward;        /* GATE_FORWARD_* */
    int marked;         /* jobs carrying our marker */
    int job_handler;    /* the handler of job topics is registered */
    int python;         /* Python knows this instance (tell it at the end) */
};

#define GATE_CTX "epilog-gate::ctx"

static struct gate_ctx *gate_ctx_get (flux_plugin_t *p)
{
    struct gate_ctx *ctx = flux_plugin_aux_get (p, GATE_CTX);

    if (!ctx)
        errno = EINVAL;
    return ctx;
}

/* Promote libpython to RTLD_GLOBAL.  The job-manager opened us (and so
 * libpython) RTLD_LOCAL, which hides Py* symbols from extension modules
 * such as _cffi_backend or _json imported later.
 */
__attribute__ ((constructor)) static void gate_promote_libpython (void)
{
    Dl_info info;

    if (dladdr ((void *)Py_IsInitialized, &info) && info.dli_fname)
        (void)dlopen (info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
}

static int gate_dirname (char *path, int levels)
{
    while (levels-- > 0) {
        char *slash = strrchr (path, '/');
        if (!slash || slash == path)
            return -1;
        *slash = '\0';
    }
    return 0;
}

/* The package lives in <site>/flux_epilog_gate/jobtap/epilog-gate.so.
 * Fill 'site' with <site>, and 'prog' with the interpreter of the
 * environment that owns it (<prefix>/bin/pythonX.Y, where <site> is
 * <prefix>/lib/pythonX.Y/site-packages), falling back to the
 * interpreter that built the library.
 */
static int gate_locate (char *site, size_t sitesz, char *prog, size_t progsz)
{
    Dl_info info;
    char prefix[PATH_MAX];

    if (!dladdr ((void *)gate_locate, &info) || !info.dli_fname
        || !realpath (info.dli_fname, site)
        || gate_dirname (site, 3) < 0)
        return -1;
    snprintf (prefix, sizeof (prefix), "%s", site);
    if (gate_dirname (prefix, 3) == 0) {
        snprintf (prog, progsz, "%s/bin/python%d.%d",
                  prefix, PY_MAJOR_VERSION, PY_MINOR_VERSION);
        if (access (prog, X_OK) == 0)
            return 0;
    }
    snprintf (prog, progsz, "%s", GATE_BUILD_PYTHON);
    (void)sitesz;
    return 0;
}

static int gate_start_python (flux_t *h, const char *prog)
{
    PyPreConfig preconfig;
    PyConfig config;
    PyStatus status;

    /* Leave the broker's locale and environment alone: by default Python
     * sets LC_CTYPE for the whole process and, in the "C" locale, coerces
     * it to C.UTF-8 and exports LC_CTYPE.  UTF-8 mode gives Python UTF-8
     * without touching either.
     */
    PyPreConfig_InitPythonConfig (&preconfig);
    preconfig.configure_locale = 0;
    preconfig.coerce_c_locale = 0;
    preconfig.coerce_c_locale_warn = 0;
    preconfig.utf8_mode = 1;
    preconfig.use_environment = 0;
    preconfig.parse_argv = 0;
    status = Py_PreInitialize (&preconfig);
    if (PyStatus_Exception (status))
        goto error_preinit;
    PyConfig_InitPythonConfig (&config);
    /* The broker's PATH, PYTHONHOME and PYTHONPATH describe whatever
     * started the instance, not the environment we were installed in.
     */
    config.use_environment = 0;
    config.user_site_directory = 0;
    config.install_signal_handlers = 0;
    config.parse_argv = 0;
    status = PyConfig_SetBytesString (&config, &config.program_name, prog);
    if (PyStatus_Exception (status))
        goto error;
    status = Py_InitializeFromConfig (&config);
    if (PyStatus_Exception (status))
        goto error;
    PyConfig_Clear (&config);
    /* Release the GIL: cffi takes it per call, from whichever thread. */
    (void)PyEval_SaveThread ();
    return 0;
error:
    PyConfig_Clear (&config);
error_preinit:
    flux_log (h, LOG_ERR, "%s: starting Python (%s) failed: %s",
              GATE_NAME, prog, status.err_msg ? status.err_msg : "unknown");
    return -1;
}

/* Put our own site directory and flux-core's bindings first on sys.path,
 * also when another plugin started the interpreter before us.  With
 * flux-python the bindings live in our site directory:
 * GATE_FLUX_PYTHONPATH is then empty.
 */
static int gate_extend_path (flux_t *h, const char *site)
{
    const char *dirs[] = { GATE_FLUX_PYTHONPATH, site };
    PyGILState_STATE gil = PyGILState_Ensure ();
    PyObject *path = PySys_GetObject ("path");
    int rc = -1;

    if (!path || !PyList_Check (path))
        goto done;
    for (size_t i = 0; i < sizeof (dirs) / sizeof (dirs[0]); i++) {
        if (dirs[i][0] == '\0')
            continue;
        PyObject *s = PyUnicode_DecodeFSDefault (dirs[i]);
        int present = s ? PySequence_Contains (path, s) : -1;
        if (present < 0 || (!present && PyList_Insert (path, 0, s) < 0)) {
            Py_XDECREF (s);
            goto done;
        }
        Py_DECREF (s);
    }
    rc = 0;
done:
    if (rc < 0) {
        PyErr_Clear ();
        flux_log (h, LOG_ERR, "%s: cannot extend sys.path", GATE_NAME);
    }
    PyGILState_Release (gil);
    return rc;
}

/* Which of our topics 'topic' is, or -1 if it is one we pass on without
 * looking (see GATE_PLUGIN_TOPICS below for why this is done here).
 */
static int gate_job_topic (const struct gate_ctx *ctx, const char *topic)
{
    if (!strncmp (topic, "job.state.", 10)) {
        const char *state = topic + 10;
        if (!strcmp (state, "cleanup"))
            return GATE_JOB_CLEANUP;
        if (!strcmp (state, "inactive"))
            return GATE_JOB_INACTIVE;
        if (!strcmp (state, "depend") && (ctx->forward & GATE_FORWARD_DEPEND))
            return GATE_JOB_DEPEND;
        if (!strcmp (state, "run"))
            return GATE_JOB_RUN;
        return -1;
    }
    /* Of a subscribed job's events only these move it to its epilog
     * point; the others stay out of Python.
     */
    if (!strcmp (topic, "job.event.finish") || !strcmp (topic, "job.event.free"))
        return GATE_JOB_EVENT;
    if (!strcmp (topic, "job.new") && (ctx->forward & GATE_FORWARD_NEW))
        return GATE_JOB_NEW;
    return -1;
}

/* The handler of job topics is registered only while some job carries
 * our marker or Python asked for every job.state.depend: a plugin with
 * nothing to do then costs the job-manager one pattern match per jobtap
 * call, for its conf.update and plugin.query handler.
 */
static int gate_job_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *data);

static int gate_sync_handlers (struct gate_ctx *ctx)
{
    int want = ctx->marked > 0 || (ctx->forward & GATE_FORWARD_DEPEND);

    if (want == ctx->job_handler)
        return 0;
    if (want) {
        if (flux_plugin_add_handler (ctx->p, GATE_JOB_TOPICS, gate_job_cb,
                                     ctx) < 0)
            return -1;
    }
    else if (flux_plugin_remove_handler (ctx->p, GATE_JOB_TOPICS) < 0)
        return -1;
    ctx->job_handler = want;
    return 0;
}

/* Jobtap callbacks.  A job reaches Python only if it carries our marker
 * (it has holds, or is being recovered), or if Python asked for all
 * job.new or job.state.depend callbacks.
 */
static int gate_job_cb (flux_plugin_t *p,
                        const char *topic,
                        flux_plugin_arg_t *args,
                        void *data)
{
    struct gate_ctx *ctx = data;
    int what = gate_job_topic (ctx, topic);
    flux_jobid_t id;
    int state = 0;
    json_int_t userid = 0;
    int rc;

    /* The last marked job went away (see gate_unmarked). */
    if (ctx->marked == 0 && ctx->job_handler)
        (void)gate_sync_handlers (ctx);
    if (what < 0)
        return 0;
    if (what != GATE_JOB_NEW
        && what != GATE_JOB_DEPEND
        && !flux_jobtap_job_aux_get (p, FLUX_JOBTAP_CURRENT_JOB, GATE_AUX))
        return 0;
    /* Entry to RUN matters only to jobs with prolog holds (gate_want_run):
     * their prolog-start must be posted from this very callback.
     */
    if (what == GATE_JOB_RUN
        && !flux_jobtap_job_aux_get (p, FLUX_JOBTAP_CURRENT_JOB, GATE_RUN_AUX))
        return 0;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:i s:I}",
                                "id", &id,
                                "state", &state,
                                "userid", &userid) < 0)
        return -1;
    if (what == GATE_JOB_EVENT)
        topic += strlen ("job.event.");
    rc = gate_py_job (p, what, topic, id, state, (uint32_t)userid, args);
    /* An inactive job has nothing more to tell us: unmark it now rather
     * than when it is purged, which may be much later.
     */
    if (what == GATE_JOB_INACTIVE) {
        (void)flux_jobtap_job_aux_set (p, FLUX_JOBTAP_CURRENT_JOB, GATE_AUX,
                                       NULL, NULL);
        (void)gate_sync_handlers (ctx);
    }
    return rc;
}

static int gate_plugin_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *data)
{
    if (!strcmp (topic, "conf.update"))
        return gate_py_plugin (p, GATE_PLUGIN_CONF, args);
    if (!strcmp (topic, "plugin.query"))
        return gate_py_plugin (p, GATE_PLUGIN_QUERY, args);
    return 0;
}

/* A description as the spec allows it: 1-64 of [A-Za-z0-9._-]. */
static int gate_valid_description (const char *s)
{
    size_t n;

    for (n = 0; s[n] != '\0'; n++) {
        char c = s[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
              || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return n >= 1 && n <= 64;
}

/* The common, well-formed hold and release requests of the owner skip
 * JSON in Python: unpacked strictly here, they reach Python as plain
 * values.  Anything else (a guest, an unknown key, a bad value) returns
 * 0 and takes the general path, which explains what is wrong.
 */
static int gate_fast_request (const flux_msg_t *msg, int method,
                              uint32_t rolemask)
{
    json_int_t id;
    const char *description;
    json_t *extra = NULL;

    if (!(rolemask & FLUX_ROLE_OWNER)
        || (method != GATE_METHOD_HOLD && method != GATE_METHOD_RELEASE))
        return 0;
    if (flux_request_unpack (msg, NULL, "{s:I s:s s?o !}",
                             "id", &id,
                             "description", &description,
                             method == GATE_METHOD_HOLD ? "timeout" : "status",
                             &extra) < 0
        || id < 0
        || !gate_valid_description (description))
        return 0;
    if (method == GATE_METHOD_HOLD) {
        double timeout = -1.;
        if (extra) {
            if (!json_is_number (extra) || json_number_value (extra) <= 0.)
                return 0;
            timeout = json_number_value (extra);
        }
        gate_py_hold (msg, (flux_jobid_t)id, description, timeout);
    }
    else {
        json_int_t status = 0;
        if (extra) {
            if (!json_is_integer (extra))
                return 0;
            status = json_integer_value (extra);
            if (status < INT_MIN || status > INT_MAX)
                return 0;
        }
        gate_py_release (msg, (flux_jobid_t)id, description, (int)status);
    }
    return 1;
}

/* Requests: decoded here, so Python gets plain values. */
static void gate_request_cb (flux_t *h,
                             flux_msg_handler_t *mh,
                             const flux_msg_t *msg,
                             void *arg)
{
    int method = (int)(intptr_t)arg;
    const char *payload = NULL;
    struct flux_msg_cred cred;

    if (flux_msg_get_cred (msg, &cred) < 0)
        goto error;
    if (gate_fast_request (msg, method, cred.rolemask))
        return;
    if (flux_request_decode (msg, NULL, &payload) < 0)
        goto error;
    gate_py_request (msg, method, cred.userid, cred.rolemask, payload);
    return;
error:
    if (flux_respond_error (h, msg, errno, NULL) < 0)
        flux_log_error (h, "%s: responding", GATE_NAME);
}

/* The job-manager matches every jobtap call of every job against every
 * handler pattern of every plugin with fnmatch(), which in a UTF-8 locale
 * converts both strings to wide characters each time: the handlers a
 * plugin registers are its main cost on jobs it does not care about.  So
 * one pattern stays registered, for conf.update and plugin.query; the
 * one for job.state.* and job.event.* comes and goes (gate_sync_handlers),
 * and the topics are narrowed in C.  Neither pattern may match
 * job.update.*, job.validate and the like: a handler for those would take
 * part in deciding them.
 */
#define GATE_PLUGIN_TOPICS "[cp][ol][nu][fg][.i]*"

/* debug-fault=WHERE in the load options: fail there (tests only). */
static int gate_fault (flux_plugin_t *p, const char *where)
{
    const char *fault = NULL;

    if (flux_plugin_conf_unpack (p, "{s:s}", "debug-fault", &fault) < 0
        || strcmp (fault, where) != 0)
        return 0;
    flux_log (flux_jobtap_get_flux (p), LOG_ERR,
              "%s: debug-fault=%s: injected failure", GATE_NAME, where);
    return 1;
}

/* The instance is destroyed: the load failed or was refused, or the
 * plugin is being removed.  Python decides which.
 */
static void gate_ctx_destroy (void *arg)
{
    struct gate_ctx *ctx = arg;

    if (ctx->python)
        gate_py_unload (ctx->p);
    free (ctx);
}

/* Nothing here may touch what the loaded instance uses: this load may
 * still be refused (a duplicate) or fail (its config).  Python takes over
 * from a loaded or removed instance only on the first conf.update, the
 * last step of a load that can fail.
 */
int flux_plugin_init (flux_plugin_t *p)
{
    static int python_started = 0;
    flux_t *h = flux_jobtap_get_flux (p);
    struct gate_ctx *ctx;
    char site[PATH_MAX];
    char prog[PATH_MAX];

    /* Services are named after the plugin, so name it before Python
     * registers any.
     */
    if (flux_plugin_set_name (p, GATE_NAME) < 0)
        return -1;
    if (!(ctx = calloc (1, sizeof (*ctx))))
        return -1;
    ctx->p = p;
    if (flux_plugin_aux_set (p, GATE_CTX, ctx, gate_ctx_destroy) < 0) {
        free (ctx);
        return -1;
    }
    if (!python_started) {
        if (gate_locate (site, sizeof (site), prog, sizeof (prog)) < 0) {
            flux_log (h, LOG_ERR, "%s: cannot locate own library", GATE_NAME);
            return -1;
        }
        if (!Py_IsInitialized () && gate_start_python (h, prog) < 0)
            return -1;
        if (gate_extend_path (h, site) < 0)
            return -1;
        python_started = 1;
    }
    /* cffi answers 0 if its own start-up failed, so success is 1. */
    if (gate_py_init (p) != 1) {
        flux_log (h, LOG_ERR, "%s: initialization failed", GATE_NAME);
        return -1;
    }
    /* From now on Python is told when this instance goes away. */
    ctx->python = 1;
    if (gate_fault (p, "plugin-init"))
        return -1;
    return flux_plugin_add_handler (p, GATE_PLUGIN_TOPICS, gate_plugin_cb, ctx);
}

/* Helpers called from Python: fixed signatures around variadic calls. */

/* Return 1 if an earlier instance of the plugin ran in this same
 * job-manager (its in-memory holds are still valid), else 0.
 */
static int gate_seen_jobmanager (flux_plugin_t *p)
{
    flux_t *h = flux_jobtap_get_flux (p);

    if (flux_aux_get (h, GATE_JM_AUX))
        return 1;
    (void)flux_aux_set (h, GATE_JM_AUX, (void *)GATE_JM_AUX, NULL);
    return 0;
}

static int gate_set_forward (flux_plugin_t *p, int flags)
{
    struct gate_ctx *ctx = gate_ctx_get (p);

    if (!ctx)
        return -1;
    ctx->forward = flags;
    /* job.new is only wanted while the plugin loads: keep its handler
     * (and the fnmatch it costs every jobtap call) for that time only.
     */
    if (flux_plugin_remove_handler (p, "job.new") < 0)
        return -1;
    if ((flags & GATE_FORWARD_NEW)
        && flux_plugin_add_handler (p, "job.new", gate_job_cb, ctx) < 0)
        return -1;
    return gate_sync_handlers (ctx);
}

/* Destructor of a job's marker (its value is the instance's context):
 * also called when the job is destroyed or the plugin removed, so it must
 * not touch the plugin.  The job-manager destroys the markers of an
 * instance before the instance itself (jobtap_remove) and its jobs before
 * its plugins (job-manager.c), so the context is still there.
 */
static void gate_unmarked (void *arg)
{
    struct gate_ctx *ctx = arg;

    if (ctx->marked > 0)
        ctx->marked--;
}

/* Send the job's callbacks to Python (with 'events', also its
 * job.event.* callbacks), or stop.
 */
static int gate_track (flux_plugin_t *p, flux_jobid_t id, int events)
{
    if (!flux_jobtap_job_aux_get (p, id, GATE_AUX)) {
        struct gate_ctx *ctx = gate_ctx_get (p);
        if (!ctx
            || flux_jobtap_job_aux_set (p, id, GATE_AUX, ctx,
                                        gate_unmarked) < 0)
            return -1;
        ctx->marked++;
        if (gate_sync_handlers (ctx) < 0)
            return -1;
    }
    if (events && flux_jobtap_job_subscribe (p, id) < 0)
        return -1;
    return 0;
}

static void gate_untrack (flux_plugin_t *p, flux_jobid_t id)
{
    struct gate_ctx *ctx = gate_ctx_get (p);

    flux_jobtap_job_unsubscribe (p, id);
    (void)flux_jobtap_job_aux_set (p, id, GATE_AUX, NULL, NULL);
    if (ctx)
        (void)gate_sync_handlers (ctx);
}

/* Post epilog-start, marked as the gate's and with the hold's timeout
 * (timeout < 0: none), so that the eventlog alone tells an active hold
 * after a restart (see holdlog.py).
 */
static int gate_epilog_start (flux_plugin_t *p,
                              flux_jobid_t id,
                              const char *description,
                              double timeout)
{
    if (timeout < 0.)
        return flux_jobtap_event_post_pack (p, id, "epilog-start", "{s:s s:b}",
                                            "description", description,
                                            GATE_MARKER, 1);
    return flux_jobtap_event_post_pack (p, id, "epilog-start", "{s:s s:b s:f}",
                                        "description", description,
                                        GATE_MARKER, 1,
                                        "timeout", timeout);
}

/* Post prolog-start (prolog-finish), marked as the gate's.  The
 * job-manager counts a posted prolog-start exactly as one from
 * flux_jobtap_prolog_start(), which only adds checks the gate makes
 * itself (see prolog.py); that call needs the current job, and a hold
 * may become active from a request.
 */
static int gate_prolog_start (flux_plugin_t *p,
                              flux_jobid_t id,
                              const char *description,
                              double timeout)
{
    if (timeout < 0.)
        return flux_jobtap_event_post_pack (p, id, "prolog-start", "{s:s s:b}",
                                            "description", description,
                                            GATE_MARKER, 1);
    return flux_jobtap_event_post_pack (p, id, "prolog-start", "{s:s s:b s:f}",
                                        "description", description,
                                        GATE_MARKER, 1,
                                        "timeout", timeout);
}

static int gate_prolog_finish (flux_plugin_t *p,
                               flux_jobid_t id,
                               const char *description,
                               int status)
{
    return flux_jobtap_event_post_pack (p, id, "prolog-finish", "{s:s s:i s:b}",
                                        "description", description,
                                        "status", status,
                                        GATE_MARKER, 1);
}

/* Post epilog-finish, marked as the gate's like its epilog-start, so that
 * a replay never takes another plugin's epilog-finish with the same
 * description for the end of a hold.  The job-manager counts it exactly
 * as flux_jobtap_epilog_finish() would: both end in event_job_post_pack()
 * with no flags, and event.c counts an epilog-* event by its name alone,
 * whatever else its context holds.  The one difference, EINVAL outside
 * CLEANUP, cannot arise: the gate finishes only its active holds, and
 * their epilog-start keeps the job in CLEANUP.
 */
static int gate_epilog_finish (flux_plugin_t *p,
                               flux_jobid_t id,
                               const char *description,
                               int status)
{
    return flux_jobtap_event_post_pack (p, id, "epilog-finish", "{s:s s:i s:b}",
                                        "description", description,
                                        "status", status,
                                        GATE_MARKER, 1);
}

/* Forward the (tracked) job's job.state.run to Python too. */
static int gate_want_run (flux_plugin_t *p, flux_jobid_t id)
{
    return flux_jobtap_job_aux_set (p, id, GATE_RUN_AUX, &gate_run_mark, NULL);
}

/* Responses of the hot path, packed here rather than encoded in Python. */
static int gate_respond_hold (flux_plugin_t *p,
                              const flux_msg_t *msg,
                              flux_jobid_t id,
                              const char *description,
                              const char *state)
{
    return flux_respond_pack (flux_jobtap_get_flux (p), msg,
                              "{s:I s:s s:s}",
                              "id", (json_int_t)id,
                              "description", description,
                              "state", state);
}

static int gate_respond_release (flux_plugin_t *p,
                                 const flux_msg_t *msg,
                                 int released,
                                 const char *reason)
{
    if (!reason)
        return flux_respond_pack (flux_jobtap_get_flux (p), msg, "{s:b}",
                                  "released", released);
    return flux_respond_pack (flux_jobtap_get_flux (p), msg, "{s:b s:s}",
                              "released", released,
                              "reason", reason);
}

static int gate_respond_activation (flux_plugin_t *p,
                                    const flux_msg_t *msg,
                                    flux_jobid_t id,
                                    const char *description,
                                    uint32_t userid,
                                    int ran)
{
    return flux_respond_pack (flux_jobtap_get_flux (p), msg,
                              "{s:I s:s s:I s:b}",
                              "id", (json_int_t)id,
                              "description", description,
                              "userid", (json_int_t)userid,
                              "ran", ran);
}

/* A watch response: an activation, or (aborted) the news that the job of
 * an active prolog hold will never start.
 */
static int gate_respond_watch (flux_plugin_t *p,
                               const flux_msg_t *msg,
                               flux_jobid_t id,
                               const char *description,
                               uint32_t userid,
                               int ran,
                               const char *point,
                               int aborted)
{
    flux_t *h = flux_jobtap_get_flux (p);

    if (aborted)
        return flux_respond_pack (h, msg, "{s:I s:s s:I s:b s:s s:b}",
                                  "id", (json_int_t)id,
                                  "description", description,
                                  "userid", (json_int_t)userid,
                                  "ran", ran,
                                  "point", point,
                                  "aborted", 1);
    return flux_respond_pack (h, msg, "{s:I s:s s:I s:b s:s}",
                              "id", (json_int_t)id,
                              "description", description,
                              "userid", (json_int_t)userid,
                              "ran", ran,
                              "point", point);
}

/* Name the holds a job's clean waits on in its user annotations, with a
 * memo event (jobtap offers no other way to annotate a job outside a
 * job.state callback); a NULL text removes the annotation.  Posted here,
 * the memo is ordered before the epilog-finish that may end the job.
 */
static int gate_memo (flux_plugin_t *p, flux_jobid_t id, const char *text)
{
    return flux_jobtap_event_post_pack (p, id, "memo", "{s:s?}",
                                        "epilog_gate", text);
}

static int gate_raise (flux_plugin_t *p,
                flux_jobid_t id,
                const char *type,
                int severity,
                const char *note)
{
    return flux_jobtap_raise_exception (p, id, type, severity, "%s", note);
}

static int gate_job_lookup (flux_plugin_t *p,
                     flux_jobid_t id,
                     int *state,
                     uint32_t *userid)
{
    flux_plugin_arg_t *args;
    json_int_t uid;
    int rc = -1;

    if (!(args = flux_jobtap_job_lookup (p, id)))
        return -1;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:i s:I}",
                                "state", state,
                                "userid", &uid) == 0) {
        *userid = (uint32_t)uid;
        rc = 0;
    }
    flux_plugin_arg_destroy (args);
    return rc;
}

static int gate_error (flux_plugin_t *p, flux_plugin_arg_t *args, const char *text)
{
    return flux_jobtap_error (p, args, "%s", text);
}

static void gate_log (flux_plugin_t *p, int level, const char *text)
{
    flux_log (flux_jobtap_get_flux (p), level, "%s: %s", GATE_NAME, text);
}

/* vi: ts=4 sw=4 expandtab
 */
