# gpu-healthcheck: top-level entry points.
#   make fake    build the simulated NVML/CUDA libraries (tests/fakegpu/build)
#   make test    the test suite (no timed assertions)
#   make bench   performance table vs floors and gcm: python3 -m tests.bench [BENCH_ARGS=...]
#   make validate  tests/gpu/validate on a real GPU node (stdlib + pynvml)
PYTHON ?= python3
BENCH_ARGS ?=

.PHONY: fake test bench validate demo

fake:
	$(MAKE) -C tests/fakegpu

test: fake
	$(PYTHON) -m pytest -q tests

bench: fake
	$(PYTHON) -m tests.bench $(BENCH_ARGS)

validate:
	$(PYTHON) tests/gpu/validate

# ---------------------------------------------------------------------------------------------
# demo: TO BE FILLED BY THE LEAD (left empty on purpose; keep the target name).
demo:
	@echo "make demo: not written yet (placeholder for the lead)"
# ---------------------------------------------------------------------------------------------
