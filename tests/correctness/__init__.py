"""Correctness suites: real programs under `paralog run` against direct runs."""
