"""The docs' normalizer tables (README.md's, docs/kernels.md's table of
modes) are the registry's rendering, and README's "Adding a normalizer"
recipe names every file a normalizer takes and its example runs as
written."""

import pathlib
import re
import types

import pytest

from softattn import modes as modes_lib
from softattn import normalizers as N
from softattn.normalizers import registry, softmax_family, tables
from tests import normalizer_sites as sites_lib
from tests import reference_normalizers as R

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _block(name):
  text = README.read_text()
  m = re.search(rf"<!-- example:{name} -->\s*```python\n(.*?)```", text, re.S)
  assert m, f"README.md has no '<!-- example:{name} -->' python fence"
  return m.group(1)


@pytest.mark.parametrize("table", tables.TABLES, ids=lambda t: t.path)
def test_committed_tables_are_the_rendered_registry(table):
  assert tables.committed(table) == table.render(), (
      f"{table.path}'s table differs from the registry: run "
      f"`{tables.WRITE_COMMAND}` (or paste the output of `{table.command}` "
      f"between its '{table.marker}' markers)")


def test_readme_table_has_a_row_per_name():
  for name in N.names():
    assert f"| `{name}" in N.markdown_table(), name


def _kernel_rows():
  rows = [[c.strip() for c in line.strip("|").split(" | ")]
          for line in tables.kernels_table().splitlines()[2:]]
  assert all(len(r) == 5 for r in rows), rows
  return rows


def test_kernels_table_has_every_mode_and_each_normalizer_once():
  """Each declared normalizer is named in exactly one row, its mode's (or
  its stream kind's, for rowwise), and every mode has its row."""
  rows = _kernel_rows()
  named = {}
  for label, norms, *_ in rows:
    for name, note in tables.NOTES.items():
      norms = norms.replace(f"{name} ({note})", name)
    for name in norms.split(", "):
      named.setdefault(name, []).append(label)
  for norm in registry.declarations():
    want = (f"`{norm.mode}`" if norm.mode in modes_lib.MODES
            else tables.STREAM_ROWS[tables._kind(norm)][0])  # pylint: disable=protected-access
    assert named.get(norm.name) == [want], norm.name
  assert [r[0] for r in rows[:len(modes_lib.MODES)]] == [
      f"`{m}`" for m in modes_lib.MODES]


def test_kernels_table_cells_are_asked_of_the_code(monkeypatch):
  """The yes/no cells come from ``streamable`` and the fused path's
  ``unsupported_reason``: a normalizer the kernels refused would show."""
  monkeypatch.setattr(tables, "_fuses", lambda n: "laplace" not in n.name)
  row = [r for r in _kernel_rows() if r[0] == "`pointwise`"][0]
  assert row[3] == "yes (not laplace)"
  prenorm = _kernel_rows()[-1]
  assert prenorm[3] == "yes (not prenorm(laplace))"
  monkeypatch.setattr(tables, "_fuses", lambda n: False)
  assert {r[3] for r in _kernel_rows()} == {"no"}


def test_kernels_table_paths_exist():
  for path in re.findall(r"`(softattn/[\w/]+\.py)`", tables.kernels_table()):
    assert (sites_lib.ROOT / path).is_file(), (
        f"docs/kernels.md's table names {path}, which is gone: fix "
        f"softattn/normalizers/tables.py's STREAM_ROWS or the Mode's how")


def test_kernels_table_needs_each_modes_how(monkeypatch):
  modes = dict(modes_lib.MODES)
  modes["exp"] = modes["exp"]._replace(how="")
  monkeypatch.setattr(modes_lib, "MODES", modes)
  with pytest.raises(ValueError, match="mode 'exp' has no `how`"):
    tables.kernels_table()


