"""Reproducibility: the numerics pin and its checks, the GPU records, and `paths`, the only
module of the library that knows the book's folders."""
