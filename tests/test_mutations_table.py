"""The mutation sample's table (benchmarks/mutations.py) matches the code and
the tests it names; no mutant is run here."""

import collections
import importlib.util
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load():
  spec = importlib.util.spec_from_file_location(
      "benchmarks_mutations", os.path.join(REPO, "benchmarks", "mutations.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


mutations = _load()
AREAS = {"normalizers": "softattn/normalizers/", "modes": "softattn/modes.py",
         "kernels": "softattn/pallas/", "sharding": "softattn/sharding.py",
         "paths": "softattn/paths.py"}


def _text(rel):
  with open(os.path.join(REPO, rel), encoding="utf-8") as f:
    return f.read()


def test_twenty_mutants_with_unique_names_spread_over_the_library():
  names = [m.name for m in mutations.MUTANTS]
  assert len(names) == 20 and len(set(names)) == 20
  for area, prefix in AREAS.items():
    assert sum(m.path.startswith(prefix) for m in mutations.MUTANTS) >= 3, area
  assert all(m.path.startswith("softattn/") and m.why and "\n" not in m.why
             for m in mutations.MUTANTS)


def test_each_old_occurs_once_and_new_is_another_single_line():
  assert mutations.problems(REPO) == []
  for m in mutations.MUTANTS:
    assert _text(m.path).count(m.old) == 1, m.name
    assert m.new != m.old and "\n" not in m.new and "\n" not in m.old, m.name


def test_each_named_test_exists():
  for m in mutations.MUTANTS:
    assert m.tests, m.name
    for node in m.tests:
      path, _, rest = node.partition("::")
      assert path.startswith("tests/") and os.path.isfile(
          os.path.join(REPO, path)), (m.name, node)
      func = re.sub(r"\[.*\]$", "", rest)
      if func:
        assert re.search(rf"^def {re.escape(func)}\(", _text(path), re.M), (
            m.name, node)


def test_no_two_mutants_are_the_same_edit():
  edits = collections.Counter((m.path, m.old) for m in mutations.MUTANTS)
  assert max(edits.values()) == 1
