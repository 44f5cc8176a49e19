"""Which routes reach which functions: a walk over the code a view refers to.

From a handler, follow every function of tenantd it names (a global, an attribute of a module
it names, a decorator's wrapped function or closure cell, nested functions, the fields of an
object of tenantd in a closure: the router's handler holds its route's spec), transitively. An
over-approximation on purpose: a route it says reaches an action must be driven by a test.
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Iterable
from typing import Any


def _code_objects(code: types.CodeType) -> Iterable[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _ours(obj: Any) -> bool:
    return getattr(obj, "__module__", "").startswith("tenantd")


def _callees(function: types.FunctionType) -> Iterable[Any]:
    """What a function may call: named globals, attributes of named modules, cells."""
    if function.__closure__:
        for cell in function.__closure__:
            try:
                yield cell.cell_contents
            except ValueError:  # an empty cell
                continue
    namespace = function.__globals__
    for code in _code_objects(function.__code__):
        names = set(code.co_names)
        for instruction in dis.get_instructions(code):
            if instruction.opname in {"LOAD_DEREF", "LOAD_CLOSURE"}:
                names.add(str(instruction.argval))
        for name in names:
            value = namespace.get(name)
            if isinstance(value, types.ModuleType):
                for attribute in names:
                    member = getattr(value, attribute, None)
                    if member is not None:
                        yield member
            elif value is not None:
                yield value


def _edges(obj: Any) -> list[Any]:
    """The objects one step from `obj` in the walk."""
    nexts: list[Any] = []
    if isinstance(obj, functools.partial):  # a handler wrapped when the app starts
        nexts.extend([obj.func, *obj.args, *obj.keywords.values()])
    wrapped = getattr(obj, "__wrapped__", None)
    if wrapped is not None:
        nexts.append(wrapped)
    if isinstance(obj, types.FunctionType) and _ours(obj):
        nexts.extend(_callees(obj))
    elif isinstance(obj, type) and _ours(obj):
        nexts.extend(vars(obj).values())
    elif _ours(type(obj)) and hasattr(obj, "__dict__"):
        nexts.extend(vars(obj).values())  # a route's spec names its view
    return [getattr(item, "__func__", item) for item in nexts]  # bound, static methods


def reached_by(roots: list[Any], targets: set[Any]) -> list[set[Any]]:
    """For each root, the `targets` it may reach through code of tenantd (one walk of the
    graph from every root, then back from every target)."""
    objects: dict[int, Any] = {}
    callers: dict[int, set[int]] = {}
    stack = [getattr(root, "__func__", root) for root in roots]
    while stack:
        obj = stack.pop()
        if id(obj) in objects:
            continue
        objects[id(obj)] = obj
        for callee in _edges(obj):
            callers.setdefault(id(callee), set()).add(id(obj))
            if id(callee) not in objects:
                stack.append(callee)
    reaches: dict[int, set[Any]] = {}
    for target in targets:
        back = [id(target)]
        marked: set[int] = set()
        while back:
            node = back.pop()
            if node in marked:
                continue
            marked.add(node)
            reaches.setdefault(node, set()).add(target)
            back.extend(callers.get(node, ()))
    return [reaches.get(id(getattr(root, "__func__", root)), set()) for root in roots]
