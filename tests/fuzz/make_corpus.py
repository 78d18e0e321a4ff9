#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target under tests/fuzz/corpus/ (committed; rerun after
changing a seed here). Each seed is a small, named case: a valid input, a rule's edge, or an
issue's reproducer. libFuzzer adds what it finds to a scratch folder, never to these."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
I64_MAX = 2**63 - 1


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


# --- fuzz_c_abi: flashjit_attention_args bytes, optional flashjit_lse, then the arch ----------
F16, BF16, F32 = 0, 1, 2


def tensor(addr, dtype, shape, stride=None, reserved=0):
    if stride is None:  # contiguous [B, S, H, D]
        b, s, h, d = shape
        stride = (s * h * d, h * d, d, 1)
    return struct.pack("<Qii4q4q", addr, dtype, reserved, *shape, *stride)


def args(q, k, v, o, lse=False, mask=0, fp32_math=0, scale=0.0, reserved=0):
    return q + k + v + o + struct.pack("<Qiifi", 1 if lse else 0, mask, fp32_math, scale, reserved)


def lse_view(addr, shape, stride=None):
    if stride is None:
        b, h, s = shape
        stride = (h * s, s, 1)
    return struct.pack("<Q3q3q", addr, *shape, *stride)


A = [0x7F0000000000 + (i << 32) for i in range(8)]  # well-separated, aligned fake device addresses


def mha(dtype=F16, B=2, Sq=100, Sk=120, Hq=8, Hkv=2, D=64, Dv=64, **kw):
    return args(tensor(A[1], dtype, (B, Sq, Hq, D)), tensor(A[2], dtype, (B, Sk, Hkv, D)),
                tensor(A[3], dtype, (B, Sk, Hkv, Dv)), tensor(A[4], dtype, (B, Sq, Hq, Dv)), **kw)


c = "fuzz_c_abi"
write(c, "valid_gqa_causal_f16", mha(mask=1))
write(c, "valid_sm90a_bf16", mha(dtype=BF16, Hkv=8) + b"sm_90a")
write(c, "valid_f32_tf32_lse", mha(dtype=F32, fp32_math=1, lse=True) + lse_view(A[5], (2, 8, 100)))
write(c, "lse_overlaps_o", mha(lse=True) + lse_view(A[4], (2, 8, 100)))
write(c, "empty_batch_null_data", args(*(tensor(0, F16, (0, 16, 4, 64)) for _ in range(4))))
write(c, "arch_unsupported_sm70", mha() + b"sm_70")
write(c, "arch_escape_bytes", mha() + b"sm_\x1b]0;pwned\x07\xff")
write(c, "arch_4k_long", mha() + b"sm_" + b"9" * 4096)
write(c, "negative_seq_q", mha(Sq=-5))
write(c, "negative_stride", args(tensor(A[1], F16, (1, 8, 1, 64), (512, 64, 64, -1)),
                                 tensor(A[2], F16, (1, 8, 1, 64)), tensor(A[3], F16, (1, 8, 1, 64)),
                                 tensor(A[4], F16, (1, 8, 1, 64))))
write(c, "scale_tiny_negative", mha(scale=-1e-30))
write(c, "scale_nan", mha(scale=float("nan")))
write(c, "bad_dtype_mask_reserved", args(tensor(A[1], 9, (1, 8, 1, 64)), tensor(A[2], F16, (1, 8, 1, 64)),
                                         tensor(A[3], F16, (1, 8, 1, 64)), tensor(A[4], F16, (1, 8, 1, 64)),
                                         mask=7, reserved=1))
write(c, "o_overlaps_itself", args(tensor(A[1], F16, (1, 8, 2, 64)), tensor(A[2], F16, (1, 8, 2, 64)),
                                   tensor(A[3], F16, (1, 8, 2, 64)), tensor(A[4], F16, (1, 8, 2, 64), (1024, 64, 1, 1))))
