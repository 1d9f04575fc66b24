"""Every file a new normalizer takes an edit in for the suite to pass,
computed from the code that requires it (README.md's "Adding a normalizer"
must name each one: tests/test_readme_normalizers.py).

* its declaration: one of the family modules ``softattn.normalizers.FAMILIES``;
* the rendered tables: ``softattn.normalizers.tables.TABLES``, rewritten by
  ``tables.WRITE_COMMAND``;
* per-name test data: every module-level dict literal in the test suite
  (pyproject's ``testpaths``) whose keys name every registered normalizer
  (``REFS``, the float64 references), or every one that has a parameter
  with no default (``REQUIRED``: the values those tests pass).

The dicts are found by their keys, so data a new test keeps for every
normalizer is a site as soon as it is written, and the recipe's test fails
until the recipe names it. Found on a tree where every site is complete (the
committed one): a normalizer half added is missing from the dicts it lacks.
"""

from __future__ import annotations

import ast
import pathlib
import tomllib
from typing import NamedTuple

from softattn import normalizers as N
from softattn.normalizers import registry, tables

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Site(NamedTuple):
  path: str          # relative to the checkout
  names: tuple       # what a recipe step must name with the path
  why: str


def _rel(path) -> str:
  path = pathlib.Path(path).resolve()
  return (path.relative_to(ROOT) if path.is_relative_to(ROOT) else
          path).as_posix()


def family_files() -> list[str]:
  return [_rel(m.__file__) for m in N.FAMILIES]


def table_sites() -> list[Site]:
  return [Site(t.path, (tables.WRITE_COMMAND,),
               f"its row in {t.path}'s table ({t.command})")
          for t in tables.TABLES]


def _test_files():
  conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
  for d in conf["tool"]["pytest"]["ini_options"]["testpaths"]:
    yield from sorted((ROOT / d).rglob("*.py"))


def data_sites(files=None) -> list[Site]:
  """The module-level dicts of ``files`` (default: the test suite's) keyed
  by every normalizer, or by every one with a required parameter."""
  every = {n.name for n in registry.declarations()}
  required = {n.name for n in registry.declarations()
              if any(v is N.REQUIRED for v in n.defaults.values())}
  out = []
  for path in _test_files() if files is None else files:
    for node in ast.parse(path.read_text()).body:
      target = (node.targets[0] if isinstance(node, ast.Assign)
                else node.target if isinstance(node, ast.AnnAssign) else None)
      if not (isinstance(target, ast.Name)
              and isinstance(getattr(node, "value", None), ast.Dict)):
        continue
      keys = {k.value for k in node.value.keys
              if isinstance(k, ast.Constant) and isinstance(k.value, str)}
      if every <= keys:
        why = "an entry for every normalizer"
      elif required and required <= keys:
        why = "values for a parameter with no default (REQUIRED)"
      else:
        continue
      out.append(Site(_rel(path), (target.id,), why))
  return out


def sites() -> list[Site]:
  """Every site but the family file (one of ``family_files()``)."""
  return data_sites() + table_sites()


def missing(steps: list[str]) -> list[str]:
  """What no step of a recipe names: a family file (each, by file name), or
  a site (its path with its names, in one step)."""
  out = [f"family file {f}" for f in family_files()
         if not any(pathlib.PurePath(f).name in s for s in steps)]
  for site in sites():
    if not any(site.path in s and all(n in s for n in site.names)
               for s in steps):
      out.append(f"{site.path} ({', '.join(site.names)}): {site.why}")
  return out
