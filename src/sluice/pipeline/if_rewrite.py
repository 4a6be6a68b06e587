"""The source rewrite behind ``pipeline_def(enable_conditionals=True)``: a function's ``if`` statements, ``and``,
``or``, ``not``, ``x if c else y`` and calls are turned into calls of the runtime in
:mod:`sluice.pipeline.conditionals`, which keeps Python's meaning for Python values and splits the batch where a
condition is a DataNode.

What the rewrite does to a function (with Python's :mod:`ast`; the function is compiled again from its own file,
so tracebacks show its lines):

* ``if test: BODY else: ORELSE`` becomes, with ``c`` a fresh name::

      c = _sluice_ag.If(test)              # a DataNode: enters a conditional scope; else Python's truth value
      if c.dynamic: c.save('x', x) ...     # each variable either branch assigns, as it was before
      if c.enter(True): BODY
      if c.dynamic: c.keep(True, 'x', x); x = c.restore('x') ...
      if c.enter(False): ORELSE
      if c.dynamic: c.keep(False, 'x', x) ...; c.finish(); x = c.result('x') ...

  Both branches run once each while the graph is traced (for a Python condition only the chosen one), and every
  variable either assigns is merged afterwards. Reading a variable that might be unbound is wrapped in
  ``try``/``except NameError``.
* ``return`` inside ``if`` branches: the statements after the ``if`` move into the branch that does not return,
  and the returns at the ends of the branches assign ``_sluice_retval``, returned after the ``if``.
  ``return``/``break``/``continue`` elsewhere inside a branch (in a loop, a ``with``) stay, and an ``if`` holding
  one refuses a DataNode condition.
* ``a and b`` -> ``_sluice_ag.and_(a, lambda: b)``, ``a or b`` likewise, ``not a`` -> ``_sluice_ag.not_(a)``,
  ``a if c else b`` -> ``_sluice_ag.ifexp(c, lambda: a, lambda: b)``: the right operand runs only where it must,
  per sample for DataNodes, as in Python for other values.
* ``f(...)`` -> ``_sluice_ag.call(f, ...)``, which rewrites ``f`` the same way (once; cached) when it is user code
  and a pipeline is being traced, so that helpers called by the pipeline function may branch on DataNodes too
  (DALI's AutoGraph converts called functions as well). Library code (sluice, torch, NumPy, the standard library,
  installed packages) is called as it is; ``@do_not_convert`` keeps a function as written.
* Functions, lambdas and classes defined inside the function are left as they are written: a function is
  rewritten when the traced code calls it, never when the pipeline runs it (``fn.python_function``'s
  ``function``, unlike in DALI, needs no ``@do_not_convert``).

The helper ``_sluice_ag`` reaches the rewritten function as one more closure variable, so the function keeps its
own globals and closure cells.
"""

from __future__ import annotations

import __future__
import ast
import copy
import functools
import inspect
import linecache
import logging
import os
import sysconfig
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["HELPER", "convert", "do_not_convert", "SourceUnavailable"]

log = logging.getLogger(__name__)

HELPER = "_sluice_ag"  # the runtime module, as seen by rewritten code (one leading underscore: never mangled)
RETVAL = "_sluice_retval"
TEMP = "_sluice_if"
FACTORY_LOCAL = "_sluice_rewritten"
_NO_CONVERT = "_sluice_do_not_convert"
#: calls that look at their caller's frame: rewritten into _sluice_ag.call(...) they would see the wrong one
_FRAME_CALLS = frozenset({"super", "locals", "globals", "vars", "eval", "exec", "dir", "__import__", "breakpoint"})
#: sluice modules whose functions are rewritten like user code (DALI's auto_aug helpers branch on DataNodes)
CONVERTED_SLUICE_MODULES = ("sluice.auto_aug", "sluice.compat.dali.auto_aug")
_LIBRARIES = frozenset({"sluice", "torch", "torchvision", "torchaudio", "numpy", "scipy", "PIL", "cv2", "cupy",
                        "jax", "nvidia", "builtins", "functools", "typing"})
_FUTURE_FLAGS = functools.reduce(lambda a, b: a | b, (getattr(__future__, f).compiler_flag
                                                      for f in __future__.all_feature_names), 0)
_SKIP_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


class SourceUnavailable(Exception):
    """The function's source cannot be read or rewritten (made by exec, a lambda, a generator)."""


