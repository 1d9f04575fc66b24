"""Normalizers against independent float64 references, their properties,
gradients, numerical range and error messages."""

import math
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from softattn import normalizers as N
from tests import reference_normalizers as R

# Every registered name; prenorm is tested through the inner normalizers below.
ALL = [n for n in N.names() if n != "prenorm"]
LEARNABLE = {"normsoftmax_learnable": {"w": 1.7}, "ssmax": {"s_scale": 0.6},
             "softmax_sink": {"sink": 0.3}, "consmax": {"beta": 0.5, "denom": 3.0},
             "lssar": {"power": 3.0}}
# Extra parameter settings, so non-default branches are covered too.
VARIANTS = [
    ("normsoftmax", {"gamma": 0.5, "tau": 2.0}),
    ("normsoftmax_inverse", {"gamma": 3.0}),
    ("logitnorm", {"tau": 0.3}),
    ("sigmoid", {"bias": 0.5}),
    ("sin_max_constant", {"freq": 10.0}),
    ("sin_softmax", {"freq": 2.0, "post_scale": 0.125}),
    ("nap", {"g": 0.5, "b": 0.1}),
    ("softmax_sink", {"sink": -3.0}),
    ("softmax_sink", {"sink": 40.0}),      # the sink dominates every row
    ("consmax", {"beta": -1.0, "denom": 0.5, "max_exponent": 1.5}),  # capped
    ("lssa", {"power": 2.0}),
    ("lssa", {"kappa": 1 / math.log(512)}),  # 1 at a training length of 512
    ("lssar", {"power": 1.5, "kappa": 0.3}),
    ("laplace", {"alpha": 0.5, "mu": 0.2, "sigma": 1.5}),
    ("polynomial", {"p": 1}),
    ("polynomial", {"p": 2}),
] + [("relu_seqlen", {"alpha": a, "act": act})
     for a, act in [(0.0, "relu"), (0.5, "gelu"), (1.0, "relu2"),
                    (0.25, "softplus"), (0.75, "identity"), (1.0, "relu6"),
                    (1.0, "sigmoid")]]
PRENORMED = ["softmax", "sin2_max_shifted", "sin_softmax", "siren_max",
             "normsoftmax", "sparsemax"]
# Periodic normalizers are well conditioned only where g stays away from the
# zero-sum region; their reference tests use scores of this size.
SMALL_SCALE = {"sin_max", "cos_max", "siren_max"}


def _params(name):
  return dict(LEARNABLE.get(name, {}))


def _data(seed, shape=(3, 4, 9), scale=2.0):
  rng = np.random.default_rng(seed)
  s = rng.normal(size=shape) * scale
  mask = rng.random(shape) < 0.75
  if len(shape) == 3:
    mask[0, 0] = False        # a fully masked row
    mask[0, 1] = False
    mask[0, 1, 3] = True      # a single valid key
  return s, mask


@pytest.fixture(autouse=True)
def _x64():
  with jax.enable_x64(True):
    yield


def _check_ref(name, ref, params, scale, key=None):
  # crc32, not hash(): str hashes differ per process (PYTHONHASHSEED), which
  # gave each pytest worker different data.
  s, mask = _data(zlib.crc32((key or name).encode()) % 1000, scale=scale)
  f = N.get(name) if isinstance(name, str) else name
  for m in (None, mask):
    got = np.asarray(f(jnp.asarray(s), mask=m, **params))
    want = R.apply(ref, s, m, **params)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12,
                               err_msg=f"{name} mask={m is not None}")


@pytest.mark.parametrize("name", ALL)
def test_matches_reference(name):
  scale = 0.5 if name in SMALL_SCALE else 2.0
  _check_ref(name, R.REFS[name], _params(name), scale)


@pytest.mark.parametrize("name,params", VARIANTS,
                         ids=[f"{n}-{p}" for n, p in VARIANTS])
def test_variants_match_reference(name, params):
  _check_ref(name, R.REFS[name], params, 2.0)


@pytest.mark.parametrize("inner", PRENORMED)
def test_prenorm_matches_reference(inner):
  f = N.get(f"prenorm({inner})")
  _check_ref(f, R.prenorm(inner), {}, 3.0, key=f"prenorm({inner})")
  # The plain-function form gives the same weights.
  s, mask = _data(1)
  np.testing.assert_allclose(N.prenorm(jnp.asarray(s), mask=mask, inner=inner),
                             f(jnp.asarray(s), mask=mask), rtol=1e-12)


