"""What the package needs to know about a caller's tensor: torch (any version) or NumPy.

torch is never imported here: a torch tensor can only be passed once the caller has imported
torch, so sys.modules tells whether an argument may be one. fp8 and bf16 arrive either as the
real dtypes or as raw bits in same-width integers (NumPy has neither type; torch 1.13 has no fp8).
"""
import sys

import numpy as np

FP8 = "fp8"
BF16 = "bf16"

# dtype names (str(dtype) without "torch.") -> what the bits are.
_TORCH_FP8 = {"uint8": FP8, "float8_e4m3fn": FP8, "float8_e4m3fnuz": FP8}
_TORCH_BF16 = {"bfloat16": BF16, "int16": BF16, "uint16": BF16}
_NUMPY_FP8 = {"uint8": FP8}
_NUMPY_BF16 = {"uint16": BF16, "int16": BF16}
# The e4m3 flavour each target's fp8 instructions read (docs/problem-format.md).
FP8_FLAVOUR = {"gfx942": "float8_e4m3fnuz", "gfx950": "float8_e4m3fn"}


def _torch():
    return sys.modules.get("torch")


class Tensor:
    """A caller's array: kind "torch" or "numpy", its dtype name, shape, device and address."""

    def __init__(self, obj, name):
        self.obj, self.name = obj, name
        torch = _torch()
        if torch is not None and isinstance(obj, torch.Tensor):
            self.kind = "torch"
            self.dtype = str(obj.dtype).replace("torch.", "")
            self.shape = tuple(obj.shape)
            self.contiguous = obj.is_contiguous()
            self.strides = tuple(obj.stride())
            self.device = "cpu" if obj.device.type == "cpu" else f"{obj.device.type}:{obj.device.index or 0}"
            self.device_index = obj.device.index or 0
            self.address = obj.data_ptr()
            self.nbytes = obj.numel() * obj.element_size()
        elif isinstance(obj, np.ndarray):
            self.kind = "numpy"
            self.dtype = obj.dtype.name
            self.shape = tuple(obj.shape)
            self.contiguous = bool(obj.flags.c_contiguous)
            self.strides = tuple(s // obj.itemsize for s in obj.strides)
            self.device = "cpu"
            self.device_index = 0
            self.address = obj.ctypes.data
            self.nbytes = obj.nbytes
        else:
            raise TypeError(f"{name}: expected a torch.Tensor or a numpy.ndarray, got {type(obj).__name__}")

    @property
    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def on_cpu(self):
        return self.device == "cpu"

    def element(self, allowed):
        """FP8 / BF16 / ... for the dtype, or TypeError naming the dtypes `allowed` takes."""
        table = {}
        for kind in allowed:
            table.update({"fp8": _TORCH_FP8 if self.kind == "torch" else _NUMPY_FP8,
                          "bf16": _TORCH_BF16 if self.kind == "torch" else _NUMPY_BF16}[kind])
        if self.dtype not in table:
            raise TypeError(f"{self.name}: dtype {self.kind}.{self.dtype} is not allowed; {self.kind} takes "
                            f"{', '.join(sorted(table))} here ({' or '.join(allowed)}"
                            f"{'; fp8 as raw bits in uint8' if 'fp8' in allowed else ''}"
                            f"{'; bf16 as raw bits in uint16/int16' if 'bf16' in allowed else ''})")
        return table[self.dtype]

    def require_dtype(self, *names):
        if self.dtype not in names:
            raise TypeError(f"{self.name}: dtype {self.kind}.{self.dtype} is not allowed; expected {' or '.join(names)}")

    def require_contiguous(self):
        # The kernels read dense row-major tensors; a strided view would be read wrongly.
        if not self.contiguous:
            raise ValueError(f"{self.name}: must be contiguous (row-major), got shape {list(self.shape)} with "
                             f"strides {list(self.strides)} (elements); call .contiguous() / "
                             f"numpy.ascontiguousarray() first")

    def require_ndim(self, ndim, meaning):
        if len(self.shape) != ndim:
            raise ValueError(f"{self.name}: expected {ndim} dimensions {meaning}, got shape {list(self.shape)}")

    def host_int32(self):
        """A NumPy int32 copy on the host (synchronises for a GPU tensor)."""
        self.require_dtype("int32")
        if len(self.shape) != 1:
            raise ValueError(f"{self.name}: expected a 1-D int32 tensor, got shape {list(self.shape)}")
        if self.kind == "numpy":
            return self.obj
        return self.obj.detach().cpu().numpy()


def empty_like_kind(like, shape, dtype_name):
    """A new float32 array of `shape` of the same kind and device as `like` (for lse)."""
    if like.kind == "numpy":
        return np.empty(shape, dtype=dtype_name)
    torch = _torch()
    return torch.empty(shape, dtype=getattr(torch, dtype_name), device=like.obj.device)