def do_not_convert(func: Callable) -> Callable:
    """Keep ``func`` as written when a pipeline with ``enable_conditionals=True`` calls it (DALI's
    ``nvidia.dali.pipeline.do_not_convert``): for functions handed to ``fn.python_function`` or made by factories
    that the rewrite should not touch.

    Example::

        @do_not_convert
        def make_fn():
            return lambda x: x + 1
    """
    try:
        setattr(func, _NO_CONVERT, True)
    except (AttributeError, TypeError):
        pass
    return func


# ------------------------------------------------------------------------------------------------------------
# Which functions are rewritten
# ------------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(sorted(r.rstrip(os.sep) + os.sep for r in roots))


def _is_user_code(func: types.FunctionType) -> bool:
    module = getattr(func, "__module__", None) or ""
    top = module.split(".", 1)[0]
    if top == "sluice":
        return module.startswith(CONVERTED_SLUICE_MODULES)
    if top in _LIBRARIES:
        return False
    filename = func.__code__.co_filename
    if filename.startswith("<"):
        return False
    real = os.path.realpath(filename)
    return not real.startswith(_library_roots())


_templates: dict[types.CodeType, types.CodeType | SourceUnavailable] = {}
_templates_lock = threading.Lock()
_converted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def convert(func: Any, helper: types.ModuleType, *, force: bool = False) -> Any:
    """``func`` with its source rewritten (see the module's doc) into calls of ``helper``
    (:mod:`sluice.pipeline.conditionals`, which passes itself: it builds on this module), or ``func`` itself where it is not user code
    (``force`` rewrites any Python function), is marked :func:`do_not_convert`, or its source cannot be rewritten.
    Bound methods, ``functools.partial`` objects and instances of user classes with ``__call__`` are rewritten
    through their function. With ``force``, a function that cannot be rewritten raises SourceUnavailable."""
    if getattr(func, _NO_CONVERT, False):
        return func
    if isinstance(func, types.MethodType):
        inner = convert(func.__func__, helper, force=force)
        return func if inner is func.__func__ else types.MethodType(inner, func.__self__)
    if isinstance(func, functools.partial):
        inner = convert(func.func, helper, force=force)
        return func if inner is func.func else functools.partial(inner, *func.args, **func.keywords)
    if not isinstance(func, types.FunctionType):
        method = getattr(type(func), "__call__", None)
        if isinstance(method, types.FunctionType) and not isinstance(func, type):
            inner = convert(method, helper, force=force)
            return func if inner is method else types.MethodType(inner, func)
        return func
    if not force and not _is_user_code(func):
        return func
    done = _converted.get(func)
    if done is not None:
        return done
    template = _template(func.__code__)
    if isinstance(template, SourceUnavailable):
        if force:
            raise template
        return func
    out = _instantiate(template, func, helper)
    _converted[func] = out
    return out


def _template(code: types.CodeType) -> types.CodeType | SourceUnavailable:
    with _templates_lock:
        cached = _templates.get(code)
    if cached is not None:
        return cached
    try:
        made: types.CodeType | SourceUnavailable = _rewrite_code(code)
    except SourceUnavailable as e:
        made = e
    except SyntaxError as e:  # the file changed since the function was compiled
        made = SourceUnavailable(f"its source does not parse any more ({e})")
    if isinstance(made, SourceUnavailable):
        log.debug("not rewriting %s: %s", code.co_qualname if hasattr(code, "co_qualname") else code.co_name, made)
    with _templates_lock:
        _templates[code] = made
    return made


def _instantiate(template: types.CodeType, func: types.FunctionType,
                 helper: types.ModuleType) -> types.FunctionType:
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
    closure = []
    for name in template.co_freevars:
        if name == HELPER:
            closure.append(types.CellType(helper))
        else:
            closure.append(cells[name])
    out = types.FunctionType(template, func.__globals__, func.__name__, func.__defaults__, tuple(closure))
    out.__kwdefaults__ = copy.copy(func.__kwdefaults__)
    out.__qualname__ = func.__qualname__
    out.__doc__ = func.__doc__
    out.__module__ = func.__module__
    out.__annotations__ = func.__annotations__
    out.__dict__.update(func.__dict__)
    out.__wrapped__ = func  # type: ignore[attr-defined]
    return out


