"""Activation offload for a decoder layer stack: saved tensors to pinned host memory and back.

Chapter 7, "Offloading activations". Autograd keeps every tensor a layer's backward needs (what
:mod:`helpers.cost.layer_bytes` counts) until that backward runs. ``saved_tensors_hooks``
(``torch/autograd/graph.py``) lets a pack hook replace each saved tensor by anything it likes and
an unpack hook give the tensor back in the backward. :class:`ActivationOffload` uses the pair to
keep only a few layers' activations on the GPU:

* **pack** (forward): a tensor saved while a layer of the stack runs, at least ``min_bytes`` large
  and not a parameter (a weight, or a view of one, is on the GPU anyway), has its whole storage
  copied to pinned host memory on a side CUDA stream (``non_blocking``), so the copy runs while the
  next kernels compute. Storages are counted once: views of one storage share one host copy.
* **release** (forward): when layer i starts, the CPU waits for the copies of layer
  i - ``in_flight`` and drops its GPU storages; without that wait the CPU, running ahead of the
  GPU, would let copies pile up and the memory would not fall. The last layer of the stack is
  kept on the GPU: the backward needs it first.
* **unpack** (backward, layers in reverse): the first tensor of layer i asked for brings back
  layer i - 1's storages on a second side stream (a prefetch), so that they arrive while layer i's
  backward computes; the compute stream waits only for the copy of the tensor it needs.

torch's own ``torch.autograd.graph.save_on_cpu(pin_memory=True)`` (the same file) does the copies
on the compute stream, one saved tensor at a time, weights included, and copies back only when a
tensor is unpacked: no overlap and no prefetch. :func:`per_layer` applies it (or any context) to
the same layers, for the comparison of :mod:`helpers.record.offload`. On a CPU the storages are
copied and handed back on the CPU, so a test can check that the gradients are unchanged exactly.
"""

from __future__ import annotations

import torch


