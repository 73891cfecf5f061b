"""``llmrt.actors`` never imports a concrete adapter: it finds them through entry points.

The walk reads every module of ``llmrt.actors`` (the application subpackage
included) with `ast` and resolves each import, relative ones too; the
adapters' shared modules (``_http``, ``_models``, ...) and the plugin
interface (``llmrt.adapters.plugin``) may be imported, a concrete adapter
module (``openai_chat``, ``demo``, ...) may not.
"""

from __future__ import annotations

import ast
import pathlib
import pkgutil

import llmrt.actors
import llmrt.adapters
from llmrt.actors.app.plugins import installed


def _modules(package: object) -> dict[str, pathlib.Path]:
    """Every module of ``package`` (recursively) by name, with its source file."""
    name = package.__name__  # type: ignore[attr-defined]
    found: dict[str, pathlib.Path] = {}
    for path in package.__path__:  # type: ignore[attr-defined]
        root = pathlib.Path(path)
        for file in root.rglob("*.py"):
            parts = file.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((name, *parts))] = file
    return found


def _imports(module: str, file: pathlib.Path) -> set[str]:
    """The absolute module names ``module`` imports (``from X import y`` counts X and X.y)."""
    is_package = file.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                # A package's own name is its first level; a module's is its parent's.
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def _concrete_adapters() -> set[str]:
    """The adapter modules: every public module of ``llmrt.adapters`` but the interface."""
    return {
        f"llmrt.adapters.{info.name}"
        for info in pkgutil.iter_modules(llmrt.adapters.__path__)
        if not info.name.startswith("_") and info.name != "plugin"
    }


def test_the_walk_sees_the_packages_it_checks() -> None:
    modules = _modules(llmrt.actors)
    assert {"llmrt.actors._call", "llmrt.actors.app.config", "llmrt.actors.app.cli"} <= set(modules)
    assert {"llmrt.adapters.openai_chat", "llmrt.adapters.demo"} <= _concrete_adapters()
    # The walk resolves relative imports: config's `from ..._runtime import` is seen
    # (in config._register, where registering into a runtime moved).
    assert "llmrt.actors._runtime" in _imports(
        "llmrt.actors.app.config._register", modules["llmrt.actors.app.config._register"]
    )
    # And it would catch a concrete import: the adapters' own modules have them.
    adapter_file = pathlib.Path(llmrt.adapters.__path__[0]) / "openai_chat.py"
    assert "llmrt.adapters._presets" in _imports("llmrt.adapters.openai_chat", adapter_file)


def test_actors_never_import_a_concrete_adapter() -> None:
    concrete = _concrete_adapters()
    offenders = {
        module: sorted(
            name
            for name in _imports(module, file)
            if any(name == c or name.startswith(c + ".") for c in concrete)
        )
        for module, file in _modules(llmrt.actors).items()
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_built_in_adapters_are_entry_points() -> None:
    plugins = installed()
    assert plugins.problems == {}
    assert set(plugins.adapters) == {
        "openai_chat",
        "anthropic",
        "demo",
        "gemini",
        "openai_responses",
    }
    for kind, plugin in plugins.adapters.items():
        assert plugin.kind == kind
        assert f"llmrt.adapters.{kind}" in _concrete_adapters()


def test_adapters_never_import_the_actors() -> None:
    # The other direction: an adapter (and the plugin interface) needs only `llmrt`.
    offenders = {
        module: sorted(n for n in _imports(module, file) if n.startswith("llmrt.actors"))
        for module, file in _modules(llmrt.adapters).items()
    }
    assert {m: names for m, names in offenders.items() if names} == {}


def test_the_gateway_never_imports_the_application() -> None:
    # The gateway and its client sit below ``llmrt.actors.app``: the client lives
    # beside the protocol it speaks, and nothing of the gateway reaches up.
    modules = _modules(llmrt.actors)
    gateway = {m: f for m, f in modules.items() if m.startswith("llmrt.actors.gateway")}
    assert "llmrt.actors.gateway.client" in gateway  # the walk sees the client
    offenders = {
        module: sorted(n for n in _imports(module, file) if n.startswith("llmrt.actors.app"))
        for module, file in gateway.items()
    }
    assert {m: names for m, names in offenders.items() if names} == {}
    # And it would catch one: the application's modules import the gateway's.
    assert "llmrt.actors.gateway.client" in _imports(
        "llmrt.actors.app._setup", modules["llmrt.actors.app._setup"]
    )