# ------------------------------------------------------------------------------------------------------------
# Reading and compiling the source
# ------------------------------------------------------------------------------------------------------------
def _function_tree(code: types.CodeType) -> tuple[ast.Module, ast.FunctionDef]:
    """The ``def`` of ``code`` parsed from its file, at its own line and column numbers."""
    if code.co_flags & _SKIP_FLAGS:
        raise SourceUnavailable("generators and coroutines are not rewritten")
    if code.co_name == "<lambda>":
        raise SourceUnavailable("lambdas are not rewritten")
    if "__class__" in code.co_freevars:
        raise SourceUnavailable("it uses super() without arguments")
    lines = linecache.getlines(code.co_filename)
    if not lines or code.co_firstlineno > len(lines):
        raise SourceUnavailable(f"no source for {code.co_filename}")
    block = inspect.getblock(lines[code.co_firstlineno - 1:])
    text = "".join(block)
    indented = text[:1].isspace()
    # an indented def (a method, a nested function) parses inside an `if 1:`, keeping its columns
    tree = ast.parse("if 1:\n" + text if indented else text)
    node = tree.body[0].body[0] if indented else tree.body[0]  # type: ignore[attr-defined]
    if not isinstance(node, ast.FunctionDef) or node.name != code.co_name:
        raise SourceUnavailable(f"the source at {code.co_filename}:{code.co_firstlineno} is not its def")
    ast.increment_lineno(node, code.co_firstlineno - 1 - (1 if indented else 0))
    for sub in ast.walk(node):  # names the class body mangled when compiling the method
        name = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if name and name.startswith("__") and not name.endswith("__"):
            raise SourceUnavailable(f"it uses the private name {name}")
    node.decorator_list = []
    return tree, node


def _rewrite_code(code: types.CodeType) -> types.CodeType:
    _, fdef = _function_tree(code)
    _Rewriter().rewrite_function(fdef)
    params = [ast.arg(arg=HELPER)] + [ast.arg(arg=n) for n in code.co_freevars]
    # defined in the factory under a name of its own: under its real name, the function's references to itself
    # (recursion) would read the factory's local instead of the global or the enclosing function's cell
    fdef.name = FACTORY_LOCAL
    factory = _function_def("_sluice_factory", params, [fdef, ast.Return(value=ast.Name(id=fdef.name,
                                                                                            ctx=ast.Load()))])
    ast.copy_location(factory, fdef)
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    compiled = compile(module, code.co_filename, "exec", flags=code.co_flags & _FUTURE_FLAGS, dont_inherit=True)
    factory_code = next(c for c in compiled.co_consts if isinstance(c, types.CodeType))
    inner = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fdef.name)
    inner = inner.replace(co_name=code.co_name)
    if hasattr(inner, "co_qualname"):
        inner = inner.replace(co_qualname=code.co_qualname)
    return inner


def _function_def(name: str, params: list[ast.arg], body: list[ast.stmt]) -> ast.FunctionDef:
    fields: dict[str, Any] = dict(name=name, body=body, decorator_list=[], returns=None, type_comment=None,
                                  args=ast.arguments(posonlyargs=[], args=params, vararg=None, kwonlyargs=[],
                                                     kw_defaults=[], kwarg=None, defaults=[]))
    if "type_params" in ast.FunctionDef._fields:
        fields["type_params"] = []
    return ast.FunctionDef(**fields)


# ------------------------------------------------------------------------------------------------------------
# Returns inside branches
# ------------------------------------------------------------------------------------------------------------
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _walk_scope(node: ast.AST):
    """``ast.walk`` that does not enter nested functions, classes and lambdas."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        yield sub
        if not isinstance(sub, _SCOPES):
            todo.extend(ast.iter_child_nodes(sub))


def _if_returns(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` is an ``if`` with a ``return`` in its branches, directly or in ``if`` statements in them."""
    if not isinstance(stmt, ast.If):
        return False
    return any(isinstance(s, ast.Return) or _if_returns(s) for s in stmt.body + stmt.orelse)


def _ends_in_return(stmts: list[ast.stmt]) -> bool:
    if not stmts:
        return False
    last = stmts[-1]
    if isinstance(last, ast.Return):
        return True
    return isinstance(last, ast.If) and _ends_in_return(last.body) and _ends_in_return(last.orelse)


