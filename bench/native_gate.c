/* native-gate: the smallest native jobtap plugin that gates a job's clean
 * the way epilog-gate does.  Benchmark reference only (bench/run.py
 * builds it with cc at run time); it is the limit a gated workload can
 * reach, not a product.
 *
 * One epilog hold and one prolog hold per job, in memory only (no eventlog
 * record, no timeout, no durability):
 *
 *   job-manager.native-gate.hold    {id, description, point?} -> {id, description, state}
 *   job-manager.native-gate.release {id, description, status?} -> {released[, reason]}
 *   job-manager.native-gate.watch   {} (streaming)      -> {id, description, userid, ran}
 *
 * A held job gets epilog-start at its epilog point: on entry to CLEANUP if
 * it never started, otherwise on its finish event.  A prolog hold (point
 * "prolog") gets prolog-start on the job's entry to RUN, so its start
 * waits for the release (prolog-finish).  Loaded with all=1,
 * every job is held (description "native") without a hold request.
 * Loaded with durable=1, each hold, prolog or epilog, is also recorded in
 * the job's eventlog (event native-gate-hold): what such a per-job record
 * costs.  Loaded
 * with synced=1, each hold is answered only once a line recording it is
 * appended to the KVS key native-gate.holds by a commit with
 * FLUX_KVS_SYNC, group-committed as epilog-gate does: at most one commit
 * in flight, the holds that arrive meanwhile share the next one.  With
 * synced=2 the lines are RFC 18 eventlog entries of the size of
 * epilog-gate's, and every 256 appends the key is replaced by a snapshot:
 * the line of every live hold, then the batch (the record epilog-gate
 * keeps; with synced=1 the key is replaced by the batch alone).
 * With lazy=1 a held job's events are subscribed to only when its finish
 * event is awaited (in CLEANUP, started, not finished), as epilog-gate
 * asks for them; without it, from the hold on.
 * With work=N each hold request keeps the job-manager's thread busy N
 * microseconds more: what time per request alone does to acknowledged
 * holds/s, all else equal (bench/durable.py's native-synced+N configs).
 *
 * Client side traffic per job is the same as epilog-gate's: one hold
 * request, one watch response, one release request.
 */
#include <errno.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <flux/core.h>
#include <flux/jobtap.h>

#define NAME "native-gate"
#define AUX "native-gate::hold"
#define PROLOG_AUX "native-gate::prolog"

enum { PENDING = 0, ACTIVE = 1 };

struct hold {
    int state;
    char description[65];
    /* synced=2: the hold's log line, and its place in the list of live
     * holds a snapshot writes.
     */
    char *line;
    struct hold *prev, *next;
};

/* synced=2: every hold with a log line (newest first). */
static struct hold *logged;

static struct flux_msglist *watchers;
static int gate_all;
static int gate_lazy;
static int gate_durable;
static int gate_synced;
static int gate_work_us;

/* synced=1: the hold requests and lines of the next batch, and the
 * requests of the commit in flight.
 */
static struct flux_msglist *queued;
static struct flux_msglist *sent;
static flux_future_t *inflight;
static char *lines;
static size_t lines_len, lines_size;
static int appends;
/* Synced commits sent (flux jobtap query native-gate.so: "commits"). */
static int commits;

static struct hold *hold_create (const char *description)
{
    struct hold *h = calloc (1, sizeof (*h));
    if (h)
        snprintf (h->description, sizeof (h->description), "%s", description);
    return h;
}

static void hold_destroy (void *arg)
{
    struct hold *h = arg;

    if (h->line) {
        if (h->prev)
            h->prev->next = h->next;
        else
            logged = h->next;
        if (h->next)
            h->next->prev = h->prev;
        free (h->line);
    }
    free (h);
}

static int attach (flux_plugin_t *p, flux_jobid_t id, const char *description)
{
    struct hold *h = hold_create (description);

    if (!h)
        return -1;
    if (flux_jobtap_job_aux_set (p, id, AUX, h, hold_destroy) < 0) {
        free (h);
        return -1;
    }
    if (!gate_lazy && flux_jobtap_job_subscribe (p, id) < 0)
        return -1;
    return 0;
}

