"""A study's RESULTS.md from a hand-written template: prose by a person,
numbers, tables and verdicts filled from the data, assertions that fail
when the prose stops matching the data.

A template (``experiments/<study>/RESULTS.md.tmpl``) is markdown with
placeholders ``{{kind:argument}}``:

* ``{{generated}}``: what wrote the file and the command that rebuilds it;
  ``{{summary}}``: the verdict counts; ``{{runs}}``: run counts and measured
  cost; ``{{rule}}``: ``claims.RULE``;
* ``{{table:NAME}}``: a ``render.Table`` the study declares;
  ``{{cell:NAME/ROW/COLUMN}}``: one of its cells (row label, column header);
* ``{{verdicts:SECTION}}``: the claims table of one ``Claim.section``;
  ``{{verdict:ID}}`` (the label word), ``{{estimate:ID}}``
  ("+3.38 [+3.14, +3.62]"), ``{{result:ID}}`` (both: "confirmed (+3.38
  [+3.14, +3.62])"), ``{{p:ID}}``, ``{{n:ID}}``: one claim's verdict;
* ``{{image:NAME}}``: a plot the study declares (``plotspec.Plot``);
* ``{{design:WHERE}}`` ("300 steps (0.32 epoch) x 3 seeds"),
  ``{{budget:WHERE}}`` ("10 epochs x 3 seeds"), ``{{steps:WHERE}}``
  ("200/1200"), ``{{epochs:WHERE}}`` ("0.11-0.43"), ``{{seeds:WHERE}}``
  ("3") and ``{{diverged:WHERE}}`` ("0/3" of the runs that ended): the
  declared budget of the runs ``WHERE`` selects, read from ``runs.csv``;
  ``{{minutes:WHERE}}`` ("123 run-minutes (45 runs)": wall time,
  ``wall_s``) and ``{{core_minutes:WHERE}}`` ("70 CPU core-minutes (3
  runs)", ``core_seconds``): what its finished runs measured ("no finished
  run in runs.csv" when none).
  ``WHERE`` is a part name (``main``), ``*`` (every run), settings
  ``part=models,model.skip=false`` (``a|b``: either value) or ``@NAME``, a
  selection the study declares (``Study.selections``) where listing the
  settings would bury the sentence;
* ``{{contrast:ID}}`` ("1.21"): the mean of claim ``ID``'s per-pair
  contrasts whatever its verdict (``render.Contrast``), for a claim the
  rule cannot judge here but whose runs the prose describes;
* ``{{fact:NAME}}``: a string the study computes from the runs (a number
  no table, verdict or budget holds): ``Study.facts`` holds a function of
  (runs, verdicts), a cell (``render.Span``, ``Spread``, ``Ratio``,
  ``ClaimEstimate``, ...) or a fixed string;
* ``{{expect:ID=WORD}}`` (``WORD`` a label, or several joined by ``|``),
  ``{{expect:ID<0}}`` / ``{{expect:ID>0}}`` (the whole 95 % CI below /
  above 0): render to nothing, and fail with the template line when the
  verdict no longer says what the prose next to it says. A line that holds
  only expectations is dropped.

Every failure is one ``TemplateError`` line naming the template line and
what to fix (for unknown names: the valid ones). ``write_results`` writes a
study's RESULTS.md: its template filled, then every claim no table showed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable, Mapping, Sequence

from softattn import paths
from softattn.sweep.records import RunRecord
from softattn_studies import claims as claims_lib
from softattn_studies import render
from softattn_studies import summary as summary_lib
from softattn_studies.claims import Claim, Verdict
from softattn_studies.runs import cost_summary, run_summary, select

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*(?::([^{}]*))?\}\}")


class TemplateError(ValueError):
  """A template that does not match its study or its data (one line)."""


@dataclasses.dataclass
class Context:
  """What a template's placeholders read, already rendered where they
  can be (``fixed``: the argument-less kinds; ``tables``/``cells``,
  ``images``, ``facts``: by name); ``shown``: the claim ids a verdicts
  table has shown so far. ``check=False`` skips the expectations and writes
  "no estimate" where the prose names an estimate the rule did not give (a
  report from synthetic runs, or before the runs, which the prose does not
  describe)."""
  claims: Sequence[Claim]
  verdicts: Mapping[str, Verdict]
  runs: Sequence[RunRecord] = ()
  selections: Mapping[str, Mapping] = dataclasses.field(default_factory=dict)
  fixed: Mapping[str, str] = dataclasses.field(default_factory=dict)
  tables: Mapping[str, str] = dataclasses.field(default_factory=dict)
  cells: Mapping[str, Mapping[tuple[str, str], str]] = \
      dataclasses.field(default_factory=dict)
  images: Mapping[str, str] = dataclasses.field(default_factory=dict)
  facts: Mapping[str, str] = dataclasses.field(default_factory=dict)
  shown: set = dataclasses.field(default_factory=set)
  check: bool = True
  notes: Mapping[str, str] = dataclasses.field(default_factory=dict)


def _pick(kind: str, name: str, table: Mapping):
  if name not in table:
    raise TemplateError(f"unknown {kind} {name!r}; valid: "
                        f"{', '.join(sorted(table)) or '(none declared)'}")
  return table[name]


def _verdict(ctx: Context, cid: str) -> Verdict:
  return _pick("claim", cid.strip(), ctx.verdicts)


def _number(what: str, field: str, show: Callable[[Verdict], str]):
  """The kind that shows one number of a claim's verdict; one the rule did
  not give is an error (the prose should name the label instead)."""
  def kind(ctx: Context, cid: str) -> str:
    v = _verdict(ctx, cid)
    if getattr(v, field) is not None:
      return show(v)
    if not ctx.check:
      return f"no {what}"
    raise TemplateError(f"claim {cid!r} has no {what} ({v.word}: "
                        f"{v.reason}); write its label instead")
  return kind


_p = _number("p-value", "p", lambda v: f"{v.p:.2g}")
_estimate = _number("estimate", "estimate", render.estimate)


def _result(ctx: Context, cid: str) -> str:
  """"contradicted (-3.3 [-5.63, -0.966])": the label and, when the rule
  gave one, the estimate."""
  v = _verdict(ctx, cid)
  return v.word + (f" ({render.estimate(v)})" if v.estimate is not None
                   else "")


def _verdicts(ctx: Context, section: str) -> str:
  section = section.strip()
  _pick("section", section, {c.section: c for c in ctx.claims if c.section})
  return render.claims_table([c for c in ctx.claims if c.section == section],
                             ctx.verdicts, ctx.shown, ctx.notes)


def _cell(ctx: Context, arg: str) -> str:
  name, sep, rest = arg.partition("/")
  row, sep2, col = rest.partition("/")
  if not (sep and sep2):
    raise TemplateError(f"cell {arg!r}: write {{{{cell:TABLE/ROW/COLUMN}}}}")
  cells = _pick("table", name, ctx.cells)
  return _pick(f"cell of table {name!r}", f"{row}/{col}",
               {f"{r}/{c}": x for (r, c), x in cells.items()})


def _value(text: str):
  """A setting's value as ``runs.csv`` reads it: bool, None, int, float
  or the string itself."""
  low = text.strip().lower()
  if low in ("true", "false", "none"):
    return {"true": True, "false": False, "none": None}[low]
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text.strip()


def where(arg: str) -> dict:
  """``main`` -> ``{"part": "main"}``; ``*`` -> every run;
  ``part=models,model.skip=false`` -> ``{"part": "models", "model.skip":
  False}``; ``model.normalizer=a|b`` matches either."""
  arg = arg.strip()
  if arg == "*":
    return {}
  if "=" not in arg:
    return {"part": arg}
  out = {}
  for item in arg.split(","):
    key, sep, val = item.partition("=")
    if not (sep and key.strip()):
      raise TemplateError(f"selection {arg!r}: write a part name, * or "
                          "key=value,key=value")
    vals = tuple(_value(v) for v in val.split("|"))
    out[key.strip()] = vals if len(vals) > 1 else vals[0]
  return out


def _selected(ctx: Context, arg: str) -> list[RunRecord]:
  """The runs ``arg`` selects; with ``check``, at least one."""
  rs = select(ctx.runs, _pick("selection", arg.strip()[1:], ctx.selections)
              if arg.strip().startswith("@") else where(arg))
  if not rs and ctx.check:
    parts = sorted({r.part for r in ctx.runs})
    raise TemplateError(f"selection {arg!r} matches no run; parts: "
                        f"{', '.join(parts) or '(no runs)'}")
  return rs


def _diverged(ctx: Context, arg: str) -> str:
  """"1/3": runs that diverged, of those that ended (finished or
  diverged)."""
  rs = [r for r in _selected(ctx, arg) if r.done or r.diverged]
  return f"{sum(r.diverged for r in rs)}/{len(rs)}"


def _minutes(column: str, unit: str):
  """The sum of a seconds ``column`` over the finished selected runs, in
  whole minutes, with its unit and run count ("70 CPU core-minutes (3
  runs)"), so the sentence reads the same whether or not any finished."""
  def kind(ctx: Context, arg: str) -> str:
    got = [r.value(column) or 0.0 for r in _selected(ctx, arg) if r.done]
    if not got:
      return "no finished run in runs.csv"
    return f"{sum(got) / 60:.0f} {unit} ({len(got)} run{'s' * (len(got) > 1)})"
  return kind


