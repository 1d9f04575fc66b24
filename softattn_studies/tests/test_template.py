"""RESULTS.md templates (softattn_studies.template), tables as data
(render.Table) and plots as data (plotspec): every placeholder kind, the
expectation that fails when prose and data part, unknown names."""

import pytest

import softattn_studies as studies
from softattn.runstate import FailureKind, State
from softattn_studies import plotspec, render, template
from softattn_studies.template import TemplateError


def run(part, seed, acc, **fields):
  return studies.RunRecord(part=part, name=f"{part}-{seed}",
                           overrides={"seed": seed, **fields},
                           state=State.DONE, step=100, epochs=1.0,
                           metrics={"final/accuracy": acc},
                           series={"train/loss": [[0, 2.0 + seed],
                                                  [10, 1.0]]})


RUNS = ([run("a", s, x) for s, x in enumerate([0.80, 0.83, 0.86])] +
        [run("b", s, x) for s, x in enumerate([0.79, 0.82, 0.85])])
CLAIMS = [
    studies.Claim("up", "a > b", "T1", "1 vs 2", studies.ACCURACY,
                  {"part": "a"}, {"part": "b"}, ">", section="main"),
    studies.Claim("down", "a < b", "T1", "1 vs 2", studies.ACCURACY,
                  {"part": "a"}, {"part": "b"}, "<", section="main"),
    studies.Claim("later", "not here", "T2", "-", None, min_budget=(
        studies.unavailable("offline"),)),
]
TABLE = render.Table(["part", "accuracy", "note"], [
    (p, [render.Cell({"part": p}, studies.ACCURACY), "fixed"])
    for p in ("a", "b")])


def context(**kw):
  verdicts = studies.judge_all(CLAIMS, RUNS)
  kw.setdefault("runs", RUNS)
  return template.Context(
      claims=CLAIMS, verdicts=verdicts, fixed={"rule": studies.RULE},
      tables={"t": TABLE.markdown(RUNS)}, cells={"t": TABLE.cells(RUNS)},
      images={"fig": "![fig](fig.png)"}, facts={"steps": "100"}, **kw)


def test_every_placeholder_kind_fills():
  ctx = context()
  out = template.fill(
      "{{verdict:up}} {{estimate:up}} | {{result:down}} | p={{p:up}} "
      "n={{n:up}} | {{cell:t/a/accuracy}} | {{fact:steps}} | {{image:fig}}"
      "\n{{table:t}}\n{{verdicts:main}}\n{{rule}}", ctx)
  first = out.split("\n")[0]
  assert first.startswith("confirmed +1 [+1, +1] | contradicted (+1 [")
  assert "p=" in first and "n=3" in first
  assert "| 83.00 ± 7.45 (n=3) | 100 | ![fig](fig.png)" in first
  assert "| a | 83.00 ± 7.45 (n=3) | fixed |" in out
  assert "(`up`)" in out and "(`down`)" in out and studies.RULE in out
  assert ctx.shown == {"up", "down"}   # "later" is left for Further claims


def test_expectations_render_to_nothing_and_drop_their_own_lines():
  text = "a beats b {{expect:up=confirmed}}.\n{{expect:down=contradicted}}" \
         " {{expect:up>0}} {{expect:later=not testable here|inconclusive}}\nend"
  assert template.fill(text, context()) == "a beats b .\nend"


@pytest.mark.parametrize("text,match", [
    ("ok\n\nb beats a {{expect:up=contradicted}}",
     r"^RESULTS\.md\.tmpl:3: claim up is confirmed, the prose expects "
     r"contradicted; rewrite"),
    ("{{expect:up<0}}", r"^RESULTS\.md\.tmpl:1: claim up has 95 % CI "
     r"\[\+1, \+1\], the prose expects it all below 0"),
    ("{{expect:up=confirmd}}", r"unknown label 'confirmd'; valid: "
     r"confirmed, contradicted, inconclusive, not testable here"),
    ("{{estimate:later}}", r"claim 'later' has no estimate"),
    ("{{verdict:nope}}", r"unknown claim 'nope'; valid: down, later, up"),
    ("{{tabel:t}}", r"unknown placeholder \{\{tabel:...\}\}; valid: budget, "
     r"cell, contrast, core_minutes, design, diverged, epochs, estimate, "
     r"expect, fact, image, minutes, n, p, result, seeds, steps, table, "
     r"verdict, verdicts, \{\{generated\}\}"),
    ("{{contrast:nope}}", r"unknown claim 'nope'; valid: down, later, up"),
    ("{{contrast:later}}", r"claim 'later' compares no runs"),
    ("{{minutes:c}}", r"selection 'c' matches no run; parts: a, b"),
    ("{{design:c}}", r"selection 'c' matches no run; parts: a, b"),
    ("{{steps:part=a,=1}}", r"selection 'part=a,=1': write a part name"),
    ("{{table:u}}", r"unknown table 'u'; valid: t"),
    ("{{cell:t/c/accuracy}}", r"unknown cell of table 't' 'c/accuracy'; "
     r"valid: a/accuracy, a/note"),
    ("{{verdicts:other}}", r"unknown section 'other'; valid: main"),
    ("{{Table:t}}", r"malformed placeholder"),
    ("{{fact}}", r"needs an argument"),
])
def test_failures_are_one_line_naming_the_template_line(text, match):
  with pytest.raises(TemplateError, match=match) as e:
    template.fill(text, context(), source="RESULTS.md.tmpl")
  assert "\n" not in str(e.value)


