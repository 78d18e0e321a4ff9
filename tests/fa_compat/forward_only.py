"""Writes a forward-only copy of a FlashAttention test file: in each test function, the statements
that run a backward pass (torch.autograd.grad, .backward()) are dropped, and so is every later
statement that reads a name those statements bound (the gradients and the checks on them).
Everything else, the forward call and its assertions included, is kept as written.

    python forward_only.py SRC DST [LOG]

FlashAttention's tests compute gradients before they assert on the forward output, so without this
every case that reaches a backward fails before its forward is checked. The copy goes wherever DST
says (a temporary folder): it is FlashAttention's code and never enters this repository. LOG lists
what was dropped, by test function and original line.
"""
import ast
import sys


def _is_backward_call(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            f = sub.func
            if f.attr == "backward":
                return True
            if f.attr == "grad" and isinstance(f.value, ast.Attribute) and f.value.attr == "autograd":
                return True
    return False


def _stored(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


_BLOCKS = ("body", "orelse", "finalbody")


def _header(stmt):
    """The parts of a compound statement outside its blocks (an if's test, a for's target and iter)."""
    parts = []
    for field, value in ast.iter_fields(stmt):
        if field in _BLOCKS or field == "handlers":
            continue
        if isinstance(value, ast.AST):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(v for v in value if isinstance(v, ast.AST))
    return parts


class _Pruner:
    def __init__(self, source):
        self.source = source
        self.killed = {}  # name -> line of the first dropped statement that bound it
        self.dropped = []

    def _drop(self, stmt, why):
        self.dropped.append((stmt.lineno, why, (ast.get_source_segment(self.source, stmt) or "").splitlines()[0][:100]))
        self.killed.update({n: stmt.lineno for n in _stored(stmt) if n not in self.killed})

    def _reads_killed(self, nodes, lineno):
        names = set().union(*(_loaded(n) for n in nodes)) if nodes else set()
        return any(n in self.killed and self.killed[n] < lineno for n in names)

    def block(self, stmts):
        kept = []
        for stmt in stmts:
            compound = any(isinstance(getattr(stmt, f, None), list) and getattr(stmt, f) and
                           isinstance(getattr(stmt, f)[0], ast.stmt) for f in _BLOCKS)
            if not compound:
                if _is_backward_call(stmt):
                    self._drop(stmt, "backward")
                    continue
                if self._reads_killed([stmt], stmt.lineno):
                    self._drop(stmt, "reads a gradient")
                    continue
                kept.append(stmt)
                continue
            if self._reads_killed(_header(stmt), stmt.lineno):
                self._drop(stmt, "its condition reads a gradient")
                continue
            for field in _BLOCKS:
                body = getattr(stmt, field, None)
                if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                    setattr(stmt, field, self.block(body))
            for handler in getattr(stmt, "handlers", []) or []:
                handler.body = self.block(handler.body) or [ast.Pass()]
            if not stmt.body:
                if isinstance(stmt, ast.If) and stmt.orelse:
                    stmt.body = [ast.Pass()]
                elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With)):
                    continue  # nothing left to run
                else:
                    stmt.body = [ast.Pass()]
            kept.append(stmt)
        return kept


def transform(source):
    tree = ast.parse(source)
    log = []
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_"):
            pruner = _Pruner(source)
            fn.body = pruner.block(fn.body) or [ast.Pass()]
            log.extend("%s line %d (%s): %s" % (fn.name, line, why, text) for line, why, text in pruner.dropped)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n", log


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    with open(argv[1]) as f:
        out, log = transform(f.read())
    with open(argv[2], "w") as f:
        f.write("# Forward-only copy made by flashjit's tests/fa_compat/forward_only.py from %s\n" % argv[1] + out)
    if len(argv) == 4:
        with open(argv[3], "w") as f:
            f.write("\n".join(log) + "\n")
    print("forward_only: %s -> %s, %d statements dropped" % (argv[1], argv[2], len(log)))


if __name__ == "__main__":
    main(sys.argv)
