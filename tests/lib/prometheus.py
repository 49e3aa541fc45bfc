"""Debian's promtool, prometheus and node_exporter for the tests, and a hermetic stack of the
last two: node_exporter's textfile collector on a tmp folder, a Prometheus scraping it every
second with our alert rules loaded, both on free loopback ports with tmp storage, stopped (by
their own pids) at the end.

    tool("promtool")                         # the path, or pytest.skip / pytest.fail (below)
    with PromStack(tmp_path, rules) as stack:
        stack.textfile_dir                   # where metrics_file goes
        stack.wait_value("gpu_healthcheck_gpus_marked_rma_total", 1)
        stack.wait_alert("GpuHealthcheckGpuMarkedRma", "firing")

The binaries come from tests/lib/fetch-prometheus (the .debs unpacked, never installed: the
package would start a host service) in $GPU_HEALTHCHECK_PROMETHEUS_DIR or
/var/cache/gpu-healthcheck-ci/prometheus, else from PATH.  Under .ci/run
(GPU_HEALTHCHECK_REQUIRE_PROMETHEUS=1) a missing one fails the test instead of skipping it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from tests.lib.slurmcluster import free_ports

CACHE = Path("/var/cache/gpu-healthcheck-ci/prometheus")
NAMES = {"promtool": ("promtool",), "prometheus": ("prometheus",),
         "node_exporter": ("prometheus-node-exporter", "node_exporter")}


def find_tool(name: str) -> Optional[str]:
    """The unpacked package's binary, else one on PATH, else None."""
    roots = [Path(os.environ["GPU_HEALTHCHECK_PROMETHEUS_DIR"])] if os.environ.get(
        "GPU_HEALTHCHECK_PROMETHEUS_DIR") else []
    for root in roots + [CACHE]:
        for exe in NAMES[name]:
            path = root / "usr" / "bin" / exe
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return next((p for p in (shutil.which(exe) for exe in NAMES[name]) if p), None)


def tool(name: str) -> str:
    path = find_tool(name)
    if path is None:
        why = (f"{name} not found (run tests/lib/fetch-prometheus: it unpacks Debian's "
               f"prometheus and prometheus-node-exporter into {CACHE})")
        if os.environ.get("GPU_HEALTHCHECK_REQUIRE_PROMETHEUS"):
            pytest.fail(f"required by GPU_HEALTHCHECK_REQUIRE_PROMETHEUS but {why}")
        pytest.skip(why)
    return path


def poll(what: str, probe: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
    """probe() until it returns something true; its last error or value in the timeout message."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except (OSError, ValueError) as exc:  # not listening yet, or a half-written answer
            last = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s; last: {last!r}")
        time.sleep(interval)


class PromStack:
    def __init__(self, wd: Path, rules: Optional[Path] = None) -> None:
        self.wd = wd
        self.textfile_dir = wd / "textfile"
        self.rules = rules
        self.procs: List[subprocess.Popen] = []
        self.logs: Dict[str, Path] = {}
        self.exporter_port, self.prom_port = free_ports(2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    def _spawn(self, name: str, argv: List[str]) -> None:
        log = self.wd / f"{name}.log"
        self.logs[name] = log
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, cwd=self.wd))

    def __enter__(self) -> "PromStack":
        try:
            self.start_exporter("node_exporter", self.exporter_port, self.textfile_dir)
            self.start_prometheus([{"targets": [f"127.0.0.1:{self.exporter_port}"]}])
        except BaseException:
            self.stop()
            raise
        return self

    def start_exporter(self, name: str, port: int, textfile_dir: Path) -> None:
        """A node_exporter with only its textfile collector, on textfile_dir."""
        textfile_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(name, [tool("node_exporter"), f"--web.listen-address=127.0.0.1:{port}",
                           "--collector.disable-defaults", "--collector.textfile",
                           f"--collector.textfile.directory={textfile_dir}"])

    def start_prometheus(self, static_configs: List[Dict[str, Any]]) -> None:
        """Prometheus scraping these targets (job "node") every second with the rules loaded,
        once it answers /-/ready."""
        (self.wd / "tsdb").mkdir(parents=True, exist_ok=True)
        config = self.wd / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.rules)] if self.rules else [],
            "scrape_configs": [{"job_name": "node", "static_configs": static_configs}]}))
        self._spawn("prometheus", [
            tool("prometheus"), f"--config.file={config}",
            f"--storage.tsdb.path={self.wd / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{self.prom_port}"])
        poll("Prometheus ready", lambda: self._get("/-/ready", raw=True))

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        self.procs = []

    def log_tails(self) -> str:
        return "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-3000:]}"
                         for n, p in self.logs.items() if p.exists())

    def _get(self, path: str, raw: bool = False) -> Any:
        with urllib.request.urlopen(self.url + path, timeout=5) as answer:
            body = answer.read().decode()
        return body if raw else json.loads(body)

    def query(self, expr: str) -> List[Dict[str, Any]]:
        """/api/v1/query's result vector for expr."""
        doc = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def wait_value(self, expr: str, value: float, timeout: float = 60.0) -> List[Dict[str, Any]]:
        """Poll the query until every series it returns (at least one) has this value."""
        def probe() -> Any:
            result = self.query(expr)
            return result if result and all(float(r["value"][1]) == value for r in result) else None
        return poll(f"{expr} == {value}", probe, timeout)

    def alerts(self) -> List[Dict[str, Any]]:
        return self._get("/api/v1/alerts")["data"]["alerts"]

    def wait_alert(self, name: str, state: str = "firing", timeout: float = 60.0) -> Dict[str, Any]:
        return poll(f"alert {name} {state}", lambda: next(
            (a for a in self.alerts() if a["labels"].get("alertname") == name and a["state"] == state),
            None), timeout)