def test_budget_kinds_read_the_selected_runs():
  runs = RUNS + [run("c", s, 0.1, skip=s == 0) for s in range(3)]
  runs[-1].state, runs[-1].kind = State.FAILED, FailureKind.NONFINITE
  ctx = context(runs=runs)
  for r in runs:
    r.total_steps = 300 if r.part == "c" else 100
  assert template.where("part=c,skip=false,depth=2|4") == {
      "part": "c", "skip": False, "depth": (2, 4)}
  out = template.fill(
      "{{design:a}}; {{budget:part=c,skip=false}}; {{steps:*}}; "
      "{{epochs:a}}; {{seeds:part=a|b}}; {{diverged:c}}", ctx)
  assert out == ("100 steps (1 epoch) x 3 seeds; 1 epoch x 2 seeds; "
                 "100/300; 1; 3; 1/3")
  named = context(runs=runs, selections={"c_skip": {"part": "c",
                                                     "skip": True}})
  assert template.fill("{{seeds:@c_skip}}", named) == "1"
  with pytest.raises(TemplateError, match=r"unknown selection 'd'; valid: "
                     r"c_skip"):
    template.fill("{{seeds:@d}}", named)
  # Unchecked (synthetic reports): an empty selection is not an error.
  assert template.fill("{{steps:zzz}}", context(check=False)) == "?"


def test_cost_and_contrast_kinds_read_the_selected_runs():
  runs = [run("a", s, 0.8 + 0.02 * s) for s in range(3)] + \
      [run("b", s, 0.8) for s in range(3)]
  for i, r in enumerate(runs):
    r.wall_s, r.core_seconds = 60.0 * (i + 1), 120.0
  runs[2].state = State.RUNNING       # not finished: not counted
  runs += [run("c", 0, 0.1)]
  runs[-1].state = State.NOT_STARTED
  ctx = context(runs=runs)
  assert template.fill("{{minutes:a}} {{core_minutes:a}} {{minutes:*}}; "
                       "{{core_minutes:c}}", ctx) == \
      "3 run-minutes (2 runs) 4 CPU core-minutes (2 runs) 18 run-minutes " \
      "(5 runs); no finished run in runs.csv"
  # a - b per seed: +0 and +2 points (seed 2 has not finished).
  assert template.fill("{{contrast:up}} {{contrast:down}}", ctx) == "1 1"
  assert render.Contrast(CLAIMS[0]).text(runs) == "1 ± 13 (n=2)"
  assert template.fill("{{contrast:up}}", context(runs=runs[3:])) == "?"


def test_derived_cells_and_facts():
  runs = [run("a", s, x) for s, x in enumerate([0.80, 0.90, 1.00])] + \
      [run("b", s, 0.40) for s in range(3)] + [run("c", 0, 0.2)]
  runs[-1].state = State.RUNNING
  acc, a, b = studies.ACCURACY, {"part": "a"}, {"part": "b"}
  assert render.Ratio(acc, a, b).text(runs) == "2.250"
  assert render.Ratio(acc, a, b, show_a=True).text(runs) == "90.000 (2.250)"
  assert render.Ratio(acc, a, {"part": "c"}).text(runs) == render.NOT_RUN
  assert render.Span([a, b], acc, ".0f").text(runs) == "40-100"
  assert render.Span([b], acc, ".0f").text(runs) == "40"
  assert render.Span([{"part": "c"}], acc).text(runs) == "?"
  # a's 95 % half-width: t(0.975, 2) * 10 / sqrt(3); b's seeds agree.
  assert render.Spread([a, b], acc).text(runs) == "±24.8"
  assert render.Spread([b], acc).text(runs) == "?"
  assert render.ClaimEstimate(CLAIMS[0]).text(runs) == "+50 [+25.2, +74.8]"
  # A fact: a cell, a function of (runs, verdicts), or a string.
  assert [studies.study._fact(f, runs, {"up": "v"}) for f in (
      render.Span([b], acc, ".0f"), lambda rs, ver: f"{len(rs)} {ver['up']}",
      "fixed")] == ["40", "7 v", "fixed"]