def test_spec_strings_bind_parameters():
  s = jnp.asarray(_data(2)[0])
  np.testing.assert_allclose(N.get("normsoftmax(gamma=0.5, tau=2)")(s),
                             N.normsoftmax(s, gamma=0.5, tau=2.0))
  np.testing.assert_allclose(N.get("relu_seqlen(alpha=0.5, act='gelu')")(s),
                             N.relu_seqlen(s, alpha=0.5, act="gelu"))
  # Bare words are strings; inf and sqrt_d expressions are understood.
  assert N.get("relu_seqlen(act=gelu)").params["act"] == "gelu"
  assert N.get("normsoftmax(gamma=inf)").params["gamma"] == math.inf
  g = N.get("normsoftmax(gamma=sqrt_d/2)").params["gamma"]
  assert g.resolve(64) == 4.0
  assert N.get("prenorm(normsoftmax(tau=2))").resolve()["tau"] == 2.0
  w = N.get("normsoftmax(gamma=2*sqrt_d)")(s, head_dim=16)
  np.testing.assert_allclose(w, N.normsoftmax(s, gamma=8.0))


# --- properties ---------------------------------------------------------------
@pytest.mark.parametrize(
    "name", [n for n in ALL if N.get(n).is_distribution])
def test_distributions_sum_to_one(name):
  s, mask = _data(3)
  f = N.get(name)
  params = _params(name)
  if f.eps_param:  # the guard eps shifts sums by ~eps / sum g: test the math
    params[f.eps_param] = 0.0
  w = f(jnp.asarray(s), mask=mask, **params)
  sums = np.asarray(w.sum(-1))
  has_key = mask.any(-1)
  np.testing.assert_allclose(sums[has_key], 1.0, rtol=1e-5)
  np.testing.assert_array_equal(sums[~has_key], 0.0)


@pytest.mark.parametrize("name", ALL)
def test_masked_keys_get_exact_zero_and_empty_rows_no_nan(name):
  s, mask = _data(4)
  s = np.where(mask, s, np.nan)  # masked scores must not leak, even NaN
  f = N.get(name)
  w = f(jnp.asarray(s), mask=mask, **_params(name))
  assert np.all(np.asarray(w)[~mask] == 0.0)
  assert np.all(np.isfinite(w))
  g = jax.grad(lambda x: jnp.sum(f(x, mask=mask, **_params(name)) ** 2))(
      jnp.asarray(np.where(mask, s, 0.0)))
  assert np.all(np.isfinite(g))


@pytest.mark.parametrize("name", ["softmax", "normsoftmax", "sin_softmax",
                                  "normsoftmax_inverse"])
def test_translation_invariance(name):
  s, mask = _data(5)
  f = N.get(name)
  if name == "sin_softmax":  # invariant to shifts by 2 pi only
    shift = 2 * math.pi * 3
  else:
    shift = 123.25
  np.testing.assert_allclose(f(jnp.asarray(s + shift), mask=mask),
                             f(jnp.asarray(s), mask=mask), atol=1e-9)


def test_normsoftmax_lemma2_scale_invariance():
  """x -> kx: same weights, gradients / k, while std < gamma (Jiang et al.)."""
  s, mask = _data(6)
  s = jnp.asarray(s)
  k = 7.5
  loss = lambda x: jnp.sum(jnp.sin(N.normsoftmax(x, mask=mask, eps=0.0)))
  np.testing.assert_allclose(N.normsoftmax(k * s, mask=mask, eps=0.0),
                             N.normsoftmax(s, mask=mask, eps=0.0), atol=1e-12)
  has2 = mask.sum(-1) > 1  # rows with a nonzero std
  np.testing.assert_allclose(np.asarray(jax.grad(loss)(k * s))[has2],
                             np.asarray(jax.grad(loss)(s))[has2] / k,
                             atol=1e-12)
  # With gamma below the std the clipping breaks scale invariance.
  assert not np.allclose(N.normsoftmax(k * s, gamma=0.1),
                         N.normsoftmax(s, gamma=0.1))


