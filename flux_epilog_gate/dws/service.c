/* dws.so's own C, compiled after the runtime and the gate's C by
 * plugin/cbuild.py (compile_dws), which puts in front of it the
 * prototypes of dws_py_failed and dws_py_remove (dws/plugin.py).
 *
 * The requests dws.so sends the DWS service for each rabbit job
 * (dws.create, dws.setup with the job's R, dws.post_run) are packed,
 * sent and answered here: a request that succeeds never enters Python.
 * Python hears only of a failure (dws_py_failed): a request that could
 * not be sent or failed, an answer that is not {success: bool,
 * errstr?: string|null}, or success false.  The requests in flight
 * belong to the plugin instance that sent them: they go with it, and
 * their answers are then never read.
 *
 * Of the service's requests to dws.so, the well-formed prolog-remove and
 * epilog-remove are decoded here too (see dws_fast_remove below).
 */

/* What dws_py_failed is told failed (dws/service.py: CALL_*). */
enum dws_kind {
    DWS_CREATE = 0,
    DWS_SETUP = 1,
    DWS_POST_RUN = 2,
    DWS_R = 3,          /* the job's R could not be read for dws.setup */
};

#define DWS_CALLS_AUX "dws::calls"
/* On a job this instance saw enter DEPEND asking for rabbit storage. */
#define DWS_RABBIT_AUX "dws::rabbit"

/* One request (or R lookup) in flight. */
struct dws_call {
    struct dws_calls *calls;
    flux_future_t *f;
    flux_jobid_t id;
    int kind;
    struct dws_call *prev;
    struct dws_call *next;
};

/* The requests in flight of one plugin instance, hung on it. */
struct dws_calls {
    flux_plugin_t *p;
    struct dws_call *head;
};

static void dws_call_destroy (struct dws_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        c->calls->head = c->next;
    if (c->next)
        c->next->prev = c->prev;
    flux_future_destroy (c->f);
    free (c);
}

static void dws_calls_destroy (void *arg)
{
    struct dws_calls *calls = arg;

    while (calls->head)
        dws_call_destroy (calls->head);
    free (calls);
}

static struct dws_calls *dws_calls_get (flux_plugin_t *p)
{
    struct dws_calls *calls = flux_plugin_aux_get (p, DWS_CALLS_AUX);

    if (calls)
        return calls;
    if (!(calls = calloc (1, sizeof (*calls))))
        return NULL;
    calls->p = p;
    if (flux_plugin_aux_set (p, DWS_CALLS_AUX, calls, dws_calls_destroy) < 0) {
        free (calls);
        return NULL;
    }
    return calls;
}

/* Tell Python that call 'kind' of job 'id' failed: 'errnum' if it did
 * not come back as an answer, else 0 and the answer's errstr (or NULL).
 */
static void dws_failed (flux_plugin_t *p, flux_jobid_t id, int kind,
                        int errnum, const char *errstr)
{
    struct runtime_ctx *ctx = flux_plugin_aux_get (p, RUNTIME_CTX);

    if (ctx && ctx->self)
        dws_py_failed (ctx->self, id, kind, errnum, errstr);
}

/* The answer of a request: {success: bool, errstr?: string|null}. */
static void dws_answer_cb (flux_future_t *f, void *arg)
{
    struct dws_call *c = arg;
    flux_plugin_t *p = c->calls->p;
    flux_jobid_t id = c->id;
    int kind = c->kind;
    int success = 0;
    json_t *errstr = NULL;

    if (flux_rpc_get_unpack (f, "{s:b s?o}",
                             "success", &success,
                             "errstr", &errstr) < 0) {
        int errnum = errno ? errno : EPROTO;
        dws_call_destroy (c);
        dws_failed (p, id, kind, errnum, NULL);
        return;
    }
    if (errstr && !json_is_null (errstr) && !json_is_string (errstr)) {
        dws_call_destroy (c);
        dws_failed (p, id, kind, EPROTO, NULL);
        return;
    }
    if (success) {
        dws_call_destroy (c);
        return;
    }
    /* The answer, and so errstr, lives until the call is destroyed. */
    dws_failed (p, id, kind, 0, json_is_string (errstr)
                                ? json_string_value (errstr) : NULL);
    dws_call_destroy (c);
}

/* Keep 'f' (a request of kind 'kind' for job 'id', or the R lookup) in
 * flight with 'cb' as its continuation.  -1 (errno set, 'f' destroyed)
 * on failure.
 */
static int dws_keep (flux_plugin_t *p, flux_future_t *f, flux_jobid_t id,
                     int kind, flux_continuation_f cb)
{
    struct dws_calls *calls;
    struct dws_call *c;

    if (!f)
        return -1;
    if (!(calls = dws_calls_get (p)) || !(c = calloc (1, sizeof (*c)))) {
        flux_future_destroy (f);
        return -1;
    }
    c->calls = calls;
    c->f = f;
    c->id = id;
    c->kind = kind;
    if (flux_future_then (f, -1., cb, c) < 0) {
        flux_future_destroy (f);
        free (c);
        return -1;
    }
    c->next = calls->head;
    if (c->next)
        c->next->prev = c;
    calls->head = c;
    return 0;
}