def _lift_returns(block: list[ast.stmt]) -> list[ast.stmt]:
    """``block`` (which returns at its end) with the statements after each returning ``if`` moved into its
    branches, so that every return of such an ``if`` is the last statement of a branch."""
    for i, stmt in enumerate(block):
        if _if_returns(stmt):
            rest = block[i + 1:]
            assert isinstance(stmt, ast.If)
            if not _ends_in_return(stmt.body):
                stmt.body = stmt.body + copy.deepcopy(rest)
            if not _ends_in_return(stmt.orelse):
                stmt.orelse = stmt.orelse + copy.deepcopy(rest)
            stmt.body = _lift_returns(stmt.body)
            stmt.orelse = _lift_returns(stmt.orelse)
            return block[:i] + [stmt]
    return block


def _assign_returns(node: ast.If) -> None:
    for branch in (node.body, node.orelse):
        last = branch[-1]
        if isinstance(last, ast.Return):
            value = last.value if last.value is not None else ast.Constant(value=None)
            branch[-1] = ast.copy_location(ast.Assign(targets=[ast.Name(id=RETVAL, ctx=ast.Store())], value=value),
                                           last)
        else:
            assert isinstance(last, ast.If)
            _assign_returns(last)


def _normalize_returns(fdef: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    if not any(_if_returns(s) for s in _walk_scope(fdef) if isinstance(s, ast.If)):
        return
    if any(isinstance(s, (ast.Yield, ast.YieldFrom)) for s in _walk_scope(fdef)):
        return
    body = list(fdef.body)
    if not _ends_in_return(body):
        body.append(ast.copy_location(ast.Return(value=None), body[-1]))
    body = _lift_returns(body)
    last = body[-1]
    if isinstance(last, ast.If) and _ends_in_return([last]):
        _assign_returns(last)
        body.append(ast.copy_location(ast.Return(value=ast.Name(id=RETVAL, ctx=ast.Load())), last))
    fdef.body = body


# ------------------------------------------------------------------------------------------------------------
# The rewrite
# ------------------------------------------------------------------------------------------------------------
def _assigned(stmts: list[ast.stmt]) -> list[str]:
    """The names that ``stmts`` bind in their own scope, sorted (the rewrite's own temporaries left out)."""
    names: set[str] = set()
    todo: list[ast.AST] = list(stmts)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            continue
        elif isinstance(node, ast.Lambda):
            continue
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            names.update(n.target.id for n in ast.walk(node) if isinstance(n, ast.NamedExpr))  # type: ignore[union-attr]
            continue
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
        todo.extend(ast.iter_child_nodes(node))
    return sorted(n for n in names if not n.startswith(TEMP) and n != HELPER)


def _jump(stmts: list[ast.stmt]) -> str | None:
    """``return``, ``break`` or ``continue`` if ``stmts`` hold one that leaves them (a ``break`` or ``continue``
    not in a loop of their own, any ``return`` outside nested functions); None otherwise."""
    todo: list[tuple[ast.AST, bool]] = [(s, False) for s in stmts]
    while todo:
        node, in_loop = todo.pop()
        if isinstance(node, ast.Return):
            return "return"
        if isinstance(node, (ast.Break, ast.Continue)) and not in_loop:
            return "break" if isinstance(node, ast.Break) else "continue"
        if isinstance(node, _SCOPES):
            continue
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            todo += [(child, True) for child in node.body]
            todo += [(child, in_loop) for child in node.orelse]  # a loop's `else` runs outside it
            continue
        todo += [(child, in_loop) for child in ast.iter_child_nodes(node)]
    return None


def _helper(attr: str) -> ast.Attribute:
    return ast.Attribute(value=ast.Name(id=HELPER, ctx=ast.Load()), attr=attr, ctx=ast.Load())


def _call(func: ast.expr, *args: ast.expr) -> ast.Call:
    return ast.Call(func=func, args=list(args), keywords=[])


def _thunk(expr: ast.expr) -> ast.Lambda:
    return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[],
                                         kwarg=None, defaults=[]), body=expr)


def _name(id_: str, store: bool = False) -> ast.Name:
    return ast.Name(id=id_, ctx=ast.Store() if store else ast.Load())


