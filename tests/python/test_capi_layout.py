"""The ctypes mirror of runtime/mla_runtime.h (python/mla_decode/_capi.py) against the header itself:
a C program generated from the ctypes declarations, compiled with the project's C compiler against
the header, prints every struct's size and every field's offset and size, and every MLA_* constant
the module defines; each must equal what ctypes computes. A field the header lacks fails to
compile; a field ctypes lacks changes the struct's size or the next offset; a renumbered enum
changes a value. So the hand-written mirror cannot drift from the ABI unnoticed.

Run by ctest ("python: mla_decode", which discovers test_*.py here) with MLA_C_COMPILER and
MLA_SOURCE_DIR set.
"""
import ctypes
import os
import subprocess
import tempfile
import unittest

from mla_decode import _capi


def mirrored_structs():
    return {name: cls for name, cls in vars(_capi).items()
            if isinstance(cls, type) and issubclass(cls, ctypes.Structure) and cls is not ctypes.Structure}


def mirrored_constants():
    return {name: value for name, value in vars(_capi).items() if name.startswith("MLA_") and isinstance(value, int)}


def c_program(structs, constants):
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "runtime/mla_runtime.h"', "int main(void) {"]
    for name, cls in sorted(structs.items()):
        lines.append(f'  printf("struct {name} %zu\\n", sizeof(struct {name}));')
        for field, _ in cls._fields_:
            lines.append(f'  printf("field {name}.{field} %zu %zu\\n", offsetof(struct {name}, {field}), '
                         f'sizeof(((struct {name}*)0)->{field}));')
    for name in sorted(constants):
        lines.append(f'  printf("const {name} %lld\\n", (long long)({name}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


class TestCapiLayout(unittest.TestCase):
    def test_ctypes_structs_and_constants_match_the_header(self):
        structs, constants = mirrored_structs(), mirrored_constants()
        self.assertGreaterEqual(len(structs), 7)  # device info, shape, selection, group, plan info, decode / merge args
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
            with open(src, "w") as f:
                f.write(c_program(structs, constants))
            cc = subprocess.run([os.environ["MLA_C_COMPILER"], "-std=c11", "-Wall", "-Werror", "-I",
                                 os.environ["MLA_SOURCE_DIR"], src, "-o", exe], capture_output=True, text=True)
            self.assertEqual(cc.returncode, 0, "the ctypes mirror names something the header lacks:\n" + cc.stderr)
            out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines()
        c = {}
        for line in out:
            kind, name, *values = line.split()
            c[(kind, name)] = [int(v) for v in values]
        for name, cls in structs.items():
            self.assertEqual(ctypes.sizeof(cls), c[("struct", name)][0], f"sizeof(struct {name})")
            for field, ftype in cls._fields_:
                want = c[("field", f"{name}.{field}")]
                got = [getattr(cls, field).offset, ctypes.sizeof(ftype)]
                self.assertEqual(got, want, f"{name}.{field}: (offset, size) ctypes {got}, header {want}")
        for name, value in constants.items():
            self.assertEqual(value, c[("const", name)][0], name)


if __name__ == "__main__":
    unittest.main()
