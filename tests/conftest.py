import sys, os; sys.path.insert(0, os.path.dirname(__file__))

# the disk cache of compiled kernels (thunder.lowering.linalg.disk_cache) is off for the test
# session (storing links a shared library per kernel; tests/test_linalg_disk_cache.py points it at
# its own directories), so tests never read or fill the user's cache. THUNDER_TEST_KERNEL_CACHE
# names a directory to keep between sessions instead (entries are keyed by content: safe to reuse).
os.environ["THUNDER_KERNEL_CACHE"] = os.environ.get("THUNDER_TEST_KERNEL_CACHE") or "off"