def test_unchecked_context_skips_only_the_expectations():
  ctx = context(check=False)
  assert template.fill("{{expect:up=contradicted}}x", ctx) == "x"
  assert template.fill("{{estimate:later}}, {{p:later}}", ctx) == \
      "no estimate, no p-value"
  with pytest.raises(TemplateError, match="unknown claim"):
    template.fill("{{expect:nope=confirmed}}", ctx)


def test_events_cell_counts_ended_runs_and_lists_their_steps():
  runs = [run("c", s, acc) for s, acc in enumerate([0.1, 0.9, 0.1, 0.1])]
  for r, at in zip(runs, [300.0, None, 285.0, None]):
    r.metrics["value/at"] = at
    r.metrics["value/low"] = float(at is not None)
  runs[2].state, runs[2].kind = State.FAILED, FailureKind.NONFINITE
  runs[3].state = State.RUNNING          # not ended: not counted
  low = studies.Metric("low", "value/low")
  ev = render.Events({"part": "c"}, low, "value/at",
                     ("diverged at step", "at chance from step"))
  assert ev.text(runs) == "2/3 (diverged at step 285, 300)"
  assert ev.text(runs[:2]) == "1/2 (at chance from step 300)"
  assert render.Events({"part": "x"}, low, "value/at").text(runs) == \
      render.NOT_RUN


def test_table_rows_must_match_the_columns():
  with pytest.raises(ValueError, match="row 'a' has 1 cells for 2 columns"):
    render.Table(["part", "x", "y"], [("a", ["1"])])
  # A repeated row label is rendered, but names no cell.
  t = render.Table(["part", "x"], [("a", ["1"]), ("a", ["2"]), ("b", ["3"])])
  assert t.markdown([]).endswith("| a | 1 |\n| a | 2 |\n| b | 3 |")
  assert t.cells([]) == {("b", "x"): "3"}


def test_write_results_appends_the_claims_no_table_showed(tmp_path):
  tmpl = tmp_path / "RESULTS.md.tmpl"
  tmpl.write_text("# T\n\n{{generated}}\n\n**Summary:** {{summary}}\n\n"
                  "{{verdicts:main}}\n")
  path = template.write_results(
      str(tmp_path / "RESULTS.md"), str(tmpl), data="d/runs.csv",
      command="cmd", runs=RUNS, claims=CLAIMS,
      verdicts=studies.judge_all(CLAIMS, RUNS), tables={}, images={},
      facts={})
  text = open(path, encoding="utf-8").read()
  assert "`RESULTS.md.tmpl`" in text and "    cmd" in text
  # No registration.json read: every claim counts as not checked yet.
  assert "**Summary:** the paper's 3 claims, by how they were declared: " \
         "not checked (run `python -m softattn_studies preregistration " \
         "--write`) (3): 1 confirmed, 1 contradicted, 1 not testable here." \
         in text
  assert text.index("(`up`)") < text.index("## Further claims") < \
      text.index("(`later`)")
  assert text.count("(`up`)") == 1 and text.endswith("\n")


def test_plots_as_data_draw_reproducibly(tmp_path):
  plot = plotspec.Plot("a vs b", [
      plotspec.Points("accuracy", studies.ACCURACY, "x", {
          "a": [(0.0, {"part": "a"})], "b": [(1.0, {"part": "b"})]},
                      reference=("b", {"part": "b"})),
      plotspec.Curves("loss", "train loss", {"a": ({"part": "a"}, "loss")},
                      hline=("one", 1.0)),
      plotspec.Paired("paired", {"a, up": "up"}, "accuracy points a - b")])
  colors = plotspec.palette(plot)
  assert colors["a, up"] == colors["a"] != colors["b"]
  paths = [plotspec.draw(plot, str(tmp_path / f"{i}.png"), RUNS, CLAIMS)
           for i in range(2)]
  data = [open(p, "rb").read() for p in paths]
  assert data[0] == data[1] and data[0][:4] == b"\x89PNG"
  assert plotspec.draw(plot, str(tmp_path / "none.png"), [], CLAIMS) is None
  with pytest.raises(ValueError, match="unknown claim 'nope'"):
    plotspec.draw(plotspec.Plot("x", [plotspec.Paired("p", {"a": "nope"},
                                                      "y")]),
                  str(tmp_path / "bad.png"), RUNS, CLAIMS)
