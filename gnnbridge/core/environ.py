"""The environment variables gnnbridge's own processes pass to each other, named once.

The launcher sets them for the ranks it starts, and the layers that read them (plugin loading,
mapped records) sit higher than the launcher may look: naming them here, below every layer, lets
each side use the name without importing the other only for a string. One user's variable is
here too, with the one rule that reads it: where datasets are kept (:func:`data_root`), which
the dataset plugins and core's in-memory graphs (``core/app/objects.py``) share.
"""

import os
from pathlib import Path

# Where datasets are kept: downloads, and the files of graphs handed over in memory.
DATA_ROOT = "GNNBRIDGE_DATA"

# Which plugins load (a user's switch too): ``a,b`` names them, empty loads none.
LOAD_PLUGINS = "GNNBRIDGE_LOAD_PLUGINS"
# Set for the ranks the launcher starts: the launching process printed the plugin warnings.
PLUGIN_WARNINGS_SHOWN = "GNNBRIDGE_PLUGIN_WARNINGS_SHOWN"
# Set for the ranks the launcher spawns: a mapped record arrives as "open it yourself" (see
# core/records/mapped.py); each rank drops it, so processes a rank starts get records.
RANKS_OPEN_DATA = "GNNBRIDGE_RANKS_OPEN_DATA"
# Set for the ranks' fork server only: the modules it imports once for every rank (``a,b``; see
# core/runtime/preload.py).
PRELOAD = "GNNBRIDGE_PRELOAD"


def data_root(root: str | None = None) -> Path:
    """``root`` (``dataset.root``), else ``$GNNBRIDGE_DATA``, else ``~/.cache/gnnbridge/datasets``:
    one shared cache for every project on the machine unless the user says otherwise."""
    default = Path.home() / ".cache" / "gnnbridge" / "datasets"
    return Path(root or os.environ.get(DATA_ROOT) or default).expanduser()