# Packed [S, 3 * d_model] projection output: q, k and v interleaved in one buffer.
S, H, D = 256, 8, 64
dm = H * D
packed = [tensor(A[6] + t * dm * 2, BF16, (1, S, H, D), (S * 3 * dm, 3 * dm, D, 1)) for t in range(3)]
write(c, "packed_qkv_bf16", args(*packed, tensor(A[7], BF16, (1, S, H, D))))
# Issue 6, defect 4: f32, no heads in q and o, k and v with shape[2] = stride[2] = 2^63 - 1.
write(c, "issue6_defect4_extent_near_2p63",
      args(tensor(A[1], F32, (1, 4, 0, 64)), tensor(A[2], F32, (1, 4, I64_MAX, 64), (0, 0, I64_MAX, 1)),
           tensor(A[3], F32, (1, 4, I64_MAX, 64), (0, 0, I64_MAX, 1)), tensor(A[4], F32, (1, 4, 0, 64))))
# Issue 6, defect 5: o.data == q.data == 0xFFFFFFFFFFFFFFFE, a range that wraps past 2^64.
top = 0xFFFFFFFFFFFFFFFE
write(c, "issue6_defect5_range_wraps",
      args(tensor(top, F16, (1, 1, 1, 1)), tensor(A[2], F16, (1, 1, 1, 1)), tensor(A[3], F16, (1, 1, 1, 1)),
           tensor(top, F16, (1, 1, 1, 1))))

# --- fuzz_c_abi_v2: flashjit_attention_args_v2 bytes, its present structs, the arch, a tail -
# The first published struct's size (it ended at `paged`; what the seeds' struct_size says, an old
# caller's), and the struct's whole size today, which the targets read before its pointees.
V2_SIZE, V2_SIZEOF, ABI_V2 = 400, 432, 2
I64_MIN = -2**63
# Every integer field meets these: zero, signs, int32's edges, the issue 21 G1 value, int64's edges.
BOUNDARIES = {"0": 0, "-1": -1, "1": 1, "2p31_minus_1": 2**31 - 1, "2p31": 2**31, "2p56": 2**56,
              "i64_max": I64_MAX, "i64_min": I64_MIN}


def contiguous(b, s, h, d):
    return [[b, s, h, d], [s * h * d, h * d, d, 1]]


class V2:
    """One flashjit_attention_args_v2 and the structs it points to (None: a null pointer)."""

    def __init__(self, dtype=F16, B=2, Sq=100, Sk=120, Hq=8, Hkv=2, D=64):
        self.struct_size, self.abi_version = V2_SIZE, ABI_V2
        # [data, dtype, reserved, shape, stride]: strides stay as made when a seed changes a shape.
        self.q = [A[1], dtype, 0] + contiguous(B, Sq, Hq, D)
        self.k = [A[2], dtype, 0] + contiguous(B, Sk, Hkv, D)
        self.v = [A[3], dtype, 0] + contiguous(B, Sk, Hkv, D)
        self.o = [A[4], dtype, 0] + contiguous(B, Sq, Hq, D)
        self.mask, self.fp32_math, self.scale, self.softcap = 0, 0, 0.0, 0.0
        self.sinks = self.kv_lens = 0
        self.lse = self.varlen = self.window = self.alibi = self.paged = None
        # Past the first published struct: ABI versions 3, 6, 4 and 7.
        self.flags = self.sm_margin = self.workspace = self.workspace_bytes = self.kv_starts = 0
        self.arch, self.tail = b"", b""

    @staticmethod
    def _tensor(t):
        addr, dtype, reserved, shape, stride = t
        return tensor(addr, dtype, shape, stride, reserved)

    def bytes(self):
        present = lambda x: 1 if x is not None else 0
        out = struct.pack("<II", self.struct_size & 0xFFFFFFFF, self.abi_version & 0xFFFFFFFF)
        out += b"".join(self._tensor(t) for t in (self.q, self.k, self.v, self.o))
        out += struct.pack("<Qiiff", present(self.lse), self.mask, self.fp32_math, self.scale, self.softcap)
        out += struct.pack("<QQQQQQ", present(self.varlen), present(self.window), present(self.alibi),
                           self.sinks, self.kv_lens, present(self.paged))
        out += struct.pack("<IIQQQ", self.flags, self.sm_margin, self.workspace, self.workspace_bytes, self.kv_starts)
        assert len(out) == V2_SIZEOF  # the targets read the whole struct before its pointees
        if self.lse is not None:
            out += lse_view(*self.lse)
        if self.varlen is not None:
            out += struct.pack("<QQqqq", *self.varlen)
        if self.window is not None:
            out += struct.pack("<qq", *self.window)
        if self.alibi is not None:
            out += struct.pack("<Qq", *self.alibi)
        if self.paged is not None:
            out += struct.pack("<Qqq", *self.paged)
        if self.arch or self.tail:
            out += self.arch + b"\0" + self.tail
        return out