def test_normsoftmax_lemma1_gradient_mean_zero():
  s, mask = _data(7)
  for gamma in (math.inf, 0.5):
    g = jax.grad(lambda x: jnp.sum(jnp.cos(3 * N.normsoftmax(
        x, mask=mask, gamma=gamma))))(jnp.asarray(s))
    np.testing.assert_allclose(np.asarray(g).sum(-1), 0.0, atol=1e-12)


def test_sparse_normalizers_give_exact_zeros():
  s = jnp.asarray([[3.0, 2.9, -4.0, -5.0, 0.0]])
  for f in (N.sparsemax, N.entmax15):
    w = f(s)
    assert float(w[0, 2]) == 0.0 and float(w[0, 3]) == 0.0


def test_relu_seqlen_counts_only_unmasked_keys():
  s = jnp.ones((1, 6))
  mask = jnp.asarray([[True, True, True, False, False, False]])
  np.testing.assert_allclose(N.relu_seqlen(s, mask=mask)[0, :3], 1 / 3)


# --- gradients ----------------------------------------------------------------
@pytest.mark.parametrize("name", ALL)
def test_check_grads(name):
  # sparsemax/entmax15 are differentiable almost everywhere (not at support
  # changes); random scores are away from those kinks with probability 1.
  s, mask = _data(8, shape=(2, 6), scale=0.7)
  mask[0, 0] = True
  f = N.get(name)
  params = _params(name)
  check_grads(lambda x: f(x, mask=mask, **params), (jnp.asarray(s),), order=1,
              modes=("fwd", "rev"), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["normsoftmax_learnable", "ssmax"])
def test_learnable_parameter_gradients(name):
  s, mask = _data(9)
  (param, value), = LEARNABLE[name].items()
  check_grads(lambda p: N.get(name)(jnp.asarray(s), mask=mask, **{param: p}),
              (jnp.asarray(value),), order=1, modes=("rev",))


# --- numerical range ------------------------------------------------------------
@pytest.mark.parametrize("name", ALL + ["prenorm(sin2_max_shifted)"])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_finite_for_large_scores_and_bf16(name, dtype):
  rng = np.random.default_rng(10)
  s = jnp.asarray(rng.uniform(-1e4, 1e4, size=(4, 16)), dtype)
  f = N.get(name)
  params = _params(name)
  w = f(s, **params)
  assert w.dtype == dtype
  assert np.all(np.isfinite(np.asarray(w, np.float32))), name
  g = jax.grad(lambda x: jnp.sum(f(x, **params).astype(jnp.float32)))(s)
  assert np.all(np.isfinite(np.asarray(g, np.float32))), name


def test_sin_max_breaks_down_but_stays_finite():
  """Spec: sin_max can sum to ~0; the guard keeps weights finite but huge."""
  s = jnp.asarray([[math.pi / 2, -math.pi / 2 + 1e-4]], jnp.float32)
  w = N.sin_max(s)
  assert np.all(np.isfinite(w))
  assert float(jnp.max(jnp.abs(w))) > 100.0  # no longer a sane distribution


# --- bad input ------------------------------------------------------------------
def test_unknown_name_lists_valid_names():
  with pytest.raises(ValueError, match="unknown normalizer 'softmaxx'.*softmax"):
    N.get("softmaxx")
  with pytest.raises(ValueError, match="relu_seqlen"):
    N.get("prenorm(nope)")


def test_bad_parameters_and_specs():
  with pytest.raises(ValueError, match="no parameter.*'gama'.*gamma"):
    N.get("normsoftmax(gama=1)")
  with pytest.raises(ValueError, match="needs parameter.*'w'"):
    N.normsoftmax_learnable(jnp.ones((2, 3)))
  with pytest.raises(ValueError, match="cannot parse"):
    N.get("normsoftmax(gamma=")
  with pytest.raises(ValueError, match="act='tanh' is invalid; it must be one of relu"):
    N.relu_seqlen(jnp.ones((2, 3)), act="tanh")
  with pytest.raises(ValueError, match="prenorm needs an inner"):
    N.get("prenorm")
  with pytest.raises(ValueError, match="head dim"):
    N.get("normsoftmax(gamma=sqrt_d)")(jnp.ones((2, 3)))
  with pytest.raises(ValueError, match=r"mask shape \(4,\).*\(2, 3\)"):
    N.softmax(jnp.ones((2, 3)), mask=jnp.ones(4, bool))


