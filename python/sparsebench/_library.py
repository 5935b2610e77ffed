"""Loads libsparsebench_ops.so (the C++ patterns and graph-attention op) into torch.ops.sparsebench, once."""
import os
import sys

_loaded = None
_NAME = "libsparsebench_ops.so"


def library_path():
    """The ops library this process uses: $SPARSEBENCH_OPS_LIBRARY, else the one installed with this package (in any
    folder of the package's path: an editable install keeps the Python files in the clone and the library in the
    environment)."""
    env = os.environ.get("SPARSEBENCH_OPS_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    folders = list(getattr(sys.modules.get(__package__), "__path__", [])) or [here]
    for folder in folders:
        if os.path.exists(os.path.join(folder, _NAME)):
            return os.path.join(folder, _NAME)
    return os.path.join(folders[0], _NAME)


def ops():
    """torch.ops.sparsebench, with the library loaded."""
    global _loaded
    import torch

    if _loaded is None:
        path = library_path()
        if not os.path.exists(path):
            raise ImportError(
                f"sparsebench: the ops library {path} is missing; install the package with "
                "'pip install --no-build-isolation .' from a clone, or point SPARSEBENCH_OPS_LIBRARY at a built "
                "libsparsebench_ops.so (build/kernels/ of a CMake build against this torch)")
        try:
            torch.ops.load_library(path)
        except OSError as exc:
            raise ImportError(f"sparsebench: cannot load {path} into torch {torch.__version__}: {exc} (it must be "
                              "built against this torch)") from exc
        _loaded = path
    return torch.ops.sparsebench
