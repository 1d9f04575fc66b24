"""One registry of normalizers, addressed by name or call-like spec string.

>>> import jax.numpy as jnp
>>> get("softmax")
Normalizer(softmax)
>>> get("normsoftmax(gamma=inf)")
Normalizer(normsoftmax(gamma=inf))
>>> get("relu_seqlen(alpha=0.5, act=gelu_exact)")
Normalizer(relu_seqlen(alpha=0.5, act='gelu_exact'))
>>> get("prenorm(sin2_max_shifted)")
Normalizer(prenorm(sin2_max_shifted))
>>> get("normsoftmax(gamma=sqrt_d/2)")   # resolved by attention from head_dim
Normalizer(normsoftmax(gamma=0.5*sqrt_d))
>>> get("softmax")(jnp.zeros(4)).tolist()
[0.25, 0.25, 0.25, 0.25]
>>> w = get("relu_seqlen")(jnp.array([-1.0, 1.0, 2.0]), mask=jnp.array([1, 1, 0]))
>>> w.tolist()   # relu(s) / n with n = 2 unmasked keys; the masked one gets 0
[0.0, 0.5, 0.0]
>>> get("normsofmax")
Traceback (most recent call last):
ValueError: unknown normalizer 'normsofmax'; valid names: cog, consmax, ...
>>> get("normsoftmax(gamma=-1)")
Traceback (most recent call last):
ValueError: normsoftmax: gamma=-1 is invalid; it must be in (0, inf].

Spec strings are parsed with Python's ``ast`` (never ``eval``): values are
literals, ``inf``/``nan``/``pi``, ``sqrt_d`` expressions, or bare words taken as
strings (``act=gelu`` is ``act='gelu'``), so configs need no nested quotes.
Parameters outside their domain (``domains.Domain``) are rejected here.
``tests/test_normalizers.py`` runs these examples as doctests
(``ELLIPSIS`` on).
"""

from __future__ import annotations

import ast
import math
from typing import Callable, Union

from softattn import config_schema
from softattn import modes as modes_lib
from softattn.normalizers.core import Normalizer, SqrtHeadDim
from softattn.normalizers.domains import EPS
from softattn.normalizers.periodic import make_prenorm

_REGISTRY: dict[str, Union[Normalizer, Callable[..., Normalizer]]] = {}
_FACTORY_ROWS: dict[str, tuple[str, str, str]] = {}


def register(normalizer: Normalizer | None = None, *, name: str | None = None,
             factory: Callable[..., Normalizer] | None = None,
             formula: str = "", source: str = "", streams: str = ""):
  """Adds a ``Normalizer`` (or a ``factory(*args, **kw) -> Normalizer``).

  A factory has no declaration to read its README row from: ``formula``,
  ``source`` and ``streams`` give it.
  """
  key = name or normalizer.name
  if key in _REGISTRY:
    raise ValueError(f"normalizer {key!r} is already registered")
  _REGISTRY[key] = factory if factory is not None else normalizer
  if factory is not None:
    _FACTORY_ROWS[key] = (formula, streams, source)
  return normalizer


def declared_in(module) -> list[Normalizer]:
  """The ``Normalizer`` objects at ``module``'s top level, each once, in
  definition order (a family module's declarations)."""
  out = []
  for value in vars(module).values():
    if isinstance(value, Normalizer) and all(value is not n for n in out):
      out.append(value)
  return out


def names() -> list[str]:
  """Every registered normalizer name, sorted."""
  return sorted(_REGISTRY)


def declarations() -> list[Normalizer]:
  """Every registered ``Normalizer`` (not the factories), sorted by name."""
  return [_REGISTRY[k] for k in names() if isinstance(_REGISTRY[k], Normalizer)]


def _unknown(name):
  return ValueError(
      f"unknown normalizer {name!r}; valid names: {', '.join(names())}.")


def get(spec: Union[str, Normalizer]) -> Normalizer:
  """Returns the normalizer named by ``spec`` with its parameters bound.

  Args:
    spec: a ``Normalizer`` (returned unchanged), a name from ``names()``, or a
      call-like string ``"name(key=value, ...)"``; ``prenorm`` takes the inner
      normalizer's spec as its one positional argument.

  Raises:
    ValueError: unknown name (the message lists the valid ones), unknown
      parameter, or a malformed spec.
  """
  if isinstance(spec, Normalizer):
    return spec
  if not isinstance(spec, str):
    raise TypeError(f"normalizer spec must be a str or Normalizer, got "
                    f"{type(spec).__name__}")
  try:
    node = ast.parse(spec.strip(), mode="eval").body
  except SyntaxError:
    raise ValueError(f"cannot parse normalizer spec {spec!r}; expected "
                     f"'name' or 'name(key=value, ...)'.") from None
  return _build(node, spec)


