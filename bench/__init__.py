"""Benchmarks behind `make bench`; each module returns a markdown section for docs/BENCHMARKS.md."""
