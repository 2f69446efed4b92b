"""mla_decode_fwd (aiter's signature) and MlaDecodeMetadata over the C API.

Where tensors run: CPU torch tensors and NumPy arrays go to the emulator backend (the exact code
objects on the CPU; target $MLA_EMULATOR_TARGET, default gfx950), torch GPU tensors (ROCm) to the
HIP backend by data_ptr() on the current stream. Catalog: $MLA_CATALOG_DIR, default <repo>/out.
"""
import ctypes
import itertools
import math
import os
import threading
import weakref

import numpy as np

from . import _capi as C
from ._tensors import BF16, FP8, FP8_FLAVOUR, Tensor, empty_like_kind

LATENT_DIM = 512  # v / o head dim (kv_lora_rank)
QK_DIM = 576      # 512 latent + 64 rope
_MLA_DTYPE = {FP8: C.MLA_DTYPE_FP8, BF16: C.MLA_DTYPE_BF16}


# ---- devices and catalogs -------------------------------------------------------------------

class _Runtime:
    """One device + one catalog context. A context is not thread-safe: calls hold `lock`."""

    def __init__(self, backend, ordinal, emulator_target, catalog_dir):
        L = C.lib()
        self.backend = backend
        self.lock = threading.RLock()
        self.dev = ctypes.c_void_p()
        target_arg = emulator_target.encode() if emulator_target else None
        C.check(L.mla_device_open(backend, ordinal, target_arg, ctypes.byref(self.dev)), "mla_device_open")
        info = C.mla_device_info()
        C.check(L.mla_device_get_info(self.dev, ctypes.byref(info)), "mla_device_get_info")
        self.target = info.target.decode()
        self.catalog_dir = catalog_dir
        self.ctx = ctypes.c_void_p()
        C.check(L.mla_context_create(self.dev, catalog_dir.encode(), ctypes.byref(self.ctx)),
                f"mla_context_create({catalog_dir})")
        if self.is_emulator:
            # Page ids are read back and checked before every decode: free on the (synchronous)
            # emulator, and the caller then gets a message instead of an emulator fault.
            C.check(L.mla_context_set_option(self.ctx, C.MLA_OPTION_VALIDATE, 1), "mla_context_set_option")
        self._staging = {}  # emulator: role -> (device address, bytes), grown, never shrunk

    @property
    def is_emulator(self):
        return self.backend == C.MLA_BACKEND_EMULATOR

    def staging(self, role, nbytes):
        """Emulator memory for a host tensor's copy, reused across calls (allocated when it grows)."""
        addr, size = self._staging.get(role, (0, 0))
        if size < nbytes:
            L = C.lib()
            if addr:
                C.check(L.mla_free(self.dev, addr), "mla_free")
            out = ctypes.c_uint64()
            C.check(L.mla_malloc(self.dev, max(nbytes, 1), ctypes.byref(out)), f"mla_malloc({role}, {nbytes})")
            addr, size = out.value, max(nbytes, 1)
            self._staging[role] = (addr, size)
        return addr


_runtimes = {}
_runtimes_lock = threading.Lock()


def _catalog_dir(catalog_dir):
    return catalog_dir or os.environ.get("MLA_CATALOG_DIR") or C.DEFAULT_CATALOG


EMULATOR_TARGETS = ("gfx942", "gfx950")


def _runtime_key(device, catalog_dir=None, emulator_target=None):
    """Everything that decides which runtime (device, target, catalog) a call runs on: the key of
    every Python-side cache (runtimes, the internal metadata of calls without one)."""
    catalog = os.path.abspath(_catalog_dir(catalog_dir))
    if device == "cpu":
        target = emulator_target or os.environ.get("MLA_EMULATOR_TARGET") or "gfx950"
        if target not in EMULATOR_TARGETS:
            source = "emulator_target" if emulator_target else "MLA_EMULATOR_TARGET"
            raise ValueError(f"{source}: got '{target}'; allowed {' or '.join(EMULATOR_TARGETS)}")
        return ("emulator", target, catalog)
    if device.startswith("cuda:"):
        if emulator_target is not None:
            raise ValueError(f"emulator_target: given ('{emulator_target}') for tensors on {device}; it applies to "
                             f"CPU tensors only (a GPU runs its own target)")
        return ("hip", int(device.split(":")[1]), catalog)
    raise ValueError(f"device: '{device}' is not supported; use CPU tensors / NumPy (emulator) or "
                     f"ROCm GPU tensors (HIP)")


def _runtime_for(device, catalog_dir=None, emulator_target=None):
    """The cached runtime of a device: "cpu" (emulator, target emulator_target or
    $MLA_EMULATOR_TARGET or gfx950) or "cuda:N" (HIP device N)."""
    key = _runtime_key(device, catalog_dir, emulator_target)
    if key[0] == "emulator":
        args = (C.MLA_BACKEND_EMULATOR, 0, key[1], key[2])
    else:
        args = (C.MLA_BACKEND_HIP, key[1], None, key[2])
    with _runtimes_lock:
        if key not in _runtimes:
            _runtimes[key] = _Runtime(*args)
            _runtimes[key].key = key
        return _runtimes[key]


def _device_name(device):
    """"cpu", "cuda:N" from a string, a torch.device or None (= cpu)."""
    if device is None:
        return "cpu"
    text = str(device)
    if text == "cuda":
        return "cuda:0"
    return text


# fp8 formats by name: the flavour of e4m3 a tensor's bits are in.
FP8_FORMATS = {"e4m3fnuz": "float8_e4m3fnuz", "e4m3fn": "float8_e4m3fn",
               "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e4m3fn": "float8_e4m3fn"}