def _contrast(ctx: Context, cid: str) -> str:
  claim = _pick("claim", cid.strip(), {c.id: c for c in ctx.claims})
  if claim.metric is None:
    raise TemplateError(f"claim {cid!r} compares no runs; write its label "
                        "({{verdict:...}}) instead")
  return render.Contrast(claim, spread=False, empty="?").text(ctx.runs)


_EXPECT = re.compile(r"^\s*([^=<>\s]+)\s*(=|<|>)\s*(.+?)\s*$")


def _expect(ctx: Context, arg: str) -> str:
  m = _EXPECT.match(arg)
  if not m:
    raise TemplateError(f"expect {arg!r}: write {{{{expect:ID=WORD}}}} "
                        "or {{expect:ID<0}} / {{expect:ID>0}}")
  cid, op, want = m.groups()
  v = _verdict(ctx, cid)
  if not ctx.check:
    return ""
  if op == "=":
    words = [w.strip() for w in want.split("|")]
    for w in words:
      _pick("label", w, dict.fromkeys(claims_lib.WORDS))
    if v.word not in words:
      raise TemplateError(f"claim {cid} is {v.word}, the prose expects "
                          f"{' or '.join(words)}; rewrite the prose next "
                          "to it (or the expectation)")
    return ""
  if want != "0":
    raise TemplateError(f"expect {arg!r}: only {cid}<0 or {cid}>0")
  ok = v.ci is not None and (v.ci[1] < 0 if op == "<" else v.ci[0] > 0)
  if not ok:
    got = "no interval" if v.ci is None else \
        f"95 % CI [{v.ci[0]:+.3g}, {v.ci[1]:+.3g}]"
    raise TemplateError(f"claim {cid} has {got}, the prose expects it "
                        f"all {'below' if op == '<' else 'above'} 0; "
                        "rewrite the prose next to it")
  return ""


