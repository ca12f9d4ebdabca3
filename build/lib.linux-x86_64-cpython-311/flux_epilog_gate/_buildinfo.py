"""Written by setup.py at build time."""

FLUX_PYTHONPATH = '/usr/local/lib/flux/python3.11'
