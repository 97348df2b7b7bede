"""optplan.py: the bookkeeping of coconet.torch.optim that needs no torch,
so that `make test` checks it without a GPU (tests/python/test_optplan.py).

A parameter is known by its key: its index in torch's state_dict numbering
(the groups' parameters in order, add_param_group appending). What is here:
  layout               element offsets of parameters in a flat buffer;
  full_order           the order in which the backward pass finishes the
                       parameters' gradients, as post-accumulate-grad hooks
                       saw it (never seen ones last, in reverse key order);
  plan_units           the units of a step: each one program over the
                       parameters of one group with one step count and one
                       element type, cut into buckets of a byte cap in that
                       order, the units sorted by when their last gradient
                       is ready;
  Launcher             which units may start as each gradient is ready (in
                       plan order, so that every rank starts the same
                       collectives in the same order);
  agreement / check_agreement   what every rank must agree on before a
                       collective step (the operation, the parameters with
                       a gradient, the units started during the backward),
                       and the refusal that names who disagrees;
  slice_pieces / member_pieces  where each parameter's optimizer state lies
                       when a program keeps 1/P of it per rank;
  piece_key / parse_piece_key / cover   the keys of a sharded checkpoint's
                       pieces, and which saved pieces fill a wanted range
                       (loading at another world size)."""
import collections

from . import CocoError

ALIGN = 16  # bytes: each member's offset in the flat buffers

# What a rank is doing when it joins an agreement: a rank in one collective
# while another is in a different one is refused, naming both.
OPS = {1: "step()", 2: "state_dict()", 3: "consolidate_state_dict()",
       4: "load_state_dict()", 5: "sharded_state_dict()", 6: "load_sharded_state_dict()",
       7: "add_param_group()"}
OP_CODES = {v: k for k, v in OPS.items()}

Member = collections.namedtuple("Member", "key gi step dtype nbytes")
Unit = collections.namedtuple("Unit", "gi step dtype members")


