/* The C side of a Python jobtap plugin.
 *
 * The job-manager dlopen()s a plugin RTLD_LOCAL from its own thread and
 * calls flux_plugin_init().  The plugin itself is a Python class (see
 * plugin.py); this file, compiled by build.py into NAME.so as the source
 * of a cffi embedding module, only
 *
 *  - makes libpython's symbols visible to extension modules imported later,
 *  - starts the interpreter of the environment the plugin belongs to, once
 *    per broker,
 *  - forwards jobtap callbacks to Python, but only those the plugin asked
 *    for and, for most topics, only for jobs it marked, so that other jobs
 *    never pay for a trip into the interpreter,
 *  - offers a few fixed-signature wrappers around variadic flux calls.
 *
 * build.py puts in front of it the RUNTIME_* defines and the prototypes of
 * the extern "Python" functions (generated from its cdef), and after it
 * the plugin's own C extension, if any (see runtime_request_cb).
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include <flux/core.h>
#include <flux/jobtap.h>

/* How the plugin wants a job topic forwarded (plugin.py declares them). */
enum runtime_topic_mode {
    RUNTIME_TOPIC_MARKED = 0, /* for jobs the plugin marked */
    RUNTIME_TOPIC_ALL = 1,    /* for every job, while switched on */
    RUNTIME_TOPIC_WANTED = 2, /* for marked jobs that want this topic */
    RUNTIME_TOPIC_SWITCHED = 3, /* for marked jobs, while switched on */
};

/* Indexes of the plugin topics forwarded to runtime_py_plugin. */
enum runtime_plugin_topic {
    RUNTIME_PLUGIN_CONF = 0,
    RUNTIME_PLUGIN_QUERY = 1,
};

#define RUNTIME_MAX_TOPICS 32
#define RUNTIME_MARK "jobtap-runtime::mark"
#define RUNTIME_JM_AUX "jobtap-runtime::job-manager::" RUNTIME_NAME
#define RUNTIME_CTX "jobtap-runtime::ctx"
/* The same key in every plugin built on this runtime (no RUNTIME_NAME). */
#define RUNTIME_JM_ID "jobtap-runtime::job-manager-id"
/* Matches job.state.* and job.event.*, nothing else (no other jobtap
 * topic begins "job.s" or "job.e"; see below): the handler's pattern
 * until the plugin sets a narrower one (runtime_set_job_pattern).  Short,
 * because in a UTF-8 locale fnmatch() converts the whole pattern to wide
 * characters at each call: this one costs about 1,320 instructions a call
 * where the spelled out "job.[se][tv][ae][tn][et].*" cost 1,760, and it
 * is matched against every jobtap call of every job while the plugin
 * keeps a job.
 */
#define RUNTIME_JOB_TOPICS "job.[se]*"
/* Matches conf.update and plugin.query. */
#define RUNTIME_PLUGIN_TOPICS "[cp][ol][nu][fg][.i]*"
#define RUNTIME_PASS_AUX "jobtap-runtime::pass::" RUNTIME_NAME

/* The job-manager's methods whose handling calls conf.update (each
 * `flux config reload`) and plugin.query (`flux jobtap query`) on its
 * plugins: the plugin's handler of those topics is registered only
 * while one of them is being handled (see runtime_plugin_topics).
 */
static const char *runtime_callers[] = {
    "job-manager.config-reload",
    "job-manager.jobtap-query",
};
#define RUNTIME_NCALLERS (sizeof (runtime_callers) / sizeof (runtime_callers[0]))

struct runtime_topic {
    char name[64];
    int mode;
    int on;             /* RUNTIME_TOPIC_ALL, _SWITCHED: switched on */
    char require[128];  /* if set, a jobspec key path the job must have */
};

/* One registered RPC method: the argument of its message handler. */
struct runtime_method {
    struct runtime_ctx *ctx;
    int index;
    size_t max_bytes;           /* largest payload taken (0: any) */
    struct runtime_method *next;
};

/* The state of one plugin instance, hung on its flux_plugin_t.  The
 * statics of this library are shared by every flux_plugin_t the
 * job-manager makes of it, and a load that fails or is refused creates
 * one too (flux_plugin_init runs before the job-manager checks the name
 * and the config): that instance must leave the loaded one's state alone.
 */
struct runtime_ctx {
    flux_plugin_t *p;
    void *self;         /* the Python instance (a cffi handle), once made */
    struct runtime_topic topics[RUNTIME_MAX_TOPICS];
    int ntopics;
    int marked;         /* jobs carrying our mark */
    int job_handler;    /* the handler of job.state.* / job.event.* is on */
    char job_pattern[32]; /* its pattern */
    int new_handler;    /* the handler of job.new is on */
    int plugin_handler; /* the handler of conf.update / plugin.query is on */
    flux_msg_handler_t *callers[RUNTIME_NCALLERS];
    struct runtime_pass *passes;
    flux_watcher_t *idle;   /* runtime_plugin_topics (off), deferred */
    struct runtime_method *methods;
    struct runtime_commit *commits; /* KVS commits in flight */
    flux_msg_handler_t *exceptions; /* the instance's job-exception events */
};

/* A request of runtime_callers passed on to the job-manager, while it is
 * being handled: freed with the request.
 */
struct runtime_pass {
    struct runtime_ctx *ctx;    /* NULL once the instance is gone */
    struct runtime_pass *next;
};

/* A job's mark: the job reaches Python (marked), and the WANTED topics it
 * asked for (bit i: topic i).  Kept, unmarked, while it still wants some.
 */
struct runtime_mark {
    struct runtime_ctx *ctx;
    int marked;
    int subscribed;     /* the job-manager counts each subscription */
    int exceptions;     /* its job.event.exception from job-exception */
    unsigned int wants;
};

static struct runtime_ctx *runtime_ctx_get (flux_plugin_t *p)
{
    struct runtime_ctx *ctx = flux_plugin_aux_get (p, RUNTIME_CTX);

    if (!ctx)
        errno = EINVAL;
    return ctx;
}

/* Promote libpython to RTLD_GLOBAL.  The job-manager opened us (and so
 * libpython) RTLD_LOCAL, which hides Py* symbols from extension modules
 * such as _cffi_backend or _json imported later.
 */
