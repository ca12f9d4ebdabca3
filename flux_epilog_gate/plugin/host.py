"""The one gate of a job-manager, shared by the plugins loaded into it.

epilog-gate.so and dws.so are plugins of the same gate: loaded together
into one job-manager they share one :class:`~flux_epilog_gate.gate.Gate`
and so one hold log, in either load order and across a reload of
either.  A :class:`Host` is that gate's place, one per job-manager (named
by the runtime's job-manager id, which a module reload renews), kept in
this module: the broker's one interpreter outlives every plugin instance.

The gate is *driven* by one plugin instance at a time: the job-manager's
callbacks of the jobs it holds come to that instance's port, and its
events are posted through it.  The others are *members*: they use the
gate in-process (dws places and releases its holds, and hears of
activations and exceptions through :attr:`Gate.listeners`).  The member
of the highest ``drive_rank`` drives: epilog-gate.so over dws.so, since
its rules and services need its own port.  When the driver goes away
while a member stays, the member takes the gate over and retracks its
jobs by id; when no member stays, the gate waits in its host for the next
load into the same job-manager (a remove and load), as one plugin's gate
always has.
"""

import syslog

#: Hosts by job-manager id.  Only the newest job-manager is alive: the
#: others' hosts are dropped when it first asks.
_hosts = {}


class Host:
    """The gate of one job-manager and the plugin instances sharing it."""

    def __init__(self, jmid):
        self.jmid = jmid
        #: The gate, once a first member committed; kept when all go.
        self.gate = None
        #: The member whose port drives the gate, or None.
        self.driver = None
        #: Committed plugin instances, in load order (the driver too).
        self.members = []
        #: The last driver's load had not recovered every job when it let
        #: the gate go (see :class:`~flux_epilog_gate.gate.loader.Load`).
        self.recovery_unfinished = False
        #: When each plugin (by name) last went away from this
        #: job-manager: what became active since, it has not seen.
        self.departures = {}

    def join(self, member):
        """``member`` committed its load: True if it is to drive the gate
        (then the current driver, if any, has handed it over)."""
        self.members.append(member)
        driver = self.driver
        if driver is not None and member.drive_rank <= driver.drive_rank:
            return False
        if driver is not None:
            driver.hand_over()
        self.driver = member
        return True

    def leave(self, member):
        """``member`` is going away: the next one to drive, or None."""
        if member in self.members:
            self.members.remove(member)
        if self.driver is not member:
            return None
        self.driver = None
        if not self.members:
            return None
        successor = max(self.members, key=lambda m: m.drive_rank)
        self.driver = successor
        return successor


def host_of(jobtap):
    """The host of the job-manager ``jobtap`` is loaded into."""
    jmid = jobtap.marks.jobmanager_id()
    host = _hosts.get(jmid)
    if host is None:
        for old in list(_hosts):
            del _hosts[old]
        host = _hosts[jmid] = Host(jmid)
        jobtap.log(syslog.LOG_DEBUG, "a new job-manager: its gate is made anew")
    return host
