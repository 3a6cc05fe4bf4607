"""A kernel binding the provider test imports through a route (it registers on import)."""

from oasr import ops


def provided_kernel(x):
    return "provided"


ops.register_kernel(ops.Kernel(op="provided_op", fn=provided_kernel, source="tests"))
