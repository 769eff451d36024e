"""Outlining: repeated runs of statements in a generated program (a model's layers) become one
Python function defined once in the same source and called once per copy.

codegen.python_source hands over the program's body as records (Stmt: one statement's code, its
comment, the `del` lines after it; Del: a `del` line before any statement). Repetition is found
on the statement sequence, not on modules (a fusion region may hold one layer's residual add and
the next layer's norm; layer 0 computes tables the others reuse):

- each statement's key is its code with the program's local names erased and each fusion callee
  replaced by its kernel identity (identical regions of different layers have different names,
  one kernel text);
- candidate periods P are the distances between statements of one key (to its last RECENT
  occurrences; most frequent first); for each, the longest stretch where key[i] == key[i + P];
  the one covering most statements wins (P >= MIN_PERIOD, at least two copies);
- every copy is checked against the block's first copy for real alpha-equivalence (a consistent
  bijection of local names, the same kernels, identical literals); copies that fail are left
  inline; then the rest of the program is searched again (another kind of block).

A block is `def _block_0(_args):` taking its free names in a list it clears (so the caller holds
no reference during the call and a tensor dies at its last use inside the block, as it did
inline), copy 0's statements verbatim, a `del` after each name's last use, and returning the
names some copy uses after its window. The caller deletes the free names that the inline
program deleted inside the window before the call, and the returned names it does not use
after it. When nothing is outlined the body is the inline program, line for line."""
import collections
import itertools
import keyword
import re

ENABLED = True  # (tests and benchmarks compare with it off)
MIN_PERIOD = 8  # statements of the smallest block worth a function
MAX_PASSES = 4  # searches for another kind of block after the first
MAX_CANDIDATES = 16  # periods tried per search
RECENT = 8  # earlier statements of one key a statement's distances are taken to (a layer's
# statement repeated within it, a linear's, still gives the distance to its copy in the layer before)
BLOCK_PREFIX = "_block_"
ARGS = "_args"  # (reserved in the program's names by codegen)

# a string literal (kept whole), or a name not after a dot and whether `=` follows it (a keyword
# argument's name, after the statement's targets)
_NAME = re.compile(r"""[rRbBfFuU]{0,2}(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")"""
                   r"""|(?<![\w.])([A-Za-z_]\w*)(\s*=(?!=))?""")
_TARGETS = re.compile(r"([A-Za-z_][\w ,]*?)\s*=(?!=)")  # `t1, t2 = ...`


class Stmt:
    """One statement of the program: code (without its comment), comment (or None), the names
    of the `del` lines after it (a list per line); fixed: never in a block (the return, the
    write-backs of mutated inputs)."""
    __slots__ = ("code", "comment", "dels", "fixed")

    def __init__(self, code, comment=None, fixed=False):
        self.code, self.comment, self.dels, self.fixed = code, comment, [], fixed

    def line(self):
        return f"  {self.code}  # {self.comment}" if self.comment else f"  {self.code}"


class Del:
    """A `del` line with no statement before it in the body."""
    __slots__ = ("names",)

    def __init__(self, names):
        self.names = names


def add_dels(records, names):
    """Records `del names` after what records holds so far."""
    if not names:
        return
    if records and isinstance(records[-1], Stmt):
        records[-1].dels.append(names)
    else:
        records.append(Del(names))


def inline_lines(records):
    out = []
    for r in records:
        if isinstance(r, Del):
            out.append(_del_line(r.names))
            continue
        out.append(r.line())
        out += [_del_line(d) for d in r.dels]
    return out


def _del_line(names, indent="  "):
    return f"{indent}del {', '.join(names)}"


class _Parsed:
    """A statement's key (its code with local names erased and fusion callees replaced by their
    kernel's identity), its local names in order, those it defines and those it uses."""
    __slots__ = ("key", "names", "defs", "uses")


