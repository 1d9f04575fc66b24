"""The launch table's host-feed column: hosts per slice, cores, the doc."""

import os

import pytest

from softattn.aot import hostfeed, table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PP = hostfeed.MEASURED_PP


def test_hosts_per_slice_follow_the_published_vm_types():
  assert hostfeed.hosts("v4-32") == 4          # 16 chips, 4 per host
  assert hostfeed.host("v4-32").vcpus == 240
  assert hostfeed.hosts("v5e-256") == 32       # docs: 16x16 on 32 hosts
  assert hostfeed.host("v5e-256").vcpus == 224
  assert hostfeed.hosts("v5e-1") == 1 and hostfeed.host("v5e-1").vcpus == 24
  assert hostfeed.host("v5e-4").vcpus == 112
  assert hostfeed.hosts("2xv5e-256") == 64
  with pytest.raises(ValueError, match="no published host figures"):
    hostfeed.host("v5p-8")


def test_feed_is_images_per_host_over_the_rate_per_core():
  f = hostfeed.feed(32_744, "v4-32", per_core=341.0)
  assert f.per_host == pytest.approx(8186.0)
  assert f.cores == pytest.approx(8186.0 / 341.0)
  assert hostfeed.cell(f) == "8,186/s: 24 of 240 vCPUs"
  assert hostfeed.row_cell(1000.0, "v5e-1", "value_range(-1, 1)", 341.0) == (
      "– (other input, not measured)")
  assert hostfeed.row_cell(None, "v4-32", PP, 341.0) == "–"


_TABLE = """intro

| config | slice | images/s ≤ | days ≥ |
|---|---|---|---|
| a | v4-32 | 32,744 | 0.15 |
| b | v4-32 | – | – |
| c | v5e-1 | 6,133 | 0.01 |

## Reports
"""


def test_add_column_from_the_table_numbers_and_again():
  out = hostfeed.add_column(_TABLE, {"a": PP, "b": PP, "c": "flip_lr"}, 341.0)
  lines = out.split("\n")
  assert lines[2] == f"| config | slice | images/s ≤ | {hostfeed.HEADER} | days ≥ |"
  assert lines[4] == "| a | v4-32 | 32,744 | 8,186/s: 24 of 240 vCPUs | 0.15 |"
  assert lines[5] == "| b | v4-32 | – | – | – |"
  assert lines[6] == ("| c | v5e-1 | 6,133 | – (other input, not measured) "
                      "| 0.01 |")
  assert lines[0] == "intro" and lines[-2] == "## Reports"
  # Refreshing with another rate replaces the column, it does not add one.
  again = hostfeed.add_column(out, {"a": PP}, 682.0)
  assert again.split("\n")[4] == ("| a | v4-32 | 32,744 | 8,186/s: 12 of 240 "
                                  "vCPUs | 0.15 |")


def test_rendered_table_has_the_column():
  result = dict(label="i21k ViT-B/16", topology="v5e-256", batch=4096,
                params=102.6e6, remat=False,
                estimate=dict(step_seconds=0.0485, bound="HBM", fits=True,
                              mfu=0.18, images_per_second=84_453, days=0.0582,
                              flops_ratio=1.007),
                programs={n: dict(hbm_gib=1.0, compile_seconds=1.0)
                          for n in table.PROGRAMS},
                spec="s", overrides=[], note="", report="r")
  page = table.render([result], per_core=341.0)
  assert hostfeed.HEADER in page.split("\n")[0]
  assert "| 84,453 | 2,639/s: 8 of 224 vCPUs | 0.0582 |" in page


def test_docs_scale_column_is_what_the_code_computes():
  """docs/scale.md's column comes from its own images/s and the committed
  benchmark (``python -m softattn.aot hostfeed``), not typed by hand."""
  path = os.path.join(REPO, "docs", "scale.md")
  text = open(path, encoding="utf-8").read()
  pp_of = {r.label: table.row_pp_train(r) for r in table.ROWS}
  rate = hostfeed.per_core_rate()
  assert hostfeed.HEADER in text
  assert hostfeed.add_column(text, pp_of, rate) == text
  # The prose quotes the rate and the most cores any row needs.
  prose = " ".join(text.split())
  assert f"**{rate:.0f} images/s per core**" in prose
  cores = [int(c.split(": ")[1].split(" of ")[0]) for c in
           (l.split(" | ")[9] for l in text.split("\n")
            if l.startswith("| i21k") or l.startswith("| ImageNet"))
           if "vCPUs" in c]
  assert f"needs at most {max(cores)} of 240 vCPUs" in prose
