"""The package's imports point one way: no fakehop module imports one that imports it back, directly
or through others, and imports inside functions count too (only those under `if TYPE_CHECKING:` do
not). `import fakehop` itself imports none of the package's modules."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import fakehop

PACKAGE = Path(fakehop.__file__).resolve().parent


def module_files() -> dict[str, Path]:
    """Each fakehop module's dotted name -> its file."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in the tree, at any depth, but for those under `if TYPE_CHECKING:`."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for branch in node.orelse:
                found.extend(runtime_imports(ast.Module(body=[branch], type_ignores=[])))
            continue
        found.extend(runtime_imports(node))
    return found


def public_map() -> dict[str, str]:
    return dict(fakehop._PUBLIC)


def absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imported_by(module: str, path: Path, modules: set[str]) -> set[str]:
    """The fakehop modules this module imports anywhere in its file."""
    targets: set[str] = set()
    for node in runtime_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        source = absolute(module, path.name == "__init__.py", node)
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in modules:
                targets.add(submodule)
            elif source == "fakehop" and alias.name in public_map():
                targets.add(public_map()[alias.name])
            else:
                targets.add(source)
    return {target for target in targets if target in modules and target != module}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {module: imported_by(module, path, set(files)) for module, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it with the first one again at the end, or None."""
    done: set[str] = set()
    for start in sorted(graph):
        path: list[str] = []
        on_path: set[str] = set()
        if start in done:
            continue
        stack = [(start, iter(sorted(graph[start] - done)))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if child in on_path:
                return [*path[path.index(child) :], child]
            if child not in done:
                path.append(child)
                on_path.add(child)
                stack.append((child, iter(sorted(graph[child] - done))))
    return None


def test_the_import_graph_has_no_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_imports_inside_functions_and_leaves_out_type_checking_ones():
    graph = import_graph()
    assert "fakehop.testing.fixture" in graph["fakehop.testing.plugin"]  # imported inside functions
    assert graph["fakehop"] == set()  # its own imports are all under `if TYPE_CHECKING:`


def test_finding_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_importing_fakehop_imports_none_of_its_modules():
    assert import_graph()["fakehop"] == set()
    shown = "import sys, fakehop; print(sorted(name for name in sys.modules if name.startswith('fakehop.')))"
    result = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]", f"import fakehop loads {result.stdout.strip()}"


# The data flow, lowest first: a module imports only from its own room or one listed before it.
LAYERS = (
    "fakehop",
    "fakehop.style",
    "fakehop.scenario",
    "fakehop.play",
    "fakehop.protocols",
    "fakehop.state",
    "fakehop.verdicts",
    "fakehop.server",
    "fakehop.record",
    "fakehop.testing",
    "fakehop.cli",
    "fakehop.__main__",
)


def layer_of(module: str) -> int:
    return max(index for index, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def test_imports_point_down_the_data_flow():
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    )
    assert upward == []


def test_the_player_and_the_encoders_need_neither_yaml_nor_re2():
    """They read the scenario's immutable model; only the reader parses YAML and compiles RE2 patterns."""
    shown = (
        "import sys, fakehop.play.player, fakehop.protocols; "
        "print(sorted(name for name in ('yaml', 're2', 'fakehop.scenario.reader') if name in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "[]"