KINDS: dict[str, Callable[[Context, str], str]] = {
    "table": lambda ctx, a: _pick("table", a.strip(), ctx.tables),
    "cell": _cell,
    "verdicts": _verdicts,
    "verdict": lambda ctx, a: _verdict(ctx, a).word,
    "result": _result,
    "estimate": _estimate,
    "p": _p,
    "n": lambda ctx, a: str(_verdict(ctx, a).n),
    "image": lambda ctx, a: _pick("image", a.strip(), ctx.images),
    "fact": lambda ctx, a: _pick("fact", a.strip(), ctx.facts),
    "design": lambda ctx, a: render.design(_selected(ctx, a), {}),
    "budget": lambda ctx, a: render.design(_selected(ctx, a), {},
                                           length="epochs"),
    "steps": lambda ctx, a: render.steps(_selected(ctx, a)),
    "epochs": lambda ctx, a: render.epoch_range(_selected(ctx, a)),
    "seeds": lambda ctx, a: render.seeds(_selected(ctx, a)),
    "diverged": _diverged,
    "minutes": _minutes("wall_s", "run-minutes"),
    "core_minutes": _minutes("core_seconds", "CPU core-minutes"),
    "contrast": _contrast,
    "expect": _expect,
}
FIXED = ("generated", "summary", "runs", "rule")


