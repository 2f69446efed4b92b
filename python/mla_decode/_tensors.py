"""What the package needs to know about a caller's tensor: torch (any version) or NumPy.

torch is never imported here: a torch tensor can only be passed once the caller has imported
torch, so sys.modules tells whether an argument may be one. fp8 and bf16 arrive either as the
real dtypes or as raw bits in same-width integers (NumPy has neither type; torch 1.13 has no fp8).

A Tensor is made for every tensor argument of every call, so it reads only what every call
needs (dtype name, shape, contiguity, device; the address of a torch tensor) and the rest when
asked (strides, a NumPy array's address, sizes); dtype names and device names are looked up in
tables filled on first sight (numpy's dtype.name alone costs ~1.5 us).
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
_KINDS = {("torch", FP8): _TORCH_FP8, ("torch", BF16): _TORCH_BF16,
          ("numpy", FP8): _NUMPY_FP8, ("numpy", BF16): _NUMPY_BF16}
# The e4m3 flavour each target's fp8 instructions read (docs/problem-format.md).
FP8_FLAVOUR = {"gfx942": "float8_e4m3fnuz", "gfx950": "float8_e4m3fn"}

_numpy_names = {}     # numpy dtype -> (name, FP8 / BF16 / None: what element() takes it for)
_torch_names = {}     # torch dtype -> (name, FP8 / BF16 / None)
_element_tables = {}  # (array kind, allowed kinds) -> {dtype name: kind}
_cuda_names = {}      # device index -> "cuda:N"


def _torch():
    return sys.modules.get("torch")


def _name_of(dtype, torch_dtype):
    """(name, bits) of a dtype not seen before: ("float8_e4m3fn", FP8), ("float32", None), remembered."""
    if torch_dtype:
        name = str(dtype).replace("torch.", "")
        entry = _torch_names[dtype] = (name, _TORCH_FP8.get(name) or _TORCH_BF16.get(name))
    else:
        name = dtype.name
        entry = _numpy_names[dtype] = (name, _NUMPY_FP8.get(name) or _NUMPY_BF16.get(name))
    return entry


def _cuda_name(index):
    name = _cuda_names[index] = f"cuda:{index}"
    return name


def _element_table(kind, allowed):
    table = _element_tables.get((kind, allowed))
    if table is None:
        table = {}
        for a in allowed:
            table.update(_KINDS[(kind, a)])
        _element_tables[(kind, allowed)] = table
    return table


class Tensor:
    """A caller's array: kind "torch" or "numpy", its dtype name, shape, device and address."""

    __slots__ = ("obj", "name", "kind", "dtype", "bits", "shape", "contiguous", "device", "_address")

    def __init__(self, obj, name):
        self.obj, self.name = obj, name
        if isinstance(obj, np.ndarray):
            self.kind = "numpy"
            dtype = obj.dtype
            self.dtype, self.bits = _numpy_names.get(dtype) or _name_of(dtype, False)
            self.shape = obj.shape
            self.contiguous = obj.flags.c_contiguous
            self.device = "cpu"
            self._address = None  # obj.ctypes.data costs ~0.7 us: read when asked
            return
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor or a numpy.ndarray, got {type(obj).__name__}")
        self.kind = "torch"
        dtype = obj.dtype
        self.dtype, self.bits = _torch_names.get(dtype) or _name_of(dtype, True)
        self.shape = obj.shape  # a torch.Size: a tuple
        self.contiguous = obj.is_contiguous()
        if obj.is_cuda:  # ROCm tensors are "cuda" tensors
            self.device = _cuda_names.get(obj.get_device()) or _cuda_name(obj.get_device())
        else:
            device = obj.device
            self.device = "cpu" if device.type == "cpu" else f"{device.type}:{device.index or 0}"
        self._address = obj.data_ptr()

    @property
    def address(self):
        if self._address is None:
            self._address = self.obj.ctypes.data
        return self._address

    @property
    def strides(self):
        """Strides in elements."""
        if self.kind == "numpy":
            return tuple(s // self.obj.itemsize for s in self.obj.strides)
        return tuple(self.obj.stride())

    @property
    def nbytes(self):
        if self.kind == "numpy":
            return self.obj.nbytes
        return self.obj.numel() * self.obj.element_size()

    @property
    def device_index(self):
        return 0 if self.device == "cpu" else int(self.device.rsplit(":", 1)[1])

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
        """FP8 / BF16 / ... for the dtype, or TypeError naming the dtypes `allowed` (a tuple) takes."""
        if self.bits in allowed:
            return self.bits
        table = _element_table(self.kind, allowed)
        kind = table.get(self.dtype)
        if kind is None:
            raise TypeError(f"{self.name}: dtype {self.kind}.{self.dtype} is not allowed; {self.kind} takes "
                            f"{', '.join(sorted(table))} here ({' or '.join(allowed)}"
                            f"{'; fp8 as raw bits in uint8' if 'fp8' in allowed else ''}"
                            f"{'; bf16 as raw bits in uint16/int16' if 'bf16' in allowed else ''})")
        return kind

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


_INT32 = np.dtype(np.int32)


def host_int32(obj, name):
    """obj as a 1-D NumPy int32 array on the host: a plain one as it is (the engines' host copies:
    ~0.1 us), anything else through Tensor (TypeError / ValueError naming `name`)."""
    if type(obj) is np.ndarray and obj.dtype is _INT32 and obj.ndim == 1:
        return obj
    return Tensor(obj, name).host_int32()


def empty_like_kind(like, shape, dtype_name):
    """A new float32 array of `shape` of the same kind and device as `like` (for lse)."""
    if like.kind == "numpy":
        return np.empty(shape, dtype=dtype_name)
    torch = _torch()
    return torch.empty(shape, dtype=getattr(torch, dtype_name), device=like.obj.device)


def torch_tensor(obj, name, contract):
    """obj as a checked Tensor that must be a torch.Tensor (the `contract` peer's, e.g. "vLLM's")."""
    t = Tensor(obj, name)
    if t.kind != "torch":
        raise TypeError(f"{name}: expected a torch.Tensor ({contract} contract), got a NumPy array")
    return t


def check_devices(tensors):
    """The one device of `tensors` ("cpu" or "cuda:N"), or ValueError naming the odd one out; a GPU
    one needs a ROCm torch."""
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise ValueError(f"{t.name}: on {t.device}, but {tensors[0].name} is on {device}; all tensors must be on "
                             f"one device")
    if device != "cpu" and getattr(_torch().version, "hip", None) is None:
        raise ValueError(f"{tensors[0].name}: on {device}, but this torch is not a ROCm build; the kernels need an AMD "
                         f"GPU (or pass CPU tensors for the emulator)")
    return device