static void notify (flux_plugin_t *p, flux_jobid_t id, uint32_t userid,
                    struct hold *h)
{
    flux_t *fh = flux_jobtap_get_flux (p);
    const flux_msg_t *msg;
    int ran = flux_jobtap_job_event_posted (p, FLUX_JOBTAP_CURRENT_JOB,
                                            "start") > 0;

    msg = flux_msglist_first (watchers);
    while (msg) {
        if (flux_respond_pack (fh, msg, "{s:I s:s s:i s:b}",
                               "id", id,
                               "description", h->description,
                               "userid", (int)userid,
                               "ran", ran) < 0)
            flux_msglist_delete (watchers);
        msg = flux_msglist_next (watchers);
    }
}

/* The epilog point of the current job: post epilog-start for its hold. */
/* Activate the current job's pending hold kept under 'aux' with 'start'
 * (epilog-start at the epilog point, prolog-start on entry to RUN).
 */
static int activate (flux_plugin_t *p,
                     flux_plugin_arg_t *args,
                     const char *aux,
                     int (*start) (flux_plugin_t *p, const char *description))
{
    struct hold *h = flux_jobtap_job_aux_get (p, FLUX_JOBTAP_CURRENT_JOB, aux);
    flux_jobid_t id;
    json_int_t userid;

    if (!h || h->state != PENDING)
        return 0;
    if (flux_plugin_arg_unpack (args, FLUX_PLUGIN_ARG_IN, "{s:I s:I}",
                                "id", &id, "userid", &userid) < 0)
        return -1;
    if (start (p, h->description) < 0)
        return -1;
    h->state = ACTIVE;
    notify (p, id, (uint32_t)userid, h);
    return 0;
}

static int point (flux_plugin_t *p, flux_plugin_arg_t *args)
{
    return activate (p, args, AUX, flux_jobtap_epilog_start);
}

/* Entry to RUN: post prolog-start for the job's prolog hold, if any, so
 * that the start request waits for it.
 */
static int run_cb (flux_plugin_t *p, const char *topic,
                   flux_plugin_arg_t *args, void *arg)
{
    return activate (p, args, PROLOG_AUX, flux_jobtap_prolog_start);
}

static int prolog_hold (flux_plugin_t *p, const flux_msg_t *msg,
                        flux_jobid_t id, const char *description)
{
    flux_t *fh = flux_jobtap_get_flux (p);
    struct hold *h = flux_jobtap_job_aux_get (p, id, PROLOG_AUX);

    if (!h) {
        if (!(h = hold_create (description)))
            return -1;
        if (flux_jobtap_job_aux_set (p, id, PROLOG_AUX, h, hold_destroy) < 0) {
            free (h);
            return -1;
        }
        /* durable=1: a prolog hold is recorded as an epilog hold is. */
        if (gate_durable
            && flux_jobtap_event_post_pack (p, id, "native-gate-hold",
                                            "{s:s s:s}",
                                            "description", description,
                                            "point", "prolog") < 0)
            return -1;
    }
    if (flux_respond_pack (fh, msg, "{s:I s:s s:s}",
                           "id", id,
                           "description", h->description,
                           "state", h->state == ACTIVE ? "active" : "pending") < 0)
        flux_log_error (fh, NAME ": hold: respond");
    return 0;
}

/* Release the job's prolog hold if it is 'description': 1 if it was. */
static int prolog_release (flux_plugin_t *p, flux_jobid_t id,
                           const char *description, int status)
{
    struct hold *h = flux_jobtap_job_aux_get (p, id, PROLOG_AUX);
    int state;

    if (!h || strcmp (h->description, description) != 0)
        return 0;
    state = h->state;
    (void)flux_jobtap_job_aux_set (p, id, PROLOG_AUX, NULL, NULL);
    if (state == ACTIVE
        && flux_jobtap_prolog_finish (p, id, description, status) < 0)
        return -1;
    return 1;
}

static int cleanup_cb (flux_plugin_t *p, const char *topic,
                       flux_plugin_arg_t *args, void *arg)
{
    /* A job that started waits for its finish event. */
    if (flux_jobtap_job_event_posted (p, FLUX_JOBTAP_CURRENT_JOB, "start") > 0) {
        if (!gate_lazy)
            return 0;
        /* lazy=1: finish may have brought it here, unsubscribed. */
        if (flux_jobtap_job_event_posted (p, FLUX_JOBTAP_CURRENT_JOB,
                                          "finish") <= 0)
            return flux_jobtap_job_subscribe (p, FLUX_JOBTAP_CURRENT_JOB);
    }
    return point (p, args);
}

