"""Building the processor named in the configuration (``processor.class`` and ``.options``)."""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from jetkafka.config._checks import check_class_path
from jetkafka.config._fields import Invalid, Origin
from jetkafka.config._schema import ProcessorConfig
from jetkafka.errors import MissingExtra, ProcessorError
from jetkafka.processors._base import BatchEventProcessor


def load_processor(config: ProcessorConfig, pythonpath: Sequence[str] = ()) -> BatchEventProcessor:
    """Import ``config.class_path`` ("package.module:ClassName") and build it with the options.

    The current directory and then each ``pythonpath`` directory are put at the front of
    ``sys.path`` (once each), so a processor module next to the configuration imports without
    installing it. Every option value is a copy: a processor can never alter the configuration.
    What goes wrong is a :class:`ProcessorError` in the form of a configuration error, naming
    the file and line of ``class`` or ``options`` (``FILE:LINE: processor.options: ...``).
    """
    class_path = config.class_path
    origin = config.origin
    try:
        check_class_path(class_path)
    except Invalid as exc:
        raise _error(origin, "class", exc.problem, exc.fix) from None
    module_name, _, attr_path = class_path.partition(":")
    searched = _extend_sys_path(pythonpath)
    module = _import(module_name, class_path, searched, origin)
    cls = _resolve(module, attr_path, class_path, origin)
    options = {name: copy.deepcopy(value) for name, value in config.options.items()}
    return _instantiate(cls, options, class_path, origin)


def _error(origin: Origin | None, key: str, problem: str, fix: str = "") -> ProcessorError:
    """An error about ``key`` of the processor section; without ``origin``, about the command line."""
    if origin is None:
        return ProcessorError(problem + (f"\n  fix: {fix}" if fix else ""))
    return ProcessorError(origin.message(key, problem, fix))


def _extend_sys_path(pythonpath: Sequence[str]) -> list[str]:
    wanted = [os.getcwd()]
    for entry in pythonpath:
        directory = os.path.abspath(entry)
        if not os.path.isdir(directory):
            raise _error(
                None,
                "",
                f"--pythonpath {entry}: not a directory",
                "pass a directory that holds the processor's module or package",
            )
        wanted.append(directory)
    present = {os.path.abspath(p or os.curdir) for p in sys.path}
    new = [d for d in dict.fromkeys(wanted) if d not in present]
    sys.path[:0] = new
    # Modules written after the interpreter started are only seen once the finder caches reset.
    importlib.invalidate_caches()
    return list(dict.fromkeys(wanted))


def _import(module_name: str, class_path: str, searched: list[str], origin: Origin) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except MissingExtra as exc:
        # The module imports a part of jetkafka (jetkafka.spark, ...) whose extra is missing.
        raise _error(origin, "class", f"{class_path!r}: {exc.problem}", exc.fix) from None
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module_name == missing or module_name.startswith(missing + ".")):
            dirs = "\n    ".join(searched + [p for p in sys.path if p and p not in searched])
            detail = "" if missing == module_name else f" (no package {missing!r})"
            raise _error(
                origin,
                "class",
                f"{class_path!r}: module {module_name!r} not found{detail}; "
                f"searched:\n    {dirs}",
                "run jetkafka from the directory that holds the module, or add that directory "
                "with --pythonpath DIR",
            ) from None
        raise _error(
            origin,
            "class",
            f"{class_path!r}: importing module {module_name!r} failed: "
            f"it imports {missing!r}, which is not installed ({exc})",
            f"install the package that provides {missing!r} into the environment running jetkafka",
        ) from None
    except Exception as exc:  # noqa: BLE001 - any import-time failure of user code is reported
        raise _error(
            origin,
            "class",
            f"{class_path!r}: importing module {module_name!r} raised "
            f"{type(exc).__name__}: {exc}{_where(exc)}",
            f"fix the error in module {module_name!r}",
        ) from None


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    # The innermost frame outside the import machinery is the user's line.
    user = [f for f in frames if "importlib" not in f.filename]
    if user:
        frame = user[-1]
        return f" ({frame.filename}, line {frame.lineno})"
    return ""


