"""Files the trainers write: ``atomic_write`` (needle's one atomic writer, ``needle.atomic_file``)."""
from needle.atomic_file import atomic_write

__all__ = ["atomic_write"]
