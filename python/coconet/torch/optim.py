"""coconet.torch.optim: data-parallel Adam, AdamW and LAMB as
torch.optim.Optimizers, each step one fused RS-Opt-AG per unit of
parameters (the paper's fuse(RS-Opt-AG), coconet.programs.optimizer): the
gradients are summed over the ranks and averaged (as DDP does), each rank
updates its slice of the parameters with its slice of the optimizer state,
and the updated slices are gathered into every rank's parameters, in one
FusedAllReduce. It replaces DDP's gradient AllReduce and the optimizer:
wrap the model in nothing, call backward, then step.

    opt = optim.AdamW(model.parameters(), lr=3e-4)            # torch's signature
    opt = optim.AdamW(params, lr=3e-4, overlap=True)          # stepped during backward
    ...
    opt.zero_grad(); loss.backward(); opt.step()

torch's semantics, and what is refused:
  - Adam (weight decay added to the gradient, default 0) and AdamW
    (decoupled, default 0.01), with torch.optim.Adam's and AdamW's
    signatures; decoupled_weight_decay in a group decides, as in torch.
    foreach and fused are accepted and change nothing. amsgrad (its state
    max_exp_avg_sq), maximize, capturable and Adam's L2 decay are program
    variants (_options, coconet.programs.step_variant): a group's settings
    choose its program. differentiable=True is refused (CocoError).
  - Parameter groups, including add_param_group later; every group's lr,
    betas, eps and weight_decay are read at each step, so lr_schedulers
    work (OneCycleLR writes betas).
  - A parameter whose .grad is None at a step is skipped: no decay, no
    state change, its step count kept. Every rank must agree: the ranks
    compare which parameters have a gradient before each step (a small
    collective over a CPU group, no GPU synchronisation) and refuse,
    naming the parameter and the ranks, where they differ. Parameters of
    one group with different step counts (frozen, then unfrozen) are
    stepped by separate programs, each with its own bias correction.
  - zero_grad(set_to_none=True) sets the gradients to None, as torch does;
    the next backward's gradients are then copied into the arena (one
    device copy per parameter, made by a post-accumulate-grad hook).
    zero_grad(set_to_none=False) zeroes them in place, where autograd
    accumulates into the arena with no copy: the faster choice.
  - optimizer.state[p] holds "step" (a CPU float tensor, as torch's); at
    P = 1 also "exp_avg" and "exp_avg_sq" shaped like p (live views);
    at P > 1 this rank keeps only a piece of p's state:
    "exp_avg_local", "exp_avg_sq_local" (flat) and "local_range" (its
    elements of p.view(-1)). A parameter that was stepped and is now
    skipped holds its whole state, under torch's names.
  - At construction the parameters are broadcast from rank 0 of the group
    (broadcast=True), as DDP does; buffers (BatchNorm statistics) are not
    the optimizer's: coconet.torch.broadcast_module(model) does both, once.
  - FP16 or BF16 parameters get FP32 master weights (replicated: 4 bytes per
    parameter on every rank), from which the program writes the rounded
    weights. A change of the 16-bit weights by an in-place op that torch
    counts (model.load_state_dict, torch.nn.init: the tensor's _version)
    refreshes their masters at the next step; refresh_masters() does it
    explicitly (after writes through .data).
  - An optimizer made again over the same parameters (after a
    checkpoint, say) takes them over; the earlier one no longer sees
    their gradients.

Clipping, GradScaler and capturable steps (the unit's program variant,
from its group's max_grad_norm, amsgrad, maximize and capturable and
whether a GradScaler scales the step; a step that needs another variant
than the last plans its units again, a collective):
  - coconet.torch.clip_grad_norm_ (or a group's max_grad_norm) clips by
    the norm of the summed, averaged gradient inside the step and returns
    that norm as a tensor written by the step (torch's
    clip_grad_norm_ before step() would see each rank's local gradients).
    A group so clipped must be one program: refused where buckets
    (overlap=True) or different step counts cut it.
  - Under a GradScaler (coconet.torch.GradScaler at P > 1, so that the
    ranks' scales agree, and with overlap=True) the step unscales, checks
    the summed gradient for Inf and NaN and skips on every rank together.
    Each unit (a group's program; with overlap=True, a bucket) decides on
    its own summed gradient alone, where torch skips every group when any
    has an Inf (torch's found_inf, this rank's check of its own gradients,
    does not decide); the scaler's found_inf is the largest of the units'
    found, and the scale follows torch's update from it. With overlap=True
    the buckets started during the backward pass read the scale tensor of
    the coconet.torch.GradScaler that stepped the optimizer last
    (scaler.step(opt) tells the optimizer which scaler it is; the first
    step runs after its backward pass, as every first overlapped step
    does), and write their found into a buffer of the optimizer's that
    scaler.step hands to update(): the parameters, scales and skipped
    steps are overlap=False's wherever the units are the same, or an
    overflow reaches every unit's gradient (an Inf in one bucket's
    gradient alone skips that bucket only). Refused with overlap=True:
    torch's own GradScaler (it gives the scale to step() only, after the
    buckets started), scaler.unscale_(opt) (the buckets read the gradients
    before it), and a step scaled otherwise than the buckets of its
    backward pass (a GradScaler at some steps only, or another one).
    With a GradScaler the step count lives on the device (a skipped step
    does not count); state[p]["step"] catches up at state_dict().
  - capturable=True reads lr (a float, or a tensor that a scheduler writes
    in place) and the step count from device memory (coconet.torch._step),
    so that a step captured in a CUDA graph replays with a changing lr.
_device_inputs, _outputs, _before and _received (_optim_step.py) are where
the step passes device tensors to a program and reads what it returns.

Checkpoints (every one collective, unless said):
  - state_dict() on every rank gives torch.optim.AdamW's layout (per
    parameter step, exp_avg, exp_avg_sq, and master_param for 16-bit
    ones), gathered one program at a time onto the CPU. It loads into
    torch.optim.AdamW and back (load_state_dict takes torch's).
  - consolidate_state_dict(to=0) on every rank gathers it on rank `to`
    only; then state_dict() on that rank alone returns it.
  - Calling state_dict() on one rank only (`if rank == 0:
    torch.save(opt.state_dict())`) fails fast: the ranks compare what they
    are doing, and a rank alone in a collective call is refused with the
    right idiom, after COCONET_OPTIM_TIMEOUT seconds (default 60) where the
    others never come.
  - sharded_state_dict(prefix) gives this rank's pieces for
    torch.distributed.checkpoint.save (each rank its own slice, under keys
    that say which elements they hold); load_sharded_state_dict(path,
    prefix) loads them at any world size, each rank reading what its slice
    needs (path: the checkpoint's directory, which every rank reads; put
    the pieces at the top level of the dict given to save, beside the
    model's, so that their keys keep the prefix).
  - load_state_dict refreshes the FP32 masters (from master_param, else
    from the 16-bit weights).

The step overlapped with the backward pass (overlap=True): the gradients
are cut into buckets of bucket_mb MiB in the order the backward pass
finishes them (post-accumulate-grad hooks, rank 0's order of the first
backward), and each bucket's whole fused RS-Opt-AG starts on a side stream
as soon as its last gradient is final, while the backward pass goes on;
step() makes the current stream wait for them and steps what is left. The
parameters thus change during the backward pass: read them after step().
The first step runs after its backward (it learns the order). Gradient
accumulation: run every micro-batch but the last under `with
opt.no_sync():` (nothing communicates there); a gradient accumulated after
its bucket was stepped is refused. At P = 1 the same plumbing runs
with no communication. LAMB takes no buckets (its group-wide trust ratio,
"trust": "group", is over a unit's parameters).

The all-gather deferred to the next forward (overlap=True,
overlap_param_gather=True; Adam and AdamW): during the backward pass each
bucket runs its reduce-scatter and the step of this rank's slice only
(coconet.programs.optimizer_rs), writing the slice of the new parameters
(and 16-bit weights) into a buffer of its own; its all-gather
(coconet.programs.param_gather) fills every rank's parameters later, on
the side stream, the current stream waiting for it. Until then the
parameters keep their values of before the step, so step() returns with
the model one step behind. The gathers happen:
  - before the forward of the first module (in the forward's order) that
    holds one of the bucket's parameters as its own (module._parameters):
    a global forward pre-hook (torch.nn.modules.module.
    register_module_forward_pre_hook), registered by the first such
    optimizer, so the model is not given to the optimizer; the pre-hook
    also starts the next owed bucket's gather (the reverse of the
    backward's order) ahead, to overlap the forward's compute;
  - before the bucket's next step (a bucket whose parameters no forward
    used);
  - in step() for the buckets not stepped in its backward pass (a step()
    with no forward since the last: everything is gathered first), and in
    the optimizer's state_dict(), consolidate_state_dict(),
    load_state_dict(), sharded_state_dict(), load_sharded_state_dict(),
    add_param_group() and refresh_masters();
  - at opt.gather_params() (collective; call it on every rank).
Reading or writing the parameters otherwise before the next forward
(model.state_dict(), an evaluation outside the modules' forwards, an EMA,
torch.nn.init, a parameter used in the forward of a module other than
its own before that one runs) needs opt.gather_params() on every rank
first. model.state_dict() and model.load_state_dict() of a module the
forward pre-hook has seen are refused (CocoError) while gathers are owed,
rather than read stale values (a rank alone cannot gather: the others
would not join the collective). Every rank must run the same modules'
forwards in the same order (the gathers are collectives). The cost: the
slices' buffers, (4 + the parameters' element size) bytes per parameter
over P, per rank; each bucket's step is two kernels after its
reduce-scatter (not the one FusedAllReduce) and its gather an NCCL
all-gather and a copy into the parameters (for 16-bit parameters also of
the FP32 masters); a Python call per module forward. clip (max_grad_norm)
is refused (the norm would span the slices' padding); LAMB has no such
argument (its step is not written without the all-gather). At
P = 1 there is nothing to gather: the fused programs run, as with overlap
alone.

Under torch.compile: step() traced by dynamo is one custom op,
coconet::optimizer_step (_optim_compile.py), that runs this eager step
when the graph runs: torch.compile(opt.step, fullgraph=True) has no graph
break and steps as the eager optimizer, bit for bit (the lr, None
gradients, overlap=True and GradScaler's tensors as at that time). Compile
the model and opt.step apart (torch's compiled-optimizer recipe): a
backward traced in the same graph (dynamo's trace_autograd_ops) is not
supported. step(closure) is refused under compile (CocoError). A change of
a 16-bit parameter made in the same graph before step() does not refresh
its FP32 master; with overlap=True, no change of the parameters made in
that graph is seen.

Where things lie. The parameters are moved into flat buffers of the arena
(coconet.torch.empty; param.data becomes a view of it) and each param.grad
is a view of a second flat buffer, so autograd accumulates the gradients
there and the programs take both as scattered tensors, member by member.
An optimizer that opens its group's session makes the arena as large as
its buffers need (_arena_need), not the 4 GiB default; COCONET_ARENA_BYTES,
or coconet.torch.session(group, arena_bytes) called first, decides instead
(give more where groups will be added or parameters unfrozen later).
coconet.torch.arena_bytes() reports the arena's size and use.

Constraints: parameters lie on this rank's GPU and are FP32, FP16 or BF16;
each unit is its own program (built at its first step: nvcc takes minutes
for a first build of a model, then the cache serves it)."""
from typing import TYPE_CHECKING, Any, Dict, Iterable, Optional, Tuple

