"""The architecture rules of the package (issue 21), checked on the source tree so that they stay true.

1. No module over 350 lines.  2. No folder with more than 12 modules.  3. No import circle, counting
imports under ``TYPE_CHECKING``, inside functions and package ``__init__`` re-exports.  4. The plugin
core names no harness method.  5. PALs and CA-MTL are sibling subpackages sharing their module names,
both patching `adapters` through the one public ``pals_adapters.patching``.  6. docs/architecture.md
names every package folder and draws the import direction between them.  7. No private name (``_x``)
imported across packages.

Each checker takes a package root, so that the last tests can run it on a small broken tree and see it fail.
"""

import ast
import re
from pathlib import Path

import pytest
from helpers import REPO

PACKAGE = REPO / "pals_adapters"
DOC = REPO / "docs" / "architecture.md"
MAX_LINES = 350
MAX_MODULES = 12


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def imports_of(path: Path, root: Path, known: set[str]) -> list[tuple[str, str]]:
    """(imported module, imported name or "") for every import of ``path`` into the package, wherever it
    stands (module level, functions, ``if TYPE_CHECKING:``). ``from pkg import mod`` imports the module."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name in known]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in known:
                    found.append((f"{target}.{alias.name}", ""))
                elif target in known:
                    found.append((target, alias.name))
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    modules = modules_of(root)
    known = set(modules)
    return {m: {t for t, _ in imports_of(p, root, known) if t != m} for m, p in modules.items()}


# --------------------------------------------------------------------------- the checkers


def long_modules(root: Path) -> list[str]:
    return [
        f"{p.relative_to(root.parent)}: {n} lines"
        for p in sorted(root.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]


def crowded_folders(root: Path) -> list[str]:
    folders = {p.parent for p in root.rglob("*.py")}
    counts = {f: len(list(f.glob("*.py"))) for f in folders}
    return [f"{f.relative_to(root.parent)}: {n} modules" for f, n in sorted(counts.items()) if n > MAX_MODULES]


def import_circles(root: Path) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle to a reader."""
    graph = import_graph(root)
    index, low, stack, on_stack, circles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for dep in graph.get(node, ()):
            if dep not in index:
                visit(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def core_strings(root: Path) -> dict[str, set[str]]:
    """String constants of the plugin core's code (docstrings left out), per module."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        if "harness" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        out[module_name(path, root)] = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
        }
    return out


def harness_methods_named_in_core(root: Path, harness_only: set[str]) -> list[str]:
    return [f"{m}: {sorted(s & harness_only)}" for m, s in core_strings(root).items() if s & harness_only]


def method_layout_problems(root: Path) -> list[str]:
    problems = []
    shared = {"config", "modeling", "layer"}
    for method in ("pals", "ca_mtl"):
        folder = root / method
        if not (folder / "__init__.py").is_file():
            problems.append(f"{method}/ is not a subpackage")
            continue
        missing = shared - {p.stem for p in folder.glob("*.py")}
        if missing:
            problems.append(f"{method}/ lacks {sorted(missing)}")
    problems += [
        f"PAL module {n}.py at the package root" for n in shared | {"integration"} if (root / f"{n}.py").exists()
    ]
    if not (root / "patching.py").is_file():
        problems.append("no public patch module patching.py")
        return problems
    graph = import_graph(root)
    top = root.name
    for method in ("pals", "ca_mtl"):
        if not any(f"{top}.patching" in graph.get(m, ()) for m in graph if m.startswith(f"{top}.{method}.")):
            problems.append(f"{method}/ does not patch through {top}.patching")
    crossing = [
        (m, d)
        for m, deps in graph.items()
        for d in deps
        for a, b in (("ca_mtl", "pals"), ("pals", "ca_mtl"))
        if m.startswith(f"{top}.{a}") and d.startswith(f"{top}.{b}")
    ]
    problems += [f"{m} imports the other method's {d}" for m, d in crossing]
    return problems


def folders_of(root: Path) -> list[str]:
    """Package folders relative to the package's parent: ``pals_adapters``, ``pals_adapters/harness`` ..."""
    return sorted(str(p.parent.relative_to(root.parent)) for p in root.rglob("__init__.py"))


def mermaid_edges(text: str) -> dict[str, set[str]]:
    """``A --> B`` edges of the doc's mermaid blocks, by node label (``A[harness/tasks]`` labels A)."""
    blocks = re.findall(r"```mermaid\n(.*?)```", text, flags=re.S)
    labels, edges = {}, {}
    node = r"(\w+)(?:\[\"?([^\]\"]+)\"?\])?"
    for block in blocks:
        for line in block.splitlines():
            m = re.match(rf"\s*{node}\s*-->\s*(?:\|[^|]*\|\s*)?{node}\s*$", line)
            if m:
                a, a_label, b, b_label = m.groups()
                labels.setdefault(a, a_label or a)
                labels.setdefault(b, b_label or b)
                labels[a] = a_label or labels[a]
                labels[b] = b_label or labels[b]
                edges.setdefault(a, set()).add(b)
            else:
                for n, label in re.findall(node, line):
                    if label:
                        labels[n] = label
    return {labels[a].strip(): {labels[b].strip() for b in bs} for a, bs in edges.items()}


def doc_problems(root: Path, text: str) -> list[str]:
    problems = [
        f"{folder}/ not named" for folder in folders_of(root) if not re.search(re.escape(folder) + r"[/\]`\s]", text)
    ]
    drawn = mermaid_edges(text)
    if not drawn:
        return problems + ["no mermaid import diagram"]

    def folder(module: str) -> str:
        path = module.replace(".", "/")
        return path if (root.parent / path / "__init__.py").is_file() else path.rpartition("/")[0]

    def reaches(a, b, seen=()):
        return a == b or any(reaches(n, b, seen + (a,)) for n in drawn.get(a, ()) if n not in seen)

    # a package's __init__ only re-exports (its imports point down into its own modules): the diagram draws
    # the imports of the modules themselves, folder to folder
    modules = modules_of(root)
    graph = import_graph(root)
    needed = {
        (folder(m), folder(d))
        for m, deps in graph.items()
        for d in deps
        if modules[m].name not in ("__init__.py", "__main__.py") and folder(m) != folder(d)
    }
    problems += [f"the diagram does not draw {a} --> {b}" for a, b in sorted(needed) if not reaches(a, b)]
    return problems


def private_imports(root: Path) -> list[str]:
    modules = modules_of(root)
    known = set(modules)
    out = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for target, imported in imports_of(path, root, known):
            target_path = modules[target]
            target_package = target if target_path.name == "__init__.py" else target.rpartition(".")[0]
            private = (imported or target.rpartition(".")[2]).startswith("_") and not (
                imported or target.rpartition(".")[2]
            ).startswith("__")
            if private and target_package != package:
                out.append(f"{name} imports {target}{':' + imported if imported else ''}")
    return out


# --------------------------------------------------------------------------- the package


def test_no_module_is_over_350_lines():
    assert long_modules(PACKAGE) == []


def test_no_folder_holds_more_than_12_modules():
    assert crowded_folders(PACKAGE) == []


def test_no_import_circle_even_through_type_checking_or_reexports():
    assert import_circles(PACKAGE) == []


def test_the_plugin_core_names_no_harness_method():
    from adapters import ADAPTER_CONFIG_MAP

    from pals_adapters.harness.methods import METHODS, OLD_NAMES

    harness_only = (set(METHODS) | set(OLD_NAMES)) - set(ADAPTER_CONFIG_MAP)
    assert {"full", "shared", "separate", "peft_lora", "attention_on_top", "top_pals"} <= harness_only
    assert harness_methods_named_in_core(PACKAGE, harness_only) == []


def test_pals_and_ca_mtl_are_siblings_patching_through_one_public_module():
    assert method_layout_problems(PACKAGE) == []


def test_the_architecture_doc_names_every_folder_and_draws_the_imports():
    assert doc_problems(PACKAGE, DOC.read_text(encoding="utf-8")) == []


def test_no_private_name_is_imported_across_packages():
    assert private_imports(PACKAGE) == []


# --------------------------------------------------------------------------- the checkers can fail


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checkers_see_a_broken_tree(tmp_path):
    root = _tree(
        tmp_path,
        {
            "__init__.py": "from . import config\n",
            "config.py": "x = 1\n" * 351,
            "patching.py": "",
            "a/__init__.py": "",
            "a/one.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .two import T\n",
            "a/two.py": "from .one import _hidden\nT = 'full'\n",
            "b/__init__.py": "",
            "b/user.py": "from ..a.two import _secret\n\ndef f():\n    return 'shared'\n",
            **{f"c/m{i}.py": "" for i in range(13)},
            "pals/__init__.py": "",
            "pals/config.py": "",
            "ca_mtl/__init__.py": "",
            "ca_mtl/config.py": "from ..pals.config import x\n",
        },
    )
    assert long_modules(root) == ["pkg/config.py: 351 lines"]
    assert crowded_folders(root) == ["pkg/c: 13 modules"]
    assert import_circles(root) == [["pkg.a.one", "pkg.a.two"]]
    assert harness_methods_named_in_core(root, {"full", "shared"}) == ["pkg.a.two: ['full']", "pkg.b.user: ['shared']"]
    layout = method_layout_problems(root)
    assert "pals/ lacks ['layer', 'modeling']" in layout
    assert "PAL module config.py at the package root" in layout
    assert "ca_mtl/ does not patch through pkg.patching" in layout
    assert "pkg.ca_mtl.config imports the other method's pkg.pals.config" in layout
    assert private_imports(root) == ["pkg.b.user imports pkg.a.two:_secret"]  # same package: allowed
    doc = "pkg/ pkg/a/ pkg/pals/ pkg/ca_mtl/\n```mermaid\ngraph TD\n  A[pkg/pals] --> P[pkg]\n```\n"
    problems = doc_problems(root, doc)
    assert "pkg/b/ not named" in problems and "the diagram does not draw pkg/b --> pkg/a" in problems
    assert doc_problems(root, "no diagram")[-1] == "no mermaid import diagram"


@pytest.mark.parametrize("line", ["  A[pkg/b] --> B[pkg/a]", "  A[pkg/b] --> C[pkg/c] \n  C --> B[pkg/a]"])
def test_a_drawn_import_path_satisfies_the_doc_check(tmp_path, line):
    root = _tree(tmp_path, {"__init__.py": "", "a/__init__.py": "", "b/__init__.py": "from ..a import x\n"})
    doc = f"pkg/ pkg/a/ pkg/b/\n```mermaid\ngraph TD\n{line}\n```\n"
    assert doc_problems(root, doc) == []
