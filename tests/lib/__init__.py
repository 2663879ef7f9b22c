"""The test library every suite under tests/ uses (standard library only;
the suites run with /usr/bin/python3):

  paths     the repository, the built binaries and tools
  proc      running a command (its own session, a time limit that ends the
            whole process tree, a non-zero exit raised as Failed), killing a
            process group, a free loopback port, the transcript of
            everything paralog printed
  check     Failed, check, fail, and the case runner (Suite: a work
            directory per case, one PASS/FAIL/SKIP line each, the closing
            "NAME: N passed, N failed" line and the exit status)
  paralog   the paralog command line: a clean environment, `paralog env`
            (capture without a server), `paralog run`, status, inspect
  mpi       the MPI modes, launchers, the environment for Open MPI as root,
            building and running the programs of tests/mpi, compiling
  compare   byte and tree comparisons with the first difference named
  server    one request to a server's socket, a `paralog server` of our
            own, a server job on simulated nodes (SimCluster)
  minio     a MinIO on a free loopback port, and awscli against it

and one test program shared by several suites, run by path:
  posix_writer.py  a deterministic one-process POSIX writer with its
            expected bytes at every epoch
"""
