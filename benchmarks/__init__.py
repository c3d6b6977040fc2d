"""Benchmark programs of DESIGN §10: run ``python -m benchmarks.<name> --help``.

They are programs with figures to read, not timed tests; docs/benchmarks.md has the
commands and the figures of the last recorded run.
"""
