"""The packages' layers: what may import what, and no import cycles.

* ``softattn`` (the library) never imports the studies: their engine
  (``softattn_studies``: claims, verdicts, RESULTS.md) or their declarations
  (``experiments``). The studies read the library, never the reverse, so the
  library does not change with a study.
* No import cycle among the modules of ``softattn`` and ``softattn_studies``:
  in a cycle, which module works depends on which was imported first (a name
  is missing while its importer is half-initialised), and the modules are
  one unit that cannot be read or tested apart.

Both read the source (``ast``) and import nothing. ``import_graph`` is the
one reader of the graph (tests/test_configlib.py checks the config layer's
direction on it).
"""

from __future__ import annotations

import ast
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent
LIBRARY = "softattn"
PACKAGES = ("softattn", "softattn_studies")
# What the library never imports.
STUDIES = ("softattn_studies", "experiments")

# Cycles still to break, each a sorted tuple of its modules, with the
# reason. ``test_no_import_cycles`` asserts each still exists, so a broken
# one must leave this list.
KNOWN_CYCLES: set[tuple[str, ...]] = set()
# (The last one, softattn.pallas.wrapper <-> gpu/triton/wrapper, went when
# the argument preparation both backends share moved to
# pallas/common/prepare.py.)


# ----------------------------------------------------------------------------
# Reading imports.


def module_name(path: pathlib.Path) -> str:
  """``softattn/pallas/wrapper.py`` -> ``softattn.pallas.wrapper``; a package's
  ``__init__.py`` is the package."""
  parts = list(path.relative_to(REPO).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def sources(packages=PACKAGES) -> dict[str, pathlib.Path]:
  """Every module of ``packages`` (their tests folders too), by name."""
  return {module_name(p): p for package in packages
          for p in sorted((REPO / package).rglob("*.py"))}


def _absolute(module: str, is_package: bool, level: int,
              target: str | None) -> str:
  """The absolute name ``from <level dots><target> import ...`` means in
  ``module``."""
  if not level:
    return target or ""
  base = module.split(".")
  base = base[:len(base) - level + (1 if is_package else 0)]
  return ".".join(base + ([target] if target else []))


def imported_names(source: str, module: str = "", is_package: bool = False
                   ) -> list[tuple[int, str]]:
  """``(line, dotted name)`` of every import in ``source``, at any depth (a
  function's import too): ``import a.b`` gives ``a.b``; ``from a import b``
  gives ``a`` and ``a.b`` (``b`` may be a submodule); relative imports are
  made absolute against ``module`` (``is_package``: it is an
  ``__init__.py``)."""
  out = []
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out += [(node.lineno, a.name) for a in node.names]
    elif isinstance(node, ast.ImportFrom):
      base = _absolute(module, is_package, node.level, node.module)
      out.append((node.lineno, base))
      out += [(node.lineno, f"{base}.{a.name}") for a in node.names
              if a.name != "*"]
  return sorted(out)


def _under(name: str, packages) -> bool:
  return any(name == p or name.startswith(p + ".") for p in packages)


def forbidden_imports(source: str, module: str = "",
                      is_package: bool = False) -> list[int]:
  """Lines of ``source`` that import the studies (``STUDIES``)."""
  return sorted({line for line, name in imported_names(
      source, module, is_package) if _under(name, STUDIES)})


def import_graph(packages=PACKAGES) -> dict[str, set[str]]:
  """Module -> the modules of ``packages`` whose import it runs.

  An import of ``a.b.c`` runs ``a``, ``a.b`` (the packages'
  ``__init__.py``) and ``a.b.c``: an edge to each that is a module here
  (``from a import b`` reaches ``a.b`` only when that is a module). Imports
  inside functions are edges too: a cycle through them still makes the
  modules one unit, and only works while each call comes after both
  imports finished. A module's own enclosing packages are no edges: they
  are being imported when it runs.
  """
  mods = sources(packages)
  graph = {}
  for name, path in mods.items():
    deps = set()
    for _, target in imported_names(path.read_text(encoding="utf-8"), name,
                                     path.name == "__init__.py"):
      parts = target.split(".")
      deps |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)
               if ".".join(parts[:i]) in mods}
    own = name.split(".")
    graph[name] = deps - {".".join(own[:i]) for i in range(1, len(own) + 1)}
  return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
  """Every module ``start``'s import runs, directly or not."""
  seen, todo = set(), [start]
  while todo:
    for nxt in graph.get(todo.pop(), ()):
      if nxt not in seen:
        seen.add(nxt)
        todo.append(nxt)
  return seen


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
  """The groups of modules that import each other (strongly connected
  components of more than one module), each sorted, in sorted order: every
  import cycle lies inside one."""
  closure = {m: reachable(graph, m) for m in graph}
  groups = {tuple(sorted({m} | {n for n in closure[m] if m in closure[n]}))
            for m in graph}
  return sorted(g for g in groups if len(g) > 1)