def every_option(dtype=F16):
    """Varlen (3 sequences packed in 300 query and 360 key rows), causal with a window, softcap,
    ALiBi per batch, sinks and the LSE."""
    a = V2(dtype, B=1, Sq=300, Sk=360)
    a.mask, a.softcap = 1, 30.0
    a.varlen = [A[5], A[5] + 256, 3, 150, 200]
    a.window = [64, 0]
    a.alibi = [A[6], 8]
    a.sinks = A[6] + 4096
    a.lse = (A[7], (1, 8, 300))
    return a


def paged(B=2, pages=32, page_size=256, max_pages=4):
    """Paged decode: B sequences of one query, pools [pages, page_size, 2, 64], kv_lens set."""
    a = V2(B=B, Sq=1, Hq=8, Hkv=2)
    a.k[3:] = contiguous(pages, page_size, 2, 64)
    a.v[3:] = contiguous(pages, page_size, 2, 64)
    a.kv_lens = A[5]
    a.paged = [A[6], max_pages, max_pages]
    return a


def paged_varlen():
    """Chunked prefill over a paged cache: 3 sequences packed in 10 query rows."""
    a = paged(B=1, page_size=16)
    a.q[3:] = contiguous(1, 10, 8, 64)
    a.o[3:] = contiguous(1, 10, 8, 64)
    a.varlen = [A[7], 0, 3, 4, 64]
    return a


def with_fields(a, **fields):
    for name, value in fields.items():
        setattr(a, name, value)
    return a


c2 = "fuzz_c_abi_v2"
write(c2, "valid_gqa_f16", V2().bytes())
write(c2, "valid_every_option_bf16_sm90a", with_fields(every_option(BF16), arch=b"sm_90a").bytes())
write(c2, "valid_every_option_f32_sm86", with_fields(every_option(F32), arch=b"sm_86").bytes())
write(c2, "valid_paged_decode", paged().bytes())
write(c2, "valid_paged_varlen", paged_varlen().bytes())
# A caller built against a newer header: zeros past the known struct pass, a set byte does not.
write(c2, "valid_newer_caller_zero_tail", with_fields(V2(), struct_size=V2_SIZEOF + 8).bytes())
write(c2, "newer_caller_field_set", with_fields(V2(), struct_size=V2_SIZEOF + 8, tail=b"\0\0\0\0\x05").bytes())
for name, size in [("0", 0), ("8", 8), ("one_short", V2_SIZE - 1), ("4096", 4096), ("4097", 4097), ("2p31", 2**31),
                   ("u32_max", 2**32 - 1)]:
    write(c2, "struct_size_" + name, with_fields(V2(), struct_size=size).bytes())
for name, version in [("0", 0), ("1", 1), ("3", 3), ("2p31", 2**31), ("u32_max", 2**32 - 1)]:
    write(c2, "abi_version_" + name, with_fields(V2(), abi_version=version).bytes())
# Issue 21 G1: max_pages = table_stride = 2^56 made max_pages * page_size wrap to 0 (UBSan: signed
# overflow); the call was accepted and a kernel compiled.
write(c2, "issue21_g1_paged_max_pages_2p56", paged(max_pages=2**56).bytes())
# Issue 21 G6: errors that named another field than the one set.
write(c2, "issue21_g6_page_size_2p31", paged(page_size=2**31).bytes())
a = paged_varlen()
a.varlen[2] = -1
write(c2, "issue21_g6_paged_varlen_batch_minus_1", a.bytes())


