"""The shape of hf_seq/ and train_scripts/, read from their source with ``ast`` (nothing is imported, except by the
saved-folder check at the end):

* no import cycle among their modules, function-level imports included (``if TYPE_CHECKING:`` blocks, which never
  run, excluded);
* two wings: the package's top (``hf_seq/*.py``) is exactly what a saved model folder carries — the modelling and
  configuration files and every module they import, at any depth — and no file of that closure imports the toolkit
  (``hf_seq.toolkit``: directly, relatively, inside a function, or by name through ``importlib``); a folder saved by
  ``save_pretrained`` with its code, for every family, holds none of the toolkit's files;
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
    targets = _import_targets(module, path.name == "__init__.py", path.read_text(encoding="utf-8"))
    return {target for target in targets if target in MODULES and target != module}


def _import_targets(module: str, is_package: bool, source: str) -> set[str]:
    """Every module name ``source`` (the code of ``module``) imports, resolved to absolute names: ``import a.b``,
    ``from a import b`` (``a.b`` where that is one of :data:`MODULES`, else ``a``), relative imports against
    ``module``'s package, at any depth; and the literal names given to ``importlib.import_module`` /
    ``__import__``."""
    package = module if is_package else module.rsplit(".", 1)[0]
    tree = ast.parse(source)
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                targets.add(node.args[0].value)
    for node in _import_nodes(tree):
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
    return targets


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
    assert "hf_seq.toolkit.model_card" in GRAPH["hf_seq.train_scripts.run_folder"]  # inside a function
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


# --- two wings: what a saved folder carries, and the toolkit that stays home ------------------------------------
TOOLKIT = "hf_seq.toolkit"


def _is_toolkit(target: str) -> bool:
    return target == TOOLKIT or target.startswith(TOOLKIT + ".")


def _folder_closure(graph: dict[str, set[str]]) -> set[str]:
    """The modelling and configuration files at the package's top and every module they import, at any depth: what
    ``save_pretrained`` copies beside the weights (the remote-code loader follows the same imports)."""
    todo = [m for m in graph if m.count(".") == 1 and m.split(".")[1].startswith(("modeling_", "configuration_"))]
    seen = set(todo)
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _toolkit_imports(module: str, source: str) -> list[str]:
    """The toolkit modules that ``source`` (a file of the package's top, named ``module``) imports in any way."""
    return sorted(t for t in _import_targets(module, False, source) if _is_toolkit(t))


def test_the_toolkit_check_sees_every_kind_of_import():
    """Each way a model file could reach the toolkit is caught (a check that reads nothing passes everything)."""
    caught = {
        "from .toolkit import data": ["hf_seq.toolkit.data"],
        "from .toolkit.data import load_data": ["hf_seq.toolkit.data"],
        "from . import toolkit": ["hf_seq.toolkit"],
        "import hf_seq.toolkit.export": ["hf_seq.toolkit.export"],
        "from hf_seq.toolkit.tokenization import build_char_tokenizer": ["hf_seq.toolkit.tokenization"],
        "def convert():\n    from .toolkit.bert_conversion import from_transformers_bert\n": [
            "hf_seq.toolkit.bert_conversion"
        ],
        "class M:\n    def save(self):\n        import hf_seq.toolkit.model_card\n": ["hf_seq.toolkit.model_card"],
        "import importlib\ndef f():\n    return importlib.import_module('hf_seq.toolkit.export')\n": [
            "hf_seq.toolkit.export"
        ],
        "from .attention import attend\nfrom . import compat": [],
    }
    for source, expected in caught.items():
        assert _toolkit_imports("hf_seq.modeling_x", source) == expected, source


def test_the_package_top_is_what_a_folder_carries_and_nothing_else():
    """Every module at hf_seq/'s top (``__init__.py`` aside: never copied) is in a saved folder's import closure, and
    the closure reaches nothing outside the top: the toolkit lives in hf_seq/toolkit/."""
    top = {m for m in MODULES if m.count(".") == 1 and not m.startswith(("hf_seq.train_scripts", TOOLKIT))}
    closure = _folder_closure(GRAPH)
    assert len(closure) >= 15 and "hf_seq.compat" in closure and "hf_seq.attention" in closure
    assert closure == top, (
        f"at the package's top but carried by no folder (move to hf_seq/toolkit/): {sorted(top - closure)}; "
        f"carried by a folder but not at the top: {sorted(closure - top)}"
    )


def test_no_file_a_folder_carries_imports_the_toolkit():
    wrong = {}
    for module in sorted(_folder_closure(GRAPH)):
        found = _toolkit_imports(module, MODULES[module].read_text(encoding="utf-8"))
        if found:
            wrong[MODULES[module].relative_to(ROOT).as_posix()] = found
    assert not wrong, f"files of a saved model folder importing the toolkit (it never travels): {wrong}"


@pytest.mark.parametrize("family", ["rnn", "rnn_seq2seq", "transformer", "bert"])
def test_a_saved_folder_holds_no_toolkit_file(family, tmp_path):
    """``save_pretrained`` of every head of a family, with its remote code: the folder's Python files are modules
    of the package's top (nothing of hf_seq/toolkit/), and none of them names the toolkit in an import."""
    from tiny_models import FAMILIES, tiny_model

    toolkit = {p.stem for p in (ROOT / "hf_seq" / "toolkit").rglob("*.py")} | {"toolkit"}
    top = {p.stem for p in (ROOT / "hf_seq").glob("*.py")} - {"__init__"}
    for head in FAMILIES[family][2]:
        folder = tmp_path / head.__name__
        tiny_model(head, vocab_size=40).save_pretrained(folder)
        saved = {p.stem for p in folder.glob("*.py")}
        assert any(name.startswith("modeling_") for name in saved), (head.__name__, saved)
        assert saved <= top and not saved & toolkit, (head.__name__, sorted(saved - top), sorted(saved & toolkit))
        for path in folder.glob("*.py"):
            found = _toolkit_imports(f"hf_seq.{path.stem}", path.read_text(encoding="utf-8"))
            assert not found, (head.__name__, path.name, found)


@pytest.mark.parametrize("former", ["hf_seq.data", "hf_seq.export", "hf_seq.metrics.accuracy", "hf_seq.tokenization"])
def test_the_toolkit_is_imported_by_its_own_path_only(former):
    """The toolkit's modules import as ``hf_seq.toolkit.<name>``; the package's top holds no second name for them."""
    import importlib

    import hf_seq

    with pytest.raises(ModuleNotFoundError, match=former.split(".")[1]):
        importlib.import_module(former)
    assert not hasattr(hf_seq, former.split(".")[1])


def test_docs_package_md_names_every_module():
    """docs/package.md is the map of the package: a module missing from it is a module a newcomer cannot place."""
    text = (ROOT / "docs" / "package.md").read_text(encoding="utf-8")
    folders = ("hf_seq", "hf_seq/toolkit", "hf_seq/toolkit/metrics", "train_scripts")
    modules = [path for folder in folders for path in sorted((ROOT / folder).glob("*.py"))]
    assert len(modules) > 50
    missing = [str(path.relative_to(ROOT)) for path in modules if f"`{path.name}`" not in text]
    assert not missing, f"docs/package.md does not name: {missing}"
