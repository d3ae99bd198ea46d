"""Tests of the quantize kernel's element encoders (fp8lab/kernels/quantize/encode.py) on their
own, as plain jnp functions on the CPU (no Pallas), against the golden codec bit for bit, and
a smoke test of benchmarks/probes/quantize_op_count.py (the instruction-count proxy).

The kernel's own tests (test_quantize_kernel.py) check the encoders inside the kernel on
tiles; here they see many more bit patterns per second: every hard case of the element
formats (values, ties, +-1 ulp, specials), a dense sweep of float32's top 16 bits, every MX
shared exponent -127..127, and hypothesis' raw bit patterns with random words.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
from jax import lax
from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from benchmarks import ir_ops

from fp8lab import testing as fpt
from fp8lab.formats import E2M1, E4M3, E5M2
from fp8lab.kernels.quantize import encode as enc
from fp8lab.numerics import codec
from fp8lab.numerics import scales as sc

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ELEMS = (E4M3, E5M2, E2M1)
_U = np.uint32


def _patterns() -> np.ndarray:
  """Hard cases of every element format (both signs) and every top-16-bit pattern with
  several low halves (0, 1, the half-way 0x8000 and its neighbours, all ones)."""
  hard = fpt.hard_bit_patterns(np.float32, [e.name for e in ELEMS]).astype(np.uint32)
  top = np.arange(1 << 16, dtype=np.uint32)[:, None] << _U(16)
  low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)[None, :]
  return np.unique(np.concatenate([hard, (top | low).reshape(-1)]))


PATTERNS = _patterns()
# The hard cases only, for the products with all 255 shared exponents.
HARD = fpt.hard_bit_patterns(np.float32, [e.name for e in ELEMS]).astype(np.uint32)


def _not_nan(bits):
  return bits[(bits & _U(0x7FFFFFFF)) <= _U(0x7F800000)]


@jax.jit
def _rne_pair(bits):
  """(kernel, golden) codes of every element format, round to nearest even, saturating."""
  return [(enc.encode_bits(bits, e), codec.encode_bits(bits, e, saturate=True)) for e in ELEMS]


def _assert_codes_equal(bits, pairs):
  """(kernel, golden) code arrays per element format of ELEMS over the patterns `bits`."""
  for e, (got, want) in zip(ELEMS, pairs):
    got, want = np.asarray(got), np.asarray(want)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (e.name, [hex(int(b)) for b in np.asarray(bits)[bad[:8]]],
                           got[bad[:8]], want[bad[:8]])


def test_nearest_even_matches_the_golden_codec():
  bits = jnp.asarray(_not_nan(PATTERNS))
  _assert_codes_equal(bits, _rne_pair(bits))


def test_nan_gives_the_nan_code():
  nan = np.array([0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0xFF800001], np.uint32)
  for e in (E4M3, E5M2):
    got = np.asarray(enc.encode_bits(jnp.asarray(nan), e, nan_code=e.nan_code))
    assert (got == e.nan_code).all(), e.name


@jax.jit
def _shifted_pair(bits, s):
  """(kernel, golden) codes of x * 2^-s (golden: ldexp, then the codec) per element format;
  bits (N, 1), s (1, 255)."""
  out = []
  for e in ELEMS:
    scaled = sc.ldexp_bits(jnp.broadcast_to(bits, (bits.shape[0], s.shape[1])), -s)
    out.append((enc.encode_shifted(bits, s, e),
                codec.encode_bits(scaled, e, saturate=True)))
  return out


def test_mx_exponent_shift_matches_ldexp_then_the_codec():
  """Every shared exponent -127..127 on the hard cases (float32 subnormals included; NaN /
  Inf are forced by the kernel's block rule, so not here)."""
  finite = HARD[(HARD & _U(0x7FFFFFFF)) < _U(0x7F800000)]
  s = jnp.arange(-127, 128, dtype=jnp.int32)[None, :]
  for e, (got, want) in zip(ELEMS, _shifted_pair(jnp.asarray(finite)[:, None], s)):
    got, want = np.asarray(got), np.asarray(want)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (e.name, [(hex(int(finite[i])), int(j) - 127) for i, j in bad[:8]])


def _float_code(vbits, e):
  """QuantizeConfig.float_encode's code of float32 bits (the kernel's _encode, NaN aside)."""
  if e is E2M1:
    return enc.e2m1_float_code(vbits)
  return enc.fp8_convert_code(lax.bitcast_convert_type(vbits, jnp.float32), e)


@jax.jit
def _float_pairs(bits):
  return [(_float_code(bits, e), codec.encode_bits(bits, e, saturate=True)) for e in ELEMS]


def test_float_encoders_match_the_golden_codec():
  """The float encoders (fp8: XLA's conversion here, the GPU's cvt.rn.satfinite compiled;
  e2m1: a + C - C and Veltkamp's split) on every pattern of PATTERNS but NaN: ties, +-1 ulp, float32 subnormals
  (flushed by XLA:CPU: they encode to +-0 either way), saturation, +-Inf."""
  bits = jnp.asarray(_not_nan(PATTERNS))
  _assert_codes_equal(bits, _float_pairs(bits))


@jax.jit
def _float_shifted_pairs(bits, s):
  out = []
  for e in ELEMS:
    scaled = sc.ldexp_bits(jnp.broadcast_to(bits, (bits.shape[0], s.shape[1])), -s)
    out.append((_float_code(enc.shift_bits(bits, s), e),
                codec.encode_bits(scaled, e, saturate=True)))
  return out


def test_float_encoders_after_the_mx_shift_match_ldexp_then_the_codec():
  """shift_bits (x * 2^-s as float32 bits, +-0 below 2^-126) then the float encoders, every
  shared exponent -127..127 on the hard cases, float32 subnormal inputs included, where
  |x| * 2^-s < 2^128 (an MX block's exponent keeps its elements below 2^(emax + 1))."""
  finite = HARD[(HARD & _U(0x7FFFFFFF)) < _U(0x7F800000)]
  s = jnp.arange(-127, 128, dtype=jnp.int32)[None, :]
  # float32 exponent of x (subnormals: below -126) minus s, below 128
  e_x = np.floor(np.log2(np.maximum(np.abs(finite.view(np.float32)), 2.0**-149)))
  valid = (e_x[:, None] - np.asarray(s)) < 128
  for e, (got, want) in zip(ELEMS, _float_shifted_pairs(jnp.asarray(finite)[:, None], s)):
    got, want = np.asarray(got), np.asarray(want)
    bad = np.argwhere((got != want) & valid)
    assert bad.size == 0, (e.name, [(hex(int(finite[i])), int(j) - 127) for i, j in bad[:8]])


def _finite_or_zero(bits):
  """NaN and +-Inf (which the kernel's block rule forces) replaced by +0: fixed shapes, one
  compile per sr_bits."""
  return np.where((bits & _U(0x7FFFFFFF)) >= _U(0x7F800000), _U(0), bits)


@functools.partial(jax.jit, static_argnames=("n",))
def _sr_pairs(bits, r, s, *, n):
  """(kernel, golden) codes per element format: encode_bits, then encode_shifted by s; with
  stochastic rounding (random words r, top n bits) for n > 0, else nearest even."""
  rb = None if n == 0 else r
  kw = {} if n == 0 else dict(random_bits=r, sr_bits=n)
  out = []
  for e in ELEMS:
    out.append((enc.encode_bits(bits, e, rb, max(n, 1)),
                codec.encode_bits(bits, e, saturate=True, **kw)))
    out.append((enc.encode_shifted(bits, s, e, rb, max(n, 1)),
                codec.encode_bits(sc.ldexp_bits(bits, -s), e, saturate=True, **kw)))
  return out


def _check_pairs(pairs):
  for i, (got, want) in enumerate(pairs):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want),
                                  f"{ELEMS[i // 2].name} {('bits', 'shifted')[i % 2]}")


