"""What any implementation may run: the ops and kernels the reuse rule never counts as the baseline's work.

Both lists are globs over full names; :mod:`.expectations` leaves them out of the baseline's
fingerprint, because none of them can carry the baseline's result.
"""

from __future__ import annotations

from typing import Tuple

#: Ops any implementation may run, excluded from the baseline's fingerprint. They
#: fall in three groups, none of which can carry the baseline's result:
#:
#: * allocation and constant initialisation (``empty*``, ``zeros*``, ``ones*``,
#:   ``full*``, ``new_*``, ``fill_``, ``zero_``, ``resize_``, ``set_``): they read no
#:   input. ``aten::zeros`` is here although it writes memory: what it writes is a
#:   constant, and forbidding it would reject every candidate that zero-initialises
#:   an output or accumulator. A candidate that *returns* zeros is the oracles' job.
#: * views and metadata (``view``, ``reshape``, ``as_strided``, ``t``, ``transpose``,
#:   ``permute``, ``expand``, ``squeeze`` ...): they compute nothing.
#: * copies and dtype/layout conversion (``contiguous``, ``clone``, ``copy_``, ``to``,
#:   ``_to_copy``): data movement that both sides may need to prepare inputs.
#:
#: * reads of one element (``item``) and padding (a copy with a border).
#:
#: Where the baseline's work *is* one of these (a transpose-copy benchmark, say), the
#: fingerprint cannot tell the two apart; name the op in ``must_not_run`` instead.
#:
#: Names that are not dispatcher ops (``ns::op``) are never the baseline's work either:
#: ``record_function`` labels, the spans torch.compile and autograd put around work
#: ("TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "CompiledFunction",
#: "autograd::engine::evaluate_function: MmBackward0") and autograd Functions' class
#: names compute nothing themselves; the ops under them are looked at instead
#: (:data:`expkit.checks.operands.DISPATCHER_OP`).
STRUCTURAL_OPS: Tuple[str, ...] = (
    "aten::empty*", "aten::new_*", "aten::zeros*", "aten::ones*", "aten::full", "aten::full_like",
    "aten::fill_", "aten::zero_", "aten::resize_", "aten::resize_as_", "aten::set_",
    "aten::view", "aten::view_as", "aten::_unsafe_view", "aten::reshape", "aten::_reshape_alias",
    "aten::as_strided", "aten::t", "aten::numpy_T", "aten::transpose", "aten::permute",
    "aten::expand", "aten::expand_as", "aten::squeeze", "aten::unsqueeze", "aten::flatten",
    "aten::unflatten", "aten::slice", "aten::select", "aten::narrow", "aten::alias",
    "aten::detach", "aten::detach_", "aten::lift*", "aten::resolve_conj", "aten::resolve_neg",
    "aten::contiguous", "aten::clone", "aten::copy_", "aten::to", "aten::_to_copy", "aten::type_as",
    "aten::record_stream", "aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind",
    "aten::movedim", "aten::swapaxes", "aten::diagonal", "aten::unfold", "aten::view_as_real",
    "aten::view_as_complex", "aten::broadcast_to", "aten::item", "aten::_local_scalar_dense",
    "aten::constant_pad_nd", "aten::pad",
)

#: Kernels any implementation may launch, excluded from the baseline's fingerprint (full
#: demangled names): the fill kernel behind ``fill_``/``zero_`` and torch's copy kernels
#: (``direct_copy_kernel_cuda`` in ATen's ``Copy.cu``); ``Memset``/``Memcpy`` in case a tool
#: reports them as kernels.
STRUCTURAL_KERNELS: Tuple[str, ...] = (
    "*FillFunctor*", "*copy_kernel_cuda*", "Memset*", "Memcpy*",
)
