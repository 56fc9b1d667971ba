"""Stage 1: static checks on a candidate's source. Pure AST: nothing is imported or executed.

Refuses what no honest kernel needs: process/file/clock access, dynamic code, timing or stream
tampering, monkey-patching libraries, state that survives between calls (result reuse) and casts
below the slot input's precision. Every finding carries its line number.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from services.common.slot_specs import BACKENDS, OPS
from services.verifier import static_rules as rules


@dataclass(frozen=True)
class Finding:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(frozen=True)
class StaticReport:
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        return not self.findings

    def detail(self, limit: int = 8) -> str:
        if self.passed:
            return "no forbidden constructs"
        shown = "; ".join(str(f) for f in self.findings[:limit])
        more = len(self.findings) - limit
        return shown + (f"; and {more} more" if more > 0 else "")


def check_source(source: str, slot: str, backend: str = "", input_dtype: str = "float32") -> StaticReport:
    """Run every static rule; `backend` (torch/triton/compile) is checked when given."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport((Finding(exc.lineno or 0, f"syntax error: {exc.msg}"),))
    findings = _structure(tree, slot, backend) + _Visitor(tree, input_dtype).run()
    unique = dict.fromkeys(sorted(findings, key=lambda f: f.line))  # one finding per line and message
    return StaticReport(tuple(unique))


# -- module structure: SLOT, BACKEND, kernel ---------------------------------------------------
def _module_constant(tree: ast.Module, name: str) -> tuple[int, object] | None:
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                value = node.value.value if isinstance(node.value, ast.Constant) else ...
                found = (node.lineno, value)
    return found


def _structure(tree: ast.Module, slot: str, backend: str) -> list[Finding]:
    out: list[Finding] = []
    if slot not in OPS:
        out.append(Finding(1, f"unknown slot or region {slot!r}; known: {', '.join(OPS)}"))
    word = "REGION" if slot in OPS and OPS[slot].kind == "region" else "SLOT"
    slot_def = _module_constant(tree, word)
    if slot_def is None:
        out.append(Finding(1, f"module does not define {word}"))
    elif not isinstance(slot_def[1], str):
        out.append(Finding(slot_def[0], f"{word} must be assigned a string literal"))
    elif slot_def[1] != slot:
        out.append(Finding(slot_def[0], f"{word} = {slot_def[1]!r} but the candidate is for "
                                        f"{word.lower()} {slot!r}"))
    backend_def = _module_constant(tree, "BACKEND")
    if backend_def is None:
        out.append(Finding(1, "module does not define BACKEND"))
    elif not isinstance(backend_def[1], str):
        out.append(Finding(backend_def[0], "BACKEND must be assigned a string literal"))
    elif backend_def[1] not in BACKENDS:
        out.append(Finding(backend_def[0], f"BACKEND = {backend_def[1]!r} is not one of {BACKENDS}"))
    elif backend and backend_def[1] != backend:
        out.append(Finding(backend_def[0], f"BACKEND = {backend_def[1]!r} but the candidate says {backend!r}"))
    out.extend(_kernel_entry(tree, slot))
    return out


def _kernel_entry(tree: ast.Module, slot: str) -> list[Finding]:
    entry: ast.stmt | None = None
    for node in tree.body:
        defines = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == "kernel"
        assigns = isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "kernel" for t in node.targets
        )
        if defines or assigns:
            entry = node
    if entry is None:
        return [Finding(1, "module does not define kernel(...) at top level")]
    if isinstance(entry, ast.AsyncFunctionDef):
        return [Finding(entry.lineno, "kernel must be a plain function, not async")]
    if not isinstance(entry, ast.FunctionDef) or slot not in OPS:
        return []
    params = OPS[slot].params
    args = entry.args
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    required_kwonly = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]
    if (len(positional) < len(params) and args.vararg is None) or required > len(params) or required_kwonly:
        wanted = ", ".join(params)
        return [Finding(entry.lineno, f"kernel must accept ({wanted}) for slot {slot!r}")]
    return []


# -- the visitor -----------------------------------------------------------------------------
def _bound_names(node: ast.AST) -> set[str]:
    """Names bound directly in a function (params, assignments, imports, nested defs), not in nested scopes."""
    names: set[str] = set()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        a = node.args
        names.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))
        names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(child.name)
            continue  # its body is its own scope
        if isinstance(child, ast.Lambda):
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
            names.add(child.id)
        elif isinstance(child, ast.alias):
            names.add((child.asname or child.name).split(".")[0])
        elif isinstance(child, ast.arg):
            names.add(child.arg)
        stack.extend(ast.iter_child_nodes(child))
    return names


