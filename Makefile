# paralog: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (scripts/setup.sh, idempotent).

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
TARGET := target/release

.PHONY: all setup build shims demo test test-rust test-capture test-server test-aggregate test-objects test-stream test-crash-long test-stream-long test-shared-stress test-remote test-cluster test-slurm setup-test lint bench-log clean bench bench-quick bench-e2e bench-micro setup-bench bench-aggregate bench-aggregate-s3 bench-rounds bench-objects bench-objects-cost bench-streams bench-streams-nodes bench-streams-idle

all: build

setup:
	@bash scripts/setup.sh

SHIMS := $(TARGET)/libparalog_mpi_mpich.so $(TARGET)/libparalog_mpi_openmpi.so \
	$(TARGET)/libparalog_coord_mpich.so $(TARGET)/libparalog_coord_openmpi.so \
	$(TARGET)/libparalog_stream.so \
	$(TARGET)/libparalog_stream_mpi_mpich.so $(TARGET)/libparalog_stream_mpi_openmpi.so \
	$(TARGET)/paralog-h5view \
	$(TARGET)/libparalog_obj_mpi_mpich.so $(TARGET)/libparalog_obj_mpi_openmpi.so

build: setup
	$(CARGO) build --release --workspace --locked
	$(MAKE) --no-print-directory shims

# The MPI shim, compiled by each MPI's own mpicc; --as-needed keeps libmpi
# out of its dependencies (it is preloaded into non-MPI processes too).
shims: $(SHIMS)

$(TARGET)/libparalog_mpi_%.so: crates/capture/mpi/paralog_mpi.c
	mpicc.$* -O2 -Wall -Wextra -Werror -shared -fPIC -Wl,--as-needed -o $@ $<
	@! readelf -d $@ | grep -q 'NEEDED.*libmpi' || { echo "$@ must not depend on libmpi"; rm -f $@; exit 1; }

# The servers' MPI operations (a server job): linked with its MPI, loaded by
# `paralog server` at run time.
$(TARGET)/libparalog_coord_%.so: crates/server/mpi/paralog_coord.c
	mpicc.$* -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $<

# The streams' C library (paralog/stream.h): cargo names it after its
# crate; programs link it as libparalog_stream.so (its soname, build.rs).
$(TARGET)/libparalog_stream.so: $(TARGET)/libparalog_stream_c.so
	cp $< $@

$(TARGET)/libparalog_stream_c.so: $(wildcard crates/stream-c/src/*.rs crates/stream/src/*.rs crates/stream/src/*/*.rs)
	$(CARGO) build --release --locked -p paralog-stream-c

# Its collective forms (paralog/stream_mpi.h), compiled by each MPI's mpicc.
STREAM_INC := crates/stream-c/include
$(TARGET)/libparalog_stream_mpi_%.so: crates/stream-c/mpi/paralog_stream_mpi.c $(STREAM_INC)/paralog/stream.h $(STREAM_INC)/paralog/stream_mpi.h $(TARGET)/libparalog_stream.so
	mpicc.$* -O2 -Wall -Wextra -Werror -shared -fPIC -I$(STREAM_INC) -o $@ $< -L$(TARGET) -lparalog_stream -Wl,-rpath,'$$ORIGIN'

# The HDF5 view's writer (docs/objects.md): Debian ships HDF5 only built
# for an MPI, so it links MPICH's (it calls no MPI); found next to paralog.
$(TARGET)/paralog-h5view: crates/objects/h5view/paralog_h5view.c
	mpicc.mpich -O2 -Wall -Wextra -Werror $$(pkg-config --cflags hdf5-mpich) -o $@ $< $$(pkg-config --libs hdf5-mpich)

