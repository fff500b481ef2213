# sdnmpi: `make test` and `make demo` set up everything they need, idempotently.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SHARED ?= $(abspath ../shared)
CG_TRACE := $(SHARED)/workloads/pfsim-traces/cg-c-128.tar.gz

.PHONY: all test demo bench install dist lint typecheck unit deps venv clean help exp-unisonflow exp-overhead exp-allreduce exp-apps exp-bcast

all: test

help:
	@echo "make demo   install what is missing, then run the main end-to-end job"
	@echo "make test   install what is missing, then run lint, type checks and all tests"
	@echo "make install PREFIX=/usr/local [DESTDIR=] [PYTHON=/usr/bin/python3.11]  build and install (docs/INSTALL.md)"
	@echo "make dist   the sdist and wheel in dist/ (the gRPC stubs generated into them)"
	@echo "make demo-installed PREFIX=...  the emulated demo run by that installation (root)"
	@echo "make unit-user  the tests that need neither root nor a compiler (pytest -m \"not root and not toolchain\")"
	@echo "make bench  run the benchmarks (figures and ratios)"
	@echo "make fuzz [SECONDS=300]  mutate every parser's inputs; inputs tried and crashes per format"
	@echo "make exp-unisonflow  the UnisonFlow experiment on the emulated fabric (root)"
	@echo "make exp-overhead    tagging and profiling overhead: emulated fabric, then a direct link (root)"
	@echo "make exp-allreduce   SDN_MPI_Allreduce: push mode vs default routes (root)"
	@echo "make exp-miniapps    seed 001's mini-apps under Slurm: D-mod-K vs ours (root)"
	@echo "make exp-manager     Slurm jobs: start latency, concurrent jobs with the manager (root)"
	@echo "make exp-apps        LAMMPS and HPCC under Slurm: ours vs D-mod-K and ECMP (root)"
	@echo "make exp-bcast       switch-replicated MPI_Bcast vs the libraries' (root; QUICK=1: minutes)"
	@echo "make exp-netsa       NetSA: hops, collectives, NPB kernels: one switch, LACP, NetSA (root)"
	@echo "make reproduce [QUICK=1]  every seed paper's experiments, one report in out/reproduce (root)"

# System packages (apt), installed only when missing; the list grows with the project.
deps:
	@scripts/install-system-deps.sh

# make unit-user sets DEPS= (no apt, no root): the venv alone.
DEPS ?= deps
$(STAMP): pyproject.toml | $(DEPS)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# The manager's gRPC stubs, generated from proto/ (build outputs, not committed).
PROTO := proto/sdnmpi/wire/manager.proto
PB := src/sdnmpi/wire/manager_pb2.py
$(PB): $(PROTO) $(STAMP)
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=src --pyi_out=src --grpc_python_out=src $(PROTO)

.PHONY: proto
proto: $(PB)

venv: $(STAMP) $(PB)

lint: $(STAMP) $(PB)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP) $(PB)
	$(BIN)/mypy

unit: $(STAMP) $(PB) csrc
	$(BIN)/pytest -q

test: lint typecheck unit reproduce-ci

# The tests that need neither root nor a compiler (tests/conftest.py: the markers).
.PHONY: unit-user
unit-user:
	@$(MAKE) --no-print-directory DEPS= $(PB)
	$(BIN)/pytest -q -m "not root and not toolchain"

# make test's last step: the quick report (root; without root it says so and passes),
# scripts/reproduce.py --quick --strict --out out/reproduce, and what it must show
# (tests/reproduce/test_quick_report.py).
.PHONY: reproduce-ci
reproduce-ci: $(STAMP) $(PB) csrc
	@if [ "$$(id -u)" -ne 0 ]; then echo "reproduce-ci: skipped, needs root (sudo make test)"; \
	else REPRODUCE_ARGS="$(REPRODUCE_ARGS)" $(BIN)/pytest -q -s --reproduce-ci tests/reproduce; fi

demo: $(STAMP) $(PB)
	@scripts/demo.sh

BENCHMARKS := bench_core bench_routing bench_ours bench_sim bench_quality bench_jobbound bench_manager bench_multicast bench_rules bench_stream bench_controller

bench: $(STAMP)
	@for b in $(BENCHMARKS); do echo "== benchmarks/$$b.py"; $(BIN)/python benchmarks/$$b.py || exit 1; done

# Issue 12: every parser an untrusted input reaches, fuzzed for SECONDS (crashes in out/fuzz).
SECONDS ?= 300
.PHONY: fuzz
fuzz: $(STAMP) $(PB)
	$(BIN)/python scripts/fuzz.py --seconds $(SECONDS)

# Issue 5's UnisonFlow experiment (root): Bcast via spine1, Reduce via spine2, vs ECMP.
exp-unisonflow: $(STAMP)
	$(BIN)/python scripts/exp_unisonflow.py

# SDN_MPI_Allreduce (root): Allreduce time over sizes, default routes vs push mode.
exp-allreduce: $(STAMP)
	$(BIN)/python scripts/exp_allreduce.py