class _Visitor(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, input_dtype: str) -> None:
        self.tree = tree
        self.input_dtype = input_dtype
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted module path it was imported as
        self.defined = _bound_names(tree)
        self.scopes: list[set[str]] = []  # bound names of the enclosing functions, innermost last
        self.mask_casts: set[int] = set()  # dtype nodes that only cast a boolean mask (not a downgrade)
        self.called: set[int] = set()  # Name nodes in call position (getattr(...) vs getattr passed around)

    def run(self) -> list[Finding]:
        for node in ast.walk(self.tree):  # aliases first: a use may come before a nested import
            if isinstance(node, ast.Import | ast.ImportFrom):
                self._record_import(node)
        for _ in range(2):  # `c = torch.cuda` makes c an alias too (twice: chains of such names)
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    target = self.dotted(node.value)
                    if target:
                        self.aliases[node.targets[0].id] = target
        self.visit(self.tree)
        return self.findings

    def flag(self, node: ast.AST, message: str) -> None:
        self.findings.append(Finding(getattr(node, "lineno", 0), message))

    # names -----------------------------------------------------------------------------------
    def _record_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    self.aliases[root] = root
        elif node.level == 0 and node.module:
            for alias in node.names:
                self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"

    def dotted(self, node: ast.AST) -> str | None:
        """The library path an expression names (F.rms_norm -> torch.nn.functional.rms_norm), if any."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and _is_name(node.func, "getattr") and len(node.args) >= 2:
            name = node.args[1]
            base = self.dotted(node.args[0])
            if base and isinstance(name, ast.Constant) and isinstance(name.value, str):
                return f"{base}.{name.value}"
        return None

    def root_name(self, node: ast.AST) -> str | None:
        # Stops at calls: a call's result is a fresh value, not the state it was computed from.
        while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    def is_outer_state(self, node: ast.AST) -> str | None:
        """Inside a function: the name of module-level or closure state `node` is rooted at."""
        name = self.root_name(node)
        if not self.scopes or name is None or name in self.aliases or name in self.scopes[-1]:
            return None
        enclosing = any(name in scope for scope in self.scopes[:-1])
        return name if enclosing or name in self.defined else None

    def check_dotted(self, node: ast.AST, dotted: str) -> None:
        path = rules.forbidden_segment(dotted)
        if path:
            module = path.rpartition(".")[2]
            self.flag(node, f"reaches {module!r} through {path}: {rules.FORBIDDEN_MODULES[module]}")
        entry = rules.match_prefix(dotted, rules.TIMING_NAMES)
        if entry:
            self.flag(node, f"uses {entry}: {rules.TIMING_NAMES[entry]}")
        dtype = rules.downgrade_dtype(dotted, self.input_dtype)
        if dtype and id(node) not in self.mask_casts:
            self.flag(node, f"precision downgrade: casts to {dtype} while the slot input is {self.input_dtype}")

    # imports ---------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            self.flag(node, "relative imports are forbidden")
            return
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            self.check_dotted(node, f"{module}.{alias.name}")

    def _check_module(self, node: ast.AST, module: str) -> None:
        root = module.split(".")[0]
        if root in rules.FORBIDDEN_MODULES:
            self.flag(node, f"import of {root!r} is forbidden ({rules.FORBIDDEN_MODULES[root]})")
        elif root not in rules.ALLOWED_MODULES:
            self.flag(node, f"import of {root!r} is not allowed (allowed: {', '.join(sorted(rules.ALLOWED_MODULES))})")
        else:
            self.check_dotted(node, module)

    # names and attributes --------------------------------------------------------------------
    def visit_Name(self, node: ast.Name) -> None:
        if node.id in rules.FORBIDDEN_BUILTINS and node.id not in self.defined:
            self.flag(node, f"{node.id}() is forbidden: {rules.FORBIDDEN_BUILTINS[node.id]}")
        if node.id == "getattr" and id(node) not in self.called and "getattr" not in self.defined:
            self.flag(node, "getattr passed around is forbidden (hides what is accessed)")
        dotted = self.aliases.get(node.id)
        if dotted and isinstance(node.ctx, ast.Load):
            self.check_dotted(node, dotted)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in rules.ALLOWED_DUNDER_ATTRS:
            self.flag(node, f"access to {node.attr} is forbidden (reaches interpreter internals)")
        dotted = self.dotted(node)
        if dotted:
            self.check_dotted(node, dotted)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        self.called.add(id(func))
        if _is_name(func, "getattr") and "getattr" not in self.defined:
            self._check_getattr(node)
        if _is_name(func, "next") and node.args and (state := self.is_outer_state(node.args[0])):
            self.flag(node, f"advances module-level iterator {state!r} inside a function (state between calls)")
        if isinstance(func, ast.Attribute):
            if func.attr in ("to", "type") and _is_boolean(func.value):  # (z == m).to(torch.uint8)
                self.mask_casts.update(id(a) for a in node.args)
            if rules.downgrade_method(func.attr, self.input_dtype) and not _is_boolean(func.value):
                self.flag(node, f"precision downgrade: .{func.attr}() while the slot input is {self.input_dtype}")
            if rules.is_mutating_method(func.attr) and (state := self.is_outer_state(func.value)):
                self.flag(node, f"mutates module-level state {state!r} (.{func.attr}) from inside a function: "
                                "results must not be cached or carried between calls")
        for kw in node.keywords:
            if kw.arg == "out" and (state := self.is_outer_state(kw.value)):
                self.flag(node, f"writes into module-level buffer {state!r} via out=")
        dotted = self.dotted(node)  # getattr(torch.cuda, "Event") resolves like torch.cuda.Event
        if dotted:
            self.check_dotted(node, dotted)
        self.generic_visit(node)

    def _check_getattr(self, node: ast.Call) -> None:
        if len(node.args) < 2 or not (isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            self.flag(node, "getattr with a computed name is forbidden (hides what is accessed)")
            return
        name = node.args[1].value
        if name.startswith("__") and name not in rules.ALLOWED_DUNDER_ATTRS:
            self.flag(node, f"getattr of {name!r} is forbidden (reaches interpreter internals)")

    # writes ----------------------------------------------------------------------------------
    def _check_target(self, node: ast.AST, target: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._check_target(node, element)
            return
        if isinstance(target, ast.Starred):
            self._check_target(node, target.value)
            return
        if not isinstance(target, ast.Attribute | ast.Subscript):
            return
        root = self.root_name(target)
        if root in self.aliases:
            what = self.dotted(target) or ast.unparse(target)
            self.flag(node, f"assigns {what}: monkey-patching a library is forbidden")
        elif state := self.is_outer_state(target):
            self.flag(node, f"writes module-level state {state!r} from inside a function "
                            "(results must not be cached or carried between calls)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(node, target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node, node.target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node, node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(node, target)
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.flag(node, f"global {', '.join(node.names)}: module-level state written from a function "
                        "(results must not be cached or carried between calls)")

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.flag(node, f"nonlocal {', '.join(node.names)}: closure state written between calls")

    # scopes ----------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            target = decorator.func if isinstance(decorator, ast.Call) else decorator
            dotted = self.dotted(target) or ""
            if dotted in rules.MEMOIZING_DECORATORS:
                self.flag(decorator, f"@{dotted} caches results between calls (result reuse)")
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None and not _is_immutable_default(default):
                self.flag(default, f"default argument of {node.name}() is evaluated once and shared "
                                   "between calls (state between calls)")
        self._visit_scope(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scope(node)

    def _visit_scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.scopes.append(_bound_names(node))
        try:
            self.generic_visit(node)
        finally:
            self.scopes.pop()


_BOOLEAN_OPS = frozenset({
    "eq", "ne", "gt", "lt", "ge", "le", "isnan", "isinf", "isfinite", "logical_and", "logical_or",
    "logical_not", "logical_xor", "bool",
})


def _is_boolean(node: ast.AST) -> bool:
    """An expression that yields a boolean mask: casting it to a small integer loses nothing."""
    if isinstance(node, ast.Compare):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in _BOOLEAN_OPS
    return False


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _is_immutable_default(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant | ast.Name | ast.Attribute):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_immutable_default(node.operand)
    if isinstance(node, ast.Tuple):
        return all(_is_immutable_default(e) for e in node.elts)
    return False