/* The dws.create payload's parts of a job's arguments: its jobspec's
 * attributes.system.dw, dw_failure_tolerance (default 0: an integer if
 * given) and resources (not null).  -1 (EPROTO) if the arguments are
 * not of that shape.
 */
static int dws_create_parts (flux_plugin_arg_t *args, json_t **dw,
                             json_int_t *tolerance, json_t **resources,
                             json_int_t *userid)
{
    json_t *t = NULL;

    *dw = *resources = NULL;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN,
                                "{s:I s:{s:{s:{s:o s?o}} s:o}}",
                                "userid", userid,
                                "jobspec",
                                  "attributes",
                                    "system",
                                      "dw", dw,
                                      "dw_failure_tolerance", &t,
                                  "resources", resources) < 0
        || json_is_null (*resources)
        || (t && !json_is_integer (t))) {
        errno = EPROTO;
        return -1;
    }
    *tolerance = t ? json_integer_value (t) : 0;
    return 0;
}

/* 0 if the arguments of the current job's callback hold what
 * dws.create needs (the job is then known as a rabbit job: see
 * dws_is_rabbit), else -1 (EPROTO).
 */
int dws_check_args (flux_plugin_t *p, flux_plugin_arg_t *args)
{
    json_t *dw, *resources;
    json_int_t tolerance, userid;

    if (!p) {
        errno = EINVAL; /* the plugin instance is gone (DwsService.close) */
        return -1;
    }
    if (dws_create_parts (args, &dw, &tolerance, &resources, &userid) < 0)
        return -1;
    (void)flux_jobtap_job_aux_set (p, FLUX_JOBTAP_CURRENT_JOB, DWS_RABBIT_AUX,
                                   (void *)1, NULL);
    return 0;
}

/* Send dws.create for job 'id', from 'args' (the job's callback's) or,
 * if NULL, from the job looked up now.  -1 (errno set) if it could not
 * be sent (EPROTO: the job has not what it needs).
 */
int dws_create (flux_plugin_t *p, flux_jobid_t id, flux_plugin_arg_t *args)
{
    flux_plugin_arg_t *looked_up = NULL;
    json_t *dw, *resources;
    json_int_t tolerance, userid;
    flux_future_t *f = NULL;
    int rc = -1;

    if (!p) {
        errno = EINVAL; /* the plugin instance is gone (DwsService.close) */
        return -1;
    }
    if (!args && !(args = looked_up = flux_jobtap_job_lookup (p, id)))
        return -1;
    if (dws_create_parts (args, &dw, &tolerance, &resources, &userid) == 0) {
        f = flux_rpc_pack (flux_jobtap_get_flux (p), "dws.create",
                           FLUX_NODEID_ANY, 0,
                           "{s:O s:I s:O s:I s:I}",
                           "dw_directives", dw,
                           "jobid", (json_int_t)id,
                           "resources", resources,
                           "userid", userid,
                           "failure_tolerance", tolerance);
        rc = dws_keep (p, f, id, DWS_CREATE, dws_answer_cb);
    }
    flux_plugin_arg_destroy (looked_up);
    return rc;
}

/* The job's R came: send dws.setup {jobid, R}. */
static void dws_r_cb (flux_future_t *f, void *arg)
{
    struct dws_call *c = arg;
    flux_plugin_t *p = c->calls->p;
    flux_jobid_t id = c->id;
    json_t *R = NULL;
    flux_future_t *setup;
    int errnum;

    if (flux_kvs_lookup_get_unpack (f, "o", &R) < 0) {
        errnum = errno ? errno : EPROTO;
        dws_call_destroy (c);
        dws_failed (p, id, DWS_R, errnum, NULL);
        return;
    }
    setup = flux_rpc_pack (flux_jobtap_get_flux (p), "dws.setup",
                           FLUX_NODEID_ANY, 0, "{s:I s:O}",
                           "jobid", (json_int_t)id, "R", R);
    dws_call_destroy (c);
    if (dws_keep (p, setup, id, DWS_SETUP, dws_answer_cb) < 0)
        dws_failed (p, id, DWS_SETUP, errno ? errno : EIO, NULL);
}

/* Read the job's R, then send dws.setup with it.  -1 (errno set) if the
 * lookup could not be sent.
 */
int dws_setup (flux_plugin_t *p, flux_jobid_t id)
{
    char key[128];

    if (!p) {
        errno = EINVAL; /* the plugin instance is gone (DwsService.close) */
        return -1;
    }
    if (flux_job_kvs_key (key, sizeof (key), id, "R") < 0)
        return -1;
    return dws_keep (p, flux_kvs_lookup (flux_jobtap_get_flux (p), NULL, 0, key),
                     id, DWS_R, dws_r_cb);
}

