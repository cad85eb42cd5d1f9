"""What a captured CUDA graph holds: its nodes, and for each kernel node the name of the function it runs.

Read through the CUDA driver API (ctypes on libcuda.so.1, the one driver every library of the process
shares, so the graph handle torch hands out is valid here): cuGraphGetNodes, cuGraphNodeGetType,
cuGraphKernelNodeGetParams (CUDA_KERNEL_NODE_PARAMS v2: a CUfunction, or a CUkernel when the runtime
launched through a library handle) and cuFuncGetName / cuKernelGetName (CUDA 12.3+), which give the
mangled symbol of the function, the same name cuobjdump and ncu print. Child-graph nodes are followed;
a conditional node's bodies are not read (it is recorded, and the stability stage refuses it).

The stability oracle records these lists; the stage decides from the names (parsers/symbols) whether the
graph holds the call's own kernel and only that one.
"""
from __future__ import annotations

import ctypes

# CUgraphNodeType (cuda.h) -> the name the result files use. The one mapping of the driver's node types.
NODE_TYPES = {0: "kernel", 1: "memcpy", 2: "memset", 3: "host", 4: "graph", 5: "empty", 6: "wait_event",
              7: "event_record", 8: "ext_semas_signal", 9: "ext_semas_wait", 10: "mem_alloc", 11: "mem_free",
              12: "batch_mem_op", 13: "conditional"}
_KERNEL, _CHILD = 0, 4
MAX_DEPTH = 8  # nested child graphs followed


class GraphInspectionError(RuntimeError):
    """A driver call failed while reading a graph."""


class _KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint),
                ("gridDimZ", ctypes.c_uint), ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint),
                ("blockDimZ", ctypes.c_uint), ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.c_void_p),
                ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]


_LIB = None


def _driver():
    global _LIB
    if _LIB is None:
        _LIB = ctypes.CDLL("libcuda.so.1")
    return _LIB


def _check(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(rc, ctypes.byref(name))
        raise GraphInspectionError(f"{what} failed: {name.value.decode() if name.value else rc}")


def _nodes(graph: int) -> list[int]:
    cu = _driver()
    count = ctypes.c_size_t(0)
    _check(cu.cuGraphGetNodes(ctypes.c_void_p(graph), None, ctypes.byref(count)), "cuGraphGetNodes")
    arr = (ctypes.c_void_p * max(1, count.value))()
    _check(cu.cuGraphGetNodes(ctypes.c_void_p(graph), arr, ctypes.byref(count)), "cuGraphGetNodes")
    return [arr[i] for i in range(count.value)]


def _kernel_name(params: _KernelNodeParams) -> str | None:
    cu = _driver()
    name = ctypes.c_char_p()
    if params.func:
        _check(cu.cuFuncGetName(ctypes.byref(name), ctypes.c_void_p(params.func)), "cuFuncGetName")
    elif params.kern:
        _check(cu.cuKernelGetName(ctypes.byref(name), ctypes.c_void_p(params.kern)), "cuKernelGetName")
    else:
        return None
    return name.value.decode("utf-8", errors="replace") if name.value else None


def describe(graph: int, depth: int = 0) -> list[dict]:
    """Every node of `graph` (a CUgraph / cudaGraph_t handle as an int), child graphs flattened in:
    {"type", "depth"} and, for kernel nodes, {"name" (mangled; None if the driver gave none), "grid", "block",
    "smem"}. Raises GraphInspectionError when a driver call fails."""
    cu = _driver()
    out = []
    for node in _nodes(graph):
        t = ctypes.c_int(-1)
        _check(cu.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t)), "cuGraphNodeGetType")
        entry = {"type": NODE_TYPES.get(t.value, f"unknown({t.value})"), "depth": depth}
        if t.value == _KERNEL:
            params = _KernelNodeParams()
            _check(cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(node), ctypes.byref(params)),
                   "cuGraphKernelNodeGetParams")
            entry.update(name=_kernel_name(params), grid=[params.gridDimX, params.gridDimY, params.gridDimZ],
                         block=[params.blockDimX, params.blockDimY, params.blockDimZ], smem=params.sharedMemBytes)
        out.append(entry)
        if t.value == _CHILD:
            if depth >= MAX_DEPTH:
                raise GraphInspectionError(f"child graphs nested deeper than {MAX_DEPTH}")
            child = ctypes.c_void_p()
            _check(cu.cuGraphChildGraphNodeGetGraph(ctypes.c_void_p(node), ctypes.byref(child)),
                   "cuGraphChildGraphNodeGetGraph")
            out += describe(child.value, depth + 1)
    return out
