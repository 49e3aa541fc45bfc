# gpu-healthcheck: top-level entry points.
#   make demo    the incident replayed on a local 3-node Slurm cluster (the main job; root)
#   make test    the test suite, in the venv .venv, on PYTEST_JOBS pytest-xdist workers (no timed
#                assertions) [PYTEST_ARGS=... PYTEST_JOBS=N; 0: in one process]
#   make test-unit  the fast layer alone (tests/unit: in-process, no fake GPUs, no Slurm), in seconds
#   make venv    make or repair .venv with the distro's python3 and install .[test] into it
#   make fake    build the simulated NVML/CUDA libraries (tests/fakegpu/build)
#   make bench   performance table vs floors and gcm, in the venv: tests.bench [BENCH_ARGS=...]
#   make validate  tests/gpu/validate on a real GPU node (stdlib + pynvml)
#   make ptx     healthcheck/read/ptx/deep_kernels.ptx and deep_tensor.ptx from their .cu (NVRTC, in the venv)
#   make ptx-check  assemble the committed PTX with ptxas for sm_70..sm_120 (tensor: sm_80..) and print each memory kernel's load width (in the venv)
#   make man     regenerate docs/gpu-healthcheck.8 from the argparse definition and the config schema, and docs/configuration.md's key reference
#   make mixin   regenerate deploy/mixin's rules, alerts and dashboards from its jsonnet (in the venv)
#   make deb     dist/gpu-healthcheck_VERSION_all.deb (deploy/deb/build-deb; dpkg-deb only)
#   make deb-spank  dist/gpu-healthcheck-spank_VERSION+slurmX.Y_ARCH.deb: the SPANK plugin built
#                against this machine's Slurm (deploy/deb/build-deb-spank; gcc, libslurm-dev)
#   make rpm     dist/gpu-healthcheck-VERSION-1.elN.noarch.rpm: EL=9 (default) or EL=8 [EL8_PYTHON=3.11|3.9]
#   make slurm-matrix  the Slurm tests against Slurm 22.05 (host), 24.11 (a Debian 13 root) and
#                26.05 (a Debian unstable root), the roots built and cached by
#                tests/slurmroot/build VERSION; needs root and debootstrap
#   make test-py313  the rest of the suite (-m "not slurm") on Python 3.13 in that root [PYTEST_ARGS=...]
#
# The distro's python3 is externally managed (PEP 668): nothing is pip-installed into it.
# Everything runs from a venv made with it (VENV_PYTHON: /usr/bin/python3 where it exists).
PYTHON ?= python3
BENCH_ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for make test: one per CPU, at most 8 (the tests wait on child processes
# more than they compute, but a worker per CPU was the quickest on 2 cores: docs/development.md)
PYTEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 8 ] && n=8; echo $$n)
VENV ?= .venv
VENV_PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || command -v python3)
VPY = $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Debian/Ubuntu packages each command needs (installed when missing).  The demo needs a
# compiler for the fake GPUs, Slurm and munge; the tests also build systemd-python.
DEMO_APT = gcc make munge slurmctld slurmd slurm-client python3-venv
TEST_APT = $(DEMO_APT) python3-dev pkg-config libsystemd-dev

.PHONY: ptx ptx-check fake test test-unit venv venv-demo apt-demo apt-test bench validate demo man mixin deb deb-spank rpm slurm-matrix test-py313

fake:
	$(MAKE) -C tests/fakegpu

# apt-get install whatever of the list is missing (only where dpkg exists; elsewhere the
# README names what to install).  Starts nothing and stops nothing: a daemon that a package
# starts is left alone; the demo and the tests run their own on their own sockets and ports.
define apt_install
	@if command -v dpkg >/dev/null 2>&1; then \
	    missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	    if [ -n "$$missing" ]; then \
	        echo "== apt-get install$$missing"; \
	        $(SUDO) apt-get update -q && \
	        $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	    fi; \
	fi
endef

apt-demo:
	$(call apt_install,$(DEMO_APT))

apt-test:
	$(call apt_install,$(TEST_APT))

