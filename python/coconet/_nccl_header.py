"""coconet._nccl_header: the NCCL version an nccl.h declares. Standard
library only: setup.py loads this file by its path at build time, before
the package exists."""
import os
import re
from typing import Optional


def version(include_dir: str) -> Optional[int]:
    """NCCL_VERSION_CODE of the nccl.h in include_dir, or None."""
    try:
        with open(os.path.join(include_dir, "nccl.h")) as f:
            m = re.search(r"#define\s+NCCL_VERSION_CODE\s+(\d+)", f.read())
    except OSError:
        return None
    return int(m.group(1)) if m else None
