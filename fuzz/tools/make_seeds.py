#!/usr/bin/env python3
"""Writes the hand-made seed files of fuzz/corpus/ (real-format files and
deliberately broken ones). Run from the repository root; it overwrites only
the files it names (seed-* and broken-*), never the regression inputs."""
import json, os, struct, sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "."
C = os.path.join(ROOT, "fuzz", "corpus")


def put(h, name, data):
    d = os.path.join(C, h)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ----
def st(header, data=b"", hlen=None, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * ((-len(h)) % 8)
    n = len(h) if hlen is None else hlen
    return struct.pack("<Q", n) + h + data


T = lambda dt, shape, b, e: {"dtype": dt, "shape": shape, "data_offsets": [b, e]}
good = {"a": T("F32", [2, 2], 0, 16), "b": T("BF16", [3], 16, 22), "e": T("F16", [0], 22, 22),
        "__metadata__": {"format": "pt"}}
put("safetensors", "seed-valid", st(good, bytes(range(22))))
put("safetensors", "seed-valid-alltypes", st(
    {k: T(k, [1], i * 8, i * 8 + s) for i, (k, s) in enumerate(
        [("F64", 8), ("I8", 1), ("I16", 2), ("U16", 2), ("U32", 4), ("U64", 8), ("BOOL", 1),
         ("F8_E4M3", 1), ("F8_E5M2", 1), ("I32", 4), ("I64", 8), ("U8", 1)])} if False else
    {"x": T("F64", [1], 0, 8), "y": T("I64", [1], 8, 16), "z": T("U8", [1], 16, 17)}, bytes(17)))
put("safetensors", "seed-empty-header", st({}, b""))
put("safetensors", "broken-hlen-past-eof", st(good, bytes(22), hlen=1 << 20))
put("safetensors", "broken-hlen-huge", st(good, bytes(22), hlen=(1 << 64) - 1))
put("safetensors", "broken-short", b"\x05\x00\x00")
put("safetensors", "broken-not-json", st(b"{not json}", b""))
put("safetensors", "broken-not-object", st([1, 2], b""))
put("safetensors", "broken-overlap", st({"a": T("F32", [2], 0, 8), "b": T("F32", [1], 4, 8)}, bytes(8)))
put("safetensors", "broken-hole", st({"a": T("F32", [1], 4, 8)}, bytes(8)))
put("safetensors", "broken-trailing", st({"a": T("F32", [1], 0, 4)}, bytes(8)))
put("safetensors", "broken-end-past-data", st({"a": T("F32", [4], 0, 16)}, bytes(8)))
put("safetensors", "broken-shape-overflow", st({"a": T("F32", [1 << 40, 1 << 40], 0, 0)}, b""))
put("safetensors", "broken-negative-dim", st({"a": T("F32", [-1], 0, 0)}, b""))
put("safetensors", "broken-9-dims", st({"a": T("U8", [1] * 9, 0, 1)}, bytes(1)))
put("safetensors", "broken-dtype", st({"a": T("F12", [1], 0, 1)}, bytes(1)))
put("safetensors", "broken-duplicate-name",
    st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', bytes(1)))
put("safetensors", "broken-metadata-value", st({"__metadata__": {"k": 1}}, b""))
put("safetensors", "broken-offsets-reversed", st({"a": T("U8", [0], 4, 0)}, bytes(4)))
put("safetensors", "broken-deep-json", st(b"[" * 3000 + b"]" * 3000, b""))

# header-only form (fuzz_safetensors writes the length): JSON, NUL, data
put("safetensors", "seed-hdr-valid", json.dumps(good).encode() + b"\0" + bytes(range(22)))
put("safetensors", "seed-hdr-many", json.dumps({"t%d" % i: T("U8", [2], 2 * i, 2 * i + 2) for i in range(40)}).encode()
    + b"\0" + bytes(80))
put("safetensors", "regress-tensor-name-newline", json.dumps({"a\nb": T("Q8", [1], 0, 1)}).encode() + b"\0" + bytes(1))

# ---- index ----
put("st_index", "seed-valid", json.dumps({"metadata": {"total_size": 11}, "weight_map": {
    "x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}}))
put("st_index", "seed-subset", json.dumps({"weight_map": {"z": "b.safetensors"}}))
put("st_index", "broken-missing-shard", json.dumps({"weight_map": {"x": "c.safetensors"}}))
put("st_index", "broken-traversal", json.dumps({"weight_map": {"x": "../a.safetensors"}}))
put("st_index", "broken-wrong-shard", json.dumps({"weight_map": {"x": "b.safetensors"}}))
put("st_index", "broken-not-string", json.dumps({"weight_map": {"x": 1}}))
put("st_index", "broken-no-map", json.dumps({"metadata": {}}))
put("st_index", "broken-not-json", "{\"weight_map\": {")

# ---- qwen3 config.json ----
q06 = {"architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
       "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
       "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
       "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
       "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
       "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
       "tie_word_embeddings": True, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
       "use_cache": True, "use_sliding_window": False, "vocab_size": 151936}
put("qwen3_config", "seed-qwen3-0.6b", json.dumps(q06, indent=2))
q8 = dict(q06, hidden_size=4096, intermediate_size=12288, num_attention_heads=32,
          num_hidden_layers=36, tie_word_embeddings=False)
put("qwen3_config", "seed-qwen3-8b", json.dumps(q8, indent=2))
put("qwen3_config", "seed-minimal", json.dumps({"hidden_size": 8, "num_hidden_layers": 1,
    "num_attention_heads": 2, "intermediate_size": 16, "vocab_size": 300}))
for name, patch in [("broken-missing-hidden", {"hidden_size": None}),
                    ("broken-huge-vocab", {"vocab_size": 1 << 40}),
                    ("broken-gqa", {"num_key_value_heads": 3}),
                    ("broken-odd-head-dim", {"head_dim": 7}),
                    ("broken-eps-string", {"rms_norm_eps": "1e-6"}),
                    ("broken-rope-scaling", {"rope_scaling": {"type": "yarn"}}),
                    ("broken-act", {"hidden_act": "gelu\nINJECTED"}),
                    ("broken-tie-int", {"tie_word_embeddings": 1}),
                    ("broken-layers-zero", {"num_hidden_layers": 0})]:
    d = dict(q06)
    for k, v in patch.items():
        if v is None:
            d.pop(k)
        else:
            d[k] = v
    put("qwen3_config", name, json.dumps(d))
put("qwen3_config", "broken-not-object", "[1,2,3]")

# ---- synthetic tokenizer.json ----
def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B = bytes_to_unicode()
vocab = {B[b]: b for b in range(256)}
merges = []
def merge(a, b):
    merges.append(a + " " + b)
    if a + b not in vocab:
        vocab[a + b] = len(vocab)
for a, b in [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (B[32], "w"), ("o", "r"),
             (B[32] + "w", "or"), ("l", "d"), (B[32] + "wor", "ld")]:
    merge(a, b)
QWEN_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
           "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
n = len(vocab)
tok = {"version": "1.0", "truncation": None, "padding": None,
       "added_tokens": [
           {"id": n, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
           {"id": n + 1, "content": "<|im_start|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
           {"id": n + 2, "content": "<think>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
           {"id": n + 3, "content": "<ws>", "single_word": True, "lstrip": True, "rstrip": True, "normalized": False, "special": False}],
       "normalizer": {"type": "NFC"},
       "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
           {"type": "Split", "pattern": {"Regex": QWEN_RE}, "behavior": "Isolated", "invert": False},
           {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
       "post_processor": None,
       "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                 "ignore_merges": False, "vocab": vocab, "merges": merges}}
dump = lambda t: json.dumps(t, ensure_ascii=False, separators=(",", ":"))
put("tokenizer_load", "seed-bytelevel-bpe", dump(tok))
t2 = json.loads(dump(tok))
t2["model"]["merges"] = [m.split(" ") for m in merges]
t2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}
t2["normalizer"] = None
put("tokenizer_load", "seed-array-merges-gpt2-regex", dump(t2))
def broken(name, f):
    t = json.loads(dump(tok))
    f(t)
    put("tokenizer_load", "broken-" + name, dump(t))
broken("missing-byte", lambda t: t["model"]["vocab"].pop(B[65]))
broken("merge-unknown", lambda t: t["model"]["merges"].append("zz qq"))
broken("merge-three", lambda t: t["model"]["merges"].append("h e l"))
broken("bad-regex", lambda t: t["pre_tokenizer"]["pretokenizers"][0]["pattern"].update(Regex="(unclosed"))
broken("normalizer-nfkc", lambda t: t.update(normalizer={"type": "NFKC"}))
broken("dup-id", lambda t: t["model"]["vocab"].update({"dup": 0}))
broken("id-out-of-range", lambda t: t["model"]["vocab"].update({"big": 1 << 23}))
broken("negative-id", lambda t: t["model"]["vocab"].update({"neg": -1}))
broken("added-empty", lambda t: t["added_tokens"].append({"id": 999, "content": ""}))
broken("added-nul", lambda t: t["added_tokens"].append({"id": 999, "content": "a\u0000b"}))
broken("model-wordpiece", lambda t: t["model"].update(type="WordPiece"))
broken("decoder-metaspace", lambda t: t.update(decoder={"type": "Metaspace"}))
broken("five-splits", lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Isolated"}] * 5}))
broken("nested-sequence", lambda t: t.update(pre_tokenizer={"type": "Sequence", "pretokenizers": [
    {"type": "Sequence", "pretokenizers": []}]}))
put("tokenizer_load", "broken-not-json", '{"model": {"vocab": {')
put("tokenizer_load", "broken-deep", "[" * 3000 + "]" * 3000)

# ---- tokenizer encode/decode (text; also read as int32 ids) ----
texts = {
    "seed-ascii": "Hello world! The quick brown fox jumps over the lazy dog.",
    "seed-chat": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "seed-code": "def f(x):\n    return x**2  # comment\n\n\tif x != 0: print('ok')\r\n",
    "seed-unicode": "caf\u00e9 na\u00efve \u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4 \u0645\u0631\u062d\u0628\u0627 \U0001F600\U0001F44D\u200d \u00a0\u3000",
    "seed-not-nfc": "e\u0301 A\u030a \u1100\u1161\u11a8 \u212b",
    "seed-whitespace": " " * 200 + "\n" * 50 + "\t \u0085 \u180e \ufeff x",
    "seed-numbers": "1234567890 3.14159 -42 1e10 0x1F",
    "seed-specials-glued": "<|endoftext|><|im_end|><|im_start|><|fim_prefix|>x<|fim_middle|>y<|fim_suffix|></think><tool_call>",
}
for k, v in texts.items():
    put("tokenizer_codec", k, v)
put("tokenizer_codec", "broken-invalid-utf8", b"abc\xff\xfe\xc3(\xe2\x82\xf0\x9f\x98 \xed\xa0\x80 \xc0\xaf")
put("tokenizer_codec", "seed-ids", struct.pack("<8i", 9707, 1879, 0, 151643, 151644, 151645, 151935, 151936))
put("tokenizer_codec", "seed-ids-partial-utf8", struct.pack("<6i", 145, 94, 241, 133, -1, 2147483647))

# ---- plugins.conf ----
put("conf", "broken-unknown-kind", "widget cpu libmi-cpu.so required\n")
put("conf", "broken-missing-field", "platform cpu libmi-cpu.so\n")
put("conf", "broken-required-word", "platform cpu libmi-cpu.so maybe\n")
put("conf", "broken-option-no-eq", "platform cpu libmi-cpu.so required threads\n")
put("conf", "broken-option-twice", "platform cpu libmi-cpu.so required a=1 a=2\n")
put("conf", "broken-duplicate", "model qwen3 a.so required\nmodel qwen3 b.so optional\n")
put("conf", "broken-control-char", "platform cpu\x01 libmi-cpu.so required\n")
put("conf", "broken-bad-utf8", "platform cpu libmi-\xc3\x28.so required\n".encode("latin-1"))
put("conf", "broken-nul", b"platform cpu libmi-cpu.so required\x00trailing\n")
put("conf", "broken-long-line", "platform cpu " + "x" * 5000 + " required\n")
put("conf", "seed-crlf-comments", "# c\r\nplatform cpu libmi-cpu.so required threads=2 # tail\r\n\r\nagent a x.so optional k=a#b\r\n")

# ---- expressions ----
for i, e in enumerate(["pos0 + T", "(T * 2 + 1) % 4 == 3", "-T * 3 >= -15", "Hq % Hkv == 0",
                       "H / Z", "MAX + 1", "MIN - 1", "MIN / N", "MIN % N", "- - - T",
                       "((T)) <= H != 1", "99999999999999999999", "T +", "a b", "@"]):
    put("expr", "seed-%02d" % i, e)