def test_jit_and_vmap():
  s, mask = _data(11)
  f = N.get("normsoftmax(gamma=1.5)")
  want = f(jnp.asarray(s), mask=mask)
  np.testing.assert_allclose(jax.jit(lambda x, m: f(x, mask=m))(s, mask), want)
  np.testing.assert_allclose(
      jax.vmap(lambda x, m: f(x, mask=m))(jnp.asarray(s), mask), want)


def test_registry_docstring_examples_run_as_doctests():
  import doctest  # pylint: disable=g-import-not-at-top
  from softattn.normalizers import registry  # pylint: disable=g-import-not-at-top
  result = doctest.testmod(registry, optionflags=doctest.ELLIPSIS)
  assert result.attempted >= 10
  assert result.failed == 0


@pytest.mark.parametrize("spec,match", [
    ("normsoftmax(gamma=-1)", r"gamma=-1 is invalid; it must be in \(0, inf\]"),
    ("normsoftmax(gamma=0)", r"gamma=0 is invalid"),
    ("normsoftmax(gamma=-sqrt_d)", r"gamma=-1.0\*sqrt_d is invalid"),
    ("normsoftmax(tau=0)", r"tau=0 is invalid"),
    ("normsoftmax(eps=-1e-6)", r"eps=-1e-06 is invalid; it must be in \[0, inf\)"),
    ("normsoftmax(gamma=abc)", r"gamma='abc' is invalid"),
    ("relu_seqlen(alpha=2)", r"alpha=2 is invalid; it must be in \[0, 1\]"),
    ("relu_seqlen(alpha=-0.5)", r"alpha=-0.5 is invalid"),
    ("relu_seqlen(act=gelux)", r"act='gelux' is invalid; it must be one of relu"),
    ("logitnorm(tau=-1)", r"tau=-1 is invalid; it must be in \(0, inf\] or None"),
    ("softpick(eps=-1)", r"eps=-1 is invalid"),
    ("sin_max(freq=nan)", r"freq=nan is invalid"),
    ("siren_max(eps=-1)", r"eps=-1 is invalid"),
    ("nap(g=inf)", r"g=inf is invalid"),
    ("prenorm(softmax, eps=-1)", r"prenorm: eps=-1 is invalid"),
])
def test_parameters_outside_their_domain_are_rejected(spec, match):
  with pytest.raises(ValueError, match=match):
    N.get(spec)


def test_domains_cover_every_parameter_and_are_documented():
  for name in N.names():
    if name == "prenorm":
      continue
    norm = N.get(name)
    assert set(norm.domains) == set(norm.defaults), name
    for key, domain in norm.domains.items():
      assert f"{key}: {domain}" in norm.__doc__, (name, key)
      default = norm.defaults[key]
      if default is not N.REQUIRED:
        domain.check(name, key, default)  # every default is in its domain


def test_domains_checked_on_direct_calls_but_not_on_traced_values():
  s = jnp.linspace(-1.0, 1.0, 5)
  with pytest.raises(ValueError, match="alpha=1.5 is invalid"):
    N.relu_seqlen(s, alpha=1.5)
  with pytest.raises(ValueError, match="gamma=-2.0 is invalid"):
    N.normsoftmax(s, gamma=-2.0)
  # Learnable parameters are traced inside grad/jit: the model owns their range.
  g = jax.grad(lambda w: N.normsoftmax_learnable(s, w=w)[0])(-3.0)
  assert np.isfinite(g)
  per_head = N.get("nap").bind(g=np.array([1.0, 2.0]))  # concrete arrays: checked
  with pytest.raises(ValueError, match="g=.* is invalid"):
    N.get("nap").bind(g=np.array([1.0, np.nan]))
  assert per_head.params["g"].shape == (2,)


def test_gelu_is_the_tanh_approximation_and_gelu_exact_the_erf_form():
  s = jnp.linspace(-3.0, 3.0, 13)
  x = np.asarray(s, np.float64)
  n = len(x)
  for act in ("gelu", "gelu_exact"):
    np.testing.assert_allclose(N.relu_seqlen(s, act=act), R.ACTS[act](x) / n,
                               atol=1e-6)
  gap = np.abs(R.ACTS["gelu"](x) - R.ACTS["gelu_exact"](x)).max()
  assert 1e-4 < gap < 1e-2  # close, but really two different functions


# --- the 2023-2025 normalizers (issue 29 item 3) ---------------------------------
NEW = ["softmax_1", "softmax_sink", "cog", "stablemax", "consmax", "lssa",
       "lssar", "laplace", "polynomial"]