class _Stash:
    """One offloaded storage: its bytes on the device (until released), on the host, and the
    events that order the two copies."""

    __slots__ = ("layer", "device_bytes", "host", "copied", "fetched")

    def __init__(self, layer: int, device_bytes, host, copied):
        self.layer, self.device_bytes, self.host = layer, device_bytes, host
        self.copied, self.fetched = copied, None


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The whole storage under ``t`` as a flat uint8 tensor (shares the memory)."""
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _is_parameter(t: torch.Tensor) -> bool:
    base = t if t._base is None else t._base
    return base.is_leaf and base.requires_grad


class HostArena:
    """Pinned host memory handed out in order and taken back all at once (:meth:`rewind`).

    torch's pinned allocator (``pin_memory=True``) rounds every block up to a power of two, up to
    twice the bytes asked for; here chunks of ``chunk_bytes`` (or one tensor's size, if larger)
    are ordinary host tensors pinned with ``cudaHostRegister`` and kept from step to step."""

    def __init__(self, chunk_bytes: int = 2**32):
        self.chunk_bytes, self.chunks, self._at = chunk_bytes, [], (0, 0)  # (chunk, offset)

    @property
    def pinned_bytes(self) -> int:
        return sum(c.numel() for c in self.chunks)

    def take(self, nbytes: int) -> torch.Tensor:
        k, offset = self._at
        while k < len(self.chunks) and offset + nbytes > self.chunks[k].numel():
            k, offset = k + 1, 0  # the rest of this chunk stays unused this step
        if k == len(self.chunks):
            chunk = torch.empty(max(self.chunk_bytes, nbytes), dtype=torch.uint8)
            code = torch.cuda.cudart().cudaHostRegister(chunk.data_ptr(), chunk.numel(), 0)
            if int(code) != 0:
                raise RuntimeError(f"cudaHostRegister of {chunk.numel()} bytes failed: {code}")
            self.chunks.append(chunk)
        self._at = (k, offset + (nbytes + 511) // 512 * 512)
        return self.chunks[k][offset : offset + nbytes]

    def rewind(self) -> None:
        self._at = (0, 0)

    def free(self) -> None:
        for chunk in self.chunks:
            torch.cuda.cudart().cudaHostUnregister(chunk.data_ptr())
        self.chunks, self._at = [], (0, 0)


class ActivationOffload:
    """Offload what the layers in ``layers`` save for backward; a context around one forward.

    ``with offload: loss = model(**batch).loss`` then ``loss.backward()``. ``min_bytes``: smaller
    storages stay; ``in_flight``: layers whose copies may still run when a new layer starts (2:
    the one computing and the one being copied). :attr:`offloaded_bytes` is what the last forward
    moved to the host. :meth:`remove` takes the layer hooks off.
    """

    def __init__(self, layers, min_bytes: int = 2**20, in_flight: int = 2):
        if min_bytes < 0 or in_flight < 1:
            raise ValueError(f"min_bytes ≥ 0 and in_flight ≥ 1, got {min_bytes}, {in_flight}")
        self.layers = list(layers)
        if not self.layers:
            raise ValueError("ActivationOffload needs at least one layer")
        self.min_bytes, self.in_flight = min_bytes, in_flight
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._handles = []
        for i, layer in enumerate(self.layers):
            self._handles.append(layer.register_forward_pre_hook(self._entering(i)))
            self._handles.append(layer.register_forward_hook(self._leaving))
        self._streams = None  # (device→host, host→device), made on the first CUDA tensor
        self.host = HostArena()
        self._reset()

    def _reset(self) -> None:
        self.host.rewind()  # the last backward has read every copy
        self._layer = None  # the index of the layer running, None outside the stack
        self._seen: dict[int, _Stash] = {}  # this layer's storages, by address
        self._weights: set[int] = set()  # the running layer's parameter storages
        self._by_layer: dict[int, list[_Stash]] = {}  # offloaded, not yet fetched back
        self._asked: set[int] = set()  # layers whose backward has begun
        self.offloaded_bytes = 0

    def __enter__(self):
        self._reset()
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._layer = None

    def remove(self) -> None:
        """Take the forward hooks off the layers and give the pinned host memory back."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self.host.free()

    def _entering(self, i: int):
        def hook(module, args):
            self._layer = i  # its weights' storages (FSDP2's gathered ones by now) are never sent
            self._weights = {p.untyped_storage().data_ptr() for p in module.parameters()}
            self._release(i - self.in_flight)

        return hook

    def _leaving(self, module, args, output):
        self._layer, self._seen = None, {}

    # [start: offload-pack]
    def _pack(self, t: torch.Tensor):
        """Forward: a saved tensor of a layer of the stack goes to the host, by storage."""
        keep = (
            self._layer is None
            or self._layer == len(self.layers) - 1  # the backward needs the last layer first
            or t.layout != torch.strided
            or t.untyped_storage().nbytes() < self.min_bytes
            or _is_parameter(t)
            or t.untyped_storage().data_ptr() in self._weights
        )
        if keep:
            return t.detach()  # not t: a packed tensor that holds its own grad_fn is a cycle
        key = t.untyped_storage().data_ptr()
        stash = self._seen.get(key)
        if stash is None:
            stash = self._seen[key] = self._offload(_as_bytes(t))
            self._by_layer.setdefault(self._layer, []).append(stash)
            self.offloaded_bytes += stash.host.numel()
        return stash, t.dtype, t.storage_offset(), t.size(), t.stride()

    def _offload(self, device_bytes: torch.Tensor) -> _Stash:
        # the device bytes are held until released: an address seen twice is one storage
        if device_bytes.device.type != "cuda":  # the CPU: a copy, handed back in the backward
            return _Stash(self._layer, device_bytes, device_bytes.clone(), None)
        d2h, _ = self._cuda_streams()
        host = self.host.take(device_bytes.numel())
        d2h.wait_stream(torch.cuda.current_stream())  # the tensor is written by then
        with torch.cuda.stream(d2h):
            host.copy_(device_bytes, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(d2h)
        return _Stash(self._layer, device_bytes, host, copied)

    # [end: offload-pack]

    def _release(self, i: int) -> None:
        """Forward: wait for layer ``i``'s copies, then let its GPU storages go."""
        for stash in self._by_layer.get(i, []):
            if stash.copied is not None:
                stash.copied.synchronize()
            stash.device_bytes = None

    # [start: offload-unpack]
    def _unpack(self, packed) -> torch.Tensor:
        """Backward: the tensor back on its device; layer i's first one prefetches layer i - 1."""
        if isinstance(packed, torch.Tensor):
            return packed
        stash, dtype, offset, size, stride = packed
        if stash.layer not in self._asked:  # the first tensor asked for from this layer
            self._asked.add(stash.layer)
            self._fetch(stash.layer)
            self._fetch(stash.layer - 1)
        if stash.fetched is not None:  # brought back on the side stream
            torch.cuda.current_stream().wait_event(stash.fetched)
        elif stash.copied is not None:  # never left: freed on this stream after its copy out
            torch.cuda.current_stream().wait_event(stash.copied)
        data = stash.device_bytes if stash.device_bytes is not None else stash.host
        return torch.empty(0, dtype=dtype, device=data.device).set_(
            data.untyped_storage(), offset, size, stride
        )

    def _fetch(self, i: int) -> None:
        """Copy layer ``i``'s released storages back to the GPU on the side stream (once: the
        layer's list is taken)."""
        for stash in self._by_layer.pop(i, []):
            if stash.device_bytes is not None or stash.copied is None:
                continue  # still on the GPU, or a CPU stash
            _, h2d = self._cuda_streams()
            device_bytes = torch.empty_like(stash.host, device="cuda")  # compute stream's memory
            h2d.wait_stream(torch.cuda.current_stream())  # its earlier users are done
            with torch.cuda.stream(h2d):
                h2d.wait_event(stash.copied)
                device_bytes.copy_(stash.host, non_blocking=True)
                stash.fetched = torch.cuda.Event()
                stash.fetched.record(h2d)
            stash.device_bytes = device_bytes  # the compute stream waits for it before any use

    # [end: offload-unpack]

    def _cuda_streams(self):
        if self._streams is None:
            self._streams = (torch.cuda.Stream(), torch.cuda.Stream())
        return self._streams


class per_layer:
    """Enter ``make_context()`` around every forward of each layer in ``layers`` (e.g.
    ``per_layer(layers, lambda: torch.autograd.graph.save_on_cpu(pin_memory=True))``): torch's
    offload on the same tensors as :class:`ActivationOffload`. :meth:`remove` takes it off."""

    def __init__(self, layers, make_context):
        self._open, self._handles = [], []
        for layer in layers:
            self._handles.append(layer.register_forward_pre_hook(self._enter(make_context)))
            self._handles.append(layer.register_forward_hook(self._exit))

    def _enter(self, make_context):
        def hook(module, args):
            ctx = make_context()
            ctx.__enter__()
            self._open.append(ctx)

        return hook

    def _exit(self, module, args, output):
        self._open.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
