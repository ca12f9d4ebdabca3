"""The pattern of a plugin's handler of its job.state.* and job.event.* topics.

flux-core calls a ``job.state.STATE`` topic of a job only if some loaded
plugin has a handler whose pattern matches it, and such a call is not
cheap: the job's arguments are packed and every handler of every plugin
is matched against the topic with fnmatch().  The runtime registers one
handler for all the job topics a plugin declares, so its pattern decides
which states flux-core calls for every job while the handler is on.

``job.[se]*`` (the runtime's default) matches every state, so a plugin
that handles ``job.state.depend`` also makes flux-core call
``job.state.sched`` for every job, which no built-in plugin handles.  The
pattern made here matches the plugin's topics and leaves out each state
whose first letter none of them begins with.  Longer patterns cost more
at each match (fnmatch converts them to wide characters each time), so
it tests only that one letter.
"""

#: The states of a job, as flux-core names their job.state.* topics.
STATES = ("new", "depend", "priority", "sched", "run", "cleanup", "inactive")

#: The prefixes of the topics the handler serves: both 10 characters long,
#: so the first letter of a state or event is the 11th of its topic.
PREFIXES = ("job.state.", "job.event.")

#: The runtime's pattern: every job.state.* and job.event.* topic.
EVERY = "job.[se]*"


def job_pattern(topics):
    """The pattern for a plugin whose job topics are ``topics`` (names;
    ``job.new`` and others that are not job.state.* or job.event.* are
    not the handler's and are ignored)."""
    firsts = {t[len(PREFIXES[0])] for t in topics if _served(t)}
    left_out = sorted({state[0] for state in STATES} - firsts)
    if not left_out:
        return EVERY
    return f"job.[se]????.[!{''.join(left_out)}]*"


def _served(topic):
    return topic.startswith(PREFIXES) and len(topic) > len(PREFIXES[0])
