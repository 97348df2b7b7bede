"""coconet.torch.optim's checkpoints: state_dict in torch.optim.AdamW's
layout, consolidate_state_dict, load_state_dict, and the pieces of
sharded_state_dict / load_sharded_state_dict for
torch.distributed.checkpoint; the units' state gathered over the ranks."""
import pickle
from typing import Any, Dict, List, Tuple

import torch
import torch.distributed as dist

from . import CocoError
from .. import optplan
from ._optim_part import _Part
from ._optim_units import _STATE


class _Checkpoints(_Part):
    """Mixin of optim._Fused: its state saved and loaded."""

    def state_dict(self) -> Dict[str, Any]:
        """torch.optim.AdamW's layout (see the module's documentation), the
        state on the CPU. Collective, unless consolidate_state_dict(to=this
        rank) ran before: then its result, on that rank alone."""
        if self._consolidated is not None:
            sd, self._consolidated = self._consolidated, None
            return sd
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("state_dict()", timeout=True)
        self.gather_params()  # after the agreement: a rank alone fails, not hangs
        return {"state": self._state_entries(), "param_groups": self._packed_groups()}

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gathers the state dict on rank `to` of the group only (as
        ZeroRedundancyOptimizer's); that rank's next state_dict() returns it
        with no collective. Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("consolidate_state_dict()", timeout=True)
        self.gather_params()
        state = self._state_entries(to=to if self._sess.nranks > 1 else None)
        if self._sess.rank == to:
            self._consolidated = {"state": state, "param_groups": self._packed_groups()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Takes a state dict of this class or of torch.optim.AdamW / Adam:
        the groups' settings, and each parameter's state, parked until the
        next step slices it over the ranks; the FP32 masters from
        master_param, else from the 16-bit weights. Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("load_state_dict()", timeout=True)
        self.gather_params()
        saved = state_dict["param_groups"]
        self._check_groups(saved)
        for pg, sg in zip(self.param_groups, saved):
            for name, value in sg.items():
                if name != "params":
                    pg[name] = value
            self._fix_group(pg)
            self._options(pg, check=True)
        self._drop_units()
        state = state_dict["state"]
        for pg, sg in zip(self.param_groups, saved):
            for p, idx in zip(pg["params"], sg["params"]):
                self._load_one(self._where[id(p)], state.get(idx))

    def _fix_group(self, pg):
        """A loaded group's settings that the class decides (AdamW: decoupled)."""

    def _check_groups(self, saved):
        if len(saved) != len(self.param_groups):
            raise CocoError("coconet.torch.optim: the state dict has %d parameter groups, this "
                            "optimizer %d" % (len(saved), len(self.param_groups)))
        for gi, (pg, sg) in enumerate(zip(self.param_groups, saved)):
            if len(sg["params"]) != len(pg["params"]):
                raise CocoError("coconet.torch.optim: group %d of the state dict has %d "
                                "parameters, this optimizer's %d"
                                % (gi, len(sg["params"]), len(pg["params"])))

    def _drop_units(self):
        """Forgets every unit (their state is replaced): buffers to the pool."""
        for u in self._units:
            self._pool += u.bufs
        self._units, self._launcher = [], None
        self._parked = {}
        self.state.clear()

    def _load_one(self, k, s):
        p = self._params[k]
        with torch.no_grad():
            if k in self._masters:
                src = s.get("master_param") if s else None
                self._masters[k].copy_(src.reshape(-1) if src is not None
                                       else p.data.reshape(-1))
                self._versions[k] = p._version
        if not s or "exp_avg" not in s:
            return
        entry = {"step": int(float(s.get("step", 0)))}
        for _, torch_name in _STATE:
            if torch_name in s:
                t = s[torch_name]
                if t.numel() != p.numel():
                    raise CocoError("coconet.torch.optim: the state dict's %s of %s has %d "
                                    "elements, the parameter %d"
                                    % (torch_name, self._describe(k), t.numel(), p.numel()))
                entry[torch_name] = t.detach().to(torch.float32).reshape(p.shape)
        self._parked[k] = entry
        self.state[p] = self._parked_view(k)

    def _packed_groups(self):
        out = []
        for gi, pg in enumerate(self.param_groups):
            entry = {k: v for k, v in pg.items() if k != "params"}
            entry["params"] = [self._where[id(p)] for p in pg["params"]]
            out.append(entry)
        return out

    def _state_entries(self, to=None):
        """torch.optim.AdamW's per-parameter state, on the CPU, one unit at a
        time (to: gathered on that rank only; None on the others)."""
        state = {}
        for u in self._units:
            self._sync_step(u)
            full = self._gather_unit(u, to)
            if any(v is None for v in full.values()):
                continue
            for j, k in enumerate(u.keys):
                entry = {"step": torch.tensor(float(u.step))}
                entry.update({dict(_STATE)[n]: full[n][j].cpu() for n in u.names})
                state[k] = entry
        for k, e in self._parked.items():
            state[k] = {n: (torch.tensor(float(t)) if n == "step" else t.detach().cpu().clone())
                        for n, t in e.items()}
        for k, m in self._masters.items():
            if k in state:
                state[k]["master_param"] = m.view(self._params[k].shape).cpu().clone()
        return state

    def _gather_unit(self, u, to=None):
        """Each member's whole state per name ({name: [tensor per member]},
        on this rank's GPU); to: only that rank gets them (others: None)."""
        ps = [self._params[k] for k in u.keys]
        out = {}
        for name in u.names:
            flat = self._gather_flat(u, u.state[name], to)
            if flat is None:
                out[name] = None
                continue
            cuts, parts = 0, []
            for p in ps:
                parts.append(flat[cuts:cuts + p.numel()].view(p.shape).clone())
                cuts += p.numel()
            out[name] = parts
        return out

    def _gather_flat(self, u, t, to):
        n = self._sess.nranks
        if n == 1 or not u.sliced:
            return t.reshape(-1)
        most = max(u.sizes)
        mine = torch.zeros(most, dtype=t.dtype, device=t.device)
        mine[:t.numel()].copy_(t.reshape(-1))
        if to is None:
            allp = torch.empty(most * n, dtype=t.dtype, device=t.device)
            dist.all_gather_into_tensor(allp, mine, group=self._pg)
        else:
            dst = dist.get_global_rank(self._pg, to) if self._pg is not None else to
            allp = torch.empty(most * n, dtype=t.dtype, device=t.device) \
                if self._sess.rank == to else None
            dist.gather(mine, list(allp.view(n, most)) if allp is not None else None, dst=dst,
                        group=self._pg)
            if allp is None:
                return None
        return torch.cat([allp[r * most:r * most + s] for r, s in enumerate(u.sizes)])

    # ---- torch.distributed.checkpoint ----

    def sharded_state_dict(self, prefix: str = "optim") -> Dict[str, Any]:
        """This rank's pieces of the state for torch.distributed.checkpoint
        .save: per parameter and state tensor, the elements this rank holds
        under optplan.piece_key (which says which they are); steps, masters
        and the groups' settings alike on every rank (saved once).
        Collective."""
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("sharded_state_dict()", timeout=True)
        self.gather_params()
        out: Dict[str, Any] = {prefix + ".param_groups": pickle.dumps(self._packed_groups())}
        for u in self._units:
            self._sync_step(u)
            for j, k in enumerate(u.keys):
                out["%s.step.%d" % (prefix, k)] = torch.tensor(float(u.step))
                if j not in u.pieces:
                    continue
                a, s, n = u.pieces[j]
                for name in u.names:
                    key = optplan.piece_key(prefix, k, dict(_STATE)[name], a, a + n)
                    out[key] = u.state[name][s:s + n]
        for k, e in self._parked.items():
            out["%s.step.%d" % (prefix, k)] = torch.tensor(float(e["step"]))
            for name, t in e.items():
                if name != "step":
                    out[optplan.piece_key(prefix, k, name, 0, t.numel())] = t.reshape(-1)
        for k, m in self._masters.items():
            out[optplan.piece_key(prefix, k, "master_param", 0, m.numel())] = m
        return out

    def load_sharded_state_dict(self, checkpoint_id: Any, prefix: str = "optim") -> None:
        """Loads what sharded_state_dict saved (at any world size): every
        parameter that requires a gradient is planned into units now, and
        each rank reads the pieces that cover its slices. Collective."""
        import torch.distributed.checkpoint as dcp
        self._sync_side()
        if self._sess.nranks > 1:
            self._agree("load_sharded_state_dict()", timeout=True)
        self.gather_params()
        meta = dcp.FileSystemReader(checkpoint_id).read_metadata().state_dict_metadata
        saved: Dict[Tuple[int, str], List[Tuple[int, int]]] = {}
        for key in meta:
            parsed = optplan.parse_piece_key(prefix, key)
            if parsed is not None:
                saved.setdefault(parsed[:2], []).append((parsed[2], parsed[3]))
        want: Dict[str, Any] = {prefix + ".param_groups": b""}
        want.update({"%s.step.%d" % (prefix, k): torch.zeros(()) for k in
                     range(len(self._params)) if "%s.step.%d" % (prefix, k) in meta})
        dcp.load(want, checkpoint_id=checkpoint_id)
        self._load_groups(pickle.loads(want[prefix + ".param_groups"]))
        self._drop_units()
        steps = {k: int(float(want["%s.step.%d" % (prefix, k)]))
                 for k in range(len(self._params)) if "%s.step.%d" % (prefix, k) in want}
        self._load_pieces(dcp, checkpoint_id, prefix, saved, steps)

    def _load_groups(self, saved):
        self._check_groups(saved)
        for pg, sg in zip(self.param_groups, saved):
            pg.update({n: v for n, v in sg.items() if n != "params"})
            self._fix_group(pg)
            self._options(pg, check=True)

    def _load_pieces(self, dcp, checkpoint_id, prefix, saved, steps):
        """Parks every saved parameter's state with its step, then plans the
        ones that require a gradient and fills their slices from the pieces
        (reads only what this rank's slices and masters need)."""
        for k in steps:
            self._parked[k] = {"step": steps[k]}
        self._plan([k for k in steps if self._params[k].requires_grad], [])
        reads = {}
        fills = self._unit_fills(prefix, saved, reads) + \
            self._parked_fills(prefix, saved, steps, reads)
        for k, m in self._masters.items():
            if (k, "master_param") in saved:
                fills += self._cover(prefix, saved, k, "master_param", 0, m, reads)
        dcp.load(reads, checkpoint_id=checkpoint_id)
        with torch.no_grad():
            for key, src_at, dst, dst_at, n in fills:
                dst[dst_at:dst_at + n].copy_(reads[key][src_at:src_at + n])
        for k in self._masters:
            self._versions[k] = self._params[k]._version
        for k in list(self._parked):
            if len(self._parked[k]) == 1:  # a step but no state tensors
                del self._parked[k]
            else:
                self.state[self._params[k]] = self._parked_view(k)

    def _unit_fills(self, prefix, saved, reads):
        """The copies that fill this rank's slices of the units' state."""
        fills = []
        for u in self._units:
            for j, k in enumerate(u.keys):
                if j not in u.pieces:
                    continue
                a, s, n = u.pieces[j]
                for name in u.names:
                    fills += self._cover(prefix, saved, k, dict(_STATE)[name], a,
                                         u.state[name][s:s + n], reads)
        return fills

    def _parked_fills(self, prefix, saved, steps, reads):
        """The copies that fill the whole state of saved parameters left out
        of the units (not requiring a gradient now), parked."""
        planned = {k for u in self._units for k in u.keys}
        fills = []
        for k in steps:
            for _, tname in _STATE:
                if k not in planned and (k, tname) in saved:
                    t = torch.empty(self._params[k].numel())
                    fills += self._cover(prefix, saved, k, tname, 0, t, reads)
                    self._parked[k][tname] = t.view(self._params[k].shape)
        return fills

    def _cover(self, prefix, saved, k, name, start, dst, reads):
        """The reads (into `reads`, by key) and copies that fill dst with
        elements [start, start + dst.numel()) of parameter k's `name`."""
        pieces = saved.get((k, name))
        if pieces is None:
            raise CocoError("coconet.torch.optim: the checkpoint has no %s for %s"
                            % (name, self._describe(k)))
        out = []
        for (a, b), src_at, dst_at, n in optplan.cover(pieces, start, start + dst.numel()):
            key = optplan.piece_key(prefix, k, name, a, b)
            if key not in reads:
                reads[key] = torch.empty(b - a)
            out.append((key, src_at, dst.reshape(-1), dst_at, n))
        return out