static int finish_cb (flux_plugin_t *p, const char *topic,
                      flux_plugin_arg_t *args, void *arg)
{
    return point (p, args);
}

static int new_cb (flux_plugin_t *p, const char *topic,
                   flux_plugin_arg_t *args, void *arg)
{
    if (!gate_all
        || flux_jobtap_job_aux_get (p, FLUX_JOBTAP_CURRENT_JOB, AUX))
        return 0;
    return attach (p, FLUX_JOBTAP_CURRENT_JOB, "native");
}

static int hold_respond (flux_plugin_t *p, const flux_msg_t *msg)
{
    flux_t *fh = flux_jobtap_get_flux (p);
    flux_jobid_t id;
    const char *description;
    struct hold *h;

    if (flux_request_unpack (msg, NULL, "{s:I s:s}",
                             "id", &id, "description", &description) < 0)
        return -1;
    h = flux_jobtap_job_aux_get (p, id, AUX);
    return flux_respond_pack (fh, msg, "{s:I s:s s:s}",
                              "id", id,
                              "description", description,
                              "state", h && h->state == ACTIVE ? "active"
                                                               : "pending");
}

static void sync_send (flux_plugin_t *p);

static void sync_done (flux_future_t *f, void *arg)
{
    flux_plugin_t *p = arg;
    flux_t *fh = flux_jobtap_get_flux (p);
    int rc = flux_future_get (f, NULL);
    int errnum = errno;
    struct flux_msglist *done = sent;
    const flux_msg_t *msg;

    flux_future_destroy (f);
    inflight = NULL;
    /* The next batch goes first: its sync overlaps these answers. */
    if (!(sent = flux_msglist_create ()))
        flux_log_error (fh, NAME ": msglist");
    else
        sync_send (p);
    msg = flux_msglist_first (done);
    while (msg) {
        if (rc < 0) {
            if (flux_respond_error (fh, msg, errnum, NULL) < 0)
                flux_log_error (fh, NAME ": hold: respond");
        }
        else if (hold_respond (p, msg) < 0)
            flux_log_error (fh, NAME ": hold: respond");
        msg = flux_msglist_next (done);
    }
    flux_msglist_destroy (done);
}

/* synced=2: the line of every live hold (they include the batch's). */
static char *snapshot (void)
{
    struct hold *h;
    size_t size = 2;
    char *text, *end;

    for (h = logged; h; h = h->next)
        size += strlen (h->line);
    if (!(text = malloc (size)))
        return NULL;
    end = text;
    for (h = logged; h; h = h->next)
        end = stpcpy (end, h->line);
    if (end == text)
        end = stpcpy (end, "\n"); /* an empty value reads back as none */
    return text;
}

/* Send the queued lines in one synced commit, unless one is in flight. */
static void sync_send (flux_plugin_t *p)
{
    flux_t *fh = flux_jobtap_get_flux (p);
    flux_kvs_txn_t *txn;
    struct flux_msglist *tmp;
    char *whole = NULL;
    int replace;

    if (inflight || lines_len == 0)
        return;
    /* Like epilog-gate, replace the key every 256 appends so that it
     * stays short (each append rewrites the key's list of blobrefs);
     * synced=1 with only the batch, not a snapshot of every hold: a
     * lower bound.
     */
    replace = ++appends > 256;
    if (replace && gate_synced == 2 && !(whole = snapshot ()))
        flux_log_error (fh, NAME ": snapshot");
    if (!(txn = flux_kvs_txn_create ())
        || flux_kvs_txn_put (txn, replace ? 0 : FLUX_KVS_APPEND,
                             "native-gate.holds", whole ? whole : lines) < 0
        || !(inflight = flux_kvs_commit (fh, NULL, FLUX_KVS_SYNC, txn))
        || flux_future_then (inflight, -1., sync_done, p) < 0)
        flux_log_error (fh, NAME ": commit");
    commits++;
    flux_kvs_txn_destroy (txn);
    free (whole);
    if (appends > 256)
        appends = 0;
    lines_len = 0;
    lines[0] = '\0';
    tmp = sent;
    sent = queued;
    queued = tmp;
}