def _fp8_format_name(fp8_format):
    """"float8_e4m3fn[uz]" from "e4m3fn[uz]", "float8_e4m3fn[uz]" or a torch dtype; None stays None."""
    if fp8_format is None:
        return None
    text = str(fp8_format).replace("torch.", "")
    if text not in FP8_FORMATS:
        raise ValueError(f"fp8_format: got {fp8_format!r}; allowed 'e4m3fnuz' (gfx942), 'e4m3fn' (gfx950), "
                         f"or the matching torch float8 dtype")
    return FP8_FORMATS[text]


def _check_fp8_flavour(tensors, target, fp8_format):
    """fp8 inputs against the flavour the target's instructions read (gfx942 e4m3fnuz, gfx950
    e4m3fn): a torch float8 dtype must be that flavour; raw uint8 bits are taken to be in
    fp8_format (default: the target's), which must be the target's; q in raw bits on the host is
    also scanned for a byte that is NaN in the target's flavour (the other flavour's -0 or
    +-240/448). Returns nothing; raises TypeError / ValueError naming the argument."""
    want = FP8_FLAVOUR.get(target)
    if want is None:
        return
    given = _fp8_format_name(fp8_format)
    short = {v: k for k, v in FP8_FORMATS.items() if not k.startswith("float8")}
    if given is not None and given != want:
        raise ValueError(f"fp8_format: '{short[given]}', but {target} reads fp8 as {short[want]} "
                         f"(gfx942: e4m3fnuz, gfx950: e4m3fn); convert the values to {short[want]} first "
                         f"(the same bits would be read as other numbers)")
    for t in tensors:
        if t.dtype.startswith("float8") and t.dtype != want:
            raise TypeError(f"{t.name}: dtype torch.{t.dtype}, but {target} reads fp8 as {want}; convert it "
                            f"(.to(torch.float32).to(torch.{want})) or run on the target whose flavour it is")
        if t.name == "q" and t.dtype in ("uint8", "float8_e4m3fn", "float8_e4m3fnuz") and t.on_cpu:
            bits = t.obj.view(np.uint8) if t.kind == "numpy" else t.obj.detach().view(_torch_uint8()).numpy()
            first = _first_nan_byte(bits.reshape(-1), want)
            if first is not None:
                b = int(bits.reshape(-1)[first])
                where = list(np.unravel_index(first, bits.shape))
                other = "e4m3fn" if want == "float8_e4m3fnuz" else "e4m3fnuz"
                raise ValueError(f"q: byte 0x{b:02X} at {where} is NaN in {short[want]}, the fp8 {target} reads, "
                                 f"but a number in {other}: are these {other} bits? Convert them to "
                                 f"{short[want]} (fp8_format names the flavour of raw uint8 bits)")


def _first_nan_byte(flat, flavour):
    """Index of the first byte of flat (uint8) that is NaN in flavour (e4m3fn: 0x7F and 0xFF, all 7
    low bits set; e4m3fnuz: 0x80), or None: numbers in the other flavour, so q holding one is q in
    the other flavour (a NaN is never a valid query). One boolean image of q and .any(): in
    bench/python_host_cost.py ~170 us for K3 pg128 8K x256 (1.8 MB of q), against ~290 us for a
    flatnonzero per byte value and ~260 us for a scan in 64 KiB blocks (its Python loop)."""
    bad = (flat | 0x80) == 0xFF if flavour == "float8_e4m3fn" else flat == 0x80
    return int(np.argmax(bad)) if bad.any() else None


def _torch_uint8():
    return __import__("torch").uint8


def _dtype_name(dtype, name):
    """fp8 / bf16 from "fp8", "bf16", a torch dtype or a NumPy dtype (raw-bit integer types too)."""
    if isinstance(dtype, str) or str(dtype).startswith("torch."):
        text = str(dtype).replace("torch.", "")
    else:
        try:
            text = np.dtype(dtype).name
        except TypeError:
            text = repr(dtype)
    table = {"fp8": FP8, "uint8": FP8, "float8_e4m3fn": FP8, "float8_e4m3fnuz": FP8,
             "bf16": BF16, "bfloat16": BF16, "uint16": BF16, "int16": BF16}
    if text not in table:
        raise TypeError(f"{name}: {dtype!r} is not an MLA dtype; use fp8 (float8_e4m3fn[uz] or uint8 bits) "
                        f"or bf16 (bfloat16 or uint16/int16 bits)")
    return table[text]


# ---- the plan + workspace of one shape at one capacity ----------------------------------------

# Integer handles of live MlaDecodeMetadata objects, for the registered op (ops.py), whose schema
# can carry tensors and scalars only. A handle is never reused in a process (a stale one is an
# error, never another object's plan); the registry holds weak references.
_handles = weakref.WeakValueDictionary()
_handle_counter = itertools.count(1)
_handle_lock = threading.Lock()


def _register(meta):
    with _handle_lock:
        h = next(_handle_counter)
        _handles[h] = meta
        return h


def metadata_from_handle(handle):
    """The live MlaDecodeMetadata of `handle` (its .handle), or ValueError."""
    m = _handles.get(int(handle))
    if m is None or getattr(m, "_plan", None) is None:
        raise ValueError(f"metadata_handle: {handle} names no live MlaDecodeMetadata (closed, collected, or never "
                         f"made in this process); pass the .handle of one, or 0 for none")
    return m