# Seed 001's mini-apps under Slurm (root): D-mod-K vs the manager's routes on milk.
.PHONY: exp-miniapps
exp-miniapps: $(STAMP) $(PB)
	$(BIN)/python scripts/exp_miniapps.py

# NetSA (root): hop count, collectives and NPB kernels three ways, rule install time.
.PHONY: exp-netsa
exp-netsa: $(STAMP)
	$(BIN)/python scripts/exp_netsa.py

# Many jobs under Slurm (root): job start latency and concurrent jobs, manager vs default.
.PHONY: exp-manager
exp-manager: $(STAMP) $(PB)
	$(BIN)/python scripts/exp_manager.py

# Real applications under Slurm (root): LAMMPS and HPCC, profile, pattern, three routings.
exp-apps: $(STAMP) $(PB) csrc
	$(BIN)/python scripts/exp_apps.py

# Every seed paper's experiments (root): calibrate, run each scripts/exp_*.py of the
# registry in scripts/reproduce.py, write out/reproduce/report.{md,json} and plots
# (docs/reproduce.md).  QUICK=1: the short form, minutes.  REPRODUCE_ARGS: more
# options, e.g. REPRODUCE_ARGS="--only allreduce --calibration cal.json".
.PHONY: reproduce
reproduce: $(STAMP) $(PB) csrc
	$(BIN)/python scripts/reproduce.py $(if $(filter-out 0,$(QUICK)),--quick) $(REPRODUCE_ARGS)

# Switch-replicated MPI_Bcast (root): the libraries' Bcast vs OpenFlow group trees, over
# sizes, 8 and 20 hosts, idle and with a competing job (QUICK=1: 8 hosts, 2 sizes).
exp-bcast: $(STAMP) csrc
	$(BIN)/python scripts/exp_bcast.py $(if $(filter-out 0,$(QUICK)),--quick)

# Node-side overhead (root): latency and bandwidth, plain vs tag mode vs profile mode.
exp-overhead: $(STAMP)
	$(BIN)/python scripts/exp_overhead.py
	$(BIN)/python scripts/exp_overhead.py --direct

clean:
	rm -rf $(VENV) build dist .mypy_cache .pytest_cache .ruff_cache

# Issue 16: install into PREFIX (staged under DESTDIR): a private venv with the wheel
# and the CLI, the compiled parts, the plugstack.conf line, the systemd units
# (packaging/install.sh says what goes where; docs/INSTALL.md).  PYTHON, SYSCONFDIR,
# UNITDIR, WHEEL and PIP_ARGS are passed through when given.
PREFIX ?= /usr/local
DESTDIR ?=
install: csrc
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' PYTHON='$(PYTHON)' \
	  $(if $(SYSCONFDIR),SYSCONFDIR='$(SYSCONFDIR)') $(if $(UNITDIR),UNITDIR='$(UNITDIR)') \
	  $(if $(WHEEL),WHEEL='$(WHEEL)') PIP_ARGS='$(PIP_ARGS)' packaging/install.sh

# make demo's emulated fabric run by an installation (root): its Python, its CLI, its
# sdnmpi-bench, libsdnmpi_idle.so and eBPF objects; from /tmp, no checkout on PYTHONPATH.
.PHONY: demo-installed
demo-installed:
	cd /tmp && $(PREFIX)/bin/sdnmpi-demo --no-large --out $(CURDIR)/out/demo-installed

# The sdist and the wheel (setup.py generates the gRPC stubs into the wheel).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m pip wheel --quiet --no-deps -w dist .
	$(BIN)/python -c 'from setuptools import build_meta as b; b.build_sdist("dist")'

# C parts. mpibench: build/{mpich,openmpi}/sdnmpi-bench (a flavour whose
# compiler wrapper is missing is skipped with a message).
.PHONY: csrc mpibench
csrc: mpibench replay idle sim bpf pmpi spank
mpibench:
	$(MAKE) -C csrc/mpibench
# replay: build/{mpich,openmpi}/sdnmpi-replay, the pattern replayer (and its
# MPI-free tests, build/replay/replay_tests).
.PHONY: replay
replay:
	$(MAKE) -C csrc/replay
# idle: build/idle/libsdnmpi_idle.so, makes waiting ranks sleep on the emulated cluster.
.PHONY: idle
idle:
	$(MAKE) -C csrc/idle
# sim: build/sim/libsdnmpi_sim.so, the flow simulator's phase engine in C (the
# numpy engines give the same results without it, slower), and its unit tests.
.PHONY: sim
sim:
	$(MAKE) -C csrc/sim
	$(MAKE) -C csrc/sim unit
# pmpi: build/{mpich,openmpi}/libsdnmpi.so, the LD_PRELOAD PMPI library.
.PHONY: pmpi
pmpi:
	$(MAKE) -C csrc/pmpi
# bpf: build/bpf/tagger.bpf.o (eBPF TC egress tagger) and the tag-layout C test.
.PHONY: bpf
bpf:
	$(MAKE) -C csrc/bpf
# spank: build/spank/sdnmpi_spank.so, the Slurm SPANK plugin (C++, gRPC client of the manager).
.PHONY: spank
spank:
	$(MAKE) -C csrc/spank
