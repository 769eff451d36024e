# lit configuration for thunder's MLIR trace tests: RUN: thunder-opt %s ... | filecheck %s
import os
import sys

import lit.formats

config.name = "thunder"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["lit.cfg.py", "Output"]
# thunder-opt and filecheck come from the Python environment that runs lit
bindir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bindir, os.environ.get("PATH", "")])
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"
for var in ("HOME", "TMPDIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