@pytest.mark.parametrize("name", NEW)
def test_new_normalizers_match_reference_at_large_logits(name):
  # Scores of order 1e3 (exp overflows float64 beyond ~709): every stabiliser
  # (row max, sink, consmax's cap, softplus) must keep the exact weights.
  _check_ref(name, R.REFS[name], _params(name), 1e3)


@pytest.mark.parametrize("name", NEW)
def test_new_normalizers_jit_vmap_grad(name):
  s, mask = _data(12)
  f = N.get(name)
  params = _params(name)
  want = f(jnp.asarray(s), mask=mask, **params)
  np.testing.assert_allclose(
      jax.jit(lambda x, m: f(x, mask=m, **params))(s, mask), want, rtol=1e-12)
  np.testing.assert_allclose(
      jax.vmap(lambda x, m: f(x, mask=m, **params))(jnp.asarray(s), mask),
      want, rtol=1e-12)
  g = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(f(x, mask=mask, **params)))))(
      jnp.asarray(s))
  assert np.all(np.isfinite(g))
  assert np.all(np.asarray(g)[~mask] == 0.0)  # masked scores get no gradient


def test_sinks_leave_mass_on_the_sink():
  s, mask = _data(13)
  has_key = mask.any(-1)
  w1 = np.asarray(N.softmax_1(jnp.asarray(s), mask=mask))
  np.testing.assert_allclose(
      w1, N.softmax_sink(jnp.asarray(s), mask=mask, sink=0.0), rtol=1e-12)
  # sum w = 1 - exp(sink) / (exp(sink) + sum exp(s)) = sigmoid(lse(s) - sink)
  for sink in (-2.0, 0.0, 3.0):
    w = np.asarray(N.softmax_sink(jnp.asarray(s), mask=mask, sink=sink))
    lse = np.log(np.sum(np.where(mask, np.exp(s), 0.0), -1)[has_key])
    np.testing.assert_allclose(w.sum(-1)[has_key], 1 / (1 + np.exp(sink - lse)),
                               rtol=1e-12)
    np.testing.assert_array_equal(w.sum(-1)[~has_key], 0.0)
  # A very negative sink is plain softmax.
  np.testing.assert_allclose(
      N.softmax_sink(jnp.asarray(s), mask=mask, sink=-200.0),
      N.softmax(jnp.asarray(s), mask=mask), atol=1e-12)


def test_sink_per_head_matches_reference_per_head():
  s, mask = _data(14)                                   # [3, 4, 9]: 3 "heads"
  sinks = np.array([-1.0, 0.5, 2.0]).reshape(3, 1, 1)
  w = np.asarray(N.softmax_sink(jnp.asarray(s), mask=mask, sink=sinks))
  for h in range(3):
    np.testing.assert_allclose(
        w[h], R.apply(R.REFS["softmax_sink"], s[h], mask[h],
                      sink=float(sinks[h, 0, 0])), rtol=1e-12, atol=1e-15)


def test_cog_weights_keep_the_sign_and_unit_l1_mass():
  s, mask = _data(15)
  w = np.asarray(N.cog(jnp.asarray(s), mask=mask))
  np.testing.assert_array_equal(np.sign(w)[mask], np.sign(s)[mask])
  has_key = mask.any(-1)
  np.testing.assert_allclose(np.abs(w).sum(-1)[has_key], 1.0, rtol=1e-12)


def test_consmax_is_one_constant_times_exp():
  """At inference beta and gamma merge: w = C exp(s), C = exp(-beta)/gamma."""
  s, mask = _data(16)
  w = N.consmax(jnp.asarray(s), mask=mask, beta=1.25, denom=7.0)
  np.testing.assert_allclose(w, np.where(mask, np.exp(-1.25) / 7.0 * np.exp(s),
                                         0.0), rtol=1e-12)


def test_stablemax_and_laplace_shapes():
  x = jnp.asarray([-3.0, -1.0, 0.0, 1.0, 3.0])
  # StableMax's g: 1/(1-x) below 0, x+1 above, g(0) = 1, ratio preserved.
  g = np.array([0.25, 0.5, 1.0, 2.0, 4.0])
  np.testing.assert_allclose(N.stablemax(x), g / g.sum(), rtol=1e-12)
  # Mega's Laplace: the Gaussian CDF at mu is 1/2; x = s / n with n = 5 keys.
  w = N.laplace(jnp.asarray([5 * math.sqrt(0.5)] * 5))
  np.testing.assert_allclose(w, 0.5, rtol=1e-12)


