"""The plugin's own tests: gnnbridge's conformance suites, run against what this plugin adds."""

from gnnbridge.testing.plugins import ModelConformance, SamplerConformance


class TestExampleMLP(ModelConformance):
    arch = "example-mlp"


class TestExampleResSAGE(ModelConformance):
    arch = "example-ressage"


class TestMultiLayerSampler(SamplerConformance):
    kind = "example-multilayer"