class MlaDecodeMetadata:
    """A plan and its workspace for one decode shape, made once per capacity (aiter's
    get_mla_metadata_info_v1 + buffers); update() plans each step on the host (aiter's
    get_mla_metadata_v1) and uploads the step's tables into the workspace with one copy;
    mla_decode_fwd(..., metadata=m) then only launches kernels (it allocates nothing, copies no
    table and reads no tensor on the host), so it can be captured in a HIP graph once and
    replayed after every update(): the grids depend on the capacity only (plan_info()).

    max_total_tokens bounds the sum of kv lengths of a batch (0: no bound, a larger workspace).
    allow_padding: accept a kernel with more heads / query rows than the shape (MLA_SELECT_ALLOW_PADDING;
    `note` says what was chosen); otherwise a shape without an exact kernel is an MlaInputError.
    emulator_target: for CPU tensors, 'gfx942' or 'gfx950' (default $MLA_EMULATOR_TARGET, else gfx950).
    merge_in_launch: merge the splits inside the decode launch (MLA_OPTION_MERGE 1): one launch per
    layer, no cascades (update() then refuses prefix_groups and detect_shared_prefixes).
    cascades=False: an engine that never shares prefixes (MLA_OPTION_CASCADE 2 at creation): no
    prefix launch, so a layer is 2 launches (decode, reduce) instead of 3; the launches are fixed
    with the plan for graph capture, and with cascades on the prefix kernel is launched every
    layer, with no work in a step without a shared prefix (docs/performance.md, "As the runtime runs
    a layer"). update() then refuses prefix_groups and detect_shared_prefixes.
    .handle: an int naming this object for the registered op (ops.py, metadata_handle=).
    get_mla_metadata_info() / get_mla_metadata() are aiter's names for __init__ / update().
    """

    def __init__(self, max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, page_size=1, return_lse=False,
                 logit_cap=False, max_total_tokens=0, device=None, catalog_dir=None, allow_padding=False,
                 emulator_target=None, merge_in_launch=False, cascades=True):
        self.max_batch, self.qseqlen, self.heads = int(max_batch), int(max_seqlen_q), int(num_heads)
        self.q_dtype, self.kv_dtype = _dtype_name(q_dtype, "q_dtype"), _dtype_name(kv_dtype, "kv_dtype")
        self.page_size, self.return_lse, self.logit_cap = int(page_size), bool(return_lse), bool(logit_cap)
        self.max_total_tokens = int(max_total_tokens)
        self.merge_in_launch = bool(merge_in_launch)
        self.cascades = bool(cascades) and not self.merge_in_launch
        self.device = _device_name(device)
        self.runtime = _runtime_for(self.device, catalog_dir, emulator_target)
        self.batch = 0  # requests of the last update()
        self.handle = _register(self)  # for the registered op (ops.py): an int the schema can carry
        self._plan = ctypes.c_void_p()
        self._workspace = 0
        L = C.lib()
        shape = C.mla_shape(_MLA_DTYPE[self.q_dtype], _MLA_DTYPE[self.kv_dtype], self.heads, self.qseqlen,
                            self.page_size, int(self.return_lse), int(self.logit_cap))
        self.selection = C.mla_selection()
        flags = C.MLA_SELECT_ALLOW_PADDING if allow_padding else C.MLA_SELECT_EXACT
        with self.runtime.lock:
            status = L.mla_select(self.runtime.ctx, ctypes.byref(shape), flags, ctypes.byref(self.selection))
            try:
                C.check(status, f"mla_select(catalog {self.runtime.catalog_dir}, target {self.runtime.target})")
            except C.MlaInputError as e:
                if status != C.MLA_ERROR_NO_KERNEL or allow_padding:
                    raise
                # The C message names the C flag; say what the Python caller passes instead.
                raise C.MlaInputError(e.status, str(e).split(": ", 1)[1] + "\n(from Python: allow_padding=True "
                                      "runs it on a larger kernel)") from None
            ctx = self.runtime.ctx
            # Options the plan reads at creation, set on the shared context only for it.
            if not self.cascades:
                C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_CASCADE, 2), "mla_context_set_option")
            if self.merge_in_launch:
                C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_MERGE, 1), "mla_context_set_option")
            try:
                C.check(L.mla_plan_create(ctx, ctypes.byref(self.selection), self.max_batch,
                                          self.max_total_tokens, ctypes.byref(self._plan)), "mla_plan_create")
            finally:
                if self.merge_in_launch:
                    C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_MERGE, 0), "mla_context_set_option")
                if not self.cascades:
                    C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_CASCADE, 0), "mla_context_set_option")
            size = ctypes.c_size_t()
            C.check(L.mla_plan_workspace_size(self._plan, ctypes.byref(size)), "mla_plan_workspace_size")
            self.workspace_bytes = size.value
            ws = ctypes.c_uint64()
            C.check(L.mla_malloc(self.runtime.dev, max(self.workspace_bytes, 1), ctypes.byref(ws)), "mla_malloc")
            self._workspace = ws.value

    @property
    def shape_key(self):
        return (self.q_dtype, self.kv_dtype, self.heads, self.qseqlen, self.page_size, self.return_lse,
                self.logit_cap)

    @property
    def decode_kernel(self):
        return self.selection.decode_kernel.decode()

    @property
    def note(self):
        return self.selection.note.decode()

    def plan_info(self):
        info = C.mla_plan_info()
        C.check(C.lib().mla_plan_get_info(self._plan, ctypes.byref(info)), "mla_plan_get_info")
        out = {f: getattr(info, f) for f, _ in C.mla_plan_info._fields_}
        for f in ("decode_grid", "prefix_grid", "reduce_grid"):
            out[f] = tuple(out[f])
        return out

    def describe_json(self):
        """The plan as JSON text (units, splits, prefix groups and the cost model's decision)."""
        text = C.lib().mla_plan_describe_json(self._plan)
        if text is None:
            C.check(C.MLA_ERROR_INVALID_ARGUMENT, "mla_plan_describe_json")
        return text.decode()

    def update(self, qo_indptr=None, kv_indptr=None, kv_last_page_lens=None, kv_indices=None, prefix_groups=None,
               detect_shared_prefixes=False, q_scale=1.0, kv_scale=1.0, *, seq_lens=None):
        """Plans one batch on the host from aiter's index tensors (host copies are taken: pass the
        CPU copies the engine holds; a GPU tensor synchronises) and uploads the step's tables into
        the workspace (one stream-ordered copy on the current stream). Instead of the three index
        tensors, seq_lens (keyword): the kv length of each request, int32 [batch] (vLLM's
        seq_lens_cpu, SGLang's seq_lens_cpu, ATOM's context lengths in numpy), every request
        having max_seqlen_q query rows; 0 is a request with no KV. Shared prefixes:
        `prefix_groups`, a list of (first, count, shared_tokens) for consecutive requests that
        share their first shared_tokens tokens (the same page ids), or detect_shared_prefixes=True
        to find them in kv_indices. q_scale / kv_scale (Python numbers): the host scales the
        kernels read when mla_decode_fwd is given numbers; scale tensors are read on the device."""
        if self.merge_in_launch and (prefix_groups is not None or detect_shared_prefixes):
            raise ValueError("prefix_groups / detect_shared_prefixes: this metadata merges in the decode launch "
                             "(merge_in_launch=True), which runs no cascade; make it with merge_in_launch=False")
        if not self.cascades and (prefix_groups is not None or detect_shared_prefixes):
            raise ValueError("prefix_groups / detect_shared_prefixes: this metadata was made with cascades=False "
                             "(no prefix launch); make it with cascades=True to share prefixes")
        if seq_lens is not None:
            if any(a is not None for a in (qo_indptr, kv_indptr, kv_last_page_lens)):
                raise ValueError("seq_lens: given with qo_indptr / kv_indptr / kv_last_page_lens; pass one or the other")
            kv_lens = _seq_lens(Tensor(seq_lens, "seq_lens"), self.qseqlen)
        else:
            missing = [n for n, a in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr),
                                      ("kv_last_page_lens", kv_last_page_lens)) if a is None]
            if missing:
                raise ValueError(f"{missing[0]}: missing; pass qo_indptr, kv_indptr and kv_last_page_lens, or seq_lens=")
            kv_lens, _ = _kv_lens(Tensor(qo_indptr, "qo_indptr"), Tensor(kv_indptr, "kv_indptr"),
                                  Tensor(kv_last_page_lens, "kv_last_page_lens"), self.qseqlen, self.page_size)
        self._update(kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, q_scale, kv_scale)

    def _upload(self, q_scale, kv_scale):
        for v, name in ((q_scale, "q_scale"), (kv_scale, "kv_scale")):
            if not isinstance(v, (int, float)):
                raise TypeError(f"{name}: update() takes the host scale as a Python number, got "
                                f"{type(v).__name__} (pass scale tensors to mla_decode_fwd)")
        C.check(C.lib().mla_plan_upload(self.runtime.ctx, self._plan, self._workspace, self.workspace_bytes,
                                        float(q_scale), float(kv_scale), _stream_of(self.runtime, self.device)),
                "mla_plan_upload")
        self.host_scales = (float(np.float32(q_scale)), float(np.float32(kv_scale)))

    def _update(self, kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, q_scale=1.0, kv_scale=1.0):
        L = C.lib()
        batch = len(kv_lens)
        lens = np.ascontiguousarray(kv_lens, dtype=np.int32)
        lens_p = lens.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        with self.runtime.lock:
            if prefix_groups is None and not detect_shared_prefixes:
                C.check(L.mla_plan_update(self.runtime.ctx, self._plan, lens_p, batch, 0), "mla_plan_update")
            else:
                host_indices, groups_arr, num_groups = None, None, 0
                if prefix_groups is not None:
                    groups = list(prefix_groups)
                    groups_arr = (C.mla_prefix_group * max(len(groups), 1))()
                    for i, g in enumerate(groups):
                        if len(g) != 3:
                            raise ValueError(f"prefix_groups[{i}]: expected (first, count, shared_tokens), got {g!r}")
                        groups_arr[i] = C.mla_prefix_group(*(int(v) for v in g))
                    num_groups = len(groups)
                else:
                    if kv_indices is None:
                        raise ValueError("detect_shared_prefixes: needs kv_indices (its host copy is searched)")
                    host = Tensor(kv_indices, "kv_indices").host_int32()
                    host_indices = np.ascontiguousarray(host, dtype=np.int32)
                indices_p = (host_indices.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
                             if host_indices is not None else None)
                C.check(L.mla_plan_update_shared(self.runtime.ctx, self._plan, lens_p, batch, 0, indices_p,
                                                 groups_arr, num_groups), "mla_plan_update_shared")
            self.batch = batch
            self._upload(q_scale, kv_scale)

    def close(self):
        """Frees the workspace and the plan (also done when the object is collected)."""
        if getattr(self, "_plan", None) is None:
            return
        L = C.lib()
        with self.runtime.lock:
            if self._workspace:
                L.mla_free(self.runtime.dev, self._workspace)
            if self._plan:
                L.mla_plan_destroy(self._plan)
        self._workspace, self._plan = 0, None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- aiter's index tensors -> kv lengths --------------------------------------------------------

