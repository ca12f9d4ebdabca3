"""Unit tests of the gate logic (flux_epilog_gate.gate), no broker."""
