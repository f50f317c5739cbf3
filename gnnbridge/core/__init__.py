"""Backend-neutral core. Nothing in this package imports torch_geometric or dgl."""
