"""A stand-in for flux-coral2's DWS service, for the dws plugin's tests.

Registers service ``dws`` on the instance of FLUX_URI and answers the
plugin's requests the way the real service does, unless told to fail
or hang:

- ``dws.create``: answers ``{success}`` (a failure for a job it was
  already asked to create), then sends
  ``job-manager.dws.resource-update {id, resources, exclude}``;
- ``dws.setup``: answers, then sends ``prolog-remove {id, variables,
  rabbits}``;
- ``dws.post_run``: answers, then sends ``epilog-remove {id}``;
- ``dws.teardown``: sends ``epilog-remove {id}`` (no answer);
- ``dws.abort``: nothing but the record.

Every request is appended to LOG as one JSON line ``{topic, payload}``,
and each answer it gets from the plugin as ``{reply: topic, errnum?,
error?}``.  It prints ``ready`` once the service is registered.
With ``--create-answer FILE`` every ``dws.create`` is answered with the
text FILE holds at that moment, raw, and nothing follows (the tests of
the plugin's reading of answers).
Usage: ``python dws_service.py LOG [--create-fail] [--create-hang] [--setup-fail]
[--setup-hang] [--post-run-fail] [--post-run-hang] [--bad-update]
[--exclude JSON] [--variables JSON] [--create-answer FILE]``.
"""

import argparse
import json
import sys

import flux
import flux.constants


class Service:
    """The fake DWS service: one handler per request topic."""

    def __init__(self, handle, args):
        self.h = handle
        self.args = args
        self.log = open(args.log, "a", buffering=1)
        self.pending = set()
        self.created = set()
        self.watchers = [
            handle.msg_watcher_create(
                self.dispatch,
                flux.constants.FLUX_MSGTYPE_REQUEST,
                f"dws.{name}",
            )
            for name in ("create", "setup", "post_run", "teardown", "abort")
        ]
        for watcher in self.watchers:
            watcher.start()

    def record(self, entry):
        self.log.write(json.dumps(entry) + "\n")

    def dispatch(self, handle, msgtype, msg, arg):
        topic = msg.topic
        payload = msg.payload
        self.record({"topic": topic, "payload": payload})
        getattr(self, topic.split(".", 1)[1])(msg, payload)

    def send(self, method, payload):
        topic = f"job-manager.dws.{method}"
        future = self.h.rpc(topic, payload)
        self.pending.add(future)

        def answered(future):
            self.pending.discard(future)
            entry = {"reply": method, "id": payload.get("id")}
            try:
                future.get()
            except OSError as exc:
                entry.update(errnum=exc.errno, error=exc.strerror)
            self.record(entry)

        future.then(answered)

    def answer(self, msg, failed, why):
        if failed:
            self.h.respond(msg, {"success": False, "errstr": why})
        else:
            self.h.respond(msg, {"success": True})

    def create(self, msg, payload):
        jobid = payload["jobid"]
        if self.args.create_answer:
            with open(self.args.create_answer) as f:
                self.h.respond(msg, f.read())
            return
        if jobid in self.created:
            # Like the real service, whose Kubernetes refuses a second
            # workflow of the same name.
            self.answer(msg, True, "workflow already exists")
            return
        self.created.add(jobid)
        if self.args.create_hang:
            return
        failed = self.args.create_fail
        self.answer(msg, failed, "create failed on purpose")
        if failed:
            return
        if self.args.bad_update:
            self.send("resource-update", {"id": jobid})
            return
        self.send(
            "resource-update",
            {
                "id": jobid,
                "resources": payload["resources"],
                "exclude": json.loads(self.args.exclude),
            },
        )

    def setup(self, msg, payload):
        if self.args.setup_hang:
            return
        self.answer(msg, self.args.setup_fail, "setup failed on purpose")
        self.send(
            "prolog-remove",
            {
                "id": payload["jobid"],
                "variables": json.loads(self.args.variables),
                "rabbits": {},
            },
        )

    def post_run(self, msg, payload):
        if self.args.post_run_hang:
            return
        failed = self.args.post_run_fail
        self.answer(msg, failed, "post_run failed on purpose")
        if not failed:
            self.send("epilog-remove", {"id": payload["jobid"]})

    def teardown(self, msg, payload):
        self.send("epilog-remove", {"id": payload["jobid"]})

    def abort(self, msg, payload):
        pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("log")
    for flag in (
        "--create-fail",
        "--create-hang",
        "--setup-fail",
        "--setup-hang",
        "--post-run-fail",
        "--post-run-hang",
        "--bad-update",
    ):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--exclude", default='{"properties": ["^nothing"]}')
    parser.add_argument("--variables", default='{"DW_JOB_X": "/mnt/x"}')
    parser.add_argument("--create-answer")
    args = parser.parse_args()
    handle = flux.Flux()
    handle.service_register("dws").get()
    service = Service(handle, args)
    print("ready", flush=True)
    handle.reactor_run()
    del service


if __name__ == "__main__":
    sys.exit(main())
