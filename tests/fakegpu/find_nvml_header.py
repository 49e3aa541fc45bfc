"""Print the path of NVIDIA's nvml.h from the pip package nvidia-nvml-dev.

Used by the Makefile (``$(PYTHON) find_nvml_header.py``).  Looks in every
site-packages directory this interpreter knows for ``nvidia/*/include/nvml.h``
(e.g. nvidia/cu13/include) and ``nvidia/include/nvml.h``.  Prints nothing and
exits 1 when there is none.
"""
import glob
import os
import site
import sys
import sysconfig


def candidates():
    dirs = []
    try:
        dirs += site.getsitepackages()
    except Exception:
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:
        pass
    paths = sysconfig.get_paths()
    dirs += [paths.get("purelib"), paths.get("platlib")]
    dirs += [p for p in sys.path if p.endswith("site-packages")]
    seen = set()
    for d in dirs:
        if not d or d in seen:
            continue
        seen.add(d)
        yield from sorted(glob.glob(os.path.join(d, "nvidia", "*", "include", "nvml.h")), reverse=True)
        yield os.path.join(d, "nvidia", "include", "nvml.h")


def main():
    for path in candidates():
        if os.path.isfile(path):
            print(path)
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