def set_path(a, path, value):
    """Sets a field by path: "varlen.2" is the third field of varlen, "k.3.1" k's shape[1]."""
    parts = path.split(".")
    target = a
    for p in parts[:-1]:
        target = getattr(target, p) if isinstance(target, V2) else target[int(p)]
    last = parts[-1]
    if isinstance(target, V2):
        setattr(target, last, value)
    else:
        target[int(last)] = value


# Each integer field at each boundary, the rest valid: (seed base, field path, name).
FIELDS = [(every_option, "varlen.2", "varlen.batch"), (every_option, "varlen.3", "varlen.max_seqlen_q"),
          (every_option, "varlen.4", "varlen.max_seqlen_k"), (every_option, "window.0", "window.left"),
          (every_option, "window.1", "window.right"), (every_option, "alibi.1", "alibi.batch_stride"),
          (paged, "paged.1", "paged.table_stride"), (paged, "paged.2", "paged.max_pages"),
          (paged, "k.3.0", "paged_k.shape0_pages"), (paged, "k.3.1", "paged_k.shape1_page_size"),
          (paged_varlen, "varlen.2", "paged_varlen.batch"), (paged_varlen, "varlen.4", "paged_varlen.max_seqlen_k")]
FIELDS += [(V2, "%s.3.%d" % (t, i), "%s.shape%d" % (t, i)) for t in "qk" for i in range(4)]
for make, path, name in FIELDS:
    for label, value in BOUNDARIES.items():
        a = make()
        set_path(a, path, value)
        if path == "paged.2":  # the table stride follows, as in the G1 reproducer
            a.paged[1] = max(value, 1)
        write(c2, "boundary_%s_%s" % (name, label), a.bytes())
# 32-bit fields: the enums and a tensor's reserved word.
for label, value in [("-1", -1), ("2", 2), ("2p31_minus_1", 2**31 - 1), ("i32_min", -2**31)]:
    for path, name in [("mask", "mask"), ("fp32_math", "fp32_math"), ("q.1", "q.dtype"), ("q.2", "q.reserved")]:
        a = every_option()
        set_path(a, path, value)
        write(c2, "boundary32_%s_%s" % (name, label), a.bytes())
for label, value in [("nan", float("nan")), ("inf", float("inf")), ("-1", -1.0), ("denormal", 1e-45)]:
    for name in ["scale", "softcap"]:
        write(c2, "float_%s_%s" % (name, label), with_fields(every_option(), **{name: value}).bytes())
# Device arrays the host never reads: misaligned, onto o (which the kernel writes), at the top of memory.
for name in ["sinks", "kv_lens"]:
    for label, value in [("misaligned", A[6] + 1), ("onto_o", A[4]), ("top_of_memory", 2**64 - 4)]:
        write(c2, "pointer_%s_%s" % (name, label), with_fields(every_option(), **{name: value}).bytes())

# --- fuzz_c_abi_backward: flashjit_backward_args_v1 bytes, the forward's (as above), the arch, a tail
BWD_SIZE, ABI_BWD = 368, 5  # sizeof(flashjit_backward_args_v1), the ABI version that added it
G = [0x7E0000000000 + (i << 32) for i in range(8)]  # the gradients' fake device addresses, apart from A


def like(t, addr):
    """A gradient view of tensor t: its dtype and shape, contiguous, at addr."""
    return [addr, t[1], 0, list(t[3]), list(t[4])]


