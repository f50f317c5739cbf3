"""The DGL backend; dgl is imported lazily (through :mod:`.compat`) inside it."""