def _one(ctx: Context, kind: str, arg: str | None) -> str:
  if kind in FIXED:
    if arg is not None:
      raise TemplateError(f"{{{{{kind}}}}} takes no argument")
    return _pick("fixed placeholder", kind, ctx.fixed)
  if kind not in KINDS:
    raise TemplateError(f"unknown placeholder {{{{{kind}:...}}}}; valid: "
                        f"{', '.join(sorted(KINDS))}, "
                        f"{', '.join('{{%s}}' % k for k in FIXED)}")
  if arg is None or not arg.strip():
    raise TemplateError(f"{{{{{kind}:...}}}} needs an argument")
  return KINDS[kind](ctx, arg)


def fill(text: str, ctx: Context, source: str = "template") -> str:
  """``text`` with every placeholder filled; a ``TemplateError`` names
  ``source`` and the line of the first that fails."""
  out = []
  for lineno, line in enumerate(text.split("\n"), 1):
    try:
      new = PLACEHOLDER.sub(lambda m: _one(ctx, m.group(1), m.group(2)),
                            line)
      if "{{" in PLACEHOLDER.sub("", line):
        raise TemplateError("malformed placeholder: write "
                            "{{kind:argument}} with a lowercase kind")
    except TemplateError as e:
      raise TemplateError(f"{source}:{lineno}: {e}") from None
    if not new.strip() and line.strip() and all(
        m.group(1) == "expect" for m in PLACEHOLDER.finditer(line)):
      continue   # a line of expectations only
    out.append(new)
  return "\n".join(out)


def further_claims(claims: Sequence[Claim], verdicts: Mapping[str, Verdict],
                   shown: set, notes: Mapping[str, str] | None = None) -> str:
  """The claims table of every claim not ``shown`` yet ("" if none), so
  that every declared claim appears exactly once."""
  rest = [c for c in claims if c.id not in shown]
  if not rest:
    return ""
  return "## Further claims\n\n" + render.claims_table(rest, verdicts, shown,
                                                       notes)


def write_results(path: str, template_path: str, *, data: str,
                  command: str, runs: Sequence[RunRecord],
                  claims: Sequence[Claim], verdicts: Mapping[str, Verdict],
                  tables: Mapping[str, render.Table],
                  images: Mapping[str, str], facts: Mapping[str, str],
                  check: bool = True,
                  selections: Mapping[str, Mapping] | None = None,
                  summary: str | None = None,
                  notes: Mapping[str, str] | None = None) -> str:
  """Writes RESULTS.md at ``path`` from the hand-written template at
  ``template_path`` (filled by ``fill``), then the claims no table showed.
  ``summary``: the ``{{summary}}`` line (default: ``summary_lib.line`` of
  the claims with no registration read); ``notes``: text after a claim's
  verdict wherever it is shown."""
  text = paths.read_text(template_path)
  if text is None:
    raise FileNotFoundError(f"{template_path}: the study's template is "
                            "missing; write it (see softattn_studies."
                            "template)")
  name = os.path.basename(template_path)
  ctx = Context(
      claims=claims, verdicts=verdicts, runs=runs,
      selections=selections or {}, fixed={
          "generated": f"Generated from the hand-written `{name}` and the "
                       f"per-run data in `{data}`;\ndo not edit by hand (edit "
                       f"the template). Regenerate from that file alone:"
                       f"\n\n    {command}",
          "summary": summary if summary is not None else summary_lib.line(
              summary_lib.tally(claims, verdicts)),
          "runs": f"{run_summary(runs)}. Measured cost: "
                  f"{cost_summary(runs)}.",
          "rule": claims_lib.RULE},
      tables={k: t.markdown(runs) for k, t in tables.items()},
      cells={k: t.cells(runs) for k, t in tables.items()},
      images=images, facts=facts, check=check, notes=notes or {})
  body = fill(text, ctx, source=template_path).strip()
  rest = further_claims(claims, verdicts, ctx.shown, notes)
  paths.write_atomic(path, body + ("\n\n" + rest if rest else "") + "\n")
  return path
