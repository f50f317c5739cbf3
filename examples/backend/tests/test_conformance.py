"""The backend's own test: gnnbridge's backend conformance suite, run against it."""

from gnnbridge.testing.conformance import BackendConformance


class TestPlainBackend(BackendConformance):
    backend_name = "plain"
