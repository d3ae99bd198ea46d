"""The two tokenizers the real models need, in plain Python (no `tokenizers` package).

WordPiece: BERT's uncased tokenizer as tokenizer.json describes it for all-MiniLM-L6-v2
(BertNormalizer: clean text, CJK characters spaced, lowercase and strip accents; BertPreTokenizer:
split on whitespace and punctuation; WordPiece: greedy longest match, "##" continuations,
[UNK] for a word with no match or over 100 characters; [CLS] ... [SEP]).

ByteLevelBPE: GPT-2's byte-level BPE with the vocabulary, merges and control tokens of a GGUF
file's metadata (tokenizer.ggml.*), with llama.cpp's "smollm" pre-tokenizer: every digit its
own piece, then GPT-2's split ('s 't 're 've 'm 'll 'd, optional space + letters, optional space
+ digits, optional space + other symbols, whitespace). Python's `re` has no \\p{L}: letters are
[^\\W\\d_] (Unicode word characters that are neither digits nor "_"), close to \\p{L} for text.
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata

__all__ = ["WordPiece", "ByteLevelBPE", "bytes_to_unicode"]


# ------------------------------------------------------------------------------ WordPiece

def _is_punctuation(ch: str) -> bool:
  cp = ord(ch)
  # BERT counts every non-alphanumeric ASCII symbol as punctuation ("$", "^", "`", ...).
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
  return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
          or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
          or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class WordPiece:
  """BERT uncased WordPiece from a tokenizer.json (model.vocab, unk, "##")."""

  def __init__(self, vocab: dict[str, int], *, unk: str = "[UNK]", cls: str = "[CLS]",
               sep: str = "[SEP]", pad: str = "[PAD]", prefix: str = "##",
               max_chars: int = 100):
    self.vocab = vocab
    self.unk_id, self.cls_id, self.sep_id = vocab[unk], vocab[cls], vocab[sep]
    self.pad_id = vocab[pad]
    self.prefix = prefix
    self.max_chars = max_chars

  @classmethod
  def from_file(cls, path: str) -> "WordPiece":
    with open(path, encoding="utf-8") as f:
      doc = json.load(f)
    model = doc["model"]
    if model.get("type") != "WordPiece":
      raise ValueError(f"{path}: not a WordPiece tokenizer ({model.get('type')!r})")
    return cls(model["vocab"], unk=model.get("unk_token", "[UNK]"),
               prefix=model.get("continuing_subword_prefix", "##"),
               max_chars=model.get("max_input_chars_per_word", 100))

  @staticmethod
  def normalize(text: str) -> str:
    out = []
    for ch in text:
      cp = ord(ch)
      if cp == 0 or cp == 0xFFFD or (unicodedata.category(ch).startswith("C")
                                     and ch not in "\t\n\r"):
        continue                                   # clean_text drops control characters
      if ch.isspace():
        out.append(" ")
      elif _is_cjk(cp):
        out.append(f" {ch} ")
      else:
        out.append(ch)
    text = "".join(out).lower()
    # strip_accents (null in tokenizer.json follows lowercase): NFD, then drop the marks.
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn")

  @staticmethod
  def pre_tokenize(text: str) -> list[str]:
    words = []
    for chunk in text.split():
      cur = ""
      for ch in chunk:
        if _is_punctuation(ch):
          if cur:
            words.append(cur)
          words.append(ch)
          cur = ""
        else:
          cur += ch
      if cur:
        words.append(cur)
    return words

  def word_ids(self, word: str) -> list[int]:
    if len(word) > self.max_chars:
      return [self.unk_id]
    ids, start = [], 0
    while start < len(word):
      end = len(word)
      while end > start:
        piece = word[start:end] if start == 0 else self.prefix + word[start:end]
        if piece in self.vocab:
          ids.append(self.vocab[piece])
          break
        end -= 1
      if end == start:
        return [self.unk_id]                       # any unmatched rest makes the word [UNK]
      start = end
    return ids

  def encode(self, text: str, max_length: int | None = None) -> list[int]:
    """[CLS] + WordPiece ids + [SEP], truncated to max_length ids in all."""
    ids = []
    for w in self.pre_tokenize(self.normalize(text)):
      ids.extend(self.word_ids(w))
    if max_length is not None:
      ids = ids[:max_length - 2]
    return [self.cls_id, *ids, self.sep_id]


# ------------------------------------------------------------------------------ byte-level BPE

@functools.lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's map of the 256 byte values to printable characters (a space is "Ġ", U+0120)."""
  keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
  out, n = {}, 0
  for b in range(256):
    if b in keep:
      out[b] = chr(b)
    else:
      out[b] = chr(256 + n)
      n += 1
  return out