def _parse(code, local_names, kernel_id):
    p = _Parsed()
    p.names, p.defs, p.uses = [], [], []
    targets = _TARGETS.match(code)
    start = 0
    if targets:
        for t in targets.group(1).replace(",", " ").split():
            if t not in local_names:
                break
        else:
            p.defs = targets.group(1).replace(",", " ").split()
            p.names += p.defs
            start = targets.end()

    def erase(m):
        name = m.group(1)
        if name is None or m.group(2):
            return m.group()  # (a string literal; a keyword argument)
        if name in local_names:
            p.names.append(name)
            p.uses.append(name)
            return "\0"
        k = kernel_id(name)
        return m.group() if k is None else f"\1{k}\1"

    p.key = "\0 " * len(p.defs) + "=" + _NAME.sub(erase, code[start:]) if start else _NAME.sub(erase, code)
    return p


class _Block:
    def __init__(self, base, period):
        self.base, self.period = base, period
        self.copies = []  # (start, base name -> this copy's name)


def outline(records, params, local_names, kernel_id, reserved):
    """(the block functions' lines, the body's lines) for records, or None where nothing is
    outlined. params: the function's parameters; local_names: every name the body binds (and
    params); kernel_id(name): an identity of the fusion kernel `name` calls, or None if `name`
    is none; reserved: names the source uses already (the block names avoid them)."""
    if not ENABLED:
        return None
    stmts = [r for r in records if isinstance(r, Stmt)]
    n = len(stmts)
    if n < 2 * MIN_PERIOD:
        return None
    local_names = {x for x in local_names if not keyword.iskeyword(x)}
    kernels = {}  # kernel text -> a small number (keys hold it rather than the text)

    def kernel_number(name):
        text = kernel_id(name)
        return None if text is None else kernels.setdefault(text, len(kernels))

    parsed = [_parse(s.code, local_names, kernel_number) for s in stmts]
    last_use = _checked_uses(parsed, params)
    if last_use is None:
        return None  # (a statement the parse misreads: left as it is)
    interned = {}
    keys = [-1 - i if s.fixed else interned.setdefault(p.key, len(interned))
            for i, (s, p) in enumerate(zip(stmts, parsed))]
    blocks = []
    for _ in range(MAX_PASSES):
        run = _best_run(keys)
        if run is None:
            break
        start, period, count = run
        added = False
        for c in range(count):
            s = start + c * period
            target = None
            for b in blocks:
                if b.period == period:
                    mapping = _equivalent(parsed, b.base, s, period)
                    if mapping is not None:
                        target = (b, mapping)
                        break
            if target is None:
                b = _Block(s, period)
                blocks.append(b)
                target = (b, _equivalent(parsed, s, s, period))
            target[0].copies.append((s, target[1]))
        for b in blocks:
            if len(b.copies) < 2:
                continue
            for s, _ in b.copies:
                if keys[s] >= 0:
                    added = True
                for i in range(s, s + b.period):
                    keys[i] = -1 - i  # (covered: matches nothing again)
        for i in range(start, start + count * period):
            if keys[i] >= 0:
                keys[i] = -1 - i  # (copies that failed the check: not tried again)
        blocks = [b for b in blocks if len(b.copies) >= 2]
        if not added:
            break
    if not blocks:
        return None
    return _render(records, stmts, parsed, last_use, blocks, reserved)


def _checked_uses(parsed, params):
    """name -> index of the last statement using it; None unless every name is bound once,
    before its uses (what the parse's reading of the statements rests on)."""
    bound, last = set(params), {}
    for i, p in enumerate(parsed):
        for u in p.uses:
            if u not in bound:
                return None
            last[u] = i
        for d in p.defs:
            if d in bound:
                return None
            bound.add(d)
    return last


def _best_run(keys):
    """(start, period, copies) of the periodic stretch covering most statements, or None."""
    seen, distances = {}, collections.Counter()
    for i, k in enumerate(keys):
        if k >= 0:
            last = seen.setdefault(k, [])
            distances.update(i - j for j in last[-RECENT:] if i - j >= MIN_PERIOD)
            last.append(i)
    best = None
    for period, _ in distances.most_common(MAX_CANDIDATES):
        # (covered and fixed statements have keys of their own: they match nothing)
        same = map(int.__eq__, keys, keys[period:])
        i = 0
        for equal, stretch in itertools.groupby(same):
            length = sum(1 for _ in stretch)
            count = (length + period) // period
            if equal and count >= 2 and (best is None or count * period > best[1] * best[2]
                                         or (count * period == best[1] * best[2] and period < best[1])):
                best = (i, period, count)
            i += length
    return best


