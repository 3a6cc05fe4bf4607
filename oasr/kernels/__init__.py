"""CUDA kernels compiled on first use (``jit``) and their thin Python bindings.

Each kernel lives in a framework-free CUDA header under ``oasr/csrc/kernels/<area>/`` with a small
``extern "C"`` launcher file beside it; ``jit.load`` compiles the launcher with ``nvcc`` into a
shared library cached under ``$OASR_CACHE_DIR/jit/<name>-<hash>/`` and the binding module calls
it through ``ctypes`` with raw device pointers and the current CUDA stream.
"""