/* Send dws.post_run {jobid, run_started}.  -1 (errno set) on failure. */
int dws_post_run (flux_plugin_t *p, flux_jobid_t id, int run_started)
{
    flux_future_t *f;

    if (!p) {
        errno = EINVAL; /* the plugin instance is gone (DwsService.close) */
        return -1;
    }
    f = flux_rpc_pack (flux_jobtap_get_flux (p), "dws.post_run",
                       FLUX_NODEID_ANY, 0, "{s:I s:b}",
                       "jobid", (json_int_t)id,
                       "run_started", run_started ? 1 : 0);

    return dws_keep (p, f, id, DWS_POST_RUN, dws_answer_cb);
}

/* 1 if job 'id' asks for rabbit storage (its jobspec has
 * attributes.system.dw), 0 if not or if there is no such job: known if
 * this instance saw it in DEPEND, else looked up (after a reload).
 */
int dws_is_rabbit (flux_plugin_t *p, flux_jobid_t id)
{
    flux_plugin_arg_t *args;
    json_t *dw = NULL;
    int rc;

    if (!p)
        return 0;
    if (flux_jobtap_job_aux_get (p, id, DWS_RABBIT_AUX))
        return 1;
    if (!(args = flux_jobtap_job_lookup (p, id)))
        return 0;
    rc = flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN,
                                 "{s:{s:{s:{s?o}}}}",
                                 "jobspec", "attributes", "system",
                                 "dw", &dw) == 0 && dw != NULL;
    flux_plugin_arg_destroy (args);
    return rc;
}

/* Post the job's dws_environment {variables}, the variables of MSG, its
 * prolog-remove request (which the request's handler has checked holds
 * them).  -1 (errno set) on failure.
 */
int dws_post_environment (flux_plugin_t *p, flux_jobid_t id,
                          const flux_msg_t *msg)
{
    json_t *variables;

    if (!p) {
        errno = EINVAL; /* the plugin instance is gone (DwsService.close) */
        return -1;
    }
    if (flux_request_unpack (msg, NULL, "{s:o}", "variables", &variables) < 0)
        return -1;
    return flux_jobtap_event_post_pack (p, id, "dws_environment", "{s:O}",
                                        "variables", variables);
}

/* The service's prolog-remove {id, variables} and epilog-remove {id}, the
 * bulk of its requests, when well formed (an errmsg, if any, a string
 * or null; other keys ignored, as Python's check does): decoded here,
 * they reach Python as the job id (dws_py_remove: DWS_PROLOG_REMOVE or
 * DWS_EPILOG_REMOVE, dws/service.py's REMOVE_*), with the request's
 * payload text should it be kept.  Python returns 0 if it did not take
 * the request (its plugin is not ready): that one, and any other, takes
 * the runtime's general path, where Python says what is wrong with it.
 */
enum dws_remove {
    DWS_PROLOG_REMOVE = 0,
    DWS_EPILOG_REMOVE = 1,
};

static int dws_fast_remove (void *self, const flux_msg_t *msg, int kind)
{
    json_int_t id;
    json_t *variables = NULL;
    json_t *errmsg = NULL;
    const char *text = NULL;
    struct flux_msg_cred cred;

    if (!self
        || flux_msg_get_cred (msg, &cred) < 0
        || flux_request_unpack (msg, NULL, "{s:I s?o s?o}",
                                "id", &id,
                                "variables", &variables,
                                "errmsg", &errmsg) < 0
        || id < 0
        || (kind == DWS_PROLOG_REMOVE && !variables)
        || (errmsg && !json_is_string (errmsg) && !json_is_null (errmsg))
        || flux_request_decode (msg, NULL, &text) < 0)
        return 0;
    return dws_py_remove (self, msg, kind, (flux_jobid_t)id, cred.userid,
                          cred.rolemask, text);
}

static void dws_remove (flux_t *h, flux_msg_handler_t *mh,
                        const flux_msg_t *msg, void *arg, int kind)
{
    if (runtime_request_oversize (h, msg, arg))
        return;
    if (dws_fast_remove (runtime_method_self (arg), msg, kind))
        return;
    runtime_request_cb (h, mh, msg, arg);
}

void dws_prolog_remove_cb (flux_t *h, flux_msg_handler_t *mh,
                           const flux_msg_t *msg, void *arg)
{
    dws_remove (h, mh, msg, arg, DWS_PROLOG_REMOVE);
}

void dws_epilog_remove_cb (flux_t *h, flux_msg_handler_t *mh,
                           const flux_msg_t *msg, void *arg)
{
    dws_remove (h, mh, msg, arg, DWS_EPILOG_REMOVE);
}

/* vi: ts=4 sw=4 expandtab
 */