def test_laplace_derivative_is_jax_erf_derivative_without_accuracy_ops():
  # laplace differentiates erf by hand (plain exp(-z^2)) because jax >= 0.12
  # differentiates it through exp(accuracy=HIGHEST), which Mosaic TPU cannot
  # lower. First and second derivatives must still be erf's own.
  s = jnp.asarray(np.random.default_rng(3).normal(size=(7,)) * 3.0)
  plain = lambda x: 0.5 * (1 + jax.lax.erf(  # noqa: E731
      (x / 7 - math.sqrt(0.5)) / (math.sqrt(0.25 / math.pi) * math.sqrt(2))))
  ours = lambda x: N.laplace(x)  # noqa: E731
  for order in (1, 2):
    d_ours, d_plain = ours, plain
    for _ in range(order):
      d_ours = jax.grad(lambda x, f=d_ours: jnp.sum(jnp.sin(f(x))))
      d_plain = jax.grad(lambda x, f=d_plain: jnp.sum(jnp.sin(f(x))))
    np.testing.assert_allclose(d_ours(s), d_plain(s), rtol=1e-10, atol=1e-14)
  jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: jnp.sum(ours(x))))(s))
  assert set(re.findall(r"accuracy=(\w+)", jaxpr)) <= {"None"}, jaxpr


@pytest.mark.parametrize("name", ["softmax_sink", "consmax", "lssar"])
def test_new_learnable_parameter_gradients(name):
  s, mask = _data(17)
  keys = sorted(LEARNABLE[name])
  f = lambda *vals: N.get(name)(jnp.asarray(s), mask=mask,  # noqa: E731
                                **dict(zip(keys, vals)))
  check_grads(f, tuple(jnp.asarray(LEARNABLE[name][k]) for k in keys),
              order=1, modes=("rev",))


@pytest.mark.parametrize("spec,match", [
    ("polynomial(p=2.5)", r"p=2.5 is invalid; it must be an integer in \[1, 9\]"),
    ("polynomial(p=0)", r"p=0 is invalid"),
    ("consmax(denom=0)", r"denom=0 is invalid; it must be in \(0, inf\]"),
    ("consmax(max_exponent=-1)", r"max_exponent=-1 is invalid"),
    ("lssar(power=0.5)", r"power=0.5 is invalid; it must be in \[1, 16\]"),
    ("lssa(power=0)", r"power=0 is invalid"),
    ("laplace(sigma=-1)", r"sigma=-1 is invalid"),
    ("laplace(alpha=2)", r"alpha=2 is invalid"),
    ("softmax_sink(sink=nan)", r"sink=nan is invalid"),
    ("stablemax(eps=-1)", r"eps=-1 is invalid"),
])
def test_new_parameters_outside_their_domain_are_rejected(spec, match):
  with pytest.raises(ValueError, match=match):
    N.get(spec)


def test_lssar_needs_its_power():
  with pytest.raises(ValueError, match=r"needs parameter\(s\) \['power'\]"):
    N.lssar(jnp.ones((2, 3)))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_lssa_is_finite_where_softplus_underflows(dtype):
  # A row whose every score puts softplus below the dtype's smallest number:
  # g/Σg would be 0/0. As softplus(y) ~ e^y there, the weights are
  # softmax(p y), y = log(n) s; the gradient stays finite too.
  s = jnp.array([[-800.0, -801.0, -803.0, -900.0]], dtype)
  y = np.log(4.0) * np.asarray(s, np.float64)[0]
  for power in (1.0, 3.0):
    w = np.asarray(jax.jit(N.lssa, static_argnames="power")(s, power=power),
                   np.float64)[0]
    # float32 rounds y ~ 1e3 to ~6e-5: softmax's own condition at this size.
    np.testing.assert_allclose(w, R._softmax(power * y), atol=1e-30,
                               rtol=1e-9 if dtype == jnp.float64 else 3e-4)
    g = jax.jit(jax.grad(lambda x: (N.lssa(x, power=power) *
                                    jnp.arange(4)).sum()))(s)
    assert np.isfinite(np.asarray(g)).all() and np.abs(g).max() > 0
