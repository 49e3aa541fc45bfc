"""Benchmark of gpu-healthcheck against its floors and gcm (python3 -m tests.bench)."""
