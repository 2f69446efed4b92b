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
from ._tensors import BF16, FP8, FP8_FLAVOUR, Tensor, _torch, empty_like_kind, host_int32

LATENT_DIM = 512  # v / o head dim (kv_lora_rank)
QK_DIM = 576      # 512 latent + 64 rope
# FlashMLA's fp8_ds_mla cache entry (sparse attention, bf16 q): 512 e4m3fn latent bytes (on every
# target), four f32 scales (one per 128 latent values), 64 bf16 rope values: 656 bytes a token.
DS_MLA = "fp8_ds_mla"
DS_MLA_BYTES = 656
_MLA_DTYPE = {FP8: C.MLA_DTYPE_FP8, BF16: C.MLA_DTYPE_BF16, DS_MLA: C.MLA_DTYPE_FP8_DS_MLA}


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
_SHORT_FP8 = {v: k for k, v in FP8_FORMATS.items() if not k.startswith("float8")}  # float8_e4m3fn -> e4m3fn
_RAW_OR_FP8 = ("uint8", "float8_e4m3fn", "float8_e4m3fnuz")


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
    +-240/448): CPU tensors and NumPy arrays only, which run on the emulator; a GPU tensor is
    never read on the host. Returns nothing; raises TypeError / ValueError naming the argument."""
    want = FP8_FLAVOUR.get(target)
    if want is None:
        return
    short = _SHORT_FP8
    given = _fp8_format_name(fp8_format)
    if given is not None and given != want:
        raise ValueError(f"fp8_format: '{short[given]}', but {target} reads fp8 as {short[want]} "
                         f"(gfx942: e4m3fnuz, gfx950: e4m3fn); convert the values to {short[want]} first "
                         f"(the same bits would be read as other numbers)")
    for t in tensors:
        if t.dtype.startswith("float8") and t.dtype != want:
            raise TypeError(f"{t.name}: dtype torch.{t.dtype}, but {target} reads fp8 as {want}; convert it "
                            f"(.to(torch.float32).to(torch.{want})) or run on the target whose flavour it is")
        if t.name == "q" and t.dtype in _RAW_OR_FP8 and t.on_cpu:
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
    if name == "kv_dtype":
        table[DS_MLA] = DS_MLA
    if text not in table:
        raise TypeError(f"{name}: {dtype!r} is not an MLA dtype; use fp8 (float8_e4m3fn[uz] or uint8 bits) "
                        f"or bf16 (bfloat16 or uint16/int16 bits){'; or fp8_ds_mla' if name == 'kv_dtype' else ''}")
    return table[text]


def _check_ds_mla(q_dtype, kv_dtype, topk):
    """kv_dtype 'fp8_ds_mla' (FlashMLA's sparse cache) only with topk (sparse) and bf16 q, as the C API."""
    if kv_dtype == DS_MLA and (topk is None or q_dtype != BF16):
        raise ValueError(f"kv_dtype: 'fp8_ds_mla' (FlashMLA's 656-byte sparse cache entries) needs sparse metadata "
                         f"(topk=) and q_dtype bf16; got topk={topk}, q_dtype {q_dtype}")


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

    topk (sparse attention, DSA; docs/engines.md "Sparse decode"): every query row is a request
    of its own over `topk` cache slots, so the plan holds max_batch * max_seqlen_q rows and
    depends only on the row count: update() re-plans only when that changes (plan_updates
    counts the plans made) and never reads kv lengths or indices. page_size, cascades and
    merge_in_launch do not apply (the kernel reads slots; no shared prefixes).

    What is the same at every step is made here once: the shape key the decode call compares,
    a capacity-sized int32 buffer of kv lengths with its ctypes pointer, the reference bytes of
    qo_indptr (0, qseqlen, 2 qseqlen, ...); update() costs its C calls plus a few microseconds.
    """

    def __init__(self, max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, page_size=1, return_lse=False,
                 logit_cap=False, max_total_tokens=0, device=None, catalog_dir=None, allow_padding=False,
                 emulator_target=None, merge_in_launch=False, cascades=True, topk=None):
        self.max_batch, self.qseqlen, self.heads = int(max_batch), int(max_seqlen_q), int(num_heads)
        self.q_dtype, self.kv_dtype = _dtype_name(q_dtype, "q_dtype"), _dtype_name(kv_dtype, "kv_dtype")
        self.page_size, self.return_lse, self.logit_cap = int(page_size), bool(return_lse), bool(logit_cap)
        self.max_total_tokens = int(max_total_tokens)
        self.merge_in_launch = bool(merge_in_launch)
        self.cascades = bool(cascades) and not self.merge_in_launch
        self.topk = None if topk is None else _sparse.check_topk(topk, self.logit_cap, self.merge_in_launch)
        _check_ds_mla(self.q_dtype, self.kv_dtype, self.topk)
        self.plan_rows = self.max_batch  # requests the C plan holds (sparse: query rows)
        if self.topk is not None:
            self.plan_rows, self.cascades = self.max_batch * self.qseqlen, False
            self.max_total_tokens = self.plan_rows * self.topk
            self.request_rows = self.qseqlen  # query rows per request of the last update()
        self.plan_updates = 0  # mla_plan_update calls made (a sparse plan is remade only for a new row count)
        self.shape_key = (self.q_dtype, self.kv_dtype, self.heads, self.qseqlen, self.page_size, self.return_lse,
                          self.logit_cap)
        self.device = _device_name(device)
        self.runtime = _runtime_for(self.device, catalog_dir, emulator_target)
        self.batch = 0  # requests of the last update()
        self.handle = _register(self)  # for the registered op (ops.py): an int the schema can carry
        self._plan = ctypes.c_void_p()
        self._workspace = 0
        with self.runtime.lock:
            self.selection = self._select(allow_padding)
            self._create_plan()
        self._lens = np.zeros(max(self.plan_rows, 1), np.int32)  # the kv lengths update() passes
        if self.topk is not None:
            self._lens[:] = self.topk  # every sparse row: topk slots (the index row's width)
            self._index_buffers = {}   # sparse.index_buffers: per tensor kind, the masked-index copy
            _sparse.preallocate(self)
        self._lens_p = self._lens.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        self._qo_bytes = _qo_reference(self.max_batch, self.qseqlen)
        self._scales = (1.0, 1.0)
        self.host_scales = (1.0, 1.0)

    def _select(self, allow_padding):
        """The kernels of the shape (mla_select); MlaInputError saying allow_padding=True if none is exact."""
        sparse = self.topk is not None  # sparse kernels: one query row per request, slots (page size 1)
        shape = C.mla_shape(_MLA_DTYPE[self.q_dtype], _MLA_DTYPE[self.kv_dtype], self.heads,
                            1 if sparse else self.qseqlen, 1 if sparse else self.page_size, int(self.return_lse),
                            int(self.logit_cap), int(sparse))
        selection = C.mla_selection()
        flags = C.MLA_SELECT_ALLOW_PADDING if allow_padding else C.MLA_SELECT_EXACT
        status = C.lib().mla_select(self.runtime.ctx, ctypes.byref(shape), flags, ctypes.byref(selection))
        try:
            C.check(status, f"mla_select(catalog {self.runtime.catalog_dir}, target {self.runtime.target})")
        except C.MlaInputError as e:
            if status != C.MLA_ERROR_NO_KERNEL or allow_padding:
                raise
            # The C message names the C flag; say what the Python caller passes instead.
            raise C.MlaInputError(e.status, str(e).split(": ", 1)[1] + "\n(from Python: allow_padding=True "
                                  "runs it on a larger kernel)") from None
        return selection

    def _create_plan(self):
        """mla_plan_create with the options it reads at creation (set on the shared context only for
        it), then the workspace (mla_malloc). Under the runtime's lock."""
        L, ctx = C.lib(), self.runtime.ctx
        if not self.cascades:
            C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_CASCADE, 2), "mla_context_set_option")
        if self.merge_in_launch:
            C.check(L.mla_context_set_option(ctx, C.MLA_OPTION_MERGE, 1), "mla_context_set_option")
        try:
            C.check(L.mla_plan_create(ctx, ctypes.byref(self.selection), self.plan_rows,
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
        kernels read when mla_decode_fwd is given numbers; scale tensors are read on the device.
        Sparse metadata (topk): rows from qo_indptr[-1] (or len(seq_lens) * max_seqlen_q); no kv
        length or index is read (sparse.rows_of)."""
        if self.topk is not None:
            if prefix_groups is not None or detect_shared_prefixes:
                raise ValueError("prefix_groups / detect_shared_prefixes: sparse attention shares no prefixes")
            rows, request_rows = _sparse.rows_of(qo_indptr, seq_lens, self.qseqlen)
            return self._update_sparse(rows, request_rows, q_scale, kv_scale)
        if prefix_groups is not None or detect_shared_prefixes:
            self._check_cascades()
        if seq_lens is not None:
            if qo_indptr is not None or kv_indptr is not None or kv_last_page_lens is not None:
                raise ValueError("seq_lens: given with qo_indptr / kv_indptr / kv_last_page_lens; pass one or the other")
            kv_lens = _seq_lens(host_int32(seq_lens, "seq_lens"), self.qseqlen)
        else:
            if qo_indptr is None or kv_indptr is None or kv_last_page_lens is None:
                missing = [n for n, a in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr),
                                          ("kv_last_page_lens", kv_last_page_lens)) if a is None]
                raise ValueError(f"{missing[0]}: missing; pass qo_indptr, kv_indptr and kv_last_page_lens, or seq_lens=")
            kv_lens, _ = _kv_lens(host_int32(qo_indptr, "qo_indptr"), host_int32(kv_indptr, "kv_indptr"),
                                  host_int32(kv_last_page_lens, "kv_last_page_lens"), self.qseqlen, self.page_size,
                                  self._qo_bytes)
        self._update(kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, q_scale, kv_scale)

    def _check_cascades(self):
        if self.merge_in_launch:
            raise ValueError("prefix_groups / detect_shared_prefixes: this metadata merges in the decode launch "
                             "(merge_in_launch=True), which runs no cascade; make it with merge_in_launch=False")
        if not self.cascades:
            raise ValueError("prefix_groups / detect_shared_prefixes: this metadata was made with cascades=False "
                             "(no prefix launch); make it with cascades=True to share prefixes")

    def _update(self, kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, q_scale=1.0, kv_scale=1.0):
        """mla_plan_update (or _shared) with kv_lens (an int32/int64 NumPy array), then the upload."""
        batch = len(kv_lens)
        shared = prefix_groups is not None or detect_shared_prefixes
        groups = _prefix_groups(prefix_groups) if prefix_groups is not None else None
        indices = _detect_indices(kv_indices) if detect_shared_prefixes and prefix_groups is None else None
        with self.runtime.lock:
            if batch <= self.max_batch:  # the capacity-sized buffer; a larger batch is the C call's error
                self._lens[:batch] = kv_lens
                lens_p = self._lens_p
            else:
                lens = np.ascontiguousarray(kv_lens, dtype=np.int32)
                lens_p = lens.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
            L = C.lib()
            if not shared:
                status = L.mla_plan_update(self.runtime.ctx, self._plan, lens_p, batch, 0)
                if status:
                    C.check(status, "mla_plan_update")
            else:
                groups_arr, num_groups = groups if groups is not None else (None, 0)
                indices_p = indices.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)) if indices is not None else None
                C.check(L.mla_plan_update_shared(self.runtime.ctx, self._plan, lens_p, batch, 0, indices_p,
                                                 groups_arr, num_groups), "mla_plan_update_shared")
            self.batch = batch
            self.plan_updates += 1
            self._upload(q_scale, kv_scale)

    def _update_sparse(self, rows, request_rows, q_scale=1.0, kv_scale=1.0):
        """A sparse plan of `rows` rows of topk slots each: planned and uploaded when the row count
        changes (or on the first call), else only the scales uploaded if they changed."""
        if rows > self.plan_rows:
            raise ValueError(f"qo_indptr: {rows} query rows, but the metadata holds max_batch * max_seqlen_q = "
                             f"{self.plan_rows}; make it with a larger max_batch")
        with self.runtime.lock:
            self.request_rows = request_rows
            if rows == self.batch and self.plan_updates:
                if (q_scale, kv_scale) != self._scales:
                    self._upload(q_scale, kv_scale)
                return
            C.check(C.lib().mla_plan_update(self.runtime.ctx, self._plan, self._lens_p, rows, 0), "mla_plan_update")
            self.plan_updates += 1
            self.batch = rows
            self._upload(q_scale, kv_scale)

    def _upload(self, q_scale, kv_scale):
        """mla_plan_upload with the host scales (Python numbers) on the current stream."""
        if not isinstance(q_scale, (int, float)) or not isinstance(kv_scale, (int, float)):
            for v, name in ((q_scale, "q_scale"), (kv_scale, "kv_scale")):
                if not isinstance(v, (int, float)):
                    raise TypeError(f"{name}: update() takes the host scale as a Python number, got "
                                    f"{type(v).__name__} (pass scale tensors to mla_decode_fwd)")
        status = C.lib().mla_plan_upload(self.runtime.ctx, self._plan, self._workspace, self.workspace_bytes,
                                         q_scale, kv_scale, _stream_of(self.runtime, self.device))
        if status:
            C.check(status, "mla_plan_upload")
        if (q_scale, kv_scale) != self._scales:  # the float32 values the kernels read, as Python floats
            self._scales = (q_scale, kv_scale)
            self.host_scales = (float(np.float32(q_scale)), float(np.float32(kv_scale)))

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


def _prefix_groups(prefix_groups):
    """(ctypes array of mla_prefix_group, count) from a list of (first, count, shared_tokens)."""
    groups = list(prefix_groups)
    arr = (C.mla_prefix_group * max(len(groups), 1))()
    for i, g in enumerate(groups):
        if len(g) != 3:
            raise ValueError(f"prefix_groups[{i}]: expected (first, count, shared_tokens), got {g!r}")
        arr[i] = C.mla_prefix_group(*(int(v) for v in g))
    return arr, len(groups)


def _detect_indices(kv_indices):
    """The host copy of kv_indices that mla_plan_update_shared searches for shared prefixes."""
    if kv_indices is None:
        raise ValueError("detect_shared_prefixes: needs kv_indices (its host copy is searched)")
    return np.ascontiguousarray(Tensor(kv_indices, "kv_indices").host_int32(), dtype=np.int32)


# ---- aiter's index tensors -> kv lengths --------------------------------------------------------

_qo_references = {}  # qseqlen -> bytes of the int32 array 0, qseqlen, 2 qseqlen, ... (grown)


def _qo_reference(batch, qseqlen):
    """The bytes of qo_indptr for at least `batch` requests of qseqlen rows each: a qo_indptr is
    right when they .startswith(its .tobytes()) (one memcmp, ~0.1 us)."""
    ref = _qo_references.get(qseqlen, b"")
    if len(ref) < 4 * (batch + 1):
        ref = _qo_references[qseqlen] = (np.arange(max(2 * batch + 1, 257), dtype=np.int32) * qseqlen).tobytes()
    return ref


def _kv_lens(qo, kvp, last, qseqlen, page_size, qo_bytes=None):
    """kv length per request and kv_indptr[-1] from aiter's arrays on the host (1-D int32 NumPy),
    checking what the C API assumes: every request has max_seqlen_q query rows, kv_indptr counts
    pages from 0, last pages hold 1..page_size. A batch whose every request has pages is checked
    in a few microseconds (qo_indptr against reference bytes: qo_bytes, or _qo_reference's); any
    other (requests without KV, bad input) by _kv_lens_checked, which names what is wrong."""
    batch = len(qo) - 1
    if batch > 0 and len(kvp) == batch + 1 and len(last) == batch and int(kvp[0]) == 0:
        total = int(kvp[-1])
        if qo_bytes is None or len(qo_bytes) < 4 * (batch + 1):
            qo_bytes = _qo_reference(batch, qseqlen)
        if total * page_size < 2**31 and batch * qseqlen < 2**31 and qo_bytes.startswith(qo.tobytes()):
            lens = _full_kv_lens(kvp, last, qseqlen, page_size)
            if lens is not None:
                return lens, total
    return _kv_lens_checked(qo, kvp, last, qseqlen, page_size)


def _full_kv_lens(kvp, last, qseqlen, page_size):
    """The kv lengths (int64) if every request has >= 1 page, its last page 1..page_size tokens
    and at least qseqlen tokens, else None. The caller checked kv_indptr[-1] * page_size < 2^31:
    then every length fits int32. Extremes by argmin / argmax (~0.1 us; .min() ~0.7 us)."""
    k = kvp.astype(np.int64)
    pages = k[1:] - k[:-1]
    if int(pages[pages.argmin()]) < 1 or int(last[last.argmin()]) < 1 or int(last[last.argmax()]) > page_size:
        return None
    if page_size > 1:  # (pages - 1) * page_size + last, in place; at page size 1 last is 1: the page count
        pages *= page_size
        pages += last
        pages -= page_size
    if qseqlen > 1 and int(pages[pages.argmin()]) < qseqlen:
        return None
    return pages


def _kv_lens_checked(qo, kvp, last, qseqlen, page_size):
    """_kv_lens for any input, with a message naming the first request that is not what the C API takes."""
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


def _seq_lens(lens, qseqlen):
    """kv lengths from an engine's host copy of seq_lens (1-D int32 NumPy, [batch])."""
    if len(lens) == 0 or int(lens[lens.argmin()]) >= (qseqlen if qseqlen > 1 else 0):
        return lens
    if np.any(lens < 0):
        b = int(np.nonzero(lens < 0)[0][0])
        raise ValueError(f"seq_lens: request {b} has {lens[b]}; allowed 0 (no KV) or >= max_seqlen_q = {qseqlen}")
    short = (lens > 0) & (lens < qseqlen)
    if np.any(short):
        b = int(np.nonzero(short)[0][0])
        raise ValueError(f"seq_lens: request {b} has {lens[b]} tokens, fewer than max_seqlen_q = {qseqlen} "
                         f"(the step's own rows are in the cache; 0: a request with no KV)")
    return lens


def get_mla_metadata_info(max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, *, page_size=1, return_lse=False,
                          logit_cap=False, max_total_tokens=0, device=None, catalog_dir=None, allow_padding=False,
                          emulator_target=None, cascades=True, topk=None):
    """Once per capacity, where an engine calls aiter's get_mla_metadata_info_v1 and allocates
    the buffers it sizes: selects the kernels and allocates the plan's fixed buffers (the
    workspace, sized by max_batch and max_total_tokens). Returns the MlaDecodeMetadata that owns
    them; pass it to get_mla_metadata() every step and to mla_decode_fwd(metadata=) (or its
    .handle to the registered op). .workspace_bytes and .plan_info() give the sizes and grids.
    cascades=False for an engine that never shares prefixes: 2 launches per layer, not 3.

    topk: sparse attention (aiter's is_sparse=True with get_mla_metadata_v1(..., topk=)): room
    for max_batch * max_seqlen_q query rows of topk cache slots each, and a masked copy of
    kv_indices of that size; page_size and max_total_tokens are then not used (docs/engines.md).
    kv_dtype 'fp8_ds_mla' (with topk and bf16 q): FlashMLA's 656-byte cache entries."""
    return MlaDecodeMetadata(max_batch, max_seqlen_q, num_heads, q_dtype, kv_dtype, page_size=page_size,
                             return_lse=return_lse, logit_cap=logit_cap, max_total_tokens=max_total_tokens,
                             device=device, catalog_dir=catalog_dir, allow_padding=allow_padding,
                             emulator_target=emulator_target, cascades=cascades, topk=topk)


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
    """The stream an upload or a launch goes on: the current torch stream of a GPU device, else none."""
    if runtime.is_emulator:
        return None
    torch = __import__("torch")
    return torch.cuda.current_stream(torch.device(device)).cuda_stream


# Internal metadata of mla_decode_fwd calls without one: per (runtime, shape), grown on demand.
_cached_metadata = {}
_cached_lock = threading.Lock()


def _cached_for(runtime, shape_key, allow_padding, batch, total_tokens):
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
#
# mla_decode_fwd checks its arguments (_checked_call, then _check_metadata or _check_index_arrays,
# then _check_values), resolves the plan (the metadata given, or the internal one planned for this
# batch) and launches (_launch). With metadata and GPU tensors nothing is read on the host: the
# checks look at shapes, dtypes and devices, and the launch passes data_ptr()s.

class _Call:
    """One mla_decode_fwd call, checked: its Tensors, runtime and the values the kernels take."""

    __slots__ = ("q", "kv", "o", "kv_indices", "qseqlen", "page_size", "tokens", "heads", "num_pages", "device",
                 "runtime", "shape_key", "kv_lens", "lse", "lse_t", "sm_scale", "q_scale", "kv_scale", "logit_cap")


def _check_unsupported(nhead_kv, return_logits, cp_world_size, g_kv_indptr, causal, logit_cap, qseqlen, page_size):
    """aiter's arguments this implementation does not take, or takes only some values of."""
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


_FP8_OR_BF16 = (FP8, BF16)
_BF16_ONLY = (BF16,)


def _check_layout(qt, kvt, ot, idx, page_size, sparse=False):
    """Shapes, dtypes and layout of q, kv_buffer, o and kv_indices: (q kind, kv kind); a kv_buffer
    of 656-byte rows is FlashMLA's fp8_ds_mla cache (kind DS_MLA), read by sparse metadata only."""
    q_shape, kv_shape, o_shape = qt.shape, kvt.shape, ot.shape
    if len(q_shape) != 3:
        qt.require_ndim(3, "[tokens, heads, 576]")
    q_kind = qt.element(_FP8_OR_BF16)
    if q_shape[2] != QK_DIM:
        raise ValueError(f"q: expected [tokens, heads, {QK_DIM}], got shape {list(q_shape)}")
    if len(kv_shape) == 4:
        if kv_shape[2] != 1:
            raise ValueError(f"kv_buffer: expected [num_pages, page_size, 1, {QK_DIM}] (one KV head), got "
                             f"shape {list(kv_shape)}")
    elif len(kv_shape) != 3:
        raise ValueError(f"kv_buffer: expected [num_pages, page_size, 1, {QK_DIM}], got shape {list(kv_shape)}")
    width = kv_shape[-1]
    if width == DS_MLA_BYTES:
        kv_kind = _ds_mla_kind(kvt, sparse)
    elif width != QK_DIM:
        raise ValueError(f"kv_buffer: expected [num_pages, page_size = {page_size}, 1, {QK_DIM}] (or {DS_MLA_BYTES} "
                         f"bytes of fp8_ds_mla with sparse metadata), got shape {list(kv_shape)}")
    else:
        kv_kind = kvt.element(_FP8_OR_BF16)
    if kv_shape[1] != page_size:
        raise ValueError(f"kv_buffer: expected [num_pages, page_size = {page_size}, 1, {width}], got shape "
                         f"{list(kv_shape)}")
    if len(o_shape) != 3:
        ot.require_ndim(3, f"[tokens, heads, {LATENT_DIM}]")
    ot.element(_BF16_ONLY)
    if o_shape[0] != q_shape[0] or o_shape[1] != q_shape[1] or o_shape[2] != LATENT_DIM:
        raise ValueError(f"o: expected [tokens, heads, {LATENT_DIM}] = {[q_shape[0], q_shape[1], LATENT_DIM]} like q, "
                         f"got shape {list(o_shape)}")
    if idx.dtype != "int32":
        idx.require_dtype("int32")
    if len(idx.shape) != 1:
        raise ValueError(f"kv_indices: expected a 1-D int32 tensor of packed page ids, got shape {list(idx.shape)}")
    if not (qt.contiguous and kvt.contiguous and ot.contiguous and idx.contiguous):
        for t in (qt, kvt, ot, idx):
            t.require_contiguous()
    return q_kind, kv_kind


_DS_MLA_BYTES_DTYPES = ("uint8", "int8", "float8_e4m3fn")  # FlashMLA's k_cache dtypes


def _ds_mla_kind(kvt, sparse):
    """DS_MLA for a kv_buffer of 656-byte rows (uint8, int8 or float8_e4m3fn: FlashMLA's), read by the
    sparse kernels only; ValueError / TypeError naming kv_buffer otherwise."""
    if not sparse:
        raise ValueError(f"kv_buffer: rows of {DS_MLA_BYTES} bytes are FlashMLA's fp8_ds_mla cache, read only by "
                         f"sparse metadata (get_mla_metadata_info(..., 'bf16', 'fp8_ds_mla', topk=)); a dense cache "
                         f"has {QK_DIM} fp8 / bf16 values a row (got shape {list(kvt.shape)})")
    if kvt.dtype not in _DS_MLA_BYTES_DTYPES:
        raise TypeError(f"{kvt.name}: dtype {kvt.kind}.{kvt.dtype} with {DS_MLA_BYTES}-byte rows; fp8_ds_mla entries "
                        f"are bytes: {', '.join(_DS_MLA_BYTES_DTYPES)}")
    return DS_MLA


def _check_device(qt, kvt, ot, idx):
    """q's device, which every tensor must be on; a GPU one needs a ROCm torch."""
    device = qt.device
    if kvt.device != device or ot.device != device or idx.device != device:
        for t in (kvt, ot, idx):
            if t.device != device:
                raise ValueError(f"{t.name}: on {t.device}, but q is on {device}; all tensors must be on one device")
    if device != "cpu" and getattr(_torch().version, "hip", None) is None:
        raise ValueError(f"q: on {device}, but this torch is not a ROCm build; the kernels need an AMD GPU "
                         f"(or pass CPU tensors / NumPy arrays for the emulator)")
    return device


def _runtime_of(metadata, device, catalog_dir, emulator_target):
    """The runtime the call runs on: the metadata's (which must be for this device and target) or
    the cached one of the device."""
    if metadata is None:
        return _runtime_for(device, catalog_dir, emulator_target)
    if not isinstance(metadata, MlaDecodeMetadata):
        raise TypeError(f"metadata: expected an MlaDecodeMetadata, got {type(metadata).__name__}")
    if metadata.device != device:
        raise ValueError(f"metadata: made for device {metadata.device}, but the tensors are on {device}")
    if emulator_target is not None and metadata.runtime.key[1] != emulator_target:
        raise ValueError(f"emulator_target: '{emulator_target}', but metadata was made for {metadata.runtime.target}")
    return metadata.runtime


def _checked_call(q, kv_buffer, o, kv_indices, max_seqlen_q, page_size, nhead_kv, logit_cap, return_logits,
                  return_lse, g_kv_indptr, cp_world_size, causal, metadata, catalog_dir, emulator_target, fp8_format):
    """The tensors (kinds, shapes, layout, device, fp8 flavour) and aiter's scalar arguments, checked."""
    call = _Call()
    call.q, call.kv, call.o = qt, kvt, ot = Tensor(q, "q"), Tensor(kv_buffer, "kv_buffer"), Tensor(o, "o")
    call.kv_indices = idx = Tensor(kv_indices, "kv_indices")
    call.qseqlen, call.page_size = qseqlen, page_size = int(max_seqlen_q), int(page_size)
    _check_unsupported(nhead_kv, return_logits, cp_world_size, g_kv_indptr, causal, logit_cap, qseqlen, page_size)
    sparse = metadata is not None and getattr(metadata, "topk", None) is not None
    q_kind, kv_kind = _check_layout(qt, kvt, ot, idx, page_size, sparse)
    call.tokens, call.heads = qt.shape[0], qt.shape[1]
    call.num_pages = kvt.shape[0]
    call.device = _check_device(qt, kvt, ot, idx)
    call.runtime = runtime = _runtime_of(metadata, call.device, catalog_dir, emulator_target)
    if q_kind == FP8 or kv_kind == FP8 or fp8_format is not None:
        fp8 = (qt, kvt) if q_kind == kv_kind == FP8 else (qt,) if q_kind == FP8 else (kvt,) if kv_kind == FP8 else ()
        _check_fp8_flavour(fp8, runtime.target, fp8_format)
    call.shape_key = (q_kind, kv_kind, call.heads, qseqlen, page_size, bool(return_lse), logit_cap > 0)
    return call


def _check_metadata(call, metadata, prefix_groups, detect_shared_prefixes):
    """With metadata: made for this shape and last updated for this batch."""
    if metadata.shape_key != call.shape_key:
        raise ValueError(f"metadata: made for (q, kv, heads, qseqlen, page_size, lse, cap) = "
                         f"{metadata.shape_key}, called with {call.shape_key}")
    if prefix_groups is not None or detect_shared_prefixes:
        raise ValueError("prefix_groups / detect_shared_prefixes: pass them to metadata.update()")
    if metadata.batch * call.qseqlen != call.tokens:
        raise ValueError(f"q: {call.tokens} rows, but metadata was last updated for {metadata.batch} requests x "
                         f"{call.qseqlen} rows; call metadata.update() for this batch")


def _check_index_arrays(call, qo_indptr, kv_indptr, kv_last_page_lens):
    """Without metadata: the kv lengths from aiter's index tensors (read on the host), checked
    against q; on the emulator the used page ids too (host memory, before any device reads them)."""
    qseqlen = call.qseqlen
    kv_lens, num_indices = _kv_lens(host_int32(qo_indptr, "qo_indptr"), host_int32(kv_indptr, "kv_indptr"),
                                    host_int32(kv_last_page_lens, "kv_last_page_lens"), qseqlen, call.page_size)
    if len(kv_lens) * qseqlen != call.tokens:
        raise ValueError(f"q: {call.tokens} rows, but qo_indptr describes {len(kv_lens)} requests x {qseqlen} "
                         f"rows = {len(kv_lens) * qseqlen}")
    idx = call.kv_indices
    if idx.shape[0] < num_indices:
        raise ValueError(f"kv_indices: {idx.shape[0]} entries, but kv_indptr[-1] = {num_indices}")
    if call.runtime.is_emulator:
        used, num_pages = idx.host_int32()[:num_indices], call.num_pages
        if used.size and (used.min() < 0 or used.max() >= num_pages):
            i = int(np.nonzero((used < 0) | (used >= num_pages))[0][0])
            raise ValueError(f"kv_indices[{i}] = {used[i]} is outside 0..num_pages-1 = 0..{num_pages - 1} "
                             f"(num_pages = kv_buffer.shape[0])")
    call.kv_lens = kv_lens


def _check_lse(call, lse):
    """(lse as returned, its Tensor): a new [tokens, heads] float32 array of q's kind if not given."""
    tokens, heads, device = call.tokens, call.heads, call.device
    if lse is None:
        lse = empty_like_kind(call.q, (tokens, heads), "float32")
    lt = Tensor(lse, "lse")
    lt.require_dtype("float32")
    if lt.shape != (tokens, heads):
        raise ValueError(f"lse: expected [tokens, heads] = {[tokens, heads]} float32, got shape {list(lt.shape)}")
    lt.require_contiguous()
    if lt.device != device:
        raise ValueError(f"lse: on {lt.device}, but q is on {device}")
    return lse, lt


def _scale_arg(value, name, device):
    """(host value, None) for a Python number (or None: 1.0), (1.0, Tensor) for a one-element
    float32 tensor on q's device, which the kernels read on the device: never read here."""
    if value is None:
        return 1.0, None
    if isinstance(value, (int, float)):
        return float(value), None
    t = Tensor(value, name)
    if t.dtype == "float32" and t.device == device and t.numel == 1:
        return 1.0, t
    if t.numel != 1:
        raise ValueError(f"{name}: expected a number or a one-element tensor, got shape {list(t.shape)}")
    t.require_dtype("float32")
    raise ValueError(f"{name}: on {t.device}, but q is on {device} (the kernels read it on q's device)")


def _check_values(call, return_lse, lse, sm_scale, q_scale, kv_scale, logit_cap):
    """lse (allocated if not given), the scales and the soft cap the kernels take."""
    call.lse, call.lse_t = _check_lse(call, lse) if return_lse else (None, None)
    call.sm_scale = (1.0 / math.sqrt(QK_DIM)) if sm_scale is None else float(sm_scale)  # aiter's 1/sqrt(576)
    call.q_scale = _scale_arg(q_scale, "q_scale", call.device)
    call.kv_scale = _scale_arg(kv_scale, "kv_scale", call.device)
    call.logit_cap = float(logit_cap)


def _planned(call, kv_indices, prefix_groups, detect_shared_prefixes, allow_padding):
    """Without metadata: the internal metadata of the call's shape, planned for its batch. Under
    the runtime's lock, held through the launch: the plan is shared by every caller of the shape."""
    kv_lens = call.kv_lens
    meta = _cached_for(call.runtime, call.shape_key, allow_padding, len(kv_lens), int(kv_lens.sum(dtype=np.int64)))
    meta._update(kv_lens, kv_indices, prefix_groups, detect_shared_prefixes, call.q_scale[0], call.kv_scale[0])
    return meta


def _launch(call, plan):
    """mla_decode on the plan's workspace with the device addresses of the call's tensors: on a GPU
    their data_ptr()s on the current stream, on the emulator copies staged in its memory."""
    runtime, o, lse = call.runtime, call.o, call.lse_t
    emulator = runtime.is_emulator
    (q_scale, q_scale_t), (kv_scale, kv_scale_t) = call.q_scale, call.kv_scale
    args = C.mla_decode_args()
    args.num_pages, args.sm_scale, args.logit_cap = call.num_pages, call.sm_scale, call.logit_cap
    args.q_scale, args.kv_scale = q_scale, kv_scale
    L = C.lib()
    if emulator:
        _stage_inputs(runtime, call, args)
        stream = None
    else:
        args.q, args.kv, args.kv_indices, args.o = call.q.address, call.kv.address, call.kv_indices.address, o.address
        args.lse = lse.address if lse is not None else 0
        args.q_scale_ptr = q_scale_t.address if q_scale_t is not None else 0
        args.kv_scale_ptr = kv_scale_t.address if kv_scale_t is not None else 0
        stream = _torch().cuda.current_stream(call.q.obj.device).cuda_stream
    status = L.mla_decode(runtime.ctx, plan._plan, ctypes.byref(args), plan._workspace, plan.workspace_bytes, stream)
    if status:
        C.check(status, f"mla_decode({plan.decode_kernel})")
    if emulator:
        C.check(L.mla_memcpy_d2h(runtime.dev, o.address, args.o, o.nbytes), "mla_memcpy_d2h(o)")
        if lse is not None:
            C.check(L.mla_memcpy_d2h(runtime.dev, lse.address, args.lse, lse.nbytes), "mla_memcpy_d2h(lse)")


def _stage_inputs(runtime, call, args):
    """The emulator has its own address space: the inputs are copied in (o and lse are copied back
    after the launch), and the scale tensors' 4 bytes (its memory is the host's)."""
    L = C.lib()
    staged = {}
    for role, t in (("q", call.q), ("kv", call.kv), ("kv_indices", call.kv_indices), ("o", call.o),
                    ("lse", call.lse_t)):
        if t is None:
            continue
        staged[role] = runtime.staging(role, t.nbytes)
        if role in ("q", "kv", "kv_indices"):
            C.check(L.mla_memcpy_h2d(runtime.dev, staged[role], t.address, t.nbytes), "mla_memcpy_h2d")
    args.q, args.kv, args.kv_indices, args.o = staged["q"], staged["kv"], staged["kv_indices"], staged["o"]
    args.lse = staged.get("lse", 0)
    for name, (_, tensor) in (("q_scale", call.q_scale), ("kv_scale", call.kv_scale)):
        if tensor is not None:
            addr = runtime.staging(name, 4)
            C.check(L.mla_memcpy_h2d(runtime.dev, addr, tensor.address, 4), "mla_memcpy_h2d")
            setattr(args, name + "_ptr", addr)


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
    check_indices=False,
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

    Sparse attention (DSA), when metadata was made with topk (get_mla_metadata_info(topk=)):
    aiter's fixed-stride form, run by sparse.sparse_decode_fwd: row t of q reads the cache slots
    kv_indices[t * topk : (t + 1) * topk] (slot = page * page_size + offset; kv_buffer of any
    page size is viewed as [slots, 1, 576]), of which only the first min(kv_indptr[b + 1] -
    kv_indptr[b], topk) count (b = t's request), as in aiter; -1 or a slot past the cache
    anywhere is masked; a slot given twice is attended twice. A row with no slot gets o = 0 and
    lse = +inf (aiter's reduce). Metadata made with kv_dtype 'fp8_ds_mla' (bf16 q) reads
    FlashMLA's cache: kv_buffer [num_pages, page_size, 1, 656] uint8 / int8 / float8_e4m3fn bytes.
    check_indices=True (sparse only) reads the counted slots and raises MlaInputError naming the
    first that is neither -1 nor in the cache (default off: nothing is read on the host).
    """
    if metadata is not None and getattr(metadata, "topk", None) is not None:
        return _sparse.sparse_decode_fwd(
            q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices, page_size=page_size, nhead_kv=nhead_kv,
            sm_scale=sm_scale, logit_cap=logit_cap, q_scale=q_scale, kv_scale=kv_scale, return_logits=return_logits,
            return_lse=return_lse, g_kv_indptr=g_kv_indptr, cp_world_size=cp_world_size, metadata=metadata, lse=lse,
            prefix_groups=prefix_groups, detect_shared_prefixes=detect_shared_prefixes, allow_padding=allow_padding,
            fp8_format=fp8_format, emulator_target=emulator_target, check_indices=check_indices)
    if check_indices:
        raise ValueError("check_indices: applies to sparse metadata (get_mla_metadata_info(..., topk=)); dense page "
                         "ids are checked on the emulator by the runtime's validation (MLA_OPTION_VALIDATE)")
    # 1. The arguments: the tensors and aiter's scalars, then the plan's (metadata or index arrays).
    call = _checked_call(q, kv_buffer, o, kv_indices, max_seqlen_q, page_size, nhead_kv, logit_cap, return_logits,
                         return_lse, g_kv_indptr, cp_world_size, causal, metadata, catalog_dir, emulator_target,
                         fp8_format)
    if metadata is not None:
        _check_metadata(call, metadata, prefix_groups, detect_shared_prefixes)
    else:
        _check_index_arrays(call, qo_indptr, kv_indptr, kv_last_page_lens)
    _check_values(call, return_lse, lse, sm_scale, q_scale, kv_scale, logit_cap)
    # 2. The plan, 3. the launch: under one lock, as a cached plan is shared by every caller of its shape.
    with call.runtime.lock:
        plan = metadata if metadata is not None else _planned(call, kv_indices, prefix_groups, detect_shared_prefixes,
                                                              allow_padding)
        _launch(call, plan)
    return o, call.lse


from . import sparse as _sparse  # noqa: E402  (sparse.py builds on the names above)
