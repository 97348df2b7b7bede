"""tp_layout.py: the torch-free rules of coconet.torch's tensor-parallel
layers (coconet.torch.tp), kept apart so that the CPU tests check them
without torch:

- which dimension of each parameter is sliced over the ranks: Megatron-LM's
  layouts, ColumnParallelLinear's weight [out/P, in] and bias [out/P],
  RowParallelLinear's weight [out, in/P] and its bias whole on every rank;
- a rank's slice of a whole tensor, and Megatron checkpoints in and out at
  any tensor-parallel size (from_megatron / to_megatron: joined along the
  sliced dimension, then cut for the ranks wanted);
- the sizes each program of coconet.tp_programs is bound to at a call, and
  the schedule each runs by default;
- Dropout's masks (doc/language.md, section 9.3): an element is kept by a
  hash of (seed, the Dropout's number, its index in the value's logical
  shape). Every rank of a layer is given the same seed (drawn from torch's
  default generator, which Megatron seeds alike on the ranks of a
  tensor-parallel group), so a Replicated activation gets the same mask on
  every rank and a Sliced one a different mask on each rank's slice: the
  rules of Megatron's RNG tracker. The seed drawn at the forward is kept
  for the backward; a recomputation under activation checkpointing draws
  it again from the generator state that torch.utils.checkpoint restores,
  so it draws the same mask (keep_mask below is the formula, for tests).

Works on anything indexable with slices (NumPy arrays, torch tensors); the
joining function is given (np.concatenate, torch.cat)."""
import functools


PARTITION = {("column", "weight"): 0, ("column", "bias"): 0,
             ("row", "weight"): 1, ("row", "bias"): None}
KINDS = ("column", "row")


def partition_dim(kind, name):
    """The dimension of parameter `name` ("weight" or "bias") of a `kind`
    ("column" or "row") layer that is sliced over the ranks; None: whole on
    every rank."""
    if (kind, name) not in PARTITION:
        raise ValueError("parameter '%s' of a '%s' layer: expected 'weight' or 'bias' of "
                         "'column' or 'row'" % (name, kind))
    return PARTITION[(kind, name)]


def bounds(n, rank, ranks, what="dimension"):
    """[lo, hi) of `rank`'s slice of n elements over `ranks` equal slices."""
    if ranks < 1 or not 0 <= rank < ranks:
        raise ValueError("rank %d of %d: expected 0 <= rank < ranks" % (rank, ranks))
    if n % ranks:
        raise ValueError("%s of %d is not a multiple of the %d ranks" % (what, n, ranks))
    k = n // ranks
    return rank * k, (rank + 1) * k


def cut(whole, dim, rank, ranks, what="dimension"):
    """`rank`'s slice of `whole` along `dim` (None: whole)."""
    if dim is None:
        return whole
    lo, hi = bounds(whole.shape[dim], rank, ranks, what)
    return whole[(slice(None),) * dim + (slice(lo, hi),)]


def shard(whole, kind, name, rank, ranks):
    """`rank`'s part of parameter `name` of a `kind` layer, cut from the
    whole tensor (torch's nn.Linear layout: weight [out, in])."""
    dim = partition_dim(kind, name)
    return cut(whole, dim, rank, ranks, "%s's %s (dimension %s)" % (kind, name, dim))


def join(parts, kind, name, cat):
    """The whole parameter from every rank's part (a list in rank order)."""
    dim = partition_dim(kind, name)
    if dim is None:
        return parts[0]
    return cat(list(parts), dim)


def from_megatron(parts, kind, name, rank, ranks, cat):
    """`rank`'s part (of `ranks`) of a parameter saved by Megatron at any
    tensor-parallel size: `parts`, the saved ranks' tensors in rank order
    (or one tensor: the whole)."""
    if not isinstance(parts, (list, tuple)):
        parts = [parts]
    return shard(join(parts, kind, name, cat), kind, name, rank, ranks)


def to_megatron(parts, kind, name, ranks_out, cat):
    """The parameter as Megatron saves it at tensor-parallel size
    `ranks_out`: a list of its ranks' tensors, from every rank's part here
    (a list in rank order)."""
    whole = join(parts, kind, name, cat)
    return [shard(whole, kind, name, r, ranks_out) for r in range(ranks_out)]


# ---- programs: sizes and schedules ----

