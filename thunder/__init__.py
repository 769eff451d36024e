"""Thunder on MLIR."""
