"""python3 -m tests.bench: see tests/bench/bench.py."""
import sys

from .bench import main

sys.exit(main())
