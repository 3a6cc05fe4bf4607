"""A kernel binding the lazy-declaration test names by string (nothing registers on import)."""


def lazy_kernel(x):
    return "lazy"


def supports(x):
    return str(x.dtype) == "torch.float16"