def cycle_path(graph: dict[str, set[str]], group: tuple[str, ...]) -> str:
  """One cycle through ``group``'s first module: ``a -> b -> a``."""
  start, members = group[0], set(group)
  paths, frontier = {start: [start]}, [start]
  while frontier:
    nxt = []
    for v in frontier:
      for w in sorted(graph[v] & members):
        if w == start:
          return " -> ".join(paths[v] + [start])
        if w not in paths:
          paths[w] = paths[v] + [w]
          nxt.append(w)
    frontier = nxt
  raise ValueError(f"{group} is not a cycle")


# ----------------------------------------------------------------------------
# The readers' own checks.


def test_forbidden_imports_sees_every_form():
  for source in ("import softattn_studies as studies",
                 "import softattn_studies",
                 "from softattn_studies.probes import probed",
                 "import softattn_studies.runs as r",
                 "from softattn_studies import render",
                 "import experiments.elementwise.claims",
                 "from experiments import test_all_studies",
                 "def f():\n  import experiments"):
    assert forbidden_imports(source) == [source.count("\n") + 1], source
  for source in ("from softattn import sweep", "import softattn_studiesx",
                 "import experimentsx", "from softattn.data import datasets",
                 "from . import studies"):
    assert forbidden_imports(source) == [], source
  # Relative imports are resolved against the importing module.
  assert forbidden_imports("from .. import x", "softattn_studies.a") == []
  assert forbidden_imports("from .. import x", "softattn_studies.a.b") == [1]
  assert forbidden_imports("from . import x", "softattn_studies",
                           is_package=True) == [1]


def test_imported_names_resolve_relative_and_submodule_imports():
  source = ("from . import render\nfrom .stats import x\nimport a.b\n"
            "from pkg import sub\ndef f():\n  from .. import lazy\n")
  assert imported_names(source, "pkg.sub.mod") == [
      (1, "pkg.sub"), (1, "pkg.sub.render"), (2, "pkg.sub.stats"),
      (2, "pkg.sub.stats.x"), (3, "a.b"), (4, "pkg"), (4, "pkg.sub"),
      (6, "pkg"), (6, "pkg.lazy")]
  assert imported_names("from . import render", "pkg.sub",
                        is_package=True) == [(1, "pkg.sub"),
                                             (1, "pkg.sub.render")]


def test_cycles_are_found_and_named():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"},
           "f": set()}
  assert cycles(graph) == [("a", "b", "c"), ("d", "e")]
  assert cycle_path(graph, ("a", "b", "c")) == "a -> b -> c -> a"
  assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_has_the_edges_imports_run():
  graph = import_graph()
  # Relative and function-level imports, and "from package import module".
  assert "softattn_studies.render" in graph["softattn_studies.template"]
  assert "softattn.pallas.gpu.backend" in graph[
      "softattn.pallas.wrapper"]  # lazy
  assert "softattn.pallas.gpu.triton.wrapper" in graph[
      "softattn.pallas.gpu.backend"]  # lazy
  assert "softattn.pallas.wrapper" not in graph[
      "softattn.pallas.gpu.triton.wrapper"]
  assert "softattn.config_schema" in graph["softattn.configlib"]
  # A package's __init__ runs before the module imported from it.
  assert {"softattn.aot", "softattn.aot.memory"} <= graph[
      "softattn_studies.probes"]
  assert "softattn" not in graph["softattn.configlib"]  # its own package


# ----------------------------------------------------------------------------
# The layers.


def test_the_library_never_imports_the_studies():
  """``softattn_studies`` and ``experiments`` read the library (models,
  data, sweep), never the reverse, so the library does not change with a
  study. An import inside a function counts: it is the same dependency."""
  offenders = []
  for name, path in sources((LIBRARY,)).items():
    offenders += [f"{path.relative_to(REPO)}:{n}" for n in forbidden_imports(
        path.read_text(encoding="utf-8"), name, path.name == "__init__.py")]
  assert not offenders, (
      f"{', '.join(offenders)} import {' or '.join(STUDIES)}; move what they "
      "need into the library module that owns it")


def test_no_import_cycles():
  """No cycle among the modules of ``softattn`` and ``softattn_studies``,
  their imports inside functions included (see ``import_graph``): those
  keep heavy dependencies (TensorFlow, the kernels, libtpu) off a light
  command's import, not a cycle out of sight. ``KNOWN_CYCLES`` are still to
  break, and must still exist."""
  graph = import_graph()
  found = cycles(graph)
  new = [cycle_path(graph, g) for g in found if g not in KNOWN_CYCLES]
  assert not new, ("import cycles: " + "; ".join(new) + ". Move what both "
                   "modules need into one of its own, or import one way only")
  gone = sorted(KNOWN_CYCLES - set(found))
  assert not gone, (f"{gone} are no cycle any more: remove them from "
                    "KNOWN_CYCLES")
