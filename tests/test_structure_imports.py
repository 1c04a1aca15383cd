"""The shape of hf_seq/ and train_scripts/, read from their source with ``ast`` (nothing is imported):

* no import cycle among their modules, function-level imports included (``if TYPE_CHECKING:`` blocks, which never
  run, excluded);
* no train script (``train_*.py``, ``finetune_*.py``, ``pretrain_*.py``) imports another: what scripts share lives
  in the shared modules (common, features, classification, ...);
* no function longer than :data:`MAX_FUNCTION_LINES`, except those in :data:`LONG_FUNCTIONS` (each with its reason).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 100
# (file, function) -> why it is still longer than MAX_FUNCTION_LINES
LONG_FUNCTIONS = {}
SCRIPT_PREFIXES = ("train_", "finetune_", "pretrain_")


def _modules() -> dict[str, Path]:
    """Module name -> source file: hf_seq/ as ``hf_seq.*``, train_scripts/ as ``hf_seq.train_scripts.*`` (how the
    wheel installs it: pyproject.toml's package-dir)."""
    found = {}
    for package, folder in (("hf_seq", ROOT / "hf_seq"), ("hf_seq.train_scripts", ROOT / "train_scripts")):
        for path in sorted(folder.rglob("*.py")):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST):
    """Every Import / ImportFrom of ``tree``, at any depth (inside functions too), outside ``if TYPE_CHECKING:``."""
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def _imported(module: str, path: Path) -> set[str]:
    """The modules of :data:`MODULES` that ``module`` imports."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    targets = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            child = f"{base}.{alias.name}"
            targets.add(child if child in MODULES else base)
    return {target for target in targets if target in MODULES and target != module}


GRAPH = {module: _imported(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph[node]):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_the_imports():
    """The graph holds module-level, function-level and relative imports (a graph that read nothing finds no cycle)."""
    assert "hf_seq.train_scripts.arguments" in GRAPH["hf_seq.train_scripts.train_classifier"]
    assert "hf_seq.train_scripts.cli" in GRAPH["hf_seq.train_scripts.train_classifier"]  # inside `if __name__`
    assert "hf_seq.toolkit.model_card" in GRAPH["hf_seq.train_scripts.common"]  # inside a function
    assert "hf_seq.modeling_bert" in GRAPH["hf_seq"]


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def _is_script(module: str) -> bool:
    package, _, name = module.rpartition(".")
    return package == "hf_seq.train_scripts" and name.startswith(SCRIPT_PREFIXES)


def test_scripts_are_found():
    scripts = {m.rsplit(".", 1)[1] for m in MODULES if _is_script(m)}
    assert {"train_classifier", "train_tagger", "finetune_bert", "pretrain_bert", "train_translation"} <= scripts


def test_no_script_imports_another():
    wrong = {m: sorted(t for t in GRAPH[m] if _is_script(t)) for m in MODULES if _is_script(m)}
    wrong = {m: targets for m, targets in wrong.items() if targets}
    assert not wrong, f"scripts importing other scripts: {wrong}"


def _long_functions() -> dict[tuple[str, str], int]:
    found = {}
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found[(path.relative_to(ROOT).as_posix(), node.name)] = lines
    return found


def test_no_long_functions_beyond_the_allow_list():
    extra = {key: n for key, n in _long_functions().items() if key not in LONG_FUNCTIONS}
    assert not extra, f"functions over {MAX_FUNCTION_LINES} lines: {extra} (split them into named steps)"


@pytest.mark.parametrize("key", sorted(LONG_FUNCTIONS))
def test_allow_list_is_current(key):
    """Each allowed function still exists and is still long: a split function leaves the list."""
    assert key in _long_functions(), (
        f"{key} is no longer over {MAX_FUNCTION_LINES} lines: remove it from LONG_FUNCTIONS"
    )