HYP = settings(max_examples=40, deadline=None)
_WORDS = st.lists(st.integers(0, 2**32 - 1), min_size=64, max_size=64)


@HYP
@given(data=st.data())
def test_stochastic_rounding_matches_the_golden_codec(data):
  """Stochastic rounding (encode_bits and encode_shifted with random words) on bit patterns
  near the formats' hard cases, against the codec's rule (docs/numerics.md section 6)."""
  n = data.draw(st.sampled_from([1, 8, 21, 24]))
  bits = np.array(data.draw(st.lists(fpt.float32_bits([e.name for e in ELEMS]), min_size=64,
                                     max_size=64)), np.uint32)
  r = np.array(data.draw(_WORDS), np.uint32)
  s = jnp.int32(data.draw(st.integers(-127, 127)))
  _check_pairs(_sr_pairs(jnp.asarray(_finite_or_zero(bits)), jnp.asarray(r), s, n=n))


@HYP
@given(data=st.data())
def test_raw_bit_patterns_nearest_even(data):
  bits = np.array(data.draw(_WORDS), np.uint32)
  s = jnp.int32(data.draw(st.integers(-127, 127)))
  _check_pairs(_sr_pairs(jnp.asarray(_finite_or_zero(bits)), jnp.zeros(64, jnp.uint32), s,
                         n=0))


