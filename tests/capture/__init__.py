"""Capture tests: real MPI programs under capture, bad input, invariants."""
