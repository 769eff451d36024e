"""The project's layers only look down (docs/architecture.md, "Layers").

Every module of thunder/, dialects/ (thunder.dialects), lowering/ (thunder.lowering) and tools/
(thunder.tools) is parsed with ast (nothing is imported), and every import statement it holds, at
module level or inside a function, becomes an edge. The test fails, naming file:line and the edge, on

* an import cycle among the project's modules (function-level imports count);
* an import of a higher layer (core < interpreter < ops < dialects < lowering < runtime < API < tools);
* a function-level import of a project module, or of anything outside OPTIONAL (an optional or
  heavy dependency, imported where it is needed, with a comment on the line saying why).
"""
import ast
import functools
import pathlib
import pkgutil
import sys

import thunder.ops.vjp as vjp

ROOT = pathlib.Path(__file__).resolve().parent.parent
# the source folders of the project's packages (pyproject.toml's package-dir)
PACKAGE_DIRS = {"thunder": "thunder", "thunder.dialects": "dialects", "thunder.lowering": "lowering",
                "thunder.tools": "tools"}
# first match wins: the module name's prefix -> its layer
LAYERS = [
    ("thunder.core", 0), ("thunder.interpreter", 1), ("thunder.ops", 2), ("thunder.dialects", 3),
    ("thunder.lowering", 4), ("thunder.runtime", 5), ("thunder.tools", 7), ("thunder", 6),
]
LAYER_NAMES = ["core", "interpreter", "ops", "dialects", "lowering", "runtime", "API", "tools"]
# top-level modules that may be imported inside a function: optional or heavy dependencies
OPTIONAL = {
    "transformers",        # optional: the model suite and library paths
    "llvmlite",            # optional (the cuda extra): PTX from LLVM IR
    "cuda",                # optional (cuda-bindings): kernel launches
    "nvfuser",             # optional executor
    "torch._dynamo",       # heavy: about a second to import
    "torch._inductor",     # heavy: imported by torch._dynamo's helpers
    "torch._subclasses", "torch.fx.experimental.symbolic_shapes",  # heavy: fake tensors, sympy
    "torch._decomp",       # heavy: torch's decomposition table, for the few ops that use it
    "torch.testing._internal",  # heavy: OpInfo samples in the tools
    "numpy",               # optional
    "torch_mlir.dialects.llvm",  # heavy: the LLVM dialect's bindings, for PTX only
    "lit", "filecheck",    # optional (the test extra): the tools' checks
}


def _module_name(path):
    for pkg, d in PACKAGE_DIRS.items():
        base = ROOT / d
        if base in path.parents:
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if pkg == "thunder" and parts and parts[0] in ("dialects", "lowering", "tools"):
                continue  # (not a folder of thunder/)
            return ".".join([pkg] + parts)
    raise AssertionError(path)


def _modules():
    mods = {}
    for d in PACKAGE_DIRS.values():
        for path in sorted((ROOT / d).rglob("*.py")):
            mods[_module_name(path)] = path
    return mods


def _layer(mod):
    for prefix, layer in LAYERS:
        if mod == prefix or mod.startswith(prefix + "."):
            return layer
    raise AssertionError(mod)


class _Imports(ast.NodeVisitor):
    """(line, imported module, inside a function) for every import of a module."""

    def __init__(self, name, is_package, modules):
        self.name, self.is_package, self.modules = name, is_package, modules
        self.found, self.depth = [], 0

    def _scope(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _scope

    def visit_Import(self, node):
        for alias in node.names:
            self.found.append((node.lineno, alias.name, self.depth > 0))

    def visit_ImportFrom(self, node):
        base = node.module or ""
        if node.level:
            package = self.name if self.is_package else self.name.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{base}" if base else package
        for alias in node.names:
            # `from package import submodule` imports the submodule, `from module import name` the
            # module (_project finds the longest known prefix); outside the project, the name
            # may be a module too (from torch_mlir.dialects import llvm)
            self.found.append((node.lineno, f"{base}.{alias.name}", self.depth > 0))


@functools.cache
def _edges():
    """{module: [(line, target module or external name, in a function, source line text)]}"""
    modules = _modules()
    edges = {}
    for name, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        v = _Imports(name, path.name == "__init__.py", modules)
        v.visit(ast.parse(text, str(path)))
        edges[name] = [(line, target, inner, lines[line - 1]) for line, target, inner in v.found]
    return modules, edges


def _project(target, modules):
    """The project module an import names (the longest known prefix), or None."""
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def _where(modules, mod, line):
    return f"{modules[mod].relative_to(ROOT)}:{line}"


def test_no_import_cycles():
    modules, edges = _edges()
    graph = {m: {} for m in modules}
    for m, found in edges.items():
        for line, target, _, _ in found:
            t = _project(target, modules)
            if t is not None and t != m:
                graph[m].setdefault(t, line)
    # Tarjan's strongly connected components, iteratively
    index, low, stack, on_stack, sccs, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        scc.append(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        sccs.append(sorted(scc))
    msgs = []
    for scc in sccs:
        members = set(scc)
        inner = [f"  {_where(modules, m, line)}: {m} -> {t}" for m in scc for t, line in graph[m].items()
                 if t in members]
        msgs.append(f"cycle among {len(scc)} modules:\n" + "\n".join(inner))
    assert not msgs, "\n".join(msgs)


def test_imports_only_look_down():
    modules, edges = _edges()
    bad = []
    for m, found in edges.items():
        for line, target, _, _ in found:
            t = _project(target, modules)
            if t is not None and _layer(t) > _layer(m):
                bad.append(f"{_where(modules, m, line)}: {m} ({LAYER_NAMES[_layer(m)]}) imports {t} "
                           f"({LAYER_NAMES[_layer(t)]})")
    assert not bad, "imports going up the layer order:\n" + "\n".join(bad)


def test_function_level_imports_are_optional_dependencies():
    modules, edges = _edges()
    bad = []
    for m, found in edges.items():
        for line, target, inner, text in found:
            if not inner:
                continue
            optional = any(target == o or target.startswith(o + ".") for o in OPTIONAL)
            if _project(target, modules) is not None or not optional:
                bad.append(f"{_where(modules, m, line)}: {m} imports {target} inside a function "
                           "(import it at the top of the module)")
            elif "#" not in text:
                bad.append(f"{_where(modules, m, line)}: {m} imports {target} inside a function without "
                           "a comment saying why")
    assert not bad, "function-level imports:\n" + "\n".join(bad)


def test_the_layer_test_sees_the_project():
    # the test would pass vacuously if it read no module or no import
    modules, edges = _edges()
    assert {"thunder", "thunder.core.trace", "thunder.ops.registry", "thunder.dialects.emit",
            "thunder.lowering.fuse", "thunder.runtime.jit", "thunder.tools.opt"} <= set(modules)
    assert ("thunder.core.proxies" in {t for _, t, _, _ in edges["thunder.ops.registry"]}
            or any(t.startswith("thunder.core") for _, t, _, _ in edges["thunder.ops.registry"]))


def test_every_vjp_module_is_imported():
    # a rule module the package does not import registers nothing: its ops would silently lose
    # their rules (decomposed, or refused) in the autograd pass
    for info in pkgutil.iter_modules(vjp.__path__):
        assert f"thunder.ops.vjp.{info.name}" in sys.modules, f"thunder/ops/vjp/{info.name}.py is not imported"