static int sync_queue (flux_plugin_t *p, const flux_msg_t *msg,
                       flux_jobid_t id, const char *description,
                       struct hold *h)
{
    char line[256];
    int n;

    if (gate_synced == 2)
        n = snprintf (line, sizeof (line),
                      "{\"timestamp\":%.6f,\"name\":\"native_gate.hold\","
                      "\"context\":{\"id\":%ju,\"description\":\"%s\"}}\n",
                      flux_reactor_now (flux_get_reactor (
                          flux_jobtap_get_flux (p))),
                      (uintmax_t)id, description);
    else
        n = snprintf (line, sizeof (line),
                      "{\"id\":%ju,\"description\":\"%s\"}\n",
                      (uintmax_t)id, description);
    if (n < 0 || n >= (int)sizeof (line))
        return -1;
    if (gate_synced == 2 && !h->line) {
        if (!(h->line = strdup (line)))
            return -1;
        h->prev = NULL;
        if ((h->next = logged))
            logged->prev = h;
        logged = h;
    }
    if (lines_len + n + 1 > lines_size) {
        size_t size = (lines_size + n + 1) * 2;
        char *grown = realloc (lines, size);
        if (!grown)
            return -1;
        lines = grown;
        lines_size = size;
    }
    memcpy (lines + lines_len, line, n + 1);
    lines_len += n;
    if (flux_msglist_append (queued, msg) < 0)
        return -1;
    sync_send (p);
    return 0;
}

/* work=N: busy the thread for N microseconds of its own CPU time (time
 * the machine takes from it elsewhere is not counted).
 */
