"""Code objects of generated sources (programs, prologues). The last few compiled are kept by
their source's hash, so a program stored on disk (runtime/persist.py) is stored with its code
objects as marshal bytes, and a second process loading it skips `compile()`: at 24 layers a
third of the load. marshal's format is the Python version's: the program cache's key holds
`sys.version`."""
import collections
import hashlib
import marshal
import threading

_KEEP = 64  # sources: a program's prologue (checked and unchecked), computation, forward, backward(s)
_compiled = collections.OrderedDict()  # (filename, sha256 of the source) -> code object
_lock = threading.Lock()


def _key(source, filename):
    return filename, hashlib.sha256(source.encode()).digest()


def compiled(source, filename):
    """compile(source, filename, "exec"), or the code object compiled or loaded before."""
    k = _key(source, filename)
    with _lock:
        code = _compiled.get(k)
    if code is None:
        code = compile(source, filename, "exec")
        _keep(k, code)
    return code


def _keep(k, code):
    with _lock:
        _compiled[k] = code
        _compiled.move_to_end(k)
        while len(_compiled) > _KEEP:
            _compiled.popitem(last=False)


def dump(sources):
    """{(filename, hash): marshal bytes} of those (source, filename) compiled recently."""
    out = {}
    for source, filename in sources:
        k = _key(source, filename)
        with _lock:
            code = _compiled.get(k)
        if code is not None:
            out[k] = marshal.dumps(code)
    return out


def load(dumped):
    """Keep the code objects of dump()'s result (from a program file whose integrity was checked)."""
    for k, data in dumped.items():
        _keep(k, marshal.loads(data))
