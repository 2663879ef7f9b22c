"""paralog's integration tests: one package, so that every suite imports the
shared library as `tests.lib` and runs as a module from the repository root
(`/usr/bin/python3 -m tests.remote.s3`). See tests/README.md."""