__attribute__ ((constructor)) static void runtime_promote_libpython (void)
{
    Dl_info info;

    if (dladdr ((void *)Py_IsInitialized, &info) && info.dli_fname)
        (void)dlopen (info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
}

static int runtime_dirname (char *path, int levels)
{
    while (levels-- > 0) {
        char *slash = strrchr (path, '/');
        if (!slash || slash == path)
            return -1;
        *slash = '\0';
    }
    return 0;
}

/* With RUNTIME_SITE_LEVELS > 0 the library lives that many directories
 * below <site> (<site>/package/jobtap/NAME.so: 3).  Fill 'site' with
 * <site> (empty if none), and 'prog' with the interpreter of the
 * environment that owns it (<prefix>/bin/pythonX.Y, where <site> is
 * <prefix>/lib/pythonX.Y/site-packages), falling back to the interpreter
 * named at build time.
 */
static int runtime_locate (char *site, char *prog, size_t progsz)
{
    Dl_info info;
    char prefix[PATH_MAX];

    site[0] = '\0';
    if (RUNTIME_SITE_LEVELS > 0) {
        if (!dladdr ((void *)runtime_locate, &info) || !info.dli_fname
            || !realpath (info.dli_fname, site)
            || runtime_dirname (site, RUNTIME_SITE_LEVELS) < 0)
            return -1;
        snprintf (prefix, sizeof (prefix), "%s", site);
        if (runtime_dirname (prefix, 3) == 0) {
            snprintf (prog, progsz, "%s/bin/python%d.%d",
                      prefix, PY_MAJOR_VERSION, PY_MINOR_VERSION);
            if (access (prog, X_OK) == 0)
                return 0;
        }
    }
    snprintf (prog, progsz, "%s", RUNTIME_BUILD_PYTHON);
    return 0;
}

static int runtime_start_python (flux_t *h, const char *prog)
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
              RUNTIME_NAME, prog, status.err_msg ? status.err_msg : "unknown");
    return -1;
}

/* Put the plugin's own directories and flux-core's bindings first on
 * sys.path, also when another plugin started the interpreter before us.
 * RUNTIME_PYTHONPATH is a ':'-separated list given at build time (empty
 * words are skipped: with flux-python the bindings live in the site
 * directory).
 */
static int runtime_extend_path (flux_t *h, const char *site)
{
    char dirs[4 * PATH_MAX];
    PyGILState_STATE gil = PyGILState_Ensure ();
    PyObject *path = PySys_GetObject ("path");
    char *saveptr = NULL;
    int rc = -1;

    snprintf (dirs, sizeof (dirs), "%s:%s:%s",
              RUNTIME_FLUX_PYTHONPATH, RUNTIME_PYTHONPATH, site);
    if (!path || !PyList_Check (path))
        goto done;
    for (char *dir = strtok_r (dirs, ":", &saveptr); dir;
         dir = strtok_r (NULL, ":", &saveptr)) {
        PyObject *s = PyUnicode_DecodeFSDefault (dir);
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
        flux_log (h, LOG_ERR, "%s: cannot extend sys.path", RUNTIME_NAME);
    }
    PyGILState_Release (gil);
    return rc;
}

/* The index of the plugin's topic 'topic', or -1. */
static int runtime_topic_index (const struct runtime_ctx *ctx,
                                const char *topic)
{
    for (int i = 0; i < ctx->ntopics; i++) {
        if (!strcmp (topic, ctx->topics[i].name))
            return i;
    }
    return -1;
}

static int runtime_job_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *data);

/* Is some RUNTIME_TOPIC_ALL topic other than job.new switched on? */
static int runtime_all_on (const struct runtime_ctx *ctx)
{
    for (int i = 0; i < ctx->ntopics; i++) {
        if (ctx->topics[i].mode == RUNTIME_TOPIC_ALL && ctx->topics[i].on
            && strcmp (ctx->topics[i].name, "job.new") != 0)
            return 1;
    }
    return 0;
}

/* The job-manager matches every jobtap call of every job against every
 * handler pattern of every plugin with fnmatch(), which in a UTF-8 locale
 * converts both strings to wide characters each time: the handlers a
 * plugin registers are its main cost on jobs it does not care about.  So
 * one pattern stays registered, for conf.update and plugin.query; the one
 * for job.state.* and job.event.* is registered only while some job is
 * marked or some topic is forwarded for every job, and the topics are
 * narrowed in C.  Neither pattern may match job.update.*, job.validate
 * and the like: a handler for those would take part in deciding them.
 */
static int runtime_sync_handlers (struct runtime_ctx *ctx)
{
    int want = ctx->marked > 0 || runtime_all_on (ctx);

    if (want == ctx->job_handler)
        return 0;
    if (want) {
        if (flux_plugin_add_handler (ctx->p, ctx->job_pattern,
                                     runtime_job_cb, ctx) < 0)
            return -1;
    }
    else if (flux_plugin_remove_handler (ctx->p, ctx->job_pattern) < 0)
        return -1;
    ctx->job_handler = want;
    return 0;
}

/* Should the current job's call of topic 'i' reach Python? */
static int runtime_wanted (flux_plugin_t *p,
                           const struct runtime_topic *t,
                           int i,
                           struct runtime_mark **markp)
{
    struct runtime_mark *mark;

    if (t->mode == RUNTIME_TOPIC_ALL)
        return t->on;
    /* Off, the topic costs a marked job nothing but this test. */
    if (t->mode == RUNTIME_TOPIC_SWITCHED && !t->on)
        return 0;
    mark = flux_jobtap_job_aux_get (p, FLUX_JOBTAP_CURRENT_JOB, RUNTIME_MARK);
    *markp = mark;
    if (!mark || !mark->marked)
        return 0;
    return t->mode != RUNTIME_TOPIC_WANTED || (mark->wants & (1u << i));
}

/* The value at dot-separated key path 'path' under 'o' (borrowed), or
 * NULL if there is none.
 */
static json_t *runtime_walk (json_t *o, const char *path)
{
    char key[256];
    char *saveptr = NULL;

    if (strlen (path) >= sizeof (key))
        return NULL;
    snprintf (key, sizeof (key), "%s", path);
    for (char *k = strtok_r (key, ".", &saveptr); k && o;
         k = strtok_r (NULL, ".", &saveptr))
        o = json_is_object (o) ? json_object_get (o, k) : NULL;
    return o;
}

/* Does the job of 'args' have jobspec key 'path' (dot-separated)?  A
 * plugin that cares only for some jobs (say, those asking for a burst
 * buffer) names the key, and the others never enter Python.
 */
static int runtime_has_key (flux_plugin_arg_t *args, const char *path)
{
    json_t *o = NULL;

    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:o}",
                                "jobspec", &o) < 0)
        return 0;
    return runtime_walk (o, path) != NULL;
}

