#!/usr/bin/env python3
"""Registers, local frame (spills and stack arrays) and static shared memory of each kernel in a
cubin or a flashjit cache entry (.fjk: a header, then the cubin), read from the ELF with no GPU
and no cuobjdump: the global .nv.info section holds EIATTR_REGCOUNT and EIATTR_FRAME_SIZE per
kernel symbol, and a kernel's .text section names its symbol in sh_info.
    scripts/cubin_resources.py ENTRY.fjk [...]"""
import struct
import sys

EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
EIFMT_NVAL, EIFMT_HVAL, EIFMT_SVAL = 0x01, 0x03, 0x04


def sections(path):
    d = open(path, "rb").read()
    d = d[d.find(b"\x7fELF"):]
    shoff = struct.unpack_from("<Q", d, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", d, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", d, shoff + i * shentsize) for i in range(shnum)]
    names = hdrs[shstrndx][4]
    out = {}
    for h in hdrs:
        name = d[names + h[0]:d.index(b"\0", names + h[0])].decode()
        out[name] = (h, d[h[4]:h[4] + h[5]] if h[1] != 8 else b"")
    return out


def attrs(blob):
    i = 0
    while i + 2 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        i += 2
        if fmt == EIFMT_NVAL:
            yield attr, b""
        elif fmt == EIFMT_HVAL:
            yield attr, blob[i:i + 2]
            i += 2
        elif fmt == EIFMT_SVAL:
            size = struct.unpack_from("<H", blob, i)[0]
            yield attr, blob[i + 2:i + 2 + size]
            i += 2 + size
        else:
            return


def main():
    for path in sys.argv[1:]:
        secs = sections(path)
        per_symbol = {}  # symbol index -> {attribute: value}
        for attr, val in attrs(secs.get(".nv.info", (None, b""))[1]):
            if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(val) >= 8:
                sym, value = struct.unpack_from("<II", val, 0)
                per_symbol.setdefault(sym, {})[attr] = value
        for name, (h, _) in secs.items():
            if not name.startswith(".text."):
                continue
            fn = name[len(".text."):]
            found = per_symbol.get(h[7], {})
            regs, frame = found.get(EIATTR_REGCOUNT, -1), found.get(EIATTR_FRAME_SIZE, -1)
            shared = secs[".nv.shared." + fn][0][5] if ".nv.shared." + fn in secs else 0
            print("%s  %s: %d registers, %d bytes local frame, %d bytes static shared" % (path.split("/")[-1][:60], fn, regs, frame, shared))


if __name__ == "__main__":
    main()