def layout(numels, itemsize):
    """Element offsets of each parameter in a flat buffer (16-byte aligned),
    and the buffer's element count."""
    per = max(1, ALIGN // itemsize)
    offs, at = [], 0
    for n in numels:
        at = (at + per - 1) // per * per
        offs.append(at)
        at += n
    return offs, at


def full_order(recorded, keys):
    """The keys in the order the backward pass finished them (recorded: the
    hooks' order, first firing of each), those never recorded after them in
    reverse key order (a model's last parameters finish first)."""
    keys = set(keys)
    seen, out = set(), []
    for k in recorded:
        if k in keys and k not in seen:
            seen.add(k)
            out.append(k)
    out += sorted(keys - seen, reverse=True)
    return out


def plan_units(members, order, cap_bytes=None, keep=()):
    """The units of a step. members: Member per parameter with a gradient;
    order: keys in readiness order (full_order); cap_bytes: a unit closes
    once it holds this many bytes of gradients (None: one unit per group,
    step count and type); keep: units started already (kept first, whole).
    The others are sorted by the position of their last member in order."""
    kept = {k for u in keep for k in u.members}
    by_key = {m.key: m for m in members}
    missing = set(by_key) - set(order)
    if missing:
        raise ValueError("plan_units: keys %s not in the order" % sorted(missing))
    pos = {k: i for i, k in enumerate(order)}
    open_, done = {}, []
    for k in order:
        m = by_key.get(k)
        if m is None or k in kept:
            continue
        ident = (m.gi, m.step, m.dtype)
        keys, size = open_.get(ident, ((), 0))
        keys, size = keys + (k,), size + m.nbytes
        if cap_bytes is not None and size >= cap_bytes:
            done.append(Unit(m.gi, m.step, m.dtype, keys))
            open_.pop(ident, None)
        else:
            open_[ident] = (keys, size)
    done += [Unit(gi, step, dt, keys) for (gi, step, dt), (keys, _) in open_.items()]
    done.sort(key=lambda u: pos[u.members[-1]])
    return list(keep) + done


class Launcher:
    """Which units start as the gradients get ready during one backward:
    a unit starts once each of its members' gradient is ready and every
    unit before it has started (plan order, the same on every rank)."""

    def __init__(self, units):
        self.units = list(units)
        self.where = {k: i for i, u in enumerate(self.units) for k in u.members}
        self.reset()

    def reset(self):
        self.left = [len(u.members) for u in self.units]
        self.fired = set()
        self.next = 0

    def ready(self, key):
        """A gradient is final: the indices of the units to start now. A
        second gradient for a member of a unit already started is refused
        (it would miss that step)."""
        i = self.where.get(key)
        if i is None:
            return []
        if key in self.fired:
            if i < self.next:
                raise CocoError(
                    "coconet.torch.optim: the gradient of parameter %d was accumulated again "
                    "after its bucket was stepped in this backward pass; for gradient "
                    "accumulation run every micro-batch but the last under the optimizer's "
                    "no_sync()" % key)
            return []
        self.fired.add(key)
        self.left[i] -= 1
        out = []
        while self.next < len(self.units) and self.left[self.next] == 0:
            out.append(self.next)
            self.next += 1
        return out


def agreement(op, launched, keys, active):
    """This rank's row: the operation's code, the count of units started in
    the backward pass, then 1 or 0 for each key (has a gradient or not)."""
    return [OP_CODES[op], int(launched)] + [1 if k in active else 0 for k in keys]


def _ranks(rows, pick):
    return ", ".join(str(r) for r, row in enumerate(rows) if pick(row))


def check_agreement(rows, keys, describe=str):
    """Refuses rows (one per rank, agreement()) that differ, saying who is
    where; describe(key) names a parameter."""
    first = rows[0]
    if any(len(r) != len(first) for r in rows):
        raise CocoError("coconet.torch.optim: the ranks' optimizers differ in their parameter "
                        "counts (%s): every rank must build the same optimizer"
                        % ", ".join(str(len(r) - 2) for r in rows))
    ops = list(dict.fromkeys(r[0] for r in rows))  # in the order of the ranks
    if len(ops) > 1:
        raise CocoError("coconet.torch.optim: the ranks are in different collective calls: %s; "
                        "every rank must call the optimizer's collective methods in the same "
                        "order (for a checkpoint on one rank: state_dict() on every rank then "
                        "save on one, or consolidate_state_dict(to=0) on every rank then "
                        "state_dict() on rank 0)"
                        % "; ".join("%s on ranks %s" % (OPS.get(o, o),
                                                        _ranks(rows, lambda r, o=o: r[0] == o))
                                    for o in ops))
    if len({r[1] for r in rows}) > 1:
        raise CocoError("coconet.torch.optim: the ranks started different numbers of buckets "
                        "during the backward pass (%s): their backward passes produced "
                        "different gradients" % ", ".join(str(r[1]) for r in rows))
    for j, k in enumerate(keys):
        col = {r[2 + j] for r in rows}
        if len(col) > 1:
            raise CocoError(
                "coconet.torch.optim: %s has a gradient on ranks %s and None on ranks %s; a "
                "step skips a parameter only where its .grad is None on every rank (freeze it "
                "on every rank alike)" % (describe(k), _ranks(rows, lambda r: r[2 + j]),
                                         _ranks(rows, lambda r: not r[2 + j])))


def slice_pieces(counts, slice_sizes):
    """The members' concatenation cut into consecutive slices (one per rank,
    slice_sizes elements each): per rank, a list of (member, start within
    the member, start within the slice, count)."""
    if sum(counts) != sum(slice_sizes):
        raise ValueError("slice_pieces: %d elements in the members, %d in the slices"
                         % (sum(counts), sum(slice_sizes)))
    out = [[] for _ in slice_sizes]
    r, used = 0, 0
    for k, n in enumerate(counts):
        at = 0
        while at < n:
            while used == slice_sizes[r]:
                r, used = r + 1, 0
            take = min(n - at, slice_sizes[r] - used)
            out[r].append((k, at, used, take))
            at, used = at + take, used + take
    return out


def member_pieces(counts, slice_sizes, rank):
    """This rank's piece of each member: {member: (start within the member,
    start within the slice, count)}; members it holds none of are absent."""
    return {k: (a, s, n) for k, a, s, n in slice_pieces(counts, slice_sizes)[rank]}


def piece_key(prefix, key, name, start, end):
    """A sharded checkpoint's key for elements [start, end) of state tensor
    `name` of parameter `key` (flattened)."""
    return "%s.state.%d.%s.%d_%d" % (prefix, key, name, start, end)


def parse_piece_key(prefix, text):
    """(key, name, start, end) of a piece_key, or None."""
    head = prefix + ".state."
    if not text.startswith(head):
        return None
    parts = text[len(head):].split(".")
    if len(parts) != 3 or "_" not in parts[2]:
        return None
    try:
        a, b = (int(x) for x in parts[2].split("_"))
        return int(parts[0]), parts[1], a, b
    except ValueError:
        return None


def cover(pieces, start, end):
    """The saved pieces ([(start, end)]) that fill [start, end): a list of
    (piece, offset in the piece, offset in the wanted range, count); a gap
    is refused."""
    out, at = [], start
    if start >= end:
        return out
    for a, b in sorted(pieces):
        if b <= at or a >= end:
            continue
        if a > at:
            end = a  # the gap's end, for the message
            break
        n = min(b, end) - at
        out.append(((a, b), at - a, at - start, n))
        at += n
        if at >= end:
            return out
    if at < end:
        raise CocoError("coconet.torch.optim: the checkpoint lacks elements %d..%d of a state "
                        "tensor (it holds %s)" % (at, end, sorted(pieces) or "none"))
    return out
