"""gpu-healthcheck: GPU node health checks for Slurm Prolog, Epilog and HealthCheckProgram."""

__version__ = "0.1.0"