def _equivalent(parsed, base, start, period):
    """base's names -> the window at start's, where the two windows are the same code up to a
    consistent renaming of local names; else None."""
    fwd, back = {}, {}
    for k in range(period):
        a, b = parsed[base + k], parsed[start + k]
        if a.key != b.key:
            return None
        for x, y in zip(a.names, b.names):
            if fwd.setdefault(x, y) != y or back.setdefault(y, x) != x:
                return None
    return fwd


def _render(records, stmts, parsed, last_use, blocks, reserved):
    index = {id(s): i for i, s in enumerate(stmts)}
    calls = {}  # start of a copy -> the caller's lines
    defs = []
    k = 0
    for b in blocks:
        while f"{BLOCK_PREFIX}{k}" in reserved:
            k += 1
        name = f"{BLOCK_PREFIX}{k}"
        k += 1
        window = range(b.base, b.base + b.period)
        free, bound, last = [], [], {}
        for i in window:
            for u in parsed[i].uses:
                if u not in bound and u not in free:
                    free.append(u)
                last[u] = i
            for d in parsed[i].defs:
                bound.append(d)
                last.setdefault(d, i)
        outputs = [d for d in bound if any(last_use.get(m[d], -1) >= s + b.period for s, m in b.copies)]
        defs += _block_def(name, stmts, window, free, outputs, last)
        for s, m in b.copies:
            lines = [f"  {ARGS} = [{', '.join(m[f] for f in free)}]"]
            args = {m[f] for f in free}
            dying = [x for i in range(s, s + b.period) for d in stmts[i].dels for x in d if x in args]
            if dying:
                lines.append(_del_line(dying))
            targets = [m[o] for o in outputs]
            lines.append(f"  {_targets(targets)}{name}({ARGS})")
            unused = [t for t in targets if last_use.get(t, -1) < s + b.period]
            if unused:
                lines.append(_del_line(unused))
            calls[s] = (lines, s + b.period)
    body, skip_to = [], -1
    for r in records:
        if isinstance(r, Del):
            body.append(_del_line(r.names))
            continue
        i = index[id(r)]
        if i < skip_to:
            continue
        if i in calls:
            lines, skip_to = calls[i]
            body += lines
            continue
        body.append(r.line())
        body += [_del_line(d) for d in r.dels]
    return defs, body


def _targets(names):
    if not names:
        return ""
    return f"{', '.join(names)}{',' if len(names) == 1 else ''} = "


def _block_def(name, stmts, window, free, outputs, last):
    lines = [f"def {name}({ARGS}):"]
    if free:
        lines.append(f"  {_targets(free)}{ARGS}")
    lines.append(f"  {ARGS}.clear()")
    keep = set(outputs)
    dead_after = collections.defaultdict(list)
    for x, i in last.items():
        if x not in keep:
            dead_after[i].append(x)
    for i in window:
        lines.append(stmts[i].line())
        dead = set(dead_after[i])
        if dead:  # (in the inline program's order, then the names it does not delete: parameters)
            inline = [x for d in stmts[i].dels for x in d if x in dead]
            lines.append(_del_line(inline + [x for x in dead_after[i] if x not in inline]))
    lines.append(f"  return ({', '.join(outputs)}{',' if len(outputs) == 1 else ''})")
    return lines


def pass_symbols(source, names):
    """source with the size symbols `names` ("_sym0, _sym1") passed on to its blocks (for
    runtime/symbolic.py, whose program takes them as parameters: a block's literals become
    expressions of them)."""
    source = re.sub(rf"^def ({BLOCK_PREFIX}\d+)\({ARGS}\):", rf"def \1({ARGS}, {names}):", source, flags=re.M)
    return re.sub(rf"= ({BLOCK_PREFIX}\d+)\({ARGS}\)$|^  ({BLOCK_PREFIX}\d+)\({ARGS}\)$",
                  lambda m: m.group(0).replace(f"({ARGS})", f"({ARGS}, {names})"), source, flags=re.M)
