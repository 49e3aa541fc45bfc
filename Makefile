# gpu-healthcheck: top-level entry points.
#   make fake    build the simulated NVML/CUDA libraries (tests/fakegpu/build)
#   make test    the test suite (no timed assertions)
#   make bench   performance table vs floors and gcm: python3 -m tests.bench [BENCH_ARGS=...]
#   make validate  tests/gpu/validate on a real GPU node (stdlib + pynvml)
#   make man     regenerate docs/gpu-healthcheck.8 from the argparse definition
#   make deb     dist/gpu-healthcheck_VERSION_all.deb (deploy/deb/build-deb; dpkg-deb only)
#   make rpm     dist/gpu-healthcheck-VERSION-1.elN.noarch.rpm: EL=9 (default) or EL=8 [EL8_PYTHON=3.11|3.9]
PYTHON ?= python3
BENCH_ARGS ?=

.PHONY: fake test bench validate demo man deb rpm

fake:
	$(MAKE) -C tests/fakegpu

test: fake
	$(PYTHON) -m pytest -q tests

bench: fake
	$(PYTHON) -m tests.bench $(BENCH_ARGS)

validate:
	$(PYTHON) tests/gpu/validate

deb:
	deploy/deb/build-deb dist

# RPM for RHEL/Rocky 9 (EL=9) or 8 (EL=8, with AppStream's python3.11 or EL8_PYTHON=3.9).
# --nodeps where rpmbuild cannot see build dependencies as RPMs (a Debian build host).
EL ?= 9
EL8_PYTHON ?= 3.11
rpm:
	@mkdir -p dist
	@nodeps=$$(rpm -q rpm >/dev/null 2>&1 || echo --nodeps); \
	py=$$([ "$(EL)" = 8 ] && echo "--python $(EL8_PYTHON)"); \
	out=$$(deploy/rpm/build-rpm $$nodeps --el $(EL) $$py build/rpm | tail -n 1) && cp "$$out" dist/ && \
	echo "dist/$$(basename "$$out")"

man:
	$(PYTHON) docs/make-manpage > docs/gpu-healthcheck.8.new && mv docs/gpu-healthcheck.8.new docs/gpu-healthcheck.8

# demo: the incident replayed on a local 3-node Slurm cluster with simulated 8-GPU nodes.
# Sets itself up on a fresh Debian 12 machine (apt packages, a venv in .venv, the fake GPU
# libraries), needs root (munged, slurmctld, slurmd, mknod), cleans up after itself.
VENV ?= .venv
DEMO_APT = gcc make munge slurmctld slurmd slurm-client
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

demo:
	@missing=""; for p in $(DEMO_APT); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	    echo "== apt-get install$$missing"; \
	    $(SUDO) apt-get update -q && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@for unit in slurmctld slurmd munge; do $(SUDO) systemctl stop $$unit >/dev/null 2>&1 || true; done
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "== pip install -e . (into $(VENV))"
	@$(VENV)/bin/python -m pip install -q -e . nvidia-nvml-dev
	@$(MAKE) -s -C tests/fakegpu PYTHON=$(abspath $(VENV))/bin/python
	@$(SUDO) $(VENV)/bin/python -m tests.demo
