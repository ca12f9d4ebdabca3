"""The ``dws`` jobtap plugin: flux-coral2's rabbit workflow on the runtime.

A drop-in for flux-coral2's ``dws-jobtap.so`` written in Python on the
project's jobtap runtime (flux_epilog_gate.jobtap): see plugin.py.
"""
