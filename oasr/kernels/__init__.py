"""CUDA kernel bindings: thin ``ctypes`` wrappers over the libraries ``oasr.ops.build`` specs.

Each kernel lives in a framework-free CUDA header under ``oasr/csrc/kernels/<area>/`` with a small
``extern "C"`` launcher file beside it; ``jit.load(spec)`` loads the prebuilt library or compiles
the launcher with ``nvcc`` into ``$OASR_CACHE_DIR/jit/<name>-<hash>/``, checks its exported
launcher table and sets the argtypes; the binding calls it with raw device pointers and the
current CUDA stream. Their ``oasr.ops`` kernels and the gaps at their edges are declared in
``declarations`` (imported here, torch-free), by name, so listing them imports no binding.
"""

from oasr.kernels import declarations  # noqa: F401  (declares the kernels and their gaps)