# Make $(VENV) with the distro's python3, or remake it when its pip does not run (a venv
# whose interpreter was upgraded or removed), then pip install $(1) when setup.cfg or
# pyproject.toml is newer than the last install of that set.
define venv_install
	@if ! $(VPY) -m pip --version >/dev/null 2>&1; then \
	    if [ -e $(VENV) ] && [ ! -e $(VENV)/pyvenv.cfg ]; then \
	        echo "make: $(VENV) exists and is not a venv; move it away or set VENV=" >&2; exit 2; fi; \
	    echo "== $(VENV): making a venv with $(VENV_PYTHON)"; \
	    rm -rf $(VENV) && $(VENV_PYTHON) -m venv $(VENV) && $(VPY) -m pip --version >/dev/null || { \
	        echo "make: cannot make a working venv with $(VENV_PYTHON) (Debian/Ubuntu: apt-get install python3-venv)" >&2; exit 2; }; \
	fi
	@stamp=$(VENV)/.installed-$(2); \
	if [ ! -e $$stamp ] || [ setup.cfg -nt $$stamp ] || [ pyproject.toml -nt $$stamp ]; then \
	    echo "== pip install $(1) (into $(VENV))"; \
	    $(VPY) -m pip install -q $(1) && touch $$stamp; \
	fi
endef

venv: apt-test
	$(call venv_install,-e '.[test]',test)

venv-demo: apt-demo
	$(call venv_install,-e . nvidia-nvml-dev,demo)

# The whole suite, in the venv. pytest exits 5 when it collected no tests: that fails too.
# --dist loadfile: a test file runs on one worker, and the Slurm tests all on one worker, one
# after another (tests/conftest.py, pytest_xdist_make_scheduler).
test: venv
	@$(MAKE) -s -C tests/fakegpu PYTHON=$(abspath $(VPY))
	$(VPY) -m pytest -q -p no:cacheprovider -n $(PYTEST_JOBS) --dist loadfile $(PYTEST_ARGS) tests

# The unit layer (tests/README.md): pure and in-process, so it needs neither the fake GPUs nor Slurm.
test-unit: venv
	$(VPY) -m pytest -q -p no:cacheprovider tests/unit

bench: venv
	@$(MAKE) -s -C tests/fakegpu PYTHON=$(abspath $(VPY))
	$(VPY) -m tests.bench $(BENCH_ARGS)

# The deep level's kernels: one CUDA C source, its PTX committed (tests/ptx/; docs/deep.md).
ptx: venv
	$(VPY) tests/ptx/make_ptx.py

ptx-check: venv
	$(VPY) tests/ptx/ptx_check.py

validate:
	$(PYTHON) tests/gpu/validate

deb:
	deploy/deb/build-deb dist

deb-spank:
	deploy/deb/build-deb-spank dist

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
	$(PYTHON) docs/make-configdoc

# The monitoring mixin's generated files (deploy/mixin/): rules, alerts and dashboards from its
# jsonnet, with the PyPI `jsonnet` package (the [test] extra); tests/cli/test_mixin.py fails
# when the committed files differ from the source.
mixin: venv
	$(VPY) deploy/mixin/build.py

# The Slurm tests on every supported Slurm version (tests/slurmroot/matrix): 22.05 from the
# host through the venv, 24.11 in a Debian 13 root and 26.05 in a Debian unstable root that
# debootstrap builds once each and caches in /var/cache/gpu-healthcheck-ci (each with its own
# venv).  Needs root.
slurm-matrix: venv
	$(call apt_install,debootstrap debian-archive-keyring)
	@$(MAKE) -s -C tests/fakegpu PYTHON=$(abspath $(VPY))
	PYTHON=$(abspath $(VPY)) tests/slurmroot/matrix

# The rest of the suite (pytest -m "not slurm") on Python 3.13, in the same Debian 13 root
# (not in .ci/run: CI's time budget; the matrix already runs the Slurm tests there).
test-py313: venv
	$(call apt_install,debootstrap debian-archive-keyring)
	PYTHON=$(abspath $(VPY)) tests/slurmroot/run python -m pytest -q -p no:cacheprovider -m "not slurm" $(PYTEST_ARGS) tests

# demo: the incident replayed on a local 3-node Slurm cluster with simulated 8-GPU nodes.
# Sets itself up on a fresh Debian 12 / Ubuntu 24.04 machine (apt packages, a venv in .venv,
# the fake GPU libraries), needs root (munged, slurmctld, slurmd, mknod), cleans up after
# itself, and leaves the host's own munge/Slurm daemons running and untouched.
demo: venv-demo
	@$(MAKE) -s -C tests/fakegpu PYTHON=$(abspath $(VPY))
	@$(SUDO) $(VPY) -m tests.lib.demo
