"""Built-in plugins that are not backends: datasets and named experiments."""
