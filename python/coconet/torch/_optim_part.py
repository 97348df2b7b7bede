"""coconet.torch.optim's parts (the mixins of optim._Fused) share one
base, _Part: the books more than one part reads or writes, with their
types, so that mypy checks each part's methods against them. The books'
values are set by _Params._init_books; _Part itself holds nothing."""
from typing import TYPE_CHECKING, Any, Dict, List, Optional


class _Part:
    """What the parts of the fused optimizer share (see the module's
    documentation)."""
    _consolidated: Optional[Dict[str, Any]]  # consolidate_state_dict's, for state_dict
    _order: List[int]  # rank 0's order of the backward's gradients
    _recording: bool  # the first step's backward records that order
    _launched: List[Any]  # the units started by the backward pass (overlap=True)
    _no_sync: bool  # inside no_sync(): accumulate, start nothing

    if TYPE_CHECKING:  # the parts' other attributes, as mypy sees them
        def __getattr__(self, name: str) -> Any: ...