from ._optim_buckets import _Buckets
from ._optim_checkpoint import _Checkpoints
from ._optim_gather import _Gathers
from ._optim_params import _Params, _owner  # noqa: F401 - _owner: coconet.torch.clip_grad_norm_
from ._optim_step import _Step
from ._optim_units import _Units

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

# torch.optim's params: the tensors, or parameter groups (dicts with "params")
Params = Iterable[Any]


class _Fused(_Checkpoints, _Gathers, _Buckets, _Step, _Units, _Params):
    """The fused optimizer: construction and parameters (_optim_params),
    units and plans (_optim_units), the step (_optim_step), the buckets
    of the backward pass (_optim_buckets), the deferred all-gathers
    (_optim_gather) and checkpoints (_optim_checkpoint)."""


def _adam_defaults(lr: float, betas: Tuple[float, float], eps: float, weight_decay: float,
                   amsgrad: bool, foreach: Optional[bool], maximize: bool, capturable: bool,
                   differentiable: bool, fused: Optional[bool],
                   decoupled: bool) -> Dict[str, Any]:
    return dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                maximize=maximize, foreach=foreach, capturable=capturable,
                differentiable=differentiable, fused=fused, decoupled_weight_decay=decoupled)


class Adam(_Fused):
    """torch.optim.Adam's signature and formula (weight decay added to the
    gradient, default 0; decoupled_weight_decay=True makes it AdamW), one
    fused RS-Opt-AG per unit a step. coconet's arguments: group (the process
    group), schedule, overlap, bucket_mb, overlap_param_gather, broadcast;
    see the module's documentation."""
    kind = "adam"

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: Optional[bool] = None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None, decoupled_weight_decay: bool = False,
                 group: "Optional[ProcessGroup]" = None, schedule: str = "paper", overlap: bool = False,
                 bucket_mb: Optional[float] = 25, overlap_param_gather: bool = False,
                 broadcast: bool = True) -> None:
        super().__init__(params, _adam_defaults(lr, betas, eps, weight_decay, amsgrad, foreach,
                                                maximize, capturable, differentiable, fused,
                                                decoupled_weight_decay),
                         group, schedule, overlap, bucket_mb, overlap_param_gather, broadcast)