/* The value at key path 'path' of the IN arguments 'args' as JSON text in
 * '*text' (runtime_free() it), or NULL if there is none.  Only that value
 * is encoded: what else the job holds (a user's attributes, however
 * deep) never reaches Python's decoder.
 */
int runtime_arg_value (flux_plugin_arg_t *args, const char *path, char **text)
{
    json_t *root = NULL;
    json_t *o;

    *text = NULL;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "o", &root) < 0)
        return -1;
    if (strlen (path) >= 256) {
        errno = EINVAL;
        return -1;
    }
    if (!(o = runtime_walk (root, path)))
        return 0;
    if (!(*text = json_dumps (o, JSON_COMPACT | JSON_ENCODE_ANY))) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* runtime_arg_value() of active job 'id' (looked up by id). */
int runtime_job_value (flux_plugin_t *p, flux_jobid_t id, const char *path,
                       char **text)
{
    flux_plugin_arg_t *args;
    int rc;

    *text = NULL;
    if (!(args = flux_jobtap_job_lookup (p, id)))
        return -1;
    rc = runtime_arg_value (args, path, text);
    flux_plugin_arg_destroy (args);
    return rc;
}

void runtime_free (void *ptr)
{
    free (ptr);
}

static void runtime_unmark_current (flux_plugin_t *p, struct runtime_ctx *ctx,
                                    struct runtime_mark *mark)
{
    if (mark && mark->marked) {
        mark->marked = 0;
        ctx->marked--;
    }
    (void)runtime_sync_handlers (ctx);
}

/* Jobtap callbacks of jobs: only the plugin's topics, and of those only
 * the ones its marks or switches ask for, reach Python.
 */
static int runtime_job_cb (flux_plugin_t *p,
                           const char *topic,
                           flux_plugin_arg_t *args,
                           void *data)
{
    struct runtime_ctx *ctx = data;
    int i = runtime_topic_index (ctx, topic);
    struct runtime_mark *mark = NULL;
    flux_jobid_t id;
    int state = 0;
    json_int_t userid = 0;
    int rc;

    /* The last marked job went away (see runtime_unmarked). */
    if (ctx->marked == 0 && ctx->job_handler)
        (void)runtime_sync_handlers (ctx);
    if (i < 0 || !runtime_wanted (p, &ctx->topics[i], i, &mark))
        return 0;
    if (ctx->topics[i].require[0]
        && !runtime_has_key (args, ctx->topics[i].require))
        return 0;
    if (flux_plugin_arg_unpack (args,
                                FLUX_PLUGIN_ARG_IN,
                                "{s:I s:i s:I}",
                                "id", &id,
                                "state", &state,
                                "userid", &userid) < 0)
        return -1;
    rc = runtime_py_job (ctx->self, i, id, state, (uint32_t)userid, args);
    /* An inactive job has nothing more to tell us: unmark it now rather
     * than when it is purged, which may be much later.
     */
    if (!strcmp (topic, "job.state.inactive") && mark)
        runtime_unmark_current (p, ctx, mark);
    return rc;
}

static int runtime_plugin_cb (flux_plugin_t *p,
                              const char *topic,
                              flux_plugin_arg_t *args,
                              void *data);
static void runtime_caller_cb (flux_t *h,
                               flux_msg_handler_t *mh,
                               const flux_msg_t *msg,
                               void *arg);

/* Every handler of a plugin costs each jobtap call of each job an
 * fnmatch() (over 1,000 instructions in a UTF-8 locale), even of jobs the
 * plugin never hears of: together that was 2% of a job's cost in the
 * job-manager.  conf.update and plugin.query come only while the
 * job-manager handles one of runtime_callers (and at load, when the
 * handler registered by flux_plugin_init serves), so their handler is
 * registered only then: the plugin shadows those methods with handlers
 * of its own (a later handler of a method takes precedence), and one
 * that fires puts the topics' handler back, steps aside and hands the
 * request back to the job-manager at the head of the queue.  When that
 * request is freed, handled, the topics' handler goes again.
 *
 * 'on' registers the handler; otherwise it is removed, but only once the
 * shadowing handlers are all in place: whatever fails, the plugin still
 * hears of every conf.update and plugin.query.  Going off is deferred to
 * the reactor (runtime_idle_cb): a plugin loaded from the config is
 * loaded before the job-manager registers its own methods, and must
 * shadow them only once they are there.
 */
static int runtime_plugin_topics (struct runtime_ctx *ctx, int on)
{
    flux_t *h = flux_jobtap_get_flux (ctx->p);

    if (on) {
        if (!ctx->plugin_handler
            && flux_plugin_add_handler (ctx->p, RUNTIME_PLUGIN_TOPICS,
                                        runtime_plugin_cb, ctx) < 0)
            return -1;
        ctx->plugin_handler = 1;
        return 0;
    }
    for (size_t i = 0; i < RUNTIME_NCALLERS; i++) {
        struct flux_match match = FLUX_MATCH_REQUEST;

        if (ctx->callers[i])
            continue;
        match.topic_glob = (char *)runtime_callers[i];
        if (!(ctx->callers[i] = flux_msg_handler_create (h, match,
                                                         runtime_caller_cb,
                                                         ctx)))
            return -1;
        flux_msg_handler_start (ctx->callers[i]);
    }
    if (ctx->plugin_handler
        && flux_plugin_remove_handler (ctx->p, RUNTIME_PLUGIN_TOPICS) < 0)
        return -1;
    ctx->plugin_handler = 0;
    return 0;
}

static void runtime_pass_unlink (struct runtime_pass *pass)
{
    struct runtime_pass **pp = &pass->ctx->passes;

    while (*pp && *pp != pass)
        pp = &(*pp)->next;
    if (*pp)
        *pp = pass->next;
    pass->ctx = NULL;
}

static void runtime_idle_cb (flux_reactor_t *r,
                             flux_watcher_t *w,
                             int revents,
                             void *arg)
{
    struct runtime_ctx *ctx = arg;

    if (!ctx->passes && runtime_plugin_topics (ctx, 0) < 0)
        flux_log_error (flux_jobtap_get_flux (ctx->p),
                        "%s: shadowing conf.update callers", RUNTIME_NAME);
}

/* The job-manager is done with a request passed on to it. */
static void runtime_pass_done (void *arg)
{
    struct runtime_pass *pass = arg;
    struct runtime_ctx *ctx = pass->ctx;

    if (ctx) {
        runtime_pass_unlink (pass);
        flux_watcher_start (ctx->idle);
    }
    free (pass);
}