def _kv_lens(qo_indptr, kv_indptr, kv_last_page_lens, qseqlen, page_size):
    """kv length per request from aiter's tensors, checking what the C API assumes: every request
    has max_seqlen_q query rows, kv_indptr counts pages from 0, last pages hold 1..page_size."""
    qo, kvp, last = qo_indptr.host_int32(), kv_indptr.host_int32(), kv_last_page_lens.host_int32()
    if len(qo) < 1:
        raise ValueError(f"qo_indptr: expected [batch + 1] entries, got shape {list(qo.shape)}")
    batch = len(qo) - 1
    if len(kvp) != batch + 1:
        raise ValueError(f"kv_indptr: expected [batch + 1] = [{batch + 1}] entries like qo_indptr, got "
                         f"shape {list(kvp.shape)}")
    if len(last) != batch:
        raise ValueError(f"kv_last_page_lens: expected [batch] = [{batch}] entries, got shape {list(last.shape)}")
    rows = np.diff(qo.astype(np.int64))
    if qo[0] != 0 or np.any(rows != qseqlen):
        b = 0 if qo[0] != 0 else int(np.nonzero(rows != qseqlen)[0][0])
        got = f"qo_indptr[0] = {qo[0]}" if qo[0] != 0 else f"request {b} has {rows[b]} query rows"
        raise ValueError(f"qo_indptr: every request must have max_seqlen_q = {qseqlen} query rows "
                         f"(qo_indptr = 0, {qseqlen}, {2 * qseqlen}, ...); got {got}")
    if kvp[0] != 0:
        raise ValueError(f"kv_indptr: must start at 0 (packed kv_indices), got kv_indptr[0] = {kvp[0]}")
    pages = np.diff(kvp.astype(np.int64))
    if np.any(pages < 0):
        b = int(np.nonzero(pages < 0)[0][0])
        raise ValueError(f"kv_indptr: request {b} has {pages[b]} pages; allowed >= 0 (kv_indptr is non-decreasing)")
    full = pages > 0  # a request with 0 pages has no KV (a padded graph batch): o = 0, lse = -inf
    bad_last = full & ((last < 1) | (last > page_size))
    if np.any(bad_last):
        b = int(np.nonzero(bad_last)[0][0])
        raise ValueError(f"kv_last_page_lens: request {b} has {last[b]}; allowed 1..page_size = 1..{page_size}")
    lens = np.where(full, (pages - 1) * page_size + last, 0)
    if np.any(full & (lens < qseqlen)):
        b = int(np.nonzero(full & (lens < qseqlen))[0][0])
        raise ValueError(f"kv lengths: request {b} has {lens[b]} tokens, fewer than max_seqlen_q = {qseqlen} "
                         f"(the step's own rows are in the cache; 0 pages: a request with no KV)")
    if np.any(lens > 2**31 - 1):
        raise ValueError("kv lengths: a request exceeds 2^31 - 1 tokens")
    return lens.astype(np.int32), int(kvp[-1])


