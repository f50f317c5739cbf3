"""The built-in sage, PyG's zoo GraphSAGE and the core sampler pass the suites plugins run against themselves."""
from gnnbridge.testing.plugins import ModelConformance, SamplerConformance


class TestSage(ModelConformance):
    arch = "sage"


class TestZooGraphSAGE(ModelConformance):
    arch = "GraphSAGE"


class TestCore(SamplerConformance):
    kind = "core"