static void runtime_caller_cb (flux_t *h,
                               flux_msg_handler_t *mh,
                               const flux_msg_t *msg,
                               void *arg)
{
    struct runtime_ctx *ctx = arg;
    struct runtime_pass *pass;

    for (size_t i = 0; i < RUNTIME_NCALLERS; i++) {
        if (ctx->callers[i] == mh)
            ctx->callers[i] = NULL;
    }
    flux_msg_handler_destroy (mh);
    if (runtime_plugin_topics (ctx, 1) < 0)
        flux_log_error (h, "%s: registering conf.update", RUNTIME_NAME);
    if ((pass = calloc (1, sizeof (*pass)))) {
        pass->ctx = ctx;
        pass->next = ctx->passes;
        ctx->passes = pass;
        if (flux_msg_aux_set (msg, RUNTIME_PASS_AUX, pass,
                              runtime_pass_done) < 0) {
            runtime_pass_unlink (pass);
            free (pass);
        }
    }
    if (flux_requeue (h, msg, FLUX_RQ_HEAD) < 0
        && flux_respond_error (h, msg, errno, "cannot requeue request") < 0)
        flux_log_error (h, "%s: responding", RUNTIME_NAME);
}

static int runtime_plugin_cb (flux_plugin_t *p,
                              const char *topic,
                              flux_plugin_arg_t *args,
                              void *data)
{
    struct runtime_ctx *ctx = data;
    int rc = 0;

    if (!strcmp (topic, "conf.update"))
        rc = runtime_py_plugin (ctx->self, RUNTIME_PLUGIN_CONF, args);
    else if (!strcmp (topic, "plugin.query"))
        rc = runtime_py_plugin (ctx->self, RUNTIME_PLUGIN_QUERY, args);
    /* At load, or a request passed on earlier ended before reaching the
     * plugin.  flux_plugin_call() no longer uses the handler once it
     * calls it, so it may go.
     */
    if (!ctx->passes)
        flux_watcher_start (ctx->idle);
    return rc;
}

/* Answer a request whose payload is not a string ending in NUL (sent
 * raw): EPROTO naming its method, as Python names a payload it cannot
 * read.
 */
static void runtime_respond_undecodable (flux_t *h, const flux_msg_t *msg)
{
    const char *topic = NULL;
    const char *method;
    char text[128];

    if (flux_msg_get_topic (msg, &topic) < 0 || !topic)
        topic = "request";
    method = strrchr (topic, '.');
    snprintf (text, sizeof (text),
              "%s: malformed payload: not a string ending in NUL",
              method ? method + 1 : topic);
    if (flux_respond_error (h, msg, EPROTO, text) < 0)
        flux_log_error (h, "%s: responding", RUNTIME_NAME);
}

/* Answer a request whose payload is larger than its method takes
 * (max_bytes): EMSGSIZE naming the method and the limit.  A request a
 * plugin keeps (a stream's, one waiting on a commit) keeps its payload
 * in the broker: the bound is what one request can make the broker
 * hold.  Returns 1 if the request was answered so.
 */
int runtime_request_oversize (flux_t *h, const flux_msg_t *msg, void *arg)
{
    struct runtime_method *m = arg;
    const void *data = NULL;
    size_t size = 0;
    const char *topic = NULL;
    const char *method;
    char text[160];

    if (m->max_bytes == 0
        || flux_msg_get_payload (msg, &data, &size) < 0
        || size <= m->max_bytes)
        return 0;
    if (flux_msg_get_topic (msg, &topic) < 0 || !topic)
        topic = "request";
    method = strrchr (topic, '.');
    snprintf (text, sizeof (text),
              "%s: a payload of %zu bytes is more than the limit of %zu",
              method ? method + 1 : topic, size, m->max_bytes);
    if (flux_respond_error (h, msg, EMSGSIZE, text) < 0)
        flux_log_error (h, "%s: responding", RUNTIME_NAME);
    return 1;
}

/* The message handler of every RPC method, unless the plugin's C
 * extension registers its own (which may end in this one): the request
 * is decoded here, so Python gets plain values.
 */
void runtime_request_cb (flux_t *h,
                         flux_msg_handler_t *mh,
                         const flux_msg_t *msg,
                         void *arg)
{
    struct runtime_method *m = arg;
    const char *payload = NULL;
    struct flux_msg_cred cred;

    if (flux_msg_get_cred (msg, &cred) < 0) {
        if (flux_respond_error (h, msg, errno, NULL) < 0)
            flux_log_error (h, "%s: responding", RUNTIME_NAME);
        return;
    }
    if (runtime_request_oversize (h, msg, m))
        return;
    if (flux_request_decode (msg, NULL, &payload) < 0) {
        runtime_respond_undecodable (h, msg);
        return;
    }
    runtime_py_request (m->ctx->self, msg, m->index, cred.userid,
                        cred.rolemask, payload);
}

/* For a C extension's message handler: the Python instance of the plugin
 * its method belongs to.
 */
static inline void *runtime_method_self (void *arg)
{
    return ((struct runtime_method *)arg)->ctx->self;
}

/* KVS commits for Python.  A commit made through the bindings costs a
 * Future object, a closure and a trip through the bindings' callback
 * machinery each time; a plugin that commits on its hot path (a durable
 * record per request) makes the transaction here and hears back through
 * one extern "Python" function, runtime_py_commit, with the number it
 * gave the commit.  The commits in flight hang on the instance: when it
 * is destroyed their futures are destroyed with it (the KVS carries a
 * commit already sent out all the same), so no answer ever reaches an
 * instance that is gone.
 */
/* The instance whose Python unload is running: its state is off its
 * flux_plugin_t already (runtime_ctx_get fails), but what Python commits
 * then (the records it still had queued) must still go out.
 */
static struct runtime_ctx *runtime_unloading;

struct runtime_commit {
    struct runtime_ctx *ctx;
    flux_future_t *f;
    int64_t cookie;
    struct runtime_commit *prev;
    struct runtime_commit *next;
};

