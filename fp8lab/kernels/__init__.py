"""Pallas kernels (Triton lowering) and their in-kernel unpack helpers; see gemv.py."""
