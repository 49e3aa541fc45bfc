"""Bench-only hook: where BENCH_HWM_FILE is set, write this process's VmHWM (KiB) there at exit.

Put on PYTHONPATH by tests/bench/harness.py for every measured Python run (floors included), so
the peak RSS of the main process is measured exactly; forked children that leave by os._exit
never run it, and a guard on the pid keeps any that do from overwriting the parent's figure.
"""
import os

_path = os.environ.get("BENCH_HWM_FILE")
if _path:
    import atexit

    _pid = os.getpid()

    def _write_hwm() -> None:
        if os.getpid() != _pid:
            return
        try:
            with open("/proc/self/status") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        with open(_path, "w") as out:
                            out.write(line.split()[1])
                        return
        except OSError:
            pass

    atexit.register(_write_hwm)
