"""File names read from checkpoint data, kept inside the folder they belong to.

A bundle's ``tokenizer_spec.files``, a sharded checkpoint's ``weight_map`` and an archive's member
names are data: a name that is absolute or climbs with ``..`` would read or write outside the
checkpoint's folder, so such names are refused rather than followed.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

__all__ = ["contained_path", "is_contained_name"]


def is_contained_name(name: object) -> bool:
    """Whether ``name`` is a non-empty relative path with no ``..`` (and no backslash, which a
    Windows reader would take as a separator)."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        return False
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and path.parts != ()


def contained_path(root: Path, name: object, what: str) -> Path:
    """``root / name`` for a contained ``name``.

    Raises:
        ValueError: ``name`` is absolute, climbs out with ``..`` or is not a plain string; the
            message says ``what`` named it.
    """
    if not is_contained_name(name):
        raise ValueError(f"{what} names {name!r}, which is not a file inside {root}; refusing to "
                         "read outside the checkpoint's folder (repair or re-create the file)")
    return Path(root) / str(name)