def _seq_lens(seq_lens, qseqlen):
    """kv lengths from an engine's host copy of seq_lens (int32, [batch])."""
    lens = seq_lens.host_int32()
    if np.any(lens < 0):
        b = int(np.nonzero(lens < 0)[0][0])
        raise ValueError(f"seq_lens: request {b} has {lens[b]}; allowed 0 (no KV) or >= max_seqlen_q = {qseqlen}")
    short = (lens > 0) & (lens < qseqlen)
    if np.any(short):
        b = int(np.nonzero(short)[0][0])
        raise ValueError(f"seq_lens: request {b} has {lens[b]} tokens, fewer than max_seqlen_q = {qseqlen} "
                         f"(the step's own rows are in the cache; 0: a request with no KV)")
    return np.ascontiguousarray(lens, dtype=np.int32)


def get_mla_metadata_info(max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, *, page_size=1, return_lse=False,
                          logit_cap=False, max_total_tokens=0, device=None, catalog_dir=None, allow_padding=False,
                          emulator_target=None, cascades=True):
    """Once per capacity, where an engine calls aiter's get_mla_metadata_info_v1 and allocates
    the buffers it sizes: selects the kernels and allocates the plan's fixed buffers (the
    workspace, sized by max_batch and max_total_tokens). Returns the MlaDecodeMetadata that owns
    them; pass it to get_mla_metadata() every step and to mla_decode_fwd(metadata=) (or its
    .handle to the registered op). .workspace_bytes and .plan_info() give the sizes and grids.
    cascades=False for an engine that never shares prefixes: 2 launches per layer, not 3."""
    return MlaDecodeMetadata(max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, page_size=page_size,
                             return_lse=return_lse, logit_cap=logit_cap, max_total_tokens=max_total_tokens,
                             device=device, catalog_dir=catalog_dir, allow_padding=allow_padding,
                             emulator_target=emulator_target, cascades=cascades)