static void runtime_commit_unlink (struct runtime_commit *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->ctx->commits = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void runtime_commit_destroy (struct runtime_commit *c)
{
    if (c) {
        int saved_errno = errno;
        flux_future_destroy (c->f);
        free (c);
        errno = saved_errno;
    }
}

static void runtime_commit_cb (flux_future_t *f, void *arg)
{
    struct runtime_commit *c = arg;
    struct runtime_ctx *ctx = c->ctx;
    int errnum = 0;
    const char *errstr = NULL;

    if (flux_future_get (f, NULL) < 0) {
        errnum = errno ? errno : EIO;
        errstr = flux_future_error_string (f);
    }
    /* Off the list first: whatever Python does, this commit is over. */
    runtime_commit_unlink (c);
    if (ctx->self)
        runtime_py_commit (ctx->self, c->cookie, errnum, errstr);
    runtime_commit_destroy (c);
}

/* A build for the benchmark only (bench/instructions.py's dws-nolog)
 * defines RUNTIME_BENCH_NO_RECORD: no commit is sent, each is answered
 * at once as if it succeeded, so that what a plugin's durable records
 * cost can be told from the rest (the facade's bench_no_record tells
 * Python, whose records are then not even made).  Never in an installed
 * plugin.
 */
#ifndef RUNTIME_BENCH_NO_RECORD
#define RUNTIME_BENCH_NO_RECORD 0
#endif

/* Append to BUF (its end at *AT, room checked by the caller: six bytes a
 * character at most) the characters of S as the inside of a JSON string.
 * Bytes past ASCII go as they are: UTF-8 is JSON's, and the KVS refuses
 * what is not.
 */
static void runtime_json_chars (char *buf, size_t *at, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20)
            *at += sprintf (buf + *at, "\\u%04x", c);
        else {
            if (c == '"' || c == '\\')
                buf[(*at)++] = '\\';
            buf[(*at)++] = (char)c;
        }
    }
}