class AdamW(Adam):
    """torch.optim.AdamW's signature and formula (decoupled weight decay,
    default 0.01); see Adam and the module's documentation."""

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: Optional[bool] = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: Optional[bool] = None, group: "Optional[ProcessGroup]" = None,
                 schedule: str = "paper", overlap: bool = False,
                 bucket_mb: Optional[float] = 25, overlap_param_gather: bool = False,
                 broadcast: bool = True) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, group=group, schedule=schedule,
                         overlap=overlap, bucket_mb=bucket_mb,
                         overlap_param_gather=overlap_param_gather, broadcast=broadcast)

    def _fix_group(self, pg):
        pg["decoupled_weight_decay"] = True  # as torch's AdamW, whatever was saved


class LAMB(_Fused):
    """Data-parallel LAMB: Adam's moments, u = m^/(sqrt(v^) + eps) + wd p,
    p -= lr ratio u with the trust ratio ||p|| / ||u|| (1 where either
    norm is 0) of each parameter tensor, as the LAMB paper and apex's
    FusedLAMB define it (trust="tensor"); trust="group" (the argument, or a
    parameter group's "trust") takes one ratio over all the parameters of
    a unit instead (a group's parameters with one step count:
    examples/lamb.coco, the CoCoNet paper's program). max_grad_norm clips
    by the global norm of the summed gradient first (None: no clipping).
    No buckets (overlap=True steps each unit whole once its gradients are
    final)."""
    kind = "lamb"

    def __init__(self, params: Params, lr: float = 1e-3,
                 betas: Tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.01, *, trust: str = "tensor",
                 max_grad_norm: Optional[float] = None, group: "Optional[ProcessGroup]" = None,
                 schedule: str = "paper", overlap: bool = False,
                 broadcast: bool = True) -> None:
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, trust=trust,
                                      max_grad_norm=max_grad_norm),
                         group, schedule, overlap, None, False, broadcast)