class Bwd:
    """One flashjit_backward_args_v1, its forward (a V2, None: a null pointer), gradients like q, k, v, o."""

    def __init__(self, forward=None):
        f = forward if forward is not None else with_fields(V2(), lse=(A[7], (2, 8, 100)))
        f.struct_size = V2_SIZEOF
        self.forward = f
        self.struct_size, self.abi_version = BWD_SIZE, ABI_BWD
        self.dout, self.dq, self.dk, self.dv = (like(t, G[i]) for i, t in enumerate((f.o, f.q, f.k, f.v)))
        self.dsinks = G[4] if f.sinks else 0
        self.flags = self.reserved = 0
        self.workspace = self.workspace_bytes = 0
        self.arch, self.tail = b"", b""

    def bytes(self):
        out = struct.pack("<IIQ", self.struct_size & 0xFFFFFFFF, self.abi_version & 0xFFFFFFFF,
                          1 if self.forward is not None else 0)
        out += b"".join(V2._tensor(t) for t in (self.dout, self.dq, self.dk, self.dv))
        out += struct.pack("<QIIQQ", self.dsinks, self.flags, self.reserved, self.workspace, self.workspace_bytes)
        assert len(out) == BWD_SIZE
        if self.forward is not None:
            out += self.forward.bytes()
        if self.arch or self.tail:
            out += self.arch + b"\0" + self.tail
        return out


def bwd_with(**fields):
    return with_fields(Bwd(), **fields)


cb = "fuzz_c_abi_backward"
write(cb, "valid_gqa_f16", Bwd().bytes())
write(cb, "valid_causal_bf16_sm90a",
      with_fields(Bwd(with_fields(V2(BF16), mask=1, lse=(A[7], (2, 8, 100)))), arch=b"sm_90a").bytes())
# Varlen, causal with a window, softcap, ALiBi, sinks with dsinks, the LSE: every feature the backward serves.
write(cb, "valid_every_feature_bf16", Bwd(every_option(BF16)).bytes())
write(cb, "valid_kv_lens_head_dim_40", Bwd(with_fields(V2(D=40), kv_lens=A[5], lse=(A[7], (2, 8, 100)))).bytes())
b_ = Bwd()
b_.dq[4] = [100 * 8 * 64, 64, 100 * 64, 1]  # dq stored [B, H, S, D]
write(cb, "valid_dq_bhsd_strides", b_.bytes())
write(cb, "valid_caller_workspace", bwd_with(workspace=G[5], workspace_bytes=1 << 20).bytes())
write(cb, "valid_empty_batch", Bwd(with_fields(V2(B=0), lse=(A[7], (0, 8, 100)))).bytes())
write(cb, "valid_newer_caller_zero_tail", bwd_with(struct_size=BWD_SIZE + 8).bytes())
write(cb, "newer_caller_field_set", bwd_with(struct_size=BWD_SIZE + 8, tail=b"\0\0\0\0\x05").bytes())
write(cb, "forward_null", bwd_with(forward=None).bytes())  # the pointer's bit clear: no struct follows
write(cb, "forward_without_lse", Bwd(V2()).bytes())
write(cb, "forward_workspace_set", Bwd(with_fields(V2(), lse=(A[7], (2, 8, 100)), workspace=G[5], workspace_bytes=4096)).bytes())
for name, size in [("0", 0), ("one_short", BWD_SIZE - 1), ("4096", 4096), ("4097", 4097), ("u32_max", 2**32 - 1)]:
    write(cb, "struct_size_" + name, bwd_with(struct_size=size).bytes())
for name, version in [("0", 0), ("4", 4), ("u32_max", 2**32 - 1)]:
    write(cb, "abi_version_" + name, bwd_with(abi_version=version).bytes())
for name, flags in [("deterministic", 1), ("unknown_bit", 2), ("all", 2**32 - 1)]:
    write(cb, "flags_" + name, bwd_with(flags=flags).bytes())
write(cb, "reserved_set", bwd_with(reserved=1).bytes())
write(cb, "workspace_misaligned", bwd_with(workspace=G[5] + 128, workspace_bytes=4096).bytes())
write(cb, "workspace_bytes_without_data", bwd_with(workspace_bytes=4096).bytes())
write(cb, "dsinks_without_sinks", bwd_with(dsinks=G[4]).bytes())
for label, value in [("onto_sinks", None), ("misaligned", G[4] + 1), ("top_of_memory", 2**64 - 4), ("onto_dq", G[1])]:
    b_ = Bwd(every_option())
    b_.dsinks = b_.forward.sinks if value is None else value
    write(cb, "dsinks_" + label, b_.bytes())
