# paralog: `make demo` runs the main job, `make test` runs every test.
# Both install what is missing first (scripts/setup.sh, idempotent).

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
TARGET := target/release

.PHONY: all setup build demo test test-rust lint bench-log clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	$(CARGO) build --release --workspace --locked

demo: build
	@bash scripts/demo.sh

test: build lint test-rust

test-rust:
	$(CARGO) test --release --workspace --locked

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --release --workspace --all-targets --locked -- -D warnings

bench-log: build
	$(CARGO) bench -p paralog-log --bench log_vs_raw --locked

clean:
	$(CARGO) clean