def _build(node, spec) -> Normalizer:
  if isinstance(node, ast.Name):
    name, args, kwargs = node.id, [], {}
  elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    name = node.func.id
    args = list(node.args)
    kwargs = {kw.arg: _value(kw.value, spec) for kw in node.keywords}
  else:
    raise ValueError(f"cannot parse normalizer spec {spec!r}; expected "
                     f"'name' or 'name(key=value, ...)'.")
  if name not in _REGISTRY:
    raise _unknown(name)
  entry = _REGISTRY[name]
  if isinstance(entry, Normalizer):
    if args:
      raise ValueError(f"normalizer {name!r} takes keyword arguments only "
                       f"(in {spec!r}).")
    return entry.bind(**kwargs) if kwargs else entry
  return entry(*[_build(a, spec) for a in args], **kwargs)


_CONSTANTS = {"inf": math.inf, "nan": math.nan, "pi": math.pi,
              "sqrt_d": SqrtHeadDim(1.0)}


def _value(node, spec):
  if isinstance(node, ast.Name):
    return _CONSTANTS.get(node.id, node.id)  # bare words are strings
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
    v = _value(node.operand, spec)
    return SqrtHeadDim(-v.factor) if isinstance(v, SqrtHeadDim) else -v
  if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
    left, right = _value(node.left, spec), _value(node.right, spec)
    if isinstance(left, SqrtHeadDim) and isinstance(right, (int, float)):
      f = left.factor * right if isinstance(node.op, ast.Mult) else (
          left.factor / right)
      return SqrtHeadDim(f)
    if isinstance(right, SqrtHeadDim) and isinstance(node.op, ast.Mult):
      return SqrtHeadDim(right.factor * left)
    if all(isinstance(v, (int, float)) for v in (left, right)):
      return left * right if isinstance(node.op, ast.Mult) else left / right
  try:
    return ast.literal_eval(node)
  except ValueError:
    raise ValueError(f"cannot read value {ast.unparse(node)!r} in normalizer "
                     f"spec {spec!r}; use numbers, strings, inf, pi or "
                     f"sqrt_d.") from None


def _prenorm_factory(inner: Normalizer | str | None = None, *, eps=1e-5,
                     **unknown) -> Normalizer:
  if unknown:
    raise ValueError(f"prenorm takes the inner normalizer and eps only, got "
                     f"{sorted(unknown)}; put parameters on the inner one: "
                     f"prenorm(normsoftmax(gamma=inf)).")
  if inner is None:
    raise ValueError("prenorm needs an inner normalizer, e.g. "
                     "'prenorm(softmax)' or 'prenorm(sin2_max_shifted)'.")
  EPS.check("prenorm", "eps", eps)
  return make_prenorm(get(inner), eps)


register(name="prenorm", factory=_prenorm_factory,
         formula="`f((s-μ)/sqrt(var_unbiased + 1e-5))`",
         streams="as `f`, μ/var first", source="Wang et al. 2021")


# -- the README's normalizer table ----------------------------------------------
def streams_as(norm: Normalizer) -> str:
  """How attention streams ``norm`` over key blocks, in words, from its
  declaration: the mode's accumulator, statistics first, the linear path."""
  if norm.mode == "rowwise":
    if norm.stream is None:
      return "dense only (needs the whole row)"
    return f"chunked: {norm.stream.passes}; {norm.stream.fused or 'not fused'}"
  text = ("fixed max (`exp_upper`)" if norm.exp_upper is not None
          else modes_lib.MODES[norm.mode].streams)
  if norm.needs == "moments":
    text += ", per-query μ, σ first"
  if norm.linear_coef is not None:
    text += ", or linear `Q(KᵀV)`"
    if norm.linear_if is not None:
      text += " for some parameters"
  return text


def markdown_table() -> str:
  """The README's normalizer table, one row per registered name.

  ``python -m softattn.normalizers`` prints it (``tables``);
  ``tests/test_readme_normalizers.py`` checks that README.md holds exactly
  this table.
  """
  lines = ["| name | weights | streams as | source |", "|---|---|---|---|"]
  for key in names():
    entry = _REGISTRY[key]
    if isinstance(entry, Normalizer):
      row = (entry.formula, streams_as(entry), entry.source)
      shown = f"`{key}`"
    else:
      row, shown = _FACTORY_ROWS[key], f"`{key}(f)`"
    if not (row[0] and row[2]):
      raise ValueError(f"normalizer {key!r} declares no formula or source; "
                       f"give its Normalizer formula= and source=")
    cells = [shown] + [c.replace("|", "\\|") for c in row]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines)


def _check_config_spec(spec) -> None:
  """``config.model.normalizer`` (``None``: the model's default) is a valid spec."""
  if spec is None:
    return
  try:
    get(spec)
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"config.model.normalizer={spec!r}: "
                     f"{config_schema.one_line(e)}") from None


config_schema.register_check("model.normalizer", _check_config_spec)
