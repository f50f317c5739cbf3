"""The PyG (torch_geometric) backend; torch_geometric is imported lazily inside it."""
