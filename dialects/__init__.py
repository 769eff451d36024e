"""The MLIR side of thunder: the ltorch and thunder dialects, generated from the op registry."""