# Gradients against their tensors and each other: shapes, dtypes, strides, overlaps, wrapping.
for grad, index, value, name in [("dq", 3, [2, 100, 8, 32], "dq_shape_head_dim"), ("dk", 3, [2, 121, 2, 64], "dk_shape_seq"),
                                 ("dout", 1, BF16, "dout_dtype"), ("dv", 4, [15360, 128, 64, -1], "dv_negative_stride"),
                                 ("dq", 4, [0, 0, 0, 0], "dq_stride_zero"), ("dq", 0, A[1], "dq_onto_q"),
                                 ("dk", 0, G[3], "dk_onto_dv"), ("dv", 0, A[4], "dv_onto_o"), ("dq", 0, A[7], "dq_onto_lse"),
                                 ("dk", 0, G[0], "dk_onto_dout"), ("dq", 0, 2**64 - 2, "dq_wraps"),
                                 ("dq", 0, G[1] + 1, "dq_misaligned")]:
    b_ = Bwd()
    getattr(b_, grad)[index] = value
    write(cb, "grad_" + name, b_.bytes())
# The small arrays the kernels read, placed onto a gradient they write.
for array, name in [("kv_lens", "kv_lens"), ("sinks", "sinks")]:
    for grad in ["dq", "dk"]:
        b_ = Bwd(with_fields(every_option(), kv_lens=A[5]))
        setattr(b_.forward, array, getattr(b_, grad)[0])
        write(cb, "array_%s_onto_%s" % (name, grad), b_.bytes())
b_ = Bwd(every_option())
b_.forward.varlen[0] = b_.dq[0]
write(cb, "array_cu_seqlens_q_onto_dq", b_.bytes())
b_ = Bwd(every_option())
b_.forward.alibi[0] = b_.dv[0]
write(cb, "array_alibi_slopes_onto_dv", b_.bytes())
# What the backward does not serve yet: refused with UNSUPPORTED by the family, after validation.
write(cb, "unsupported_f32", Bwd(with_fields(V2(F32), lse=(A[7], (2, 8, 100)))).bytes())
write(cb, "unsupported_head_dim_192", Bwd(with_fields(V2(D=192), lse=(A[7], (2, 8, 100)))).bytes())
write(cb, "unsupported_paged", Bwd(with_fields(paged(), lse=(A[7], (2, 8, 1)))).bytes())
write(cb, "unsupported_kv_starts", Bwd(with_fields(V2(), kv_lens=A[5], kv_starts=A[6], lse=(A[7], (2, 8, 100)))).bytes())
write(cb, "arch_sm75", bwd_with(arch=b"sm_75").bytes())
write(cb, "arch_escape_bytes", bwd_with(arch=b"sm_\x1b]0;pwned\x07\xff").bytes())
for field_path, name in [("q.3.0", "batch"), ("q.3.1", "seq_q"), ("k.3.1", "seq_k"), ("q.3.2", "heads_q")]:
    for label in ["-1", "2p31", "i64_max"]:
        f = with_fields(V2(), lse=(A[7], (2, 8, 100)))
        set_path(f, field_path, BOUNDARIES[label])
        write(cb, "boundary_%s_%s" % (name, label), Bwd(f).bytes())

# --- fuzz_bundle_import: flags byte (1: repair checksums) + bundle bytes ----------------------
REPAIR = b"\x01"
AS_GIVEN = b"\x00"
HASH_A = "0123456789abcdef0123456789abcdef"
HASH_B = "fedcba9876543210fedcba9876543210"


def field(s):
    s = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return struct.pack("<H", len(s)) + s


def record(arch, name, content_hash, payload, size=None):
    size = len(payload) if size is None else size
    return b"\x01" + field(arch) + field(name) + field(content_hash) + struct.pack("<QQ", size, 0) + payload


def bundle(*records, count=None, version=1, trailing=b""):
    count = len(records) if count is None else count
    return b"FJKBUNDL" + struct.pack("<I", version) + b"".join(records) + b"\x00" + struct.pack("<QQ", count, 0) + trailing


