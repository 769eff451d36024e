import sys, os; sys.path.insert(0, os.path.dirname(__file__))

# the disk cache of compiled kernels (thunder.lowering.linalg.disk_cache): a fresh directory for
# the test session, so tests never read or fill the user's cache
import atexit as _atexit, shutil as _shutil, tempfile as _tempfile  # noqa: E401,E402
os.environ["THUNDER_KERNEL_CACHE"] = _tempfile.mkdtemp(prefix="thunder-kernel-cache-")
_atexit.register(_shutil.rmtree, os.environ["THUNDER_KERNEL_CACHE"], True)