static void work (int usec)
{
    struct timespec t0, t;
    long ns = usec * 1000L;

    clock_gettime (CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        clock_gettime (CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

static void hold_cb (flux_t *fh, flux_msg_handler_t *mh,
                     const flux_msg_t *msg, void *arg)
{
    flux_plugin_t *p = arg;
    flux_jobid_t id;
    const char *description;
    const char *point = "epilog";
    struct hold *h;

    if (gate_work_us > 0)
        work (gate_work_us);
    if (flux_request_unpack (msg, NULL, "{s:I s:s s?s}",
                             "id", &id,
                             "description", &description,
                             "point", &point) < 0)
        goto error;
    if (!strcmp (point, "prolog")) {
        if (prolog_hold (p, msg, id, description) < 0)
            goto error;
        return;
    }
    if (!(h = flux_jobtap_job_aux_get (p, id, AUX))) {
        if (attach (p, id, description) < 0
            || !(h = flux_jobtap_job_aux_get (p, id, AUX)))
            goto error;
        /* durable=1: record the hold in the job's eventlog, to show what
         * a durable record per job costs.
         */
        if (gate_durable
            && flux_jobtap_event_post_pack (p, id, "native-gate-hold",
                                            "{s:s}",
                                            "description", description) < 0)
            goto error;
    }
    if (gate_synced) {
        if (sync_queue (p, msg, id, description, h) < 0)
            goto error;
        return;
    }
    if (flux_respond_pack (fh, msg, "{s:I s:s s:s}",
                           "id", id,
                           "description", h->description,
                           "state", h->state == ACTIVE ? "active" : "pending") < 0)
        flux_log_error (fh, NAME ": hold: respond");
    return;
error:
    if (flux_respond_error (fh, msg, errno, NULL) < 0)
        flux_log_error (fh, NAME ": hold: respond");
}

static void release_cb (flux_t *fh, flux_msg_handler_t *mh,
                        const flux_msg_t *msg, void *arg)
{
    flux_plugin_t *p = arg;
    flux_jobid_t id;
    const char *description;
    int status = 0;
    struct hold *h;
    int state;
    int rc;

    if (flux_request_unpack (msg, NULL, "{s:I s:s s?i}",
                             "id", &id,
                             "description", &description,
                             "status", &status) < 0)
        goto error;
    if ((rc = prolog_release (p, id, description, status)) != 0) {
        if (rc < 0)
            goto error;
        if (flux_respond_pack (fh, msg, "{s:b}", "released", 1) < 0)
            flux_log_error (fh, NAME ": release: respond");
        return;
    }
    if (!(h = flux_jobtap_job_aux_get (p, id, AUX))
        || strcmp (h->description, description) != 0) {
        if (flux_respond_pack (fh, msg, "{s:b s:s}",
                               "released", 0, "reason", "no such hold") < 0)
            flux_log_error (fh, NAME ": release: respond");
        return;
    }
    state = h->state;
    flux_jobtap_job_unsubscribe (p, id);
    /* The job may go inactive inside epilog_finish: drop the hold first. */
    (void)flux_jobtap_job_aux_set (p, id, AUX, NULL, NULL);
    if (state == ACTIVE
        && flux_jobtap_epilog_finish (p, id, description, status) < 0)
        goto error;
    if (flux_respond_pack (fh, msg, "{s:b}", "released", 1) < 0)
        flux_log_error (fh, NAME ": release: respond");
    return;
error:
    if (flux_respond_error (fh, msg, errno, NULL) < 0)
        flux_log_error (fh, NAME ": release: respond");
}

static void watch_cb (flux_t *fh, flux_msg_handler_t *mh,
                      const flux_msg_t *msg, void *arg)
{
    if (!flux_msg_is_streaming (msg)) {
        errno = EPROTO;
        goto error;
    }
    if (flux_msglist_append (watchers, msg) < 0)
        goto error;
    return;
error:
    if (flux_respond_error (fh, msg, errno, NULL) < 0)
        flux_log_error (fh, NAME ": watch: respond");
}

static void disconnect_cb (flux_t *fh, flux_msg_handler_t *mh,
                           const flux_msg_t *msg, void *arg)
{
    (void)flux_msglist_disconnect (watchers, msg);
}

static void destroy (void *arg)
{
    flux_msglist_destroy (arg);
    if (watchers == arg)
        watchers = NULL;
    /* Unanswered requests are dropped: a benchmark reference only. */
    flux_future_destroy (inflight);
    inflight = NULL;
    flux_msglist_destroy (queued);
    flux_msglist_destroy (sent);
    queued = sent = NULL;
    free (lines);
    lines = NULL;
    lines_len = lines_size = 0;
    appends = commits = 0;
}

/* The counters a benchmark reads with `flux jobtap query`. */
static int query_cb (flux_plugin_t *p, const char *topic,
                     flux_plugin_arg_t *args, void *arg)
{
    return flux_plugin_arg_pack (args, FLUX_PLUGIN_ARG_OUT,
                                 "{s:{s:i}}", "counters", "commits", commits);
}

static const struct flux_plugin_handler handlers[] = {
    { "job.new", new_cb, NULL },
    { "job.state.run", run_cb, NULL },
    { "job.state.cleanup", cleanup_cb, NULL },
    { "job.event.finish", finish_cb, NULL },
    { "plugin.query", query_cb, NULL },
    { 0 },
};

int flux_plugin_init (flux_plugin_t *p)
{
    gate_all = gate_lazy = gate_durable = gate_synced = gate_work_us = 0;
    if (flux_plugin_set_name (p, NAME) < 0
        || (flux_plugin_get_conf (p)
            && flux_plugin_conf_unpack (p, "{s?i s?i s?i s?i s?i}",
                                       "all", &gate_all,
                                       "lazy", &gate_lazy,
                                       "durable", &gate_durable,
                                       "synced", &gate_synced,
                                       "work", &gate_work_us) < 0)
        || !(watchers = flux_msglist_create ())
        || !(queued = flux_msglist_create ())
        || !(sent = flux_msglist_create ())
        || flux_plugin_aux_set (p, NULL, watchers, destroy) < 0
        || flux_jobtap_service_register (p, "hold", hold_cb, p) < 0
        || flux_jobtap_service_register (p, "release", release_cb, p) < 0
        || flux_jobtap_service_register (p, "watch", watch_cb, p) < 0
        || flux_jobtap_service_register (p, "disconnect", disconnect_cb, p) < 0)
        return -1;
    return flux_plugin_register (p, NAME, handlers);
}