class _Rewriter(ast.NodeTransformer):
    """Rewrites the body of one function. Functions, lambdas and classes defined in it are left as written: they
    are rewritten when the traced code calls them (:func:`convert` through ``_sluice_ag.call``), so that one
    handed to ``fn.python_function`` runs as written when the pipeline runs."""

    def __init__(self) -> None:
        self._count = 0
        self._globals: set[str] = set()

    def rewrite_function(self, fdef: ast.FunctionDef) -> None:
        # module globals the function assigns keep Python's meaning (the last assignment wins), not merged
        self._globals = {n for g in _walk_scope(fdef) if isinstance(g, ast.Global) for n in g.names}
        _normalize_returns(fdef)
        self.generic_visit(fdef)

    # ---- nested scopes: only what runs where they are defined (decorators, defaults, bases) -----------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.args = self.visit(node.args)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        node.args = self.visit(node.args)
        return node

    def visit_arguments(self, node: ast.arguments) -> ast.AST:
        node.defaults = [self.visit(d) for d in node.defaults]
        node.kw_defaults = [self.visit(d) if d is not None else None for d in node.kw_defaults]
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [self.visit(k) for k in node.keywords]
        return node

    # ---- if statements ------------------------------------------------------------------------------------
    def visit_If(self, node: ast.If) -> Any:
        names = [n for n in _assigned(node.body + node.orelse) if n not in self._globals]
        jump = _jump(node.body + node.orelse)
        self.generic_visit(node)
        self._count += 1
        c = f"{TEMP}{self._count}"

        def method(attr: str, *args: ast.expr) -> ast.Call:
            return _call(ast.Attribute(value=_name(c), attr=attr, ctx=ast.Load()), *args)

        def guarded(name: str, attr: str, *args: ast.expr) -> ast.Try:
            """``try: c.attr(*args, 'name', name) / except NameError: pass``"""
            return ast.Try(body=[ast.Expr(value=method(attr, *args, ast.Constant(value=name), _name(name)))],
                           handlers=[ast.ExceptHandler(type=_name("NameError"), name=None, body=[ast.Pass()])],
                           orelse=[], finalbody=[])

        def when_dynamic(body: list[ast.stmt]) -> ast.If:
            return ast.If(test=ast.Attribute(value=_name(c), attr="dynamic", ctx=ast.Load()), body=body, orelse=[])

        test_args: list[ast.expr] = [node.test] + ([ast.Constant(value=jump)] if jump else [])
        out: list[ast.stmt] = [ast.Assign(targets=[_name(c, store=True)], value=_call(_helper("If"), *test_args))]
        if names:
            out.append(when_dynamic([guarded(n, "save") for n in names]))
        out.append(ast.If(test=method("enter", ast.Constant(value=True)), body=node.body, orelse=[]))
        between: list[ast.stmt] = [guarded(n, "keep", ast.Constant(value=True)) for n in names]
        between += [ast.Assign(targets=[_name(n, store=True)], value=method("restore", ast.Constant(value=n)))
                    for n in names]
        if between:
            out.append(when_dynamic(between))
        out.append(ast.If(test=method("enter", ast.Constant(value=False)), body=node.orelse or [ast.Pass()],
                          orelse=[]))
        after: list[ast.stmt] = [guarded(n, "keep", ast.Constant(value=False)) for n in names]
        after.append(ast.Expr(value=method("finish")))
        after += [ast.Assign(targets=[_name(n, store=True)], value=method("result", ast.Constant(value=n)))
                  for n in names]
        out.append(when_dynamic(after))
        for stmt in out:
            ast.copy_location(stmt, node)
        return out

    # ---- expressions --------------------------------------------------------------------------------------
    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await))
               for v in node.values[1:] for n in ast.walk(v)):
            return node
        helper = "and_" if isinstance(node.op, ast.And) else "or_"
        expr = node.values[-1]
        for value in reversed(node.values[:-1]):
            expr = _call(_helper(helper), value, _thunk(expr))
        return ast.copy_location(expr, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        return ast.copy_location(_call(_helper("not_"), node.operand), node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        if any(isinstance(n, (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await))
               for v in (node.body, node.orelse) for n in ast.walk(v)):
            return node
        return ast.copy_location(_call(_helper("ifexp"), node.test, _thunk(node.body), _thunk(node.orelse)), node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_CALLS:
            return node
        return ast.copy_location(ast.Call(func=_helper("call"), args=[node.func] + node.args,
                                          keywords=node.keywords), node)
