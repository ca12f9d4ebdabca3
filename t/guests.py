"""Guests of a test instance: handles and jobs of users other than the owner.

Guests are simulated the way flux-core's own tests do it: a handle opened
with FLUX_HANDLE_USERID (and FLUX_HANDLE_ROLEMASK=0x2, FLUX_ROLE_USER) in
the environment gets that userid and rolemask stamped on its messages by
the broker's local connector (see flux_open_ex() in
src/common/libflux/handle.c).  Jobs of a guest are submitted through a
handle with the guest's userid but owner role, with jobspec wrapped
"sign-none" for that userid, which is what job-ingest accepts without
flux-security (src/modules/job-ingest/job.c).
"""

import base64
import os

import flux
import flux.job
from flux.job import JobspecV1

from flux_epilog_gate import EpilogGate

FLUX_ROLE_USER = 0x2
GUEST_A = os.getuid() + 4242
GUEST_B = os.getuid() + 4343
GUEST_NONE = os.getuid() + 4444


def open_as(uri, userid, rolemask=None):
    """A handle whose messages carry ``userid`` (and ``rolemask``)."""
    keys = ("FLUX_HANDLE_USERID", "FLUX_HANDLE_ROLEMASK")
    saved = {key: os.environ.get(key) for key in keys}
    os.environ["FLUX_HANDLE_USERID"] = str(userid)
    if rolemask is not None:
        os.environ["FLUX_HANDLE_ROLEMASK"] = hex(rolemask)
    else:
        os.environ.pop("FLUX_HANDLE_ROLEMASK", None)
    try:
        return flux.Flux(uri)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def sign_none(text, userid):
    """``text`` wrapped as flux-core's sign_none_wrap() does for userid."""
    header = f"version\0i1\0userid\0i{userid}\0mechanism\0snone\0".encode()
    return ".".join(
        (
            base64.b64encode(header).decode(),
            base64.b64encode(text.encode()).decode(),
            "none",
        )
    )


def submit_as(uri, userid):
    """Submit a job owned by ``userid``, held in PRIORITY (urgency 0)."""
    handle = open_as(uri, userid)
    spec = JobspecV1.from_command(["true"])
    return flux.job.submit(
        handle, sign_none(spec.dumps(), userid), urgency=0, pre_signed=True
    )


def guest(inst, userid):
    """The gate as seen by ``userid`` with the user role on ``inst``."""
    return EpilogGate(open_as(inst.uri, userid, FLUX_ROLE_USER))