# The MPI form of the objects' C API (paralog/objects_mpi.h): only MPI
# calls over libparalog_obj.so (cargo), found beside it at run time.
$(TARGET)/libparalog_obj_mpi_%.so: crates/objects-c/mpi/paralog_obj_mpi.c crates/objects-c/include/paralog/objects_mpi.h $(TARGET)/libparalog_obj.so
	mpicc.$* -O2 -Wall -Wextra -Werror -shared -fPIC -Icrates/objects-c/include -o $@ $< -L$(TARGET) -lparalog_obj -Wl,-rpath,'$$ORIGIN'

demo: build
	@bash scripts/demo.sh

setup-test: setup
	@bash scripts/setup.sh --test

test: build setup-test lint test-rust test-capture test-server test-aggregate test-objects test-stream test-remote test-cluster test-slurm

# The Rust tests; the backend conformance suite
# (crates/server/tests/conformance.rs) runs its S3 part against the MinIO
# that setup-test builds (without MINIO_TEST_BINARY it skips S3, and says so).
test-rust: setup-test
	MINIO_TEST_BINARY=$(CURDIR)/target/go/bin/minio $(CARGO) test --release --workspace --locked

# Real MPI programs under capture with MPICH, Open MPI/OMPIO and Open MPI/ROMIO,
# compared byte for byte with direct MPI-IO at every epoch.
test-capture: build
	/usr/bin/python3 -m tests.capture.run
	/usr/bin/python3 -m tests.capture.bad_input
	/usr/bin/python3 -m tests.capture.invariants

# The node server: real programs under `paralog run` (all MPI modes, drained
# to the prefix and to a separate remote), read-back while draining, start-up
# scan, damaged epochs, a failing remote (tmpfs full / read-only), recover;
# and programs as they really write files (stdio, streams, rename, shells);
# `paralog run --report` checked in headless Chromium (scripts/setup.sh --test).
test-server: build
	/usr/bin/python3 -m tests.server.e2e
	/usr/bin/python3 -m tests.server.crash
	/usr/bin/python3 -m tests.correctness.mpi_order
	/usr/bin/python3 -m tests.correctness.posix_processes
	/usr/bin/python3 -m tests.correctness.mpi_flavour
	/usr/bin/python3 -m tests.correctness.run_summary
	/usr/bin/python3 -m tests.correctness.report
	/usr/bin/python3 -m tests.correctness.hdf5_examples
	/usr/bin/python3 -m tests.correctness.pnetcdf_examples
	/usr/bin/python3 -m tests.correctness.posix_programs
	/usr/bin/python3 -m tests.correctness.posix_programs --remote prefix
	/usr/bin/python3 -m tests.correctness.open_remote
	/usr/bin/python3 -m tests.correctness.library_suites
	/usr/bin/python3 -m tests.correctness.doctor
	/usr/bin/python3 -m tests.correctness.bad_commands

# N-to-K checkpoint aggregation (docs/aggregate.md): a file-per-process
# writer (forked processes; 4 MPICH and Open MPI ranks, POSIX calls or MPI-IO
# on MPI_COMM_SELF) under `paralog run --aggregate`,
# K = 1, 2, 4; sets, extract and restart reads in a new job against direct
# runs; damage; a crash between containers and record, then recover.
test-aggregate: build setup-test
	/usr/bin/python3 -m tests.aggregate.run

# Array objects (docs/objects.md): `paralog obj` puts and gets on objstore://
# and a plain directory, every version's Zarr view read by zarr-python 3 and
# tensorstore (the virtual environment scripts/setup.sh --test makes), its
# HDF5 view by h5py, h5dump and a C program; the C API's chunked PUT by
# MPICH and Open MPI programs on 1, 2 and 4 ranks; the Python module;
# logged puts published by the node server and by recover; kill -9 of a
# writing rank, the committing rank and the server, then recover
# (tests/objects/crash.py, about 30 s); logged puts across 2 simulated
# nodes on objstore:// and s3://, with servers killed, and published by a
# server job (tests/objects/nodes.py with tests/objects/nodes_job.py,
# about 75 s + 15 s); puts and gets on s3:// against MinIO (tests/objects/s3.py); what a version costs in fsyncs and views made
# after the commit (tests/objects/cost.py, about 15 s); the HDF5 view's
# co-process: restarted, failures, exits (tests/objects/views.py, about 10 s).
test-objects: build setup-test
	/usr/bin/python3 -m tests.objects.run
	/usr/bin/python3 -m tests.objects.cost
	/usr/bin/python3 -m tests.objects.views
	/usr/bin/python3 -m tests.objects.mpi
	/usr/bin/python3 -m tests.objects.logged
	/usr/bin/python3 -m tests.objects.crash
	/usr/bin/python3 -m tests.objects.nodes
	/usr/bin/python3 -m tests.objects.s3