def program_sizes(kind, tokens, in_features, out_features):
    """The Sizes of coconet.tp_programs' program of a layer (T tokens; H is
    the residual width, F the sliced width): column: H = in, F = out; row
    and norm_after_row_parallel: H = out, F = in."""
    if kind == "column":
        return {"T": int(tokens), "H": int(in_features), "F": int(out_features)}
    if kind in ("row", "norm"):
        return {"T": int(tokens), "H": int(out_features), "F": int(in_features)}
    raise ValueError("layer kind '%s': expected 'column', 'row' or 'norm'" % kind)


def check_sizes(kind, sizes, ranks, sequence_parallel):
    """Refuses sizes the program cannot take at `ranks` ranks, saying why."""
    sliced = "F"
    if sizes[sliced] % ranks:
        raise ValueError("%s-parallel layer: its sliced width %d is not a multiple of the %d "
                         "ranks" % (kind, sizes[sliced], ranks))
    if sequence_parallel and sizes["T"] % ranks:
        raise ValueError("%s-parallel layer with sequence parallelism: %d tokens (sequence x "
                         "batch) are not a multiple of the %d ranks" % (kind, sizes["T"], ranks))


DEFAULT_SCHEDULES = {
    # (kind, direction, sequence parallel): the schedule, where the program has it
    ("column", "forward", True): "ol", ("column", "backward", True): "ol",
    ("row", "forward", True): "ol", ("row", "forward", False): "ol",
    ("row", "backward", True): "ol",
    # the norm's forward is the same program with or without sequence
    # parallelism (its output is whole on every rank): fused either way
    ("norm", "forward", True): "fused_overlapped", ("norm", "forward", False): "fused_overlapped",
    # its backward has no collective: the row statistics in one row kernel
    ("norm", "backward", True): "rows", ("norm", "backward", False): "rows",
}


# At one rank there is no communication to hide: an overlapped schedule's
# chunks only add launches, so its counterpart without the overlap runs.
ONE_RANK_SCHEDULES = {"ol": "program", "fused_overlapped": "fused"}


def default_schedule(kind, direction, sequence_parallel, available, ranks=None):
    """The schedule a layer's program runs by default at `ranks` ranks: the
    overlapped or fused one where the program has it (`available`: its
    schedules), at one rank without the overlap, else the program as
    written."""
    name = DEFAULT_SCHEDULES.get((kind, direction, bool(sequence_parallel)))
    if ranks == 1:
        name = ONE_RANK_SCHEDULES.get(name, name)
    return name if name in available else "program"


@functools.lru_cache(maxsize=256)
def schedules_in(text):
    """The names of the schedules written in a program's text."""
    import re
    return re.findall(r"^Schedule (\w+)", text, re.M)


def program_choice(kind, direction, sequence_parallel, text, schedule=None, ranks=None):
    """(file name, schedule) under which a layer compiles program `text`:
    `schedule` if given, else the default for its kind and direction at
    `ranks` ranks."""
    name = schedule or default_schedule(kind, direction, sequence_parallel, schedules_in(text),
                                        ranks)
    return "%s_%s" % (kind, direction), name


# ---- Dropout's masks (doc/language.md, section 9.3) ----

_M64 = (1 << 64) - 1


def _mix(z):
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & _M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def uniform(seed, stream, index):
    """rng_uniform(seed, stream, index) of section 9.3, in [0, 1)."""
    h = _mix((seed * 0x9E3779B97F4A7C15 + 0x6A09E667F3BCC909) & _M64)
    h = _mix(h ^ ((stream * 0xD1B54A32D192ED03) & _M64))
    h = _mix(h ^ ((index * 0x8CB92BA72F3D8DD7) & _M64))
    return (h >> 40) * 2.0 ** -24


def keep_mask(seed, number, count, p, start=0):
    """Which of the elements start .. start+count-1 (row-major indices in a
    value's logical shape) Dropout number `number` of a program keeps at
    probability p under `seed`: a list of booleans. A Sliced value's slice
    starts at its offset in the whole; a Replicated one at 0 on every rank."""
    stream = (1 << 63) | int(number)
    return [uniform(int(seed), stream, i) >= p for i in range(start, start + count)]


def mask_agrees_across_ranks(layout):
    """Do the ranks draw the same Dropout mask for a value of this layout
    (given the same seed)? Yes for Replicated and Local values (indices in
    the rank's tensor); no for a Sliced one (indices of its slice in the
    whole)."""
    return not layout.startswith("Sliced")


SEED_BITS = 62


def seed_from_draw(draw):
    """A layer call's Dropout seed from a draw of the default generator (an
    integer below 2**SEED_BITS): never 0, so that a call with a seed
    given is told apart from one that asks for the next."""
    return int(draw) % ((1 << SEED_BITS) - 1) + 1
