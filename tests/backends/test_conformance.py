"""Both built-in backends pass the same conformance suite a plugin backend would run."""

from gnnbridge.testing.conformance import BackendConformance


class TestPyg(BackendConformance):
    backend_name = "pyg"


class TestDgl(BackendConformance):
    backend_name = "dgl"