# Shared event streams on one node (docs/streams.md): 4 producer processes
# x 3 partitions x 50,000 events drained while they run, two reader groups,
# a re-drain byte for byte, producers killed with SIGKILL, one fdatasync per
# flush (strace), damage named by file and offset (about 20 s); then the C
# API and Python module: MPICH and Open MPI ranks producing through
# paralog/stream.h, Python producers (mpi4py) and a following reader, bad
# input (about 15 s); backpressure (a quota of undrained bytes) and
# retention (`stream trim`) (about 5 s); local retention: MPICH and Open
# MPI ranks appending with a segment roll while a drain deletes what it
# published, the node's bytes bounded (about 12 s); streams drained to S3 (a real
# MinIO on loopback) and objstore://, read back equal to a directory's,
# MinIO restarted during a drain, a damaged object named (about 20 s).
test-stream: build setup-test
	/usr/bin/python3 -m tests.stream.run
	/usr/bin/python3 -m tests.stream.api
	/usr/bin/python3 -m tests.stream.retention
	/usr/bin/python3 -m tests.stream.local_retention
	/usr/bin/python3 -m tests.stream.nodes
	/usr/bin/python3 -m tests.stream.objects
	/usr/bin/python3 -m tests.stream.object_retention
	/usr/bin/python3 -m tests.stream.recover
	/usr/bin/python3 -m tests.stream.kills

# Streams killed at random points, 500 trials (about 25 minutes).
test-stream-long: build setup-test
	/usr/bin/python3 -m tests.stream.kills --trials 500

# The long crash run (500 randomized trials, about 10 minutes).
test-crash-long: build
	/usr/bin/python3 -m tests.server.crash --trials 500

# Concurrent writers of one redirected stdout (make -j style), RUNS runs
# under `paralog run`, every line counted (about 30 s a run; by hand).
RUNS ?= 30
test-shared-stress: build
	/usr/bin/python3 -m tests.correctness.shared_stress --runs $(RUNS)

# Object remotes: S3 against a real MinIO started on loopback, and the
# versioned object layout.
test-remote: build setup-test
	/usr/bin/python3 -m tests.remote.s3
	/usr/bin/python3 -m tests.remote.objstore

# A real Slurm started by the test on this machine (one node): the shipped
# examples/slurm/job.sh submitted with sbatch, MPICH and Open MPI, scancel.
test-slurm: build setup-test
	/usr/bin/python3 -m tests.slurm.run

# Many nodes on one machine: simulated nodes under a server job (MPICH and
# Open MPI), every remote, server and application failures.
test-cluster: build setup-test
	/usr/bin/python3 -m tests.cluster.run
	/usr/bin/python3 -m tests.cluster.netns

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets --locked -- -D warnings

bench-log: build
	$(CARGO) bench -p paralog-log --bench log_vs_raw --locked
	$(CARGO) bench -p paralog-log --bench write_cpu --locked

# The end-to-end benchmark against a bandwidth-limited remote (network
# namespaces, veth, tc tbf 200 Mbit/s, MinIO and sshfs; needs root) and the
# micro benchmarks; docs/benchmarks.md sections 6 and 7 (about 35 minutes;
# `make bench-quick`: a few). Plots go to docs/img/.
setup-bench: setup
	@bash scripts/setup-bench.sh

