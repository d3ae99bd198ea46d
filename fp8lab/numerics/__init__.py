"""The golden model: pure JAX on integer bit patterns, written to be obviously right."""
