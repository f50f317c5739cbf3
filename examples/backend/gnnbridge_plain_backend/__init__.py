"""The hooks of the ``plain`` backend: the backend itself and the neutral architectures it builds.

It builds two of the catalogue's six (``sage`` and ``gcn``): ``model.arch=gat`` with
``--backend plain`` is then one line naming the backends that build GAT.
"""

from gnnbridge import hookimpl
from gnnbridge.backends.catalogue import register_neutral

NAME = "plain"


@hookimpl
def register_backends(register):
    from gnnbridge_plain_backend.backend import PlainBackend

    register(PlainBackend())


def build(in_dim, out_dim, spec):
    from gnnbridge_plain_backend.models import PlainGNN

    return PlainGNN(spec, in_dim, out_dim)


@hookimpl
def register_models(register):
    register_neutral(register, NAME, {"sage": build, "gcn": build}, {"gcn": "index_add GCN layer"})
