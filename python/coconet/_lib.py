"""_lib.py: the C library (libcoconet.so) through ctypes, its functions
declared with their argument and result types.

ctypes rather than a C extension: the public C API (include/coconet.h) is
small and plain C, so declaring it here needs no compiler at install time
beyond the one that builds the library itself, and the same library serves
the CLI's tests, C users and Python. The library is found at COCONET_LIB, in
this package (where `pip install ./python` puts it), or in the checkout's
build/ folder (for running from the source tree after `make`)."""
import ctypes
import os

MAXDIM = 8


class CocoCudaBuild(ctypes.Structure):
    """coco_cuda_build (include/coconet.h)."""
    _fields_ = [("schedule", ctypes.c_char_p), ("cuda_source", ctypes.c_char_p),
                ("timeout_s", ctypes.c_double), ("nccl_home", ctypes.c_char_p),
                ("so", ctypes.c_void_p), ("variant", ctypes.c_void_p),  # writable buffers
                ("knobs", ctypes.c_void_p), ("note", ctypes.c_void_p),
                ("solen", ctypes.c_size_t), ("variantlen", ctypes.c_size_t),
                ("knobslen", ctypes.c_size_t), ("notelen", ctypes.c_size_t),
                ("on_build", ctypes.c_void_p), ("on_build_arg", ctypes.c_void_p)]


# coco_cuda_build.on_build: void (*)(const char *so, void *arg)
ON_BUILD = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_void_p)


class CocoConfig(ctypes.Structure):
    _fields_ = [("defines", ctypes.POINTER(ctypes.c_char_p)), ("ndefines", ctypes.c_int),
                ("nranks", ctypes.c_int), ("group_size", ctypes.c_long)]


class CocoTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("type", ctypes.c_char_p),
                ("layout", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("global_shape", ctypes.c_long * MAXDIM), ("local_shape", ctypes.c_long * MAXDIM),
                ("count", ctypes.c_long), ("data", ctypes.POINTER(ctypes.c_double)),
                ("group_ranks", ctypes.c_int)]


def _candidates():
    env = os.environ.get("COCONET_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libcoconet.so"),
            os.path.join(here, "..", "..", "build", "libcoconet.so")]


def _find():
    tried = _candidates()
    for path in tried:
        if os.path.exists(path):
            return path
    raise ImportError("coconet: libcoconet.so not found (looked at %s); run `make` in the "
                      "checkout, install with `pip install ./python`, or set COCONET_LIB"
                      % ", ".join(tried))


def _declare(lib):
    P, S, I, L = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_long
    E, N = ctypes.c_char_p, ctypes.c_size_t  # error buffer (writable), its length
    table = {
        "coco_load_file": (P, [S, ctypes.POINTER(CocoConfig), E, N]),
        "coco_program_free": (None, [P]),
        "coco_add_schedules": (I, [P, S, E, N]),
        "coco_num_schedules": (I, [P]),
        "coco_schedule_name": (S, [P, I]),
        "coco_schedule_note": (S, [P, I]),
        "coco_schedule": (P, [P, S, E, N]),
        "coco_enumerate_schedules": (I, [P]),
        "coco_program_name": (S, [P]),
        "coco_num_ranks": (I, [P]),
        "coco_num_inputs": (I, [P]),
        "coco_input_name": (S, [P, I]),
        "coco_num_outputs": (I, [P]),
        "coco_output_name": (S, [P, I]),
        "coco_run_fits": (I, [P, E, N]),
        "coco_run_new": (P, [P, ctypes.c_uint64, I]),
        "coco_describe": (I, [P, S, I, ctypes.POINTER(CocoTensor)]),
        "coco_run_tensor": (I, [P, S, I, ctypes.POINTER(CocoTensor)]),
        "coco_run_updated": (I, [P, S, I, ctypes.POINTER(CocoTensor)]),
        "coco_run_write": (I, [P, S, I, ctypes.POINTER(ctypes.c_double), L, E, N]),
        "coco_run_execute": (I, [P, E, N]),
        "coco_run_free": (None, [P]),
        "coco_input_is_scalar": (I, [P, I]),
        "coco_input_constant": (I, [P, I, ctypes.POINTER(ctypes.c_double)]),
        "coco_input_members": (I, [P, I, ctypes.POINTER(L), I]),
        "coco_num_sizes": (I, [P]),
        "coco_program_group_size": (I, [P]),
        "coco_size_name": (S, [P, I]),
        "coco_size_value": (L, [P, I]),
        "coco_build_cuda": (I, [P, ctypes.POINTER(CocoCudaBuild), E, N]),
    }
    for name, (res, args) in table.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


lib = _declare(ctypes.CDLL(_find()))
