"""README.md's normalizer table is the registry's rendering, and its
"Adding a normalizer" example runs as written."""

import pathlib
import re
import types

import pytest

from softattn import normalizers as N
from softattn.normalizers import registry, softmax_family

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def _block(name):
  text = README.read_text()
  m = re.search(rf"<!-- example:{name} -->\s*```python\n(.*?)```", text, re.S)
  assert m, f"README.md has no '<!-- example:{name} -->' python fence"
  return m.group(1)


def test_readme_table_is_the_rendered_registry():
  text = README.read_text()
  m = re.search(r"<!-- normalizers:table[^\n]*-->\n(.*?)\n<!-- /normalizers:table -->",
                text, re.S)
  assert m, "README.md lost its normalizers:table markers"
  assert m.group(1) == N.markdown_table(), (
      "README's normalizer table differs from the registry: paste the output "
      "of `python -m softattn.normalizers` over it")
  # Every registered name has its row.
  for name in N.names():
    assert f"| `{name}" in m.group(1), name


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
