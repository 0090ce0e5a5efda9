"""Benchmarks; each module runs as a script and exposes its measuring functions for reuse."""
