"""A jobtap plugin of the tests that starts a rabbit job's ``dws-setup``
prolog under its own name, unmarked, as flux-coral2's dws-jobtap.so
does, and never finishes it: a job dws.so finds so when it is loaded
after that plugin was removed (the swap)."""

from flux_epilog_gate.jobtap.plugin import Plugin, job_topic, plugin_topic


class ForeignProlog(Plugin):
    """Start prolog ``dws-setup`` of every job that asks for rabbits."""

    @plugin_topic("conf.update")
    def configure(self, args):
        self.jobtap.marks.forward("job.state.run", True)

    @job_topic("job.state.run", every_job=True, requires="attributes.system.dw")
    def on_run(self, job):
        self.jobtap.jobs.prolog_start_current("dws-setup")