ra = record("sm_80", "fa2_sm80-f16-d64-none-v8-m128n64w4s2", HASH_A, b"cubin bytes of a")
rb = record("sm_90a", "fa2_sm80-bf16-d128-causal-v8-m128n64w4s2", HASH_B, b"cubin bytes of b" * 4)
b = "fuzz_bundle_import"
write(b, "valid_two_entries", REPAIR + bundle(ra, rb))
write(b, "valid_empty", REPAIR + bundle())
write(b, "checksums_wrong", AS_GIVEN + bundle(ra, rb))
write(b, "not_a_bundle", AS_GIVEN + b'{"this": "is json, not a bundle"}\n')
write(b, "newer_version", REPAIR + bundle(ra, version=2))
write(b, "truncated_in_record", REPAIR + bundle(ra, rb)[:60])
write(b, "unknown_tag", REPAIR + b"FJKBUNDL" + struct.pack("<I", 1) + b"\x07" + b"\x00" * 16)
write(b, "field_too_long", REPAIR + bundle(record("sm_80", "n" * 2000, HASH_A, b"x")))
write(b, "payload_size_2p63", REPAIR + bundle(record("sm_80", "big", HASH_A, b"x", size=2**63)))
write(b, "count_mismatch", REPAIR + bundle(ra, count=5))
write(b, "trailing_bytes", REPAIR + bundle(ra, trailing=b"junk"))
write(b, "duplicate_key", REPAIR + bundle(ra, ra))
write(b, "name_escape_bytes", REPAIR + bundle(record("sm_80", "x\x1b]0;pwned\x07", HASH_A, b"x")))
write(b, "name_path_traversal", REPAIR + bundle(record("sm_80", "../../.bashrc", HASH_A, b"x")))
write(b, "arch_invalid_utf8", REPAIR + bundle(record(b"sm_\xff\xfe", "k", HASH_A, b"x")))
write(b, "hash_uppercase", REPAIR + bundle(record("sm_80", "k", HASH_A.upper(), b"x")))
# Two keys sharing the name and the first 16 hex digits of the hash: one file name (issue 6, defect 9).
write(b, "same_file_two_keys", REPAIR + bundle(record("sm_80", "k", HASH_A, b"first"),
                                              record("sm_80", "k", HASH_A[:16] + HASH_B[16:], b"second")))

# --- fuzz_variant_json and fuzz_workload_json: JSON text, one (name, text) pair a seed -------------
with open(os.path.join(HERE, "..", "..", "bench", "workloads", "prefill_grid_f16.json"), "rb") as f:
    PREFILL_GRID = f.read()
JSON_SEEDS = {
    "fuzz_variant_json": [
        ("basic", '[{"dtype": "bf16", "head_dim": 128, "mask": "causal", "lse": true},\n'
                  ' {"head_dim": 64, "head_dim_v": 32, "gqa": true, "tiling": "m64n64w4s2", "vec": 4}]\n'),
        ("wrapped", '{"variants": [{"head_dim": 64, "dtype": "tf32"}]}'),
        ("issue6_defect6_head_dim_2p32_plus_64", '[{"head_dim": 4294967360}]'),
        ("issue6_defect6_vec_2p32_plus_8", '[{"head_dim": 64, "vec": 4294967304}]'),
        ("head_dim_u64_max", '[{"head_dim": 18446744073709551615}]'),
        ("head_dim_float", '[{"head_dim": 64.0}]'),
        ("head_dim_string", '[{"head_dim": "64"}]'),
        ("vec_not_dividing", '[{"head_dim": 36, "vec": 8}]'),
        ("tiling_overflow", '[{"head_dim": 64, "tiling": "m99999999999n64w4s2"}]'),
        ("unknown_field_escape", '[{"head_dim": 64, "\\u001b]0;x\\u0007": 1}]'),
        ("dtype_escape", '[{"head_dim": 64, "dtype": "f\\u001b[2J\\u202e"}]'),
        ("invalid_utf8", b'[{"head_dim": 64, "dtype": "\xff\xfe"}]'),
        ("issue6_defect3_nested_1000", "[" * 1000 + "]" * 1000),
        ("nested_64_ok", "[" * 63 + '{"head_dim": 64}' + "]" * 63),
        ("brackets_in_strings", '[{"head_dim": 64, "tiling": "' + "[{" * 100 + '\\""}]'),
    ],
    "fuzz_workload_json": [
        ("prefill_grid_f16", PREFILL_GRID),
        ("gqa_lse_defaults", '[{"dtype": "bf16", "head_dim": 128, "gqa": true, "lse": true, "seqlen_q": 512}]'),
        ("seqlen_q_missing", '[{"head_dim": 64}]'),
        ("seqlen_q_u64_max", '[{"head_dim": 64, "seqlen_q": 18446744073709551615}]'),
        ("seqlen_k_2p63", '[{"head_dim": 64, "seqlen_q": 1024, "seqlen_k": 9223372036854775808}]'),
        ("seqlen_q_float", '[{"head_dim": 64, "seqlen_q": 1e3}]'),
        ("batch_x_heads_negative", '[{"head_dim": 64, "seqlen_q": 1024, "batch_x_heads": -1}]'),
        ("issue6_defect6_head_dim_2p32_plus_64", '[{"head_dim": 4294967360, "seqlen_q": 1024}]'),
        # Issue 6, defect 3: the reproducer itself, nested 200,000 deep (400 KB; git stores it in ~1 KB).
        ("issue6_defect3_nested_200000", "[" * 200000 + "]" * 200000),
        ("nested_objects", "[" + '{"a":' * 1000 + "1" + "}" * 1000 + "]"),
    ],
}
for target, seeds in JSON_SEEDS.items():
    for name, text in seeds:
        write(target, name, text)