def get_mla_metadata(metadata, qo_indptr=None, kv_indptr=None, kv_last_page_lens=None, *, seq_lens=None,
                     kv_indices=None, prefix_groups=None, detect_shared_prefixes=False, q_scale=1.0, kv_scale=1.0):
    """Every step, where an engine calls aiter's get_mla_metadata_v1: fills the fixed buffers of
    `metadata` (get_mla_metadata_info's result) for this batch from the CPU copies the engine
    holds, either seq_lens (kv length per request) or aiter's qo_indptr / kv_indptr /
    kv_last_page_lens. Plans on the host (microseconds) and uploads one stream-ordered copy; the
    decode calls that follow only launch. MlaDecodeMetadata.update() does the work."""
    if not isinstance(metadata, MlaDecodeMetadata):
        raise TypeError(f"metadata: expected the MlaDecodeMetadata of get_mla_metadata_info(), got "
                        f"{type(metadata).__name__}")
    metadata.update(qo_indptr, kv_indptr, kv_last_page_lens, kv_indices=kv_indices, prefix_groups=prefix_groups,
                    detect_shared_prefixes=detect_shared_prefixes, q_scale=q_scale, kv_scale=kv_scale,
                    seq_lens=seq_lens)


def _stream_of(runtime, device):
    """The stream an upload goes on: the current torch stream of a GPU device, else none."""
    if runtime.is_emulator:
        return None
    torch = __import__("torch")
    return ctypes.c_void_p(torch.cuda.current_stream(torch.device(device)).cuda_stream)


def _scale_arg(value, name, device):
    """(host value, None) for a Python number (or None: 1.0), (None, Tensor) for a one-element
    float32 tensor on q's device, which the kernels read on the device: never read here."""
    if value is None:
        return 1.0, None
    if isinstance(value, (int, float)):
        return float(value), None
    t = Tensor(value, name)
    if t.numel != 1:
        raise ValueError(f"{name}: expected a number or a one-element tensor, got shape {list(t.shape)}")
    t.require_dtype("float32")
    if t.device != device:
        raise ValueError(f"{name}: on {t.device}, but q is on {device} (the kernels read it on q's device)")
    return None, t


# Internal metadata of mla_decode_fwd calls without one: per (runtime, shape), grown on demand.
_cached_metadata = {}
_cached_lock = threading.Lock()


def _cached_for(runtime, catalog_dir, shape_key, allow_padding, batch, total_tokens):
    # The runtime's key names device, emulator target and catalog: all that changes the answer.
    key = (runtime.key, shape_key, allow_padding)
    runtime_device = "cpu" if runtime.key[0] == "emulator" else f"cuda:{runtime.key[1]}"
    emulator_target = runtime.key[1] if runtime.key[0] == "emulator" else None
    with _cached_lock:
        m = _cached_metadata.get(key)
        if m is None or m.max_batch < batch or m.max_total_tokens < total_tokens:
            old_batch, old_tokens = (m.max_batch, m.max_total_tokens) if m else (0, 0)
            new_batch = max(batch, 2 * old_batch, 8)
            new_tokens = max(1 << max(total_tokens - 1, 1).bit_length(), 2 * old_tokens, 1 << 14)
            q_dtype, kv_dtype, heads, qseqlen, page_size, lse, cap = shape_key
            if m is not None:
                m.close()
            m = MlaDecodeMetadata(new_batch, qseqlen, heads, q_dtype, kv_dtype, page_size=page_size,
                                  return_lse=lse, logit_cap=cap, max_total_tokens=new_tokens,
                                  device=runtime_device, catalog_dir=runtime.key[2], allow_padding=allow_padding,
                                  emulator_target=emulator_target)
            _cached_metadata[key] = m
        return m


# ---- the decode call ----------------------------------------------------------------------------

