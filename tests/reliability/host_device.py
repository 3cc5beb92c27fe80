"""A static lint for host/device slips that a CPU-only run never shows (STYLE.md, "On the GPU").

On the CPU every tensor is on the host, so `t.numpy()`, `np.asarray(t)` and a `torch.arange(n)` beside a model
activation all work; on CUDA each of them raises. The rules, each keyed by a code:

- HD1 `X.numpy()` whose receiver chain holds no `.cpu()` (or `.to("cpu")`).
- HD2 `np.asarray(X)` / `np.array(X)` / `np.asanyarray(X)` on an expression that is a tensor by its own shape: a
  `torch.*` call, or a method chain through a tensor-only method (`.float()`, `.detach()`, `.abs()`, ...), with
  no `.cpu()` / `.numpy()` / `.tolist()` on the way.
- HD3 a tensor factory (`torch.zeros`, `arange`, `tensor`, ...; not the `*_like` ones) without `device=`, not
  moved at once with `.to(...)`, that meets another tensor in the same function: an operand of an arithmetic or
  comparison, or an argument of `torch.cat` / `stack` / `where` ..., directly or through the name it was assigned
  to. (Not an index: a CUDA tensor takes host indices.) A module whose tensors all live on the host by design
  says so once, in a line `# host-module: <why>`, and HD3 skips it.
- HD4 in probes: an SAE made or loaded (`train_sae`, `cached_sae`, `load_sae`, under any alias) without saying
  `device=`. The buffers SAEs train on live on the host by default, so an SAE that meets model activations
  must be asked for on the model's device (and one that stays on the host says so).

A line ending in `# host: <why>` is exempt: a deliberate host tensor, with its reason.

What it cannot see: a tensor that reaches another device through a function's argument or return value, a
name rebound between assignment and use, methods of objects whose class it does not know (an SAE's
`W_enc` meeting a CUDA activation). The device run and the CPU test of a probe's stages cover those.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

FACTORIES = {"zeros", "ones", "empty", "full", "arange", "tensor", "randn", "rand", "randint", "eye", "linspace",
             "as_tensor", "randperm", "logspace"}
"""torch functions that make a tensor on the default (host) device unless told `device=`."""
MEET_FUNCS = {"cat", "stack", "where", "maximum", "minimum", "matmul", "einsum", "take_along_dim", "gather",
              "cdist", "dot", "outer", "bmm", "mm", "searchsorted", "bucketize", "isin", "cross", "kron"}
"""torch functions whose tensor arguments must share a device."""
TENSOR_METHODS = {"float", "double", "half", "bfloat16", "long", "int", "bool", "detach", "abs", "softmax",
                  "log_softmax", "clamp", "clamp_min", "clamp_max", "norm", "flip", "contiguous", "unsqueeze",
                  "permute", "to", "cuda", "clone", "topk", "masked_fill", "exp", "log", "sqrt", "pow", "square",
                  "logsumexp", "argmax", "argmin", "amax", "amin", "nonzero", "flatten", "expand", "sigmoid", "relu",
                  "cumsum", "mean", "sum", "std", "var", "max", "min", "reshape", "view", "squeeze", "t", "type_as",
                  "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "eq", "ne", "gt", "lt", "ge", "le"}
"""Methods that, on a tensor, return a tensor; HD2 counts a chain through one of the torch-only ones below."""
TENSOR_ONLY = {"float", "double", "half", "bfloat16", "long", "int", "bool", "detach", "abs", "softmax",
               "log_softmax", "clamp", "clamp_min", "clamp_max", "norm", "flip", "contiguous", "unsqueeze", "permute",
               "cuda", "clone", "topk", "masked_fill", "logsumexp", "exp", "sqrt", "sigmoid", "relu", "type_as",
               "amax", "amin"}
HOST = {"cpu", "numpy", "tolist", "item"}
SAE_MAKERS = {"train_sae", "cached_sae", "load_sae"}
PRAGMA = "# host:"
PRAGMA_MODULE = "# host-module:"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.code} {self.text}"


def _chain(node: ast.AST) -> Iterator[ast.AST]:
    """node, then its receivers: `a.b().c[0]` yields the Subscript, Call c, Attribute c, Call b, ..., Name a."""
    while True:
        yield node
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            return


def _method(node: ast.AST) -> str | None:
    return node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None


def _to_host(node: ast.AST) -> bool:
    """`.cpu()`, `.to("cpu")` or `.to(device="cpu")`."""
    m = _method(node)
    if m == "cpu":
        return True
    if m != "to":
        return False
    args = list(node.args) + [k.value for k in node.keywords if k.arg == "device"]
    return any(isinstance(a, ast.Constant) and a.value == "cpu" for a in args)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def _torch_call(node: ast.AST) -> str | None:
    """`zeros` for `torch.zeros(...)` (also `torch.linalg.qr` -> `qr`), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if _dotted(node.func.value).split(".")[0] == "torch":
            return node.func.attr
    return None