# ----------------------------------------------------------------------------------------
# The proxy: benchmarks/probes/quantize_op_count.py.

def test_count_ops_weights_by_tensor_elements():
  """A hand-written IR: free layout ops count 0, each op its widest tensor's elements, a
  reduce its input's elements (its region not again)."""
  ir = """
    %c = arith.constant dense<1> : tensor<4x8xi32>
    %0 = tt.splat %arg : i32 -> tensor<4x8xi32>
    %1 = arith.addi %0, %c : tensor<4x8xi32>
    %2 = arith.muli %s, %s : i32
    %3 = "tt.reduce"(%1) <{axis = 1 : i32}> ({
    ^bb0(%a: i32, %b: i32):
      %9 = arith.maxui %a, %b : i32
      tt.reduce.return %9 : i32
    }) : (tensor<4x8xi32>) -> tensor<4xi32>
    %4 = arith.cmpi eq, %3, %3 : tensor<4xi32>
    tt.store %p, %1 : tensor<4x8x!tt.ptr<i32>>
  """
  assert ir_ops.count_ops(ir) == {"arith.addi": 32, "arith.muli": 1, "tt.reduce": 32,
                                    "arith.cmpi": 4, "tt.store": 32}


def test_probe_script_writes_its_table(tmp_path):
  out = tmp_path / "ops.json"
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             PYTHONPATH=os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p))
  env.pop("OUT", None)
  proc = subprocess.run([sys.executable, os.path.join(_REPO, "benchmarks", "probes",
                                                      "quantize_op_count.py"),
                         "--cases=mxfp4,mxfp4:sr,e4m3", "--shape=32x512", f"--out={out}"],
                        cwd=_REPO, env=env, capture_output=True, text=True, timeout=240)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  doc = json.loads(out.read_text())
  rows = {r["case"]: r for r in doc["rows"]}
  assert list(rows) == ["mxfp4", "mxfp4:sr", "e4m3"] and doc["config"] == "16:256:8"
  assert all(r["tile"] == 16 * 256 for r in rows.values())
  # every element is loaded once; the random words (threefry) only add work
  assert all(r["ops"]["tt.load"] == pytest.approx(1.0, abs=0.01) for r in rows.values())
  assert rows["mxfp4:sr"]["alu_per_element"] > rows["mxfp4"]["alu_per_element"] + 50
  assert 10 < rows["mxfp4"]["alu_per_element"] < rows["e4m3"]["alu_per_element"]
  assert "mxfp4:sr" in proc.stdout