def test_write_rewrites_a_stale_table(tmp_path):
  for table in tables.TABLES:
    (tmp_path / table.path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / table.path).write_text(
        (sites_lib.ROOT / table.path).read_text())
  kernels = tmp_path / "docs/kernels.md"
  kernels.write_text(kernels.read_text().replace("| `softpick` | softpick",
                                                 "| `softpick` | softmax"))
  assert tables.write(tmp_path) == ["docs/kernels.md"]
  assert [tables.committed(t, tmp_path) for t in tables.TABLES] == [
      t.render() for t in tables.TABLES]
  assert tables.write(tmp_path) == []


# --- the recipe ------------------------------------------------------------------
def _recipe_steps(text):
  """The numbered steps of README's "Adding a normalizer", one string each
  (an item runs to the next item or a blank line)."""
  m = re.search(r"^## Adding a normalizer\n(.*?)(?=^## )", text, re.S | re.M)
  assert m, "README.md lost its '## Adding a normalizer' section"
  return [" ".join(s.split()) for s in
          re.findall(r"^\d+\. (.*?)(?=^\d+\. |\n\n)", m.group(1), re.S | re.M)]


def test_recipe_names_every_file_a_normalizer_takes():
  steps = _recipe_steps(README.read_text())
  assert steps, "README's 'Adding a normalizer' has no numbered steps"
  missing = sites_lib.missing(steps)
  assert not missing, (
      "README's 'Adding a normalizer' steps do not name every file the suite "
      "requires an edit in for a new normalizer (tests/normalizer_sites.py "
      "finds them); add them to a step:\n  " + "\n  ".join(missing))


def test_recipe_check_fails_without_each_step():
  """Deleting any step that names a file leaves that file unnamed."""
  steps = _recipe_steps(README.read_text())
  naming = [i for i, s in enumerate(steps)
            if sites_lib.missing([s]) != sites_lib.missing([])]
  assert len(naming) >= 4, steps   # declare, reference, parameters, tables
  for i in naming:
    assert sites_lib.missing(steps[:i] + steps[i + 1:]), steps[i]


def test_sites_are_found_in_the_code(tmp_path):
  """The scan finds the references the suite checks against and the values
  it passes for required parameters, and data a new test would keep for
  every normalizer."""
  found = sites_lib.data_sites()
  assert (sites_lib._rel(R.__file__), ("REFS",)) in [  # pylint: disable=protected-access
      (s.path, s.names) for s in found]
  assert any("REQUIRED" in s.why for s in found)
  new = tmp_path / "test_new.py"
  new.write_text("TOL = {%s}\n" % ", ".join(
      f"{n!r}: 1e-6" for n in N.names()))
  assert [s.names for s in sites_lib.data_sites([new])] == [("TOL",)]


def test_table_needs_formula_and_source(monkeypatch):
  bare = N.Normalizer(name="bare", mode="exp", needs="none", defaults={},
                      transform=lambda s, stats: s)
  monkeypatch.setattr(registry, "_REGISTRY", {"bare": bare})
  with pytest.raises(ValueError, match="'bare' declares no formula"):
    N.markdown_table()


def test_adding_a_normalizer_example_runs(monkeypatch):
  """The declaration, placed in softmax_family.py's namespace (its imports,
  none of its normalizers), registers through the same path as the package's
  families and then runs on dense, chunked and pallas paths and in the layer
  (the second block asserts that)."""
  monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
  # Followed literally, the recipe declares it in softmax_family.py too.
  registry._REGISTRY.pop("tempered_softmax", None)
  family = types.ModuleType("example_family")
  family.__dict__.update({k: v for k, v in vars(softmax_family).items()
                          if not isinstance(v, N.Normalizer)
                          and not k.startswith("__")})
  exec(_block("declare"), family.__dict__)  # noqa: S102
  declared = registry.declared_in(family)
  assert [n.name for n in declared] == ["tempered_softmax"]
  for n in declared:
    N.register(n)
  exec(_block("use"), {})  # noqa: S102
  row = [r for r in N.markdown_table().splitlines() if "tempered_softmax" in r]
  assert row == ["| `tempered_softmax` | `softmax(s/T)` | running max | "
                 "Hinton et al. 2015 |"]
