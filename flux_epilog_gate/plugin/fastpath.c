/* The gate's own C, compiled into epilog-gate.so after the runtime
 * (flux_epilog_gate/jobtap/runtime.c) by flux_epilog_gate/plugin/cbuild.py,
 * which also puts in front of it the constants shared with Python
 * (GATE_MARKER, GATE_ANNOTATION, GATE_DESCRIPTION_MAX,
 * GATE_DESCRIPTION_CHARS, GATE_POINTS) and the
 * prototypes of gate_py_hold and gate_py_release (fast.py).
 *
 *  - The owner's well-formed hold and release requests, the bulk of the
 *    gate's traffic, are decoded here and reach Python as plain values,
 *    with a reference on the request that Python owns from then on (one
 *    answer below, or a drop, gives it back); anything else takes the
 *    runtime's general path (runtime_request_cb), where Python explains
 *    what is wrong.
 *  - The events and answers of a hold's life are packed here rather than
 *    encoded in Python.
 */

/* A description as the spec allows it (holds.py: the same grammar),
 * looked up in a table made once from GATE_DESCRIPTION_CHARS.  LENGTH
 * is its length in the payload: a JSON string may hold a NUL, which
 * would end the C string early.
 */
static int gate_valid_description (const char *s, size_t length)
{
    static unsigned char allowed[256];
    static int made = 0;
    size_t n;

    if (!made) {
        for (const char *c = GATE_DESCRIPTION_CHARS; *c; c++)
            allowed[(unsigned char)*c] = 1;
        made = 1;
    }
    for (n = 0; s[n] != '\0'; n++) {
        if (!allowed[(unsigned char)s[n]])
            return 0;
    }
    return n == length && n >= 1 && n <= GATE_DESCRIPTION_MAX;
}

/* The index of POINT among the points a hold may keep its job at
 * (GATE_POINTS: "|a|b|", the order of holds.POINTS), or -1 if it is
 * none of them ("a|b" is none: it would match across a separator).
 */
static int gate_point_index (const char *point)
{
    char word[32];
    const char *at;
    int index = 0;

    if (strchr (point, '|')
        || snprintf (word, sizeof (word), "|%s|", point) >= (int)sizeof (word)
        || !(at = strstr (GATE_POINTS, word)))
        return -1;
    for (const char *c = GATE_POINTS; c < at; c++) {
        if (*c == '|')
            index++;
    }
    return index;
}

/* The owner's hold: {id, description, timeout?, point?}, strictly; the
 * point reaches Python as its index in holds.POINTS (-1: none given).
 * Returns 0 if the request must take the general path.
 */
static int gate_fast_hold (void *self, const flux_msg_t *msg)
{
    json_int_t id;
    const char *description;
    size_t length;
    const char *point = NULL;
    size_t point_length = 0;
    json_t *timeout = NULL;
    int index = -1;

    if (flux_request_unpack (msg, NULL, "{s:I s:s% s?o s?s% !}",
                             "id", &id,
                             "description", &description, &length,
                             "timeout", &timeout,
                             "point", &point, &point_length) < 0
        || id < 0
        || !gate_valid_description (description, length)
        || (point && (strlen (point) != point_length
                      || (index = gate_point_index (point)) < 0))
        || (timeout && (!json_is_number (timeout)
                        || json_number_value (timeout) <= 0.)))
        return 0;
    gate_py_hold (self, flux_msg_incref (msg), (flux_jobid_t)id, description,
                  timeout ? json_number_value (timeout) : -1., index);
    return 1;
}

/* The owner's release: {id, description, status?}, strictly. */
static int gate_fast_release (void *self, const flux_msg_t *msg)
{
    json_int_t id;
    const char *description;
    size_t length;
    json_t *status = NULL;
    json_int_t value = 0;

    if (flux_request_unpack (msg, NULL, "{s:I s:s% s?o !}",
                             "id", &id,
                             "description", &description, &length,
                             "status", &status) < 0
        || id < 0
        || !gate_valid_description (description, length))
        return 0;
    if (status) {
        if (!json_is_integer (status))
            return 0;
        value = json_integer_value (status);
        if (value < INT_MIN || value > INT_MAX)
            return 0;
    }
    gate_py_release (self, flux_msg_incref (msg), (flux_jobid_t)id,
                     description, (int)value);
    return 1;
}

static int gate_is_owner (const flux_msg_t *msg)
{
    struct flux_msg_cred cred;

    return flux_msg_get_cred (msg, &cred) == 0
           && (cred.rolemask & FLUX_ROLE_OWNER);
}

void gate_hold_cb (flux_t *h, flux_msg_handler_t *mh, const flux_msg_t *msg,
                   void *arg)
{
    if (runtime_request_oversize (h, msg, arg))
        return;
    if (gate_is_owner (msg) && gate_fast_hold (runtime_method_self (arg), msg))
        return;
    runtime_request_cb (h, mh, msg, arg);
}