/* Append to BUF at *AT the RFC 4648 base64 of the LEN bytes of DATA. */
static void runtime_base64 (char *buf, size_t *at, const char *data, size_t len)
{
    static const char digits[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *in = (const unsigned char *)data;
    char *out = buf + *at;
    size_t i;

    for (i = 0; i + 2 < len; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        *out++ = digits[v >> 18];
        *out++ = digits[(v >> 12) & 63];
        *out++ = digits[(v >> 6) & 63];
        *out++ = digits[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)in[i + 1] << 8;
        *out++ = digits[v >> 18];
        *out++ = digits[(v >> 12) & 63];
        *out++ = i + 1 < len ? digits[(v >> 6) & 63] : '=';
        *out++ = '=';
    }
    *at = out - buf;
}

/* The payload of a kvs.commit request that puts VALUE at KEY (RFC 11: a
 * "val" tree object of VALUE in base64), as flux_kvs_commit() would send
 * it for a transaction of that one put, but written here directly.  A
 * plugin with a durable log commits on its hot path, and
 * flux_kvs_commit() builds those few hundred bytes as a JSON object, then
 * encodes them character by character: that costs the job-manager's
 * thread several times what the record does.  NULL (errno set) on
 * failure; the caller frees it.
 */
static char *runtime_commit_payload (const char *key, const char *value,
                                     int put_flags, int flags)
{
    const char *ns = getenv ("FLUX_KVS_NAMESPACE");
    size_t vlen = strlen (value);
    /* The fixed text is under 192 bytes with both flags. */
    size_t room = 192 + 6 * strlen (key) + 6 * (ns ? strlen (ns) : 8)
                  + 4 * (vlen / 3 + 1);
    size_t at = 0;
    char *buf;

    if (!ns)
        ns = "primary";
    if (!(buf = malloc (room)))
        return NULL;
    at += sprintf (buf, "{\"namespace\":\"");
    runtime_json_chars (buf, &at, ns);
    at += sprintf (buf + at, "\",\"flags\":%d,\"ops\":[{\"key\":\"", flags);
    runtime_json_chars (buf, &at, key);
    at += sprintf (buf + at,
                   "\",\"flags\":%d,\"dirent\":"
                   "{\"ver\":1,\"type\":\"val\",\"data\":\"",
                   put_flags);
    runtime_base64 (buf, &at, value, vlen);
    strcpy (buf + at, "\"}}]}");
    return buf;
}

static flux_future_t *runtime_commit_send (flux_t *h, const char *key,
                                           const char *value, int put_flags,
                                           int flags)
{
    flux_future_t *f;
    char *payload;

    if (!RUNTIME_BENCH_NO_RECORD) {
        if (!*key || !(payload = runtime_commit_payload (key, value,
                                                         put_flags, flags))) {
            if (!*key)
                errno = EINVAL;
            return NULL;
        }
        f = flux_rpc (h, "kvs.commit", payload, FLUX_NODEID_ANY, 0);
        free (payload);
        return f;
    }
    if ((f = flux_future_create (NULL, NULL))) {
        flux_future_set_flux (f, h);
        flux_future_fulfill (f, NULL, NULL);
    }
    return f;
}

/* Put (append: append) 'value' at KVS 'key' in one commit (sync: with
 * FLUX_KVS_SYNC) and, once it is answered, call runtime_py_commit with
 * 'cookie' and 0 or the errno of its failure.  -1 (errno set) if the
 * commit could not be sent: then nothing is called back.
 */
int runtime_kvs_commit (flux_plugin_t *p, const char *key, const char *value,
                        int append, int sync, int64_t cookie)
{
    struct runtime_ctx *ctx = flux_plugin_aux_get (p, RUNTIME_CTX);
    struct runtime_commit *c = NULL;

    if (!ctx && runtime_unloading && runtime_unloading->p == p)
        ctx = runtime_unloading;
    if (!ctx) {
        errno = EINVAL;
        return -1;
    }
    if (!(c = calloc (1, sizeof (*c)))
        || !(c->f = runtime_commit_send (flux_jobtap_get_flux (p),
                                         key,
                                         value,
                                         append ? FLUX_KVS_APPEND : 0,
                                         sync ? FLUX_KVS_SYNC : 0))
        || flux_future_then (c->f, -1., runtime_commit_cb, c) < 0)
        goto error;
    c->ctx = ctx;
    c->cookie = cookie;
    c->next = ctx->commits;
    if (c->next)
        c->next->prev = c;
    ctx->commits = c;
    return 0;
error:
    runtime_commit_destroy (c);
    return -1;
}

/* debug-fault=plugin-init in the load options: fail there (tests only). */
static int runtime_fault (flux_plugin_t *p, const char *where)
{
    const char *fault = NULL;

    if (flux_plugin_conf_unpack (p, "{s:s}", "debug-fault", &fault) < 0
        || strcmp (fault, where) != 0)
        return 0;
    flux_log (flux_jobtap_get_flux (p), LOG_ERR,
              "%s: debug-fault=%s: injected failure", RUNTIME_NAME, where);
    return 1;
}

/* The instance is destroyed: the load failed or was refused, or the
 * plugin is being removed.  Python decides which.
 */
static void runtime_ctx_destroy (void *arg)
{
    struct runtime_ctx *ctx = arg;

    if (ctx->self) {
        runtime_unloading = ctx;
        runtime_py_unload (ctx->self);
        runtime_unloading = NULL;
    }
    for (size_t i = 0; i < RUNTIME_NCALLERS; i++)
        flux_msg_handler_destroy (ctx->callers[i]);
    /* The broker's subscription stays: another plugin of this
     * job-manager may have one to the same topic.
     */
    flux_msg_handler_destroy (ctx->exceptions);
    flux_watcher_destroy (ctx->idle);
    while (ctx->passes)
        runtime_pass_unlink (ctx->passes);
    while (ctx->methods) {
        struct runtime_method *next = ctx->methods->next;
        free (ctx->methods);
        ctx->methods = next;
    }
    /* After Python's unload, which may still have sent some. */
    while (ctx->commits) {
        struct runtime_commit *c = ctx->commits;
        runtime_commit_unlink (c);
        runtime_commit_destroy (c);
    }
    free (ctx);
}

/* Nothing here may touch what a loaded instance uses: this load may still
 * be refused (a duplicate) or fail (its config).
 */
int flux_plugin_init (flux_plugin_t *p)
{
    static int python_started = 0;
    flux_t *h = flux_jobtap_get_flux (p);
    struct runtime_ctx *ctx;
    char site[PATH_MAX];
    char prog[PATH_MAX];

    /* Services are named after the plugin, so name it before Python
     * registers any.
     */
    if (flux_plugin_set_name (p, RUNTIME_NAME) < 0)
        return -1;
    if (!(ctx = calloc (1, sizeof (*ctx))))
        return -1;
    ctx->p = p;
    snprintf (ctx->job_pattern, sizeof (ctx->job_pattern), "%s",
              RUNTIME_JOB_TOPICS);
    if (flux_plugin_aux_set (p, RUNTIME_CTX, ctx, runtime_ctx_destroy) < 0) {
        free (ctx);
        return -1;
    }
    if (!python_started) {
        if (runtime_locate (site, prog, sizeof (prog)) < 0) {
            flux_log (h, LOG_ERR, "%s: cannot locate own library",
                      RUNTIME_NAME);
            return -1;
        }
        if (!Py_IsInitialized () && runtime_start_python (h, prog) < 0)
            return -1;
        if (runtime_extend_path (h, site) < 0)
            return -1;
        python_started = 1;
    }
    /* cffi answers NULL if its own start-up failed.  From now on Python is
     * told when this instance goes away.
     */
    if (!(ctx->self = runtime_py_init (p))) {
        flux_log (h, LOG_ERR, "%s: initialization failed", RUNTIME_NAME);
        return -1;
    }
    if (runtime_fault (p, "plugin-init"))
        return -1;
    if (!(ctx->idle = flux_timer_watcher_create (flux_get_reactor (h), 0., 0.,
                                                 runtime_idle_cb, ctx)))
        return -1;
    /* For the conf.update of the load. */
    return runtime_plugin_topics (ctx, 1);
}

/* Helpers called from Python: fixed signatures around variadic calls. */

const char *runtime_name (void)
{
    return RUNTIME_NAME;
}

/* Return 1 if an earlier instance of this plugin ran in this same
 * job-manager, else 0 (and remember that one has).
 */
int runtime_seen_jobmanager (flux_plugin_t *p)
{
    flux_t *h = flux_jobtap_get_flux (p);

    if (flux_aux_get (h, RUNTIME_JM_AUX))
        return 1;
    (void)flux_aux_set (h, RUNTIME_JM_AUX, (void *)RUNTIME_JM_AUX, NULL);
    return 0;
}

/* A number naming the job-manager 'p' is loaded into: the same for every
 * plugin built on this runtime (so that plugins can share state kept per
 * job-manager), and another one for each new job-manager, also one that a
 * module reload makes in the same process.  The value lives on the
 * job-manager's handle and goes with it; it is the monotonic clock when
 * first asked for (no two job-managers start in the same nanosecond).
 * 0 on failure.
 */
uint64_t runtime_jobmanager_id (flux_plugin_t *p)
{
    flux_t *h = flux_jobtap_get_flux (p);
    uint64_t *id;
    struct timespec ts;

    if (!h)
        return 0;
    if ((id = flux_aux_get (h, RUNTIME_JM_ID)))
        return *id;
    if (!(id = malloc (sizeof (*id))))
        return 0;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    *id = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1;
    if (flux_aux_set (h, RUNTIME_JM_ID, id, free) < 0) {
        free (id);
        return 0;
    }
    return *id;
}

/* Declare the plugin's job topic number ctx->ntopics. */
int runtime_add_topic (flux_plugin_t *p, const char *name, int mode)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);

    if (!ctx)
        return -1;
    if (ctx->ntopics == RUNTIME_MAX_TOPICS
        || strlen (name) >= sizeof (ctx->topics[0].name)) {
        errno = EOVERFLOW;
        return -1;
    }
    snprintf (ctx->topics[ctx->ntopics].name, sizeof (ctx->topics[0].name),
              "%s", name);
    ctx->topics[ctx->ntopics].mode = mode;
    ctx->topics[ctx->ntopics].on = 0;
    ctx->topics[ctx->ntopics].require[0] = '\0';
    return ctx->ntopics++;
}

/* The pattern of the handler of the plugin's job.state.* and job.event.*
 * topics, narrower than RUNTIME_JOB_TOPICS: a job.state.* topic that no
 * other plugin handles is called by the job-manager, for every job, only
 * because some handler matches it, and that call (its arguments packed,
 * every handler of every plugin matched) costs far more than a longer
 * pattern does.  Only while the handler is off: the pattern it was added
 * with is the one it is removed with.
 */
int runtime_set_job_pattern (flux_plugin_t *p, const char *pattern)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);

    if (!ctx)
        return -1;
    if (ctx->job_handler || strlen (pattern) >= sizeof (ctx->job_pattern)) {
        errno = EINVAL;
        return -1;
    }
    snprintf (ctx->job_pattern, sizeof (ctx->job_pattern), "%s", pattern);
    return 0;
}

/* Forward topic 'i' only for jobs whose jobspec has key 'path'. */
int runtime_topic_require (flux_plugin_t *p, int i, const char *path)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);

    if (!ctx)
        return -1;
    if (i < 0 || i >= ctx->ntopics
        || strlen (path) >= sizeof (ctx->topics[0].require)) {
        errno = EINVAL;
        return -1;
    }
    snprintf (ctx->topics[i].require, sizeof (ctx->topics[0].require),
              "%s", path);
    return 0;
}