bench: build setup-test setup-bench
	/usr/bin/python3 bench/e2e/run.py $(E2E_FLAGS)
	/usr/bin/python3 bench/micro.py $(MICRO_FLAGS)

bench-quick: build setup-test setup-bench
	/usr/bin/python3 bench/e2e/run.py --quick --plots "" $(E2E_FLAGS)
	/usr/bin/python3 bench/micro.py --quick --plots "" $(MICRO_FLAGS)

bench-e2e: build setup-test setup-bench
	/usr/bin/python3 bench/e2e/run.py $(E2E_FLAGS)

bench-micro: build setup-bench
	/usr/bin/python3 bench/micro.py $(MICRO_FLAGS)

# Array objects against parallel HDF5 and zarr-python, on the local disk and
# the bandwidth-limited remote of bench-e2e (root): docs/benchmarks.md
# section 11; about 10 minutes (OBJ_FLAGS=--quick: a few).
bench-objects: build setup-test setup-bench
	/usr/bin/python3 bench/objects/run.py $(OBJ_FLAGS)

# One logged put's publish on that remote, system call by system call
# (strace): docs/objects.md "A logged publish on sshfs"; about 2 minutes
# (OBJ_COST_FLAGS='--bin DIR': another build's binaries).
bench-objects-cost: build setup-test setup-bench
	/usr/bin/python3 bench/objects/publish_cost.py $(OBJ_COST_FLAGS)

# Shared event streams against Apache Kafka (one KRaft broker on loopback),
# raw append + fdatasync and (as root) a shared file on the sshfs remote:
# docs/benchmarks.md section 12; about 30 minutes (STREAMS_FLAGS=--quick:
# about 6). Not part of `make test`.
bench-streams: build setup-bench
	/usr/bin/python3 bench/streams/run.py $(STREAMS_FLAGS)

# What 100 idle streams cost the one-node server in CPU over a minute
# (docs/benchmarks.md section 12, "Idle streams"); before and after a
# change: STREAMS_IDLE_FLAGS="--before /path/to/an/earlier/paralog".
bench-streams-idle: build
	/usr/bin/python3 bench/streams/idle.py $(STREAMS_IDLE_FLAGS)

# The SLoG shapes across 1, 2 and 4 simulated nodes (a server job):
# docs/benchmarks.md section 12, "Across nodes" (about 5 minutes).
bench-streams-nodes: build setup-test
	/usr/bin/python3 bench/streams/nodes.py $(STREAMS_NODES_FLAGS)

# Drain with many nodes (network namespaces; needs root): docs/benchmarks.md section 8.
bench-cluster: build setup-test
	/usr/bin/python3 bench/cluster_drain.py $(CLUSTER_FLAGS)

# N-to-K checkpoint aggregation against file-per-process and N-1 on 4
# simulated nodes behind a tc-capped sshfs link (root): docs/benchmarks.md
# section 9. AGG_FLAGS="--repeat 3 --mib 16 --steps 3" for the full run.
bench-aggregate: build setup-test setup-bench
	/usr/bin/python3 bench/aggregate.py $(AGG_FLAGS)

# Checkpoint sets on S3 (MinIO on loopback) by a server job of simulated
# nodes: --agg-mode leader against own (docs/benchmarks.md section 9, "On
# S3"; a few minutes).
bench-aggregate-s3: build setup-test
	/usr/bin/python3 bench/aggregate_s3.py $(AGG_S3_FLAGS)

# What a round of the server job costs against nodes and pending epochs
# (simulated nodes: servers of one mpirun on this machine; a few minutes):
# docs/benchmarks.md section 10, the cost model in docs/cluster.md.
bench-rounds: build
	$(CARGO) build --release --locked -p paralog-log --example pending_logs
	/usr/bin/python3 bench/rounds.py $(ROUNDS_FLAGS)

clean:
	$(CARGO) clean