def mla_decode_fwd(
    q,
    kv_buffer,
    o,
    qo_indptr,
    kv_indptr,
    kv_indices,
    kv_last_page_lens,
    max_seqlen_q,
    page_size=1,
    nhead_kv=1,
    sm_scale=None,
    logit_cap=0.0,
    num_kv_splits=None,
    num_kv_splits_indptr=None,
    work_meta_data=None,
    work_indptr=None,
    work_info_set=None,
    reduce_indptr=None,
    reduce_final_map=None,
    reduce_partial_map=None,
    q_scale=None,
    kv_scale=None,
    intra_batch_mode=False,
    return_logits=False,
    return_lse=False,
    g_kv_indptr=None,
    cp_world_size=1,
    cp_rank=0,
    causal=True,
    *,
    metadata=None,
    lse=None,
    prefix_groups=None,
    detect_shared_prefixes=False,
    catalog_dir=None,
    allow_padding=False,
    fp8_format=None,
    emulator_target=None,
):
    """MLA decode with aiter's arguments (aiter/mla.py mla_decode_fwd): writes o, returns (o, lse).

    q [tokens, heads, 576] fp8/bf16; kv_buffer [num_pages, page_size, 1, 576] (or without the
    nhead_kv axis) fp8/bf16; o [tokens, heads, 512] bf16; qo_indptr [batch+1] with every request
    having max_seqlen_q rows; kv_indptr [batch+1] page prefix sums from 0; kv_indices int32 packed
    page ids; kv_last_page_lens [batch] (1..page_size). sm_scale defaults to 1/sqrt(576) as aiter's
    (1/sqrt(qk_head_dim), qk_head_dim = kv_buffer.shape[-1]); DeepSeek-style models use
    1/sqrt(192) and vLLM always passes it. q_scale / kv_scale: one-element float32 tensors on q's
    device, which the kernels read on the device at every launch (as aiter's), or Python numbers
    (the host values the step's upload wrote: without metadata, this call's; with metadata, those
    given to metadata.update()). logit_cap > 0 selects the soft-cap kernels (aiter asserts it is 0).
    lse [tokens, heads] f32 is returned when return_lse (into `lse` if given), else None.

    aiter's split and persistent-scheduling arguments (num_kv_splits, num_kv_splits_indptr, the
    work_* / reduce_* buffers, intra_batch_mode) are accepted and ignored: the runtime's planner
    splits the work itself. Not supported: return_logits, context parallelism (cp_world_size > 1),
    causal=False with max_seqlen_q > 1, nhead_kv != 1.

    Keyword-only: metadata (an MlaDecodeMetadata already update()d for this batch: nothing is
    planned, read back or allocated), lse, prefix_groups / detect_shared_prefixes (as in
    MlaDecodeMetadata.update; without metadata), catalog_dir, allow_padding (run a shape without
    an exact kernel on one with more heads / query rows: the C API's MLA_SELECT_ALLOW_PADDING),
    fp8_format (the e4m3 flavour of fp8 given as raw uint8 bits: 'e4m3fnuz' or 'e4m3fn'; default
    the target's, gfx942 e4m3fnuz, gfx950 e4m3fn; another flavour is refused, see docs/engines.md),
    emulator_target (CPU tensors: 'gfx942' or 'gfx950'; default $MLA_EMULATOR_TARGET, else gfx950).
    """
    qt, kvt, ot = Tensor(q, "q"), Tensor(kv_buffer, "kv_buffer"), Tensor(o, "o")
    idx = Tensor(kv_indices, "kv_indices")
    qseqlen, page_size = int(max_seqlen_q), int(page_size)

    # Arguments this implementation does not take.
    if nhead_kv != 1:
        raise ValueError(f"nhead_kv: MLA has one latent KV head; got {nhead_kv}, allowed 1")
    if return_logits:
        raise ValueError("return_logits: not supported (the split partials live in the runtime's workspace)")
    if cp_world_size != 1 or g_kv_indptr is not None:
        raise ValueError(f"cp_world_size: context parallelism is not supported; got {cp_world_size}, allowed 1")
    if not causal and qseqlen > 1:
        raise ValueError("causal: the kernels are causal within a step; causal=False needs max_seqlen_q = 1")
    if logit_cap is None or logit_cap < 0 or not math.isfinite(logit_cap):
        raise ValueError(f"logit_cap: got {logit_cap}; allowed 0 (off) or a finite cap > 0")
    if qseqlen < 1:
        raise ValueError(f"max_seqlen_q: got {qseqlen}, allowed >= 1")
    if page_size < 1:
        raise ValueError(f"page_size: got {page_size}, allowed 1 or a power of two up to 256")

    # Shapes, dtypes, layout.
    qt.require_ndim(3, "[tokens, heads, 576]")
    q_kind = qt.element((FP8, BF16))
    if qt.shape[2] != QK_DIM:
        raise ValueError(f"q: expected [tokens, heads, {QK_DIM}], got shape {list(qt.shape)}")
    tokens, heads = qt.shape[0], qt.shape[1]
    if len(kvt.shape) == 4:
        if kvt.shape[2] != 1:
            raise ValueError(f"kv_buffer: expected [num_pages, page_size, 1, {QK_DIM}] (one KV head), got "
                             f"shape {list(kvt.shape)}")
    elif len(kvt.shape) != 3:
        raise ValueError(f"kv_buffer: expected [num_pages, page_size, 1, {QK_DIM}], got shape {list(kvt.shape)}")
    if kvt.shape[-1] != QK_DIM or kvt.shape[1] != page_size:
        raise ValueError(f"kv_buffer: expected [num_pages, page_size = {page_size}, 1, {QK_DIM}], got shape "
                         f"{list(kvt.shape)}")
    kv_kind = kvt.element((FP8, BF16))
    ot.require_ndim(3, f"[tokens, heads, {LATENT_DIM}]")
    ot.element((BF16,))
    if ot.shape != (tokens, heads, LATENT_DIM):
        raise ValueError(f"o: expected [tokens, heads, {LATENT_DIM}] = {[tokens, heads, LATENT_DIM]} like q, "
                         f"got shape {list(ot.shape)}")
    idx.require_dtype("int32")
    if len(idx.shape) != 1:
        raise ValueError(f"kv_indices: expected a 1-D int32 tensor of packed page ids, got shape {list(idx.shape)}")
    for t in (qt, kvt, ot, idx):
        t.require_contiguous()
    num_pages = kvt.shape[0]

    # Devices: everything on the CPU (emulator) or on one GPU (HIP).
    device = qt.device
    for t in (kvt, ot, idx):
        if t.device != device:
            raise ValueError(f"{t.name}: on {t.device}, but q is on {device}; all tensors must be on one device")
    if not qt.on_cpu:
        torch = __import__("torch")
        if getattr(torch.version, "hip", None) is None:
            raise ValueError(f"q: on {device}, but this torch is not a ROCm build; the kernels need an AMD GPU "
                             f"(or pass CPU tensors / NumPy arrays for the emulator)")
    if metadata is not None and not isinstance(metadata, MlaDecodeMetadata):
        raise TypeError(f"metadata: expected an MlaDecodeMetadata, got {type(metadata).__name__}")
    if metadata is not None and metadata.device != device:
        raise ValueError(f"metadata: made for device {metadata.device}, but the tensors are on {device}")
    if metadata is not None and emulator_target is not None and metadata.runtime.key[1] != emulator_target:
        raise ValueError(f"emulator_target: '{emulator_target}', but metadata was made for {metadata.runtime.target}")
    runtime = metadata.runtime if metadata is not None else _runtime_for(device, catalog_dir, emulator_target)
    _check_fp8_flavour([t for t, kind in ((qt, q_kind), (kvt, kv_kind)) if kind == FP8], runtime.target, fp8_format)

    shape_key = (q_kind, kv_kind, heads, qseqlen, page_size, bool(return_lse), logit_cap > 0)
    if metadata is not None:
        if metadata.shape_key != shape_key:
            raise ValueError(f"metadata: made for (q, kv, heads, qseqlen, page_size, lse, cap) = "
                             f"{metadata.shape_key}, called with {shape_key}")
        if prefix_groups is not None or detect_shared_prefixes:
            raise ValueError("prefix_groups / detect_shared_prefixes: pass them to metadata.update()")
        if metadata.batch * qseqlen != tokens:
            raise ValueError(f"q: {tokens} rows, but metadata was last updated for {metadata.batch} requests x "
                             f"{qseqlen} rows; call metadata.update() for this batch")
        plan_meta = metadata
    else:
        kv_lens, num_indices = _kv_lens(Tensor(qo_indptr, "qo_indptr"), Tensor(kv_indptr, "kv_indptr"),
                                        Tensor(kv_last_page_lens, "kv_last_page_lens"), qseqlen, page_size)
        if len(kv_lens) * qseqlen != tokens:
            raise ValueError(f"q: {tokens} rows, but qo_indptr describes {len(kv_lens)} requests x {qseqlen} "
                             f"rows = {len(kv_lens) * qseqlen}")
        if idx.shape[0] < num_indices:
            raise ValueError(f"kv_indices: {idx.shape[0]} entries, but kv_indptr[-1] = {num_indices}")
        if runtime.is_emulator:
            # Host memory: page ids are checked here, before any device reads them.
            used = idx.host_int32()[:num_indices]
            if used.size and (used.min() < 0 or used.max() >= num_pages):
                i = int(np.nonzero((used < 0) | (used >= num_pages))[0][0])
                raise ValueError(f"kv_indices[{i}] = {used[i]} is outside 0..num_pages-1 = 0..{num_pages - 1} "
                                 f"(num_pages = kv_buffer.shape[0])")
        plan_meta = None  # the cached one, planned below under the runtime's lock

    if return_lse:
        if lse is None:
            lse = empty_like_kind(qt, (tokens, heads), "float32")
        lt = Tensor(lse, "lse")
        lt.require_dtype("float32")
        if lt.shape != (tokens, heads):
            raise ValueError(f"lse: expected [tokens, heads] = {[tokens, heads]} float32, got shape {list(lt.shape)}")
        lt.require_contiguous()
        if lt.device != device:
            raise ValueError(f"lse: on {lt.device}, but q is on {device}")
    else:
        lse, lt = None, None

    scale = (1.0 / math.sqrt(kvt.shape[-1])) if sm_scale is None else float(sm_scale)
    args = C.mla_decode_args()
    args.num_pages = num_pages
    args.sm_scale = scale
    scales = {"q_scale": _scale_arg(q_scale, "q_scale", device), "kv_scale": _scale_arg(kv_scale, "kv_scale", device)}
    for name, (value, tensor) in scales.items():
        setattr(args, name, value if tensor is None else 1.0)
    args.logit_cap = float(logit_cap)
    L = C.lib()
    # One lock over planning and launch: a cached plan is shared by every caller of its shape.
    with runtime.lock:
        if plan_meta is None:
            plan_meta = _cached_for(runtime, catalog_dir, shape_key, allow_padding, len(kv_lens),
                                    int(kv_lens.sum(dtype=np.int64)))
            plan_meta._update(kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, args.q_scale, args.kv_scale)
        if runtime.is_emulator:
            # The emulator has its own address space: copy the inputs in, the outputs back.
            staged = {}
            for role, t in (("q", qt), ("kv", kvt), ("kv_indices", idx), ("o", ot), ("lse", lt)):
                if t is None:
                    continue
                staged[role] = runtime.staging(role, t.nbytes)
                if role in ("q", "kv", "kv_indices"):
                    C.check(L.mla_memcpy_h2d(runtime.dev, staged[role], t.address, t.nbytes), "mla_memcpy_h2d")
            args.q, args.kv, args.kv_indices, args.o = staged["q"], staged["kv"], staged["kv_indices"], staged["o"]
            args.lse = staged.get("lse", 0)
            # Scale tensors: the emulator's memory is the host's, so their 4 bytes are staged.
            for name, (_, tensor) in scales.items():
                if tensor is not None:
                    addr = runtime.staging(name, 4)
                    C.check(L.mla_memcpy_h2d(runtime.dev, addr, tensor.address, 4), "mla_memcpy_h2d")
                    setattr(args, name + "_ptr", addr)
            stream = None
        else:
            torch = __import__("torch")
            args.q, args.kv, args.kv_indices, args.o = qt.address, kvt.address, idx.address, ot.address
            args.lse = lt.address if lt is not None else 0
            for name, (_, tensor) in scales.items():
                if tensor is not None:
                    setattr(args, name + "_ptr", tensor.address)
            stream = ctypes.c_void_p(torch.cuda.current_stream(qt.obj.device).cuda_stream)
        C.check(L.mla_decode(runtime.ctx, plan_meta._plan, ctypes.byref(args), plan_meta._workspace,
                             plan_meta.workspace_bytes, stream), f"mla_decode({plan_meta.decode_kernel})")
        if runtime.is_emulator:
            C.check(L.mla_memcpy_d2h(runtime.dev, ot.address, args.o, ot.nbytes), "mla_memcpy_d2h(o)")
            if lt is not None:
                C.check(L.mla_memcpy_d2h(runtime.dev, lt.address, args.lse, lt.nbytes), "mla_memcpy_d2h(lse)")
    return o, lse