def _tensorish(node: ast.AST) -> bool:
    """A tensor by its own shape (HD2): a torch call or a chain through a torch-only method, not yet on the host."""
    for n in _chain(node):
        if _to_host(n) or _method(n) in HOST:
            return False
        if _method(n) in TENSOR_ONLY or (_torch_call(n) and _torch_call(n) != "from_numpy"):
            return True
    return False


def _unplaced(node: ast.AST) -> bool:
    """A factory call without device= (the `.to(...)` that may follow is checked by the caller)."""
    return _torch_call(node) in FACTORIES and not any(k.arg == "device" for k in node.keywords)


class _Lint(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], probe: bool):
        self.path, self.lines, self.probe = path, lines, probe
        self.found: list[Finding] = []
        self.parents: dict[ast.AST, ast.AST] = {}
        self.sae_names = set(SAE_MAKERS)

    def flag(self, node: ast.AST, code: str, text: str) -> None:
        line = self.lines[node.lineno - 1] if node.lineno <= len(self.lines) else ""
        end = self.lines[node.end_lineno - 1] if node.end_lineno and node.end_lineno <= len(self.lines) else ""
        if PRAGMA in line or PRAGMA in end:
            return
        self.found.append(Finding(self.path, node.lineno, code, text))

    def run(self, tree: ast.AST) -> list[Finding]:
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("interp.sae", "interp")):
                self.sae_names |= {a.asname or a.name for a in node.names if a.name in SAE_MAKERS}
        self.visit(tree)
        if any(line.startswith(PRAGMA_MODULE) for line in self.lines):
            return sorted(set(self.found), key=lambda f: (f.line, f.code))
        for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module))]:
            self._meets(fn)
        return sorted(set(self.found), key=lambda f: (f.line, f.code))

    def visit_Call(self, node: ast.Call) -> None:
        m = _method(node)
        if m == "numpy" and not node.args:
            if not any(_to_host(n) for n in _chain(node.func.value)):
                self.flag(node, "HD1", f"`{ast.unparse(node)[:60]}`: .numpy() of a tensor not moved by .cpu()")
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("asarray", "array", "asanyarray") \
                and _dotted(node.func.value) in ("np", "numpy") and node.args and _tensorish(node.args[0]):
            self.flag(node, "HD2", f"`{ast.unparse(node)[:60]}`: NumPy of a tensor not moved by .cpu()")
        if self.probe:
            name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr \
                if isinstance(node.func, ast.Attribute) else None
            if name in self.sae_names and not any(k.arg == "device" for k in node.keywords):
                self.flag(node, "HD4", f"`{name}(...)` without device=: the SAE lands on the buffer's device "
                                       "(the host), not the model's")
        self.generic_visit(node)

    # ------------------------------------------------------------------ HD3

    def _placed_later(self, node: ast.AST) -> bool:
        """The factory's value is moved at once: `torch.zeros(n).to(x)`."""
        p = self.parents.get(node)
        return isinstance(p, ast.Attribute) and p.attr in ("to", "cuda", "type_as") and \
            isinstance(self.parents.get(p), ast.Call)

    def _meets(self, fn: ast.AST) -> None:
        """Unplaced factories (and names bound only to them) used beside another tensor in `fn`'s own body."""
        own = list(_own_nodes(fn))
        bound: dict[str, ast.AST] = {}
        other_binds: set[str] = set()
        for n in own:  # a name counts as a host factory only if every binding of it in `fn` is one
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                    and self._host_value(n.value):
                bound.setdefault(n.targets[0].id, n.value)
            elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
                targets = n.targets if isinstance(n, ast.Assign) else [getattr(n, "target", None)] + \
                    [i.optional_vars for i in getattr(n, "items", [])]
                other_binds |= {t.id for tt in targets if tt is not None
                                for t in ast.walk(tt) if isinstance(t, ast.Name)}
        bound = {k: v for k, v in bound.items() if k not in other_binds}

        def host(e: ast.AST) -> ast.AST | None:
            """The unplaced factory `e` is (or is derived from by indexing, a tensor method, arithmetic with
            constants or other host factories), else None."""
            if isinstance(e, ast.UnaryOp):
                return host(e.operand)
            if isinstance(e, ast.BinOp):
                left, right = host(e.left), host(e.right)
                if left is not None and (right is not None or isinstance(e.right, ast.Constant)):
                    return left
                return right if right is not None and isinstance(e.left, ast.Constant) else None
            for c in _chain(e):
                if _to_host(c) or (_method(c) in ("to", "cuda", "type_as")):
                    return None
                if _unplaced(c) and not self._placed_later(c):
                    return c
                if isinstance(c, ast.Name) and c.id in bound:
                    return bound[c.id]
                if isinstance(c, ast.Call) and _method(c) not in TENSOR_METHODS and not isinstance(c.func,
                                                                                                   ast.Attribute):
                    return None
            return None

        def other(e: ast.AST) -> bool:
            """Could be a tensor somewhere else: not a literal, not itself a host factory."""
            return not isinstance(e, (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Slice)) and host(e) is None \
                and not (isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant))

        for n in own:
            pairs: list[tuple[ast.AST, list[ast.AST]]] = []
            if isinstance(n, ast.BinOp) and not isinstance(n.op, ast.Mod):
                pairs = [(n.left, [n.right]), (n.right, [n.left])]
            elif isinstance(n, ast.Compare):
                ops = [n.left, *n.comparators]
                pairs = [(o, [p for p in ops if p is not o]) for o in ops]
            elif isinstance(n, ast.Call) and _torch_call(n) in MEET_FUNCS:
                args = [a for a in n.args if not isinstance(a, ast.Constant)]
                if len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
                    args = list(args[0].elts)
                pairs = [(a, [b for b in args if b is not a]) for a in args]
            for a, others in pairs:
                f = host(a)
                if f is not None and any(other(o) and _could_be_tensor(o, bound) for o in others):
                    self.flag(n, "HD3", f"`{ast.unparse(f)[:50]}` made on the host (no device=) meets "
                                        f"`{ast.unparse(n)[:50]}`")
                    break

    def _host_value(self, e: ast.AST) -> bool:
        for c in _chain(e):
            if _to_host(c) or _method(c) in ("to", "cuda", "type_as", "tolist", "item", "numpy"):
                return False
            if _unplaced(c):
                return not self._placed_later(c)
        return False


def _could_be_tensor(e: ast.AST, bound: dict[str, ast.AST]) -> bool:
    """Names and expressions that may hold a tensor; `len(x)`, `int(...)` and friends do not."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("len", "int", "float", "range",
                                                                                   "min", "max", "round", "sum"):
        return False
    if isinstance(e, ast.Attribute) and e.attr in ("shape", "ndim", "dtype"):
        return False
    return not (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape")


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `fn`'s body, not those of functions or classes nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield n
        stack.extend(ast.iter_child_nodes(n))


def lint_source(src: str, path: str = "<src>", probe: bool = True) -> list[Finding]:
    """Findings of HD1-HD4 in `src` (HD4 only where `probe`)."""
    return _Lint(path, src.splitlines(), probe).run(ast.parse(src))


def lint_tree(root: Path, dirs: Iterable[str] = ("interp", "interp_probes", "bench", "interp_app")) -> list[Finding]:
    out: list[Finding] = []
    for d in dirs:
        for p in sorted((root / d).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            out += lint_source(p.read_text(), rel, probe=rel.startswith("interp_probes/"))
    return out