# --- fuzz_env_values: parser byte + value ------------------------------------------------------
BYTE_SIZE, TUNE_MODE, ARCH, TILING, DTYPE_MASK, PRINTABLE = (bytes([i]) for i in range(6))
e = "fuzz_env_values"
for name, value in [("byte_size_512M", b"512M"), ("byte_size_fraction", b"1.5GiB"), ("byte_size_plain", b"1048576"),
                    ("byte_size_2p64_minus_1", b"18446744073709551615"),
                    # Found by this target: an odd count above 2^63 came back one larger.
                    ("byte_size_odd_above_2p63", b"9999999999999999999"), ("byte_size_over_2p64", b"99999999999T"),
                    ("byte_size_near_2p64", b"16777215.9999999999T"), ("byte_size_escape", b"2\x1b[2JG")]:
    write(e, name, BYTE_SIZE + value)
for name, value in [("tune_mode_first_use", b"First-Use"), ("tune_mode_typo", b"offlien\xff")]:
    write(e, name, TUNE_MODE + value)
for name, value in [("arch_sm90a", b"sm_90a"), ("arch_four_digits", b"sm_1000f"), ("arch_five_digits", b"sm_12345"),
                    ("arch_escape", b"sm_\x1b[2J")]:
    write(e, name, ARCH + value)
for name, value in [("tiling_ok", b"m128n64w4s2"), ("tiling_overflow", b"m99999999999n64w4s2"),
                    ("tiling_sign", b"m-64n64w4s2"), ("tiling_leading_zero", b"m064n64w4s2"),
                    # Issue 21, G6: 2^32 + 128 in an fa2 form given to decode_sm80 (or to no family),
                    # 2^32 + 1 in decode's own form, and letters of no family.
                    ("issue21_G6_fa2_form_2p32_plus_128", b"m4294967424n64w4s2"),
                    ("issue21_G6_decode_form_2p32_plus_1", b"r4294967297w4k16s2p0"),
                    ("tiling_decode_ok", b"r1w8k16s2p0"), ("tiling_fa3_ok", b"g2n176s2p0c1"),
                    # Found by this target: a backward tiling, which the check once missed.
                    ("tiling_bwd_ok", b"m128n64w4q2"),
                    ("tiling_no_family", b"x1y2")]:
    write(e, name, TILING + value)
write(e, "dtype_bf16", DTYPE_MASK + b"bf16")
write(e, "printable_escapes_and_utf8", PRINTABLE + b"\x10caf\xc3\xa9 \x1b[31m\xe2\x80\xae\xf0\x9f\x98\x80\xc0\xaf\\")
