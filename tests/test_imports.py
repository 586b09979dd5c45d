"""The package imports downward only: no module of src/rnmt imports one that imports it back, directly or
through others, counting the imports inside functions too (a lazy import is still a dependency, and a
circle of them is a house where nothing can be read or moved on its own). A package's __init__ that
only hands names on (the registries' auto-import) is its face, not a room, and is left out."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str], top: bool = False) -> set[str]:
    """The rnmt modules a file imports (a `from pkg import name` of a submodule counts as that module); with
    `top`, those it imports when it is imported (not inside its functions)."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in (tree.body if top else ast.walk(tree)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:                  # a relative import: from the package `level - 1` folders up
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *filter(None, [base])])
            subs = {f"{base}.{a.name}" for a in node.names} & modules
            found |= subs or {base}
    return {m for m in found if m in modules and m != here}


def graph() -> dict[str, set[str]]:
    files = [p for p in SRC.joinpath("rnmt").rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports(p, modules) for p in files if p.name != "__init__.py"}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle once, as the modules along it (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle_through_three_modules() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_one_that_imports_it_back() -> None:
    edges = graph()
    assert len(edges) > 100 and "rnmt.report.layout" in edges["rnmt.report.tables"]
    found = circles(edges)
    assert not found, "import circles (break each by moving the shared names down): " + "; ".join(
        " -> ".join(c) for c in found)


# The house's floors, lowest first: a package or top-level module imports only from its own floor and those
# below it. Written once, here; docs/architecture.md describes them.
FLOORS = [
    # the ground: files, settings and their checks, provenance, the machine (switches, fast paths, products)
    {"rnmt", "io", "settings", "config", "progress", "provenance", "energies", "machine", "cluster"},
    {"cells", "data"},                                  # the papers' cells; corpora, subwords, batches
    {"models", "parse"},                                # architectures and their model files; UD labels
    {"decode"},                                         # search, ensembles, bundles
    {"train"},                                          # training (validation decodes)
    {"planning"},                                       # from config and experiment files to jobs
    {"evaluate"},                                       # scores, significance tests, gates
    {"report"},                                         # tables, claims, figures
    {"bench", "cli", "__main__"},                       # benchmarks and the command line
]


def unit(module: str) -> str:
    """A module's package (rnmt.train.trainer -> train) or top-level module (rnmt.planning.plan -> plan)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward(edges: dict[str, set[str]]) -> list[str]:
    floor = {u: i for i, units in enumerate(FLOORS) for u in units}
    units = {unit(m) for m in edges}
    missing = sorted(units - set(floor))
    assert not missing, f"give each package and top-level module a floor in FLOORS: {missing}"
    return [f"{m} -> {d}" for m, deps in sorted(edges.items()) for d in sorted(deps)
            if floor[unit(d)] > floor[unit(m)]]


def test_the_floor_check_finds_an_import_that_runs_up() -> None:
    assert upward({"rnmt.models.srnmt": {"rnmt.train.optim"}, "rnmt.train.optim": set()}) == \
        ["rnmt.models.srnmt -> rnmt.train.optim"]
    assert upward({"rnmt.train.trainer": {"rnmt.models.init"}, "rnmt.models.init": set()}) == []
    assert unit("rnmt.planning.plan") == "planning" and unit("rnmt.cli") == "cli"


def test_no_package_imports_from_a_higher_floor() -> None:
    found = upward(graph())
    assert not found, "imports that run up the floors (move the shared names down): " + "; ".join(found)


FIRST_IMPORT = """
import importlib, pkgutil, sys
import rnmt.models
failed = []
for info in pkgutil.iter_modules(rnmt.models.__path__):
    for name in [k for k in sys.modules if k.startswith("rnmt.models.")]:
        del sys.modules[name]
    try:
        importlib.import_module(f"rnmt.models.{info.name}")
    except Exception as e:  # noqa: BLE001
        failed.append(f"{info.name}: {e!r}")
print("\\n".join(failed))
"""


def test_every_architecture_module_imports_as_the_first_of_its_package() -> None:
    """Importing the registry imports every module of rnmt.models, so a module imported first (a script's
    `from rnmt.models.rnnsearch import ...`) is only half-made while the others import: none may take a
    name from another at import time that the other defines below its own import of the registry."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", FIRST_IMPORT], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr[-2000:]


FILES = {module_name(p): p for p in SRC.joinpath("rnmt").rglob("*.py")}


def reached(start: list[str], top: bool = False) -> set[str]:
    """The rnmt modules `start` imports, directly or through others (with `top`, only at import time)."""
    todo, seen = list(start), set()
    while todo:
        if (m := todo.pop()) not in seen:
            seen.add(m)
            todo += imports(FILES[m], set(FILES), top=top)
    return seen


def outside(modules: set[str], parts: tuple[str, ...], own: frozenset[str] = frozenset({"rnmt"})) -> list[str]:
    """Those of `modules` (but `own`) in no file or folder of `parts` (relative to the rnmt package)."""
    root = SRC / "rnmt"
    return sorted(m for m in modules if m not in own and not any(
        FILES[m].resolve().is_relative_to((root / part).resolve()) for part in parts))


def test_the_score_rules_digest_covers_the_code_that_computes_scores() -> None:
    # the score rule scores again when the digest of SCORED_BY changes: a module the scoring imports outside it
    # could change the scores while the metrics files stay as the old code made them
    from rnmt.evaluate import SCORED_BY

    seen = reached(["rnmt.evaluate.metrics", "rnmt.evaluate.score"], top=True)
    assert "rnmt.data.tokenize" in seen
    missing = outside(seen, SCORED_BY)
    assert not missing, f"add to rnmt.evaluate.SCORED_BY what the scoring imports: {missing}"


def test_the_decoding_rules_digests_cover_the_code_that_decodes() -> None:
    # the translate, gates and postprocess rules run again when the digest of their code changes: a module the
    # decoding imports outside it (inside a function too) could change the translations while they stay as
    # the old code made them. `rnmt translate --model` imports these; the models' and cells' registries import
    # every module of their folders.
    from rnmt.decode import DECODED_BY, POSTPROCESSED_BY

    translate = ["rnmt.decode.translate", "rnmt.decode.settings", "rnmt.machine.hardware", "rnmt.models.checkpoint",
                 "rnmt.io", "rnmt.settings", *(m for m in FILES if m.startswith(("rnmt.models.", "rnmt.cells.")))]
    assert not outside(reached(translate), DECODED_BY), "add to rnmt.decode.DECODED_BY what the decoding imports"
    assert not outside(reached(["rnmt.evaluate.gates"]), DECODED_BY,
                       frozenset({"rnmt", "rnmt.evaluate", "rnmt.evaluate.gates"}))
    assert not outside(reached(["rnmt.data.tokenize"]), POSTPROCESSED_BY), "add to POSTPROCESSED_BY"
    # and no more than that: the corpus preparation's code is not the decoding's
    assert not any(part.startswith(("data/tokenize", "data/clean", "data/truecase", "decode/bundle"))
                   for part in DECODED_BY)
