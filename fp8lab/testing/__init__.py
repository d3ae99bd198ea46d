"""Public hypothesis strategies for testing code built on fp8lab (needs the "test" extra).

The strategies draw raw bit patterns weighted toward the hard cases of the element formats
(ties, largest finite +- 1 ulp, the overflow threshold, subnormal edges, NaN payloads of
both signs, +-Inf, +-0), and valid codes of a format; they compose with
`hypothesis.extra.numpy` like its own strategies. Example: check that your own e4m3
conversion agrees with fp8lab on any float32 input::

    import numpy as np
    from hypothesis import given
    import fp8lab
    from fp8lab import testing as fpt

    @given(fpt.bit_pattern_arrays(np.float32, (8, 32), formats="e4m3"))
    def test_my_cast(x):
      want = np.asarray(fp8lab.encode(x, "e4m3"))
      got = my_cast_to_e4m3_codes(x)
      np.testing.assert_array_equal(got, want)   # uint8 codes: bit for bit

    @given(fpt.code_arrays("e2m1", (16,), allow_nan=False))
    def test_my_decode(codes): ...

Block-format inputs and QuantizedArrays (fp8lab/testing/quantized.py) come the same way:
`block_arrays("mxfp4", (4, 64))` draws arrays whose blocks span the float32 range and hold
special values, `quantized_arrays("nvfp4")` draws QuantizedArrays.

Invalid arguments raise hypothesis.errors.InvalidArgument when the strategy is drawn from
(in @given or `.example()`), not when the strategy function is called, like
hypothesis.extra.numpy. Formats come from the registry in fp8lab.formats.
"""

from fp8lab.testing.elements import (
    BIT_DTYPES,
    DEFAULT_FORMATS,
    bfloat16_bits,
    bit_pattern_arrays,
    bits_for,
    code_arrays,
    codes,
    float16_bits,
    float32_bits,
    floats_for,
    hard_bit_patterns,
)

from fp8lab.testing.quantized import (
    BLOCK_FORMATS,
    block_arrays,
    quantize_inputs,
    quantize_shapes,
    quantized_arrays,
)

__all__ = [
    "BIT_DTYPES", "DEFAULT_FORMATS", "hard_bit_patterns", "bits_for", "float32_bits",
    "bfloat16_bits", "float16_bits", "floats_for", "bit_pattern_arrays", "codes",
    "code_arrays",
    "BLOCK_FORMATS", "quantize_shapes", "block_arrays", "quantize_inputs", "quantized_arrays",
]