_LETTERS = r"[^\W\d_]"
_GPT2_SPLIT = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d"
    rf"| ?{_LETTERS}+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+")
_DIGIT = re.compile(r"(\d)")


class ByteLevelBPE:
  """Byte-level BPE: tokens (id -> string in GPT-2's byte alphabet), merges by rank, and
  control tokens (matched literally in the text before any splitting)."""

  def __init__(self, tokens: list[str], merges: list[str], control: list[str] = ()):
    self.tokens = list(tokens)
    self.ids = {t: i for i, t in enumerate(self.tokens)}
    self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    self.byte_map = bytes_to_unicode()
    self.byte_unmap = {c: b for b, c in self.byte_map.items()}
    self.control = sorted(control, key=len, reverse=True)
    self._special = (re.compile("(" + "|".join(map(re.escape, self.control)) + ")")
                     if self.control else None)
    self._cache: dict[str, list[int]] = {}

  @classmethod
  def from_gguf(cls, meta: dict) -> "ByteLevelBPE":
    """From a GGUF file's metadata (loaders.read_gguf_metadata): tokenizer.ggml.* of model
    "gpt2" (byte-level BPE)."""
    model = meta["tokenizer.ggml.model"]
    if model != "gpt2":
      raise ValueError(f"GGUF tokenizer model {model!r}: only byte-level BPE ('gpt2') is read")
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta["tokenizer.ggml.token_type"]
    control = [t for t, ty in zip(tokens, types) if ty == 3]     # llama.cpp: 3 = CONTROL
    return cls(tokens, meta["tokenizer.ggml.merges"], control)

  @staticmethod
  def pre_tokenize(text: str) -> list[str]:
    pieces = []
    for part in _DIGIT.split(text):
      if not part:
        continue
      if len(part) == 1 and part.isdigit():
        pieces.append(part)
      else:
        pieces.extend(_GPT2_SPLIT.findall(part))
    return pieces

  def _bpe(self, piece: str) -> list[int]:
    hit = self._cache.get(piece)
    if hit is not None:
      return hit
    word = [self.byte_map[b] for b in piece.encode("utf-8")]
    while len(word) > 1:
      best, at = None, -1
      for i in range(len(word) - 1):
        r = self.ranks.get((word[i], word[i + 1]))
        if r is not None and (best is None or r < best):
          best, at = r, i
      if best is None:
        break
      word[at:at + 2] = [word[at] + word[at + 1]]
    ids = [self.ids[w] for w in word]
    self._cache[piece] = ids
    return ids

  def encode(self, text: str) -> list[int]:
    parts = self._special.split(text) if self._special else [text]
    ids = []
    for part in parts:
      if part in self.ids and part in self.control:
        ids.append(self.ids[part])
        continue
      for piece in self.pre_tokenize(part):
        ids.extend(self._bpe(piece))
    return ids

  def decode(self, ids) -> str:
    out = bytearray()
    for i in ids:
      t = self.tokens[int(i)]
      if t in self.control:
        out += t.encode("utf-8")
      else:
        out += bytes(self.byte_unmap[c] for c in t)
    return out.decode("utf-8", errors="replace")