/* Switch forwarding of RUNTIME_TOPIC_ALL topic 'i' to every job (of
 * RUNTIME_TOPIC_SWITCHED topic 'i' to marked jobs) on or off.  job.new has
 * a handler of its own, kept (with the fnmatch it costs every jobtap
 * call) only while it is on.
 */
int runtime_forward (flux_plugin_t *p, int i, int on)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);

    if (!ctx)
        return -1;
    if (i < 0 || i >= ctx->ntopics
        || (ctx->topics[i].mode != RUNTIME_TOPIC_ALL
            && ctx->topics[i].mode != RUNTIME_TOPIC_SWITCHED)) {
        errno = EINVAL;
        return -1;
    }
    ctx->topics[i].on = on ? 1 : 0;
    if (!strcmp (ctx->topics[i].name, "job.new") && on != ctx->new_handler) {
        if (on) {
            if (flux_plugin_add_handler (p, "job.new", runtime_job_cb, ctx) < 0)
                return -1;
        }
        else if (flux_plugin_remove_handler (p, "job.new") < 0)
            return -1;
        ctx->new_handler = on ? 1 : 0;
    }
    return runtime_sync_handlers (ctx);
}

/* Destructor of a job's mark: also called when the job is destroyed or
 * the plugin removed, so it must not touch the plugin.  The job-manager
 * destroys the marks of an instance before the instance itself
 * (jobtap_remove) and its jobs before its plugins (job-manager.c), so the
 * context is still there.
 */
static void runtime_unmarked (void *arg)
{
    struct runtime_mark *mark = arg;

    if (mark->marked && mark->ctx->marked > 0)
        mark->ctx->marked--;
    free (mark);
}

static struct runtime_mark *runtime_mark_get (flux_plugin_t *p,
                                              flux_jobid_t id)
{
    struct runtime_mark *mark = flux_jobtap_job_aux_get (p, id, RUNTIME_MARK);
    struct runtime_ctx *ctx;

    if (mark)
        return mark;
    if (!(ctx = runtime_ctx_get (p)) || !(mark = calloc (1, sizeof (*mark))))
        return NULL;
    mark->ctx = ctx;
    if (flux_jobtap_job_aux_set (p, id, RUNTIME_MARK, mark,
                                 runtime_unmarked) < 0) {
        free (mark);
        return NULL;
    }
    return mark;
}

/* Send the job's callbacks of MARKED topics to Python (with 'events',
 * subscribe to its job.event.* callbacks too).
 */
int runtime_mark (flux_plugin_t *p, flux_jobid_t id, int events)
{
    struct runtime_mark *mark = runtime_mark_get (p, id);

    if (!mark)
        return -1;
    if (!mark->marked) {
        mark->marked = 1;
        mark->ctx->marked++;
        if (runtime_sync_handlers (mark->ctx) < 0)
            return -1;
    }
    /* A second subscription would call each job.event.* twice. */
    if (events && !mark->subscribed) {
        if (flux_jobtap_job_subscribe (p, id) < 0)
            return -1;
        mark->subscribed = 1;
    }
    return 0;
}

void runtime_unmark (flux_plugin_t *p, flux_jobid_t id)
{
    struct runtime_mark *mark = flux_jobtap_job_aux_get (p, id, RUNTIME_MARK);
    struct runtime_ctx *ctx = runtime_ctx_get (p);

    flux_jobtap_job_unsubscribe (p, id);
    if (mark) {
        mark->subscribed = 0;
        mark->exceptions = 0;
    }
    if (mark && mark->marked) {
        mark->marked = 0;
        mark->ctx->marked--;
    }
    if (ctx)
        (void)runtime_sync_handlers (ctx);
}

/* Stop the job's job.event.* calls (runtime_mark with 'events' asks for
 * them again); its other calls still come while it is marked.
 */
void runtime_unsubscribe (flux_plugin_t *p, flux_jobid_t id)
{
    struct runtime_mark *mark = flux_jobtap_job_aux_get (p, id, RUNTIME_MARK);

    if (mark && mark->subscribed) {
        flux_jobtap_job_unsubscribe (p, id);
        mark->subscribed = 0;
    }
}

/* A job-exception event of the instance: the job-manager publishes one
 * for every exception raised by a request or a plugin ({id, type,
 * severity}, no note).  A marked job watched for its exceptions gets
 * its job.event.exception from here, as if subscribed (unless it is:
 * then the call came already): the entry's context has no note.  An
 * event for a job whose eventlog has no exception is not the
 * job-manager's (anyone with the owner's role may publish one) and is
 * dropped.
 */
static void runtime_exception_cb (flux_t *h,
                                  flux_msg_handler_t *mh,
                                  const flux_msg_t *msg,
                                  void *arg)
{
    struct runtime_ctx *ctx = arg;
    flux_plugin_t *p = ctx->p;
    struct runtime_mark *mark;
    flux_plugin_arg_t *args;
    flux_jobid_t id;
    const char *type;
    int severity, state, i;
    json_int_t userid;

    if (flux_event_unpack (msg, NULL, "{s:I s:s s:i}",
                           "id", &id,
                           "type", &type,
                           "severity", &severity) < 0
        || !(mark = flux_jobtap_job_aux_get (p, id, RUNTIME_MARK))
        || !mark->marked || !mark->exceptions || mark->subscribed
        || (i = runtime_topic_index (ctx, "job.event.exception")) < 0
        || (ctx->topics[i].mode == RUNTIME_TOPIC_SWITCHED
            && !ctx->topics[i].on)
        || !ctx->self
        || flux_jobtap_job_event_posted (p, id, "exception") <= 0)
        return;
    if (!(args = flux_jobtap_job_lookup (p, id)))
        return;
    if (flux_plugin_arg_pack (args,
                              FLUX_PLUGIN_ARG_IN,
                              "{s:{s:s s:{s:s s:i}}}",
                              "entry",
                                "name", "exception",
                                "context",
                                  "type", type,
                                  "severity", severity) == 0
        && flux_plugin_arg_unpack (args,
                                   FLUX_PLUGIN_ARG_IN,
                                   "{s:i s:I}",
                                   "state", &state,
                                   "userid", &userid) == 0)
        (void)runtime_py_job (ctx->self, i, id, state, (uint32_t)userid, args);
    flux_plugin_arg_destroy (args);
}