def _resolve(module: ModuleType, attr_path: str, class_path: str, origin: Origin) -> type[BatchEventProcessor]:
    target: Any = module
    walked = module.__name__
    for part in attr_path.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(target) if not n.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1, cutoff=0.6)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            found = _processor_classes(module)
            listing = (
                f"processor classes in {module.__name__}: {', '.join(found)}"
                if found
                else (f"{module.__name__} defines no BatchEventProcessor subclass")
            )
            raise _error(
                origin,
                "class",
                f"{class_path!r}: {walked!r} has no attribute {part!r}.{hint}",
                f"check the class name after the ':'; {listing}",
            )
        target = getattr(target, part)
        walked = f"{walked}.{part}"
    if not inspect.isclass(target):
        raise _error(
            origin,
            "class",
            f"{class_path!r}: {walked} is {_kind(target)}, not a class",
            "name a class that subclasses jetkafka.processors._base.BatchEventProcessor",
        )
    if not issubclass(target, BatchEventProcessor):
        raise _error(
            origin,
            "class",
            f"{class_path!r}: {target.__name__} does not subclass BatchEventProcessor",
            f"declare it as: class {target.__name__}(BatchEventProcessor) "
            "(from jetkafka.processors._base import BatchEventProcessor)",
        )
    if inspect.isabstract(target):
        missing = ", ".join(sorted(getattr(target, "__abstractmethods__", ())))
        raise _error(
            origin,
            "class",
            f"{class_path!r}: {target.__name__} does not implement {missing}",
            f"define {missing} in {target.__name__}",
        )
    return target


def _processor_classes(module: ModuleType) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if inspect.isclass(value)
        and issubclass(value, BatchEventProcessor)
        and value is not BatchEventProcessor
        and not inspect.isabstract(value)
    )


def _kind(value: Any) -> str:
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "a function"
    if inspect.ismodule(value):
        return "a module"
    return f"an instance of {type(value).__name__}"


def _instantiate(
    cls: type[BatchEventProcessor], options: dict[str, Any], class_path: str, origin: Origin
) -> BatchEventProcessor:
    try:
        signature: inspect.Signature | None = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        shown = f"{cls.__name__}{signature.replace(return_annotation=inspect.Signature.empty)}"
        try:
            signature.bind(**options)
        except TypeError:
            raise _signature_error(cls, signature, options, origin, shown) from None
    try:
        instance = cls(**options)
    except ProcessorError as exc:
        # The constructor named the option, the cause and the fix itself; one that says which
        # option (``key`` within the section, ``problem``, ``fix``) is placed at its line too.
        key, problem = getattr(exc, "key", None), getattr(exc, "problem", None)
        if origin is None or not isinstance(key, str) or not isinstance(problem, str):
            raise
        raise _error(origin, key, problem, str(getattr(exc, "fix", ""))) from None
    except Exception as exc:  # noqa: BLE001 - a constructor refusing the options is a config problem
        raised = f"raised {type(exc).__name__}: {exc}{_where(exc)}"
        if not options:
            raise _error(
                origin, "class", f"{class_path!r}: {cls.__name__}() {raised}", f"fix the constructor of {cls.__name__}"
            ) from None
        # The values under options are what the constructor refused.
        raise _error(
            origin,
            "options",
            f"{cls.__name__}(**options) {raised}",
            f"check the values under {origin.path}.options against what the constructor expects",
        ) from None
    return instance


def _signature_error(
    cls: type, signature: inspect.Signature, options: dict[str, Any], origin: Origin, shown: str
) -> ProcessorError:
    params = signature.parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    named = [
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = [] if takes_kwargs else [o for o in options if o not in named]
    missing = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and name not in options
    ]
    positional_only = [
        name
        for name, p in params.items()
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.default is p.empty
    ]
    parts: list[str] = []
    fixes: list[str] = []
    renamed: set[str] = set()
    if unknown:
        parts.append(f"does not accept option(s) {', '.join(map(repr, unknown))}")
        for name in unknown:
            close = difflib.get_close_matches(name, named, n=1, cutoff=0.6)
            if close:
                renamed.add(close[0])
            fixes.append(f"rename {name!r} to {close[0]!r}" if close else f"remove {name!r}")
    if missing:
        parts.append(f"needs option(s) {', '.join(map(repr, missing))}")
        to_add = [m for m in missing if m not in renamed]
        if to_add:
            fixes.append("add " + ", ".join(f"{m}: ..." for m in to_add) + f" under {origin.path}.options")
    if positional_only:
        parts.append(f"takes positional-only argument(s) {', '.join(map(repr, positional_only))}")
        fixes.append("make the constructor's parameters keyword-capable; options are passed by name")
    if not parts:
        parts.append("does not accept the given options")
    return _error(
        origin,
        "options",
        f"{cls.__name__} {'; '.join(parts)}; its signature is {shown}",
        "; ".join(fixes) or f"match {origin.path}.options to the constructor's parameters",
    )