void gate_release_cb (flux_t *h, flux_msg_handler_t *mh,
                      const flux_msg_t *msg, void *arg)
{
    if (runtime_request_oversize (h, msg, arg))
        return;
    if (gate_is_owner (msg)
        && gate_fast_release (runtime_method_self (arg), msg))
        return;
    runtime_request_cb (h, mh, msg, arg);
}

/* Post NAME for the hold DESCRIPTION, marked as the gate's, and nothing
 * else: a start without a timeout, a dependency hold's end (which has no
 * status).
 */
int gate_post_marked (flux_plugin_t *p, flux_jobid_t id, const char *name,
                      const char *description)
{
    return flux_jobtap_event_post_pack (p, id, name, "{s:s s:b}",
                                        "description", description,
                                        GATE_MARKER, 1);
}

/* Post NAME-start (epilog-start, prolog-start), marked as the gate's and
 * with the hold's timeout (timeout < 0: none), so that the eventlog alone
 * tells an active hold after a restart (see holdlog.py).  The job-manager
 * counts a posted prolog-start exactly as one from
 * flux_jobtap_prolog_start(), which only adds checks the gate makes
 * itself (see gate/prolog.py); that call needs the current job, and a hold may
 * become active from a request.
 */
int gate_post_start (flux_plugin_t *p, flux_jobid_t id, const char *name,
                     const char *description, double timeout)
{
    if (timeout < 0.)
        return gate_post_marked (p, id, name, description);
    return flux_jobtap_event_post_pack (p, id, name, "{s:s s:b s:f}",
                                        "description", description,
                                        GATE_MARKER, 1,
                                        "timeout", timeout);
}

/* Post NAME-finish, marked as the gate's like its start, so that a replay
 * never takes another plugin's event with the same description for the
 * end of a hold.  The job-manager counts it exactly as
 * flux_jobtap_epilog_finish() would: both end in event_job_post_pack()
 * with no flags, and event.c counts an epilog-* event by its name alone,
 * whatever else its context holds.  The one difference, EINVAL outside
 * CLEANUP, cannot arise: the gate finishes only its active holds, and
 * their epilog-start keeps the job in CLEANUP.
 */
int gate_post_finish (flux_plugin_t *p, flux_jobid_t id, const char *name,
                      const char *description, int status)
{
    return flux_jobtap_event_post_pack (p, id, name, "{s:s s:i s:b}",
                                        "description", description,
                                        "status", status,
                                        GATE_MARKER, 1);
}

/* Name the holds a job's clean waits on in its user annotations, with a
 * memo event (jobtap offers no other way to annotate a job outside a
 * job.state callback); a NULL text removes the annotation.  Posted here,
 * the memo is ordered before the epilog-finish that may end the job.
 */
int gate_memo (flux_plugin_t *p, flux_jobid_t id, const char *text)
{
    return flux_jobtap_event_post_pack (p, id, "memo", "{s:s?}",
                                        GATE_ANNOTATION, text);
}

/* Answers of the hot path.  Each takes over the caller's reference on its
 * request (kept with flux_msg_incref while the record was committed) and
 * drops it once answered: one call from Python, and no Python object that
 * must be collected for the message to be freed.
 */
static int gate_answered (const flux_msg_t *msg, int rc)
{
    flux_msg_decref (msg);
    return rc;
}

int gate_answer_hold (flux_t *h, const flux_msg_t *msg, flux_jobid_t id,
                      const char *description, const char *state)
{
    return gate_answered (msg, flux_respond_pack (h, msg, "{s:I s:s s:s}",
                                                  "id", (json_int_t)id,
                                                  "description", description,
                                                  "state", state));
}

int gate_answer_release (flux_t *h, const flux_msg_t *msg, int released,
                         const char *reason)
{
    if (!reason)
        return gate_answered (msg, flux_respond_pack (h, msg, "{s:b}",
                                                      "released", released));
    return gate_answered (msg, flux_respond_pack (h, msg, "{s:b s:s}",
                                                  "released", released,
                                                  "reason", reason));
}

int gate_answer_error (flux_t *h, const flux_msg_t *msg, int errnum,
                       const char *text)
{
    return gate_answered (msg, flux_respond_error (h, msg, errnum, text));
}

/* A watch response: an activation, or (aborted) the news that the job of
 * an active prolog hold will never start.
 */
int gate_respond_watch (flux_t *h, const flux_msg_t *msg, flux_jobid_t id,
                        const char *description, uint32_t userid, int ran,
                        const char *point, int aborted)
{
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

/* vi: ts=4 sw=4 expandtab
 */