/* Send the marked job's job.event.exception calls from the instance's
 * job-exception events, not by subscribing to its events: once a job has
 * had a subscriber, the job-manager packs the job's arguments for each
 * later event of it, about 20k instructions an event, whoever listens.
 * The first call subscribes the job-manager to the events.  A job that
 * has had an exception already is subscribed instead: its job-exception
 * event may still be on its way, and would be taken for a later one.
 */
int runtime_watch_exceptions (flux_plugin_t *p, flux_jobid_t id)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);
    struct runtime_mark *mark;
    flux_t *h = flux_jobtap_get_flux (p);
    int raised;

    if (!ctx || (raised = flux_jobtap_job_event_posted (p, id, "exception")) < 0)
        return -1;
    if (raised)
        return runtime_mark (p, id, 1);
    if (runtime_mark (p, id, 0) < 0
        || !(mark = flux_jobtap_job_aux_get (p, id, RUNTIME_MARK)))
        return -1;
    if (!ctx->exceptions) {
        struct flux_match match = FLUX_MATCH_EVENT;
        flux_future_t *f;

        match.topic_glob = "job-exception";
        if (!(f = flux_event_subscribe_ex (h, "job-exception", 0)))
            return -1;
        /* Its answer is not waited for (the reactor is the
         * job-manager's): the subscription holds once the broker has it.
         */
        flux_future_destroy (f);
        if (!(ctx->exceptions = flux_msg_handler_create (h, match,
                                                         runtime_exception_cb,
                                                         ctx)))
            return -1;
        flux_msg_handler_start (ctx->exceptions);
    }
    mark->exceptions = 1;
    return 0;
}

/* While it is marked, also send the job's calls of WANTED topic 'i'. */
int runtime_want (flux_plugin_t *p, flux_jobid_t id, int i)
{
    struct runtime_mark *mark;

    if (i < 0 || i >= RUNTIME_MAX_TOPICS) {
        errno = EINVAL;
        return -1;
    }
    if (!(mark = runtime_mark_get (p, id)))
        return -1;
    mark->wants |= 1u << i;
    return 0;
}

/* Post event 'name' with context 'context' (a JSON object, or NULL).
 * A string of it may hold a NUL (\u0000), as in any payload flux-core
 * decodes (JSON_ALLOW_NUL): a value a request carried posts as it came.
 */
int runtime_post_event (flux_plugin_t *p, flux_jobid_t id, const char *name,
                        const char *context)
{
    json_t *o = NULL;
    int rc;

    if (context && !(o = json_loads (context, JSON_ALLOW_NUL, NULL))) {
        errno = EINVAL;
        return -1;
    }
    if (o)
        rc = flux_jobtap_event_post_pack (p, id, name, "O", o);
    else
        rc = flux_jobtap_event_post_pack (p, id, name, NULL);
    json_decref (o);
    return rc;
}

/* Update the jobspec of job 'id' (not the current job's) with 'update',
 * a JSON object of period-delimited keys and their new values.
 */
int runtime_jobspec_update (flux_plugin_t *p, flux_jobid_t id,
                            const char *update)
{
    json_t *o;
    int rc;

    if (!(o = json_loads (update, 0, NULL)) || !json_is_object (o)) {
        json_decref (o);
        errno = EINVAL;
        return -1;
    }
    rc = flux_jobtap_jobspec_update_id_pack (p, id, "O", o);
    json_decref (o);
    return rc;
}

int runtime_raise (flux_plugin_t *p,
                   flux_jobid_t id,
                   const char *type,
                   int severity,
                   const char *note)
{
    return flux_jobtap_raise_exception (p, id, type, severity, "%s", note);
}

int runtime_job_lookup (flux_plugin_t *p,
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

/* What job 'id' (active, or in the job-manager's inactive cache) has at
 * each of 'paths' (space-separated key paths of its arguments, such as
 * "state jobspec.attributes.system.constraints"), as the text of a JSON
 * object of path: value, leaving out the paths it has not: a lookup
 * that encodes only what is asked for, not the whole job (its jobspec
 * with its environment).  NULL (errno set) if there is no such job.
 * The caller frees the text.
 */
char *runtime_job_pick (flux_plugin_t *p, flux_jobid_t id, const char *paths)
{
    flux_plugin_arg_t *args;
    json_t *in = NULL;
    json_t *out = NULL;
    char *text = NULL;
    char *copy = NULL;
    char *saveptr = NULL;

    if (!(args = flux_jobtap_job_lookup (p, id)))
        return NULL;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "o", &in) < 0
        || !(out = json_object ()) || !(copy = strdup (paths)))
        goto done;
    for (char *path = strtok_r (copy, " ", &saveptr); path;
         path = strtok_r (NULL, " ", &saveptr)) {
        json_t *o = in;
        char *key_save = NULL;
        char key[256];

        snprintf (key, sizeof (key), "%s", path);
        for (char *k = strtok_r (key, ".", &key_save); k && o;
             k = strtok_r (NULL, ".", &key_save))
            o = json_is_object (o) ? json_object_get (o, k) : NULL;
        if (o && json_object_set (out, path, o) < 0)
            goto done;
    }
    if (!(text = json_dumps (out, JSON_COMPACT)))
        errno = ENOMEM;
done:
    free (copy);
    json_decref (out);
    flux_plugin_arg_destroy (args);
    return text;
}

/* Register RPC method 'name' (index 'index' for Python) with message
 * handler 'cb' (runtime_request_cb or a C extension's), taking payloads
 * of at most 'max_bytes' (0: any).
 */
int runtime_service_register (flux_plugin_t *p, const char *name, int index,
                              uint32_t rolemask, size_t max_bytes,
                              flux_msg_handler_f cb)
{
    struct runtime_ctx *ctx = runtime_ctx_get (p);
    struct runtime_method *m;

    if (!ctx || !(m = calloc (1, sizeof (*m))))
        return -1;
    m->ctx = ctx;
    m->index = index;
    m->max_bytes = max_bytes;
    m->next = ctx->methods;
    ctx->methods = m;
    return flux_jobtap_service_register_ex (p, name, rolemask, cb, m);
}

int runtime_error (flux_plugin_t *p, flux_plugin_arg_t *args, const char *text)
{
    return flux_jobtap_error (p, args, "%s", text);
}

void runtime_log (flux_plugin_t *p, int level, const char *text)
{
    flux_log (flux_jobtap_get_flux (p), level, "%s: %s", RUNTIME_NAME, text);
}

/* vi: ts=4 sw=4 expandtab
 */
