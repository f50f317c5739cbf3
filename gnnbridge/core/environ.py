"""The environment variables gnnbridge's own processes pass to each other, named once.

The launcher sets them for the ranks it starts, and the layers that read them (plugin loading,
mapped records) sit higher than the launcher may look: naming them here, below every layer, lets
each side use the name without importing the other only for a string.
"""

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
