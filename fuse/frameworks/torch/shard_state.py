"""A sharded optimizer's state when parameters are split into blocks: which optimizers allow
it, and a parameter's state cut into blocks and put back together, written once.

A block of a parameter is stepped as a tensor of its own (a view of the parameter's elements
``start:stop``), so the wrapped optimizer keeps a state of the block's length for it.  That is
the state of the whole parameter cut to those elements only when the optimizer treats each
element on its own: the update of an element depends on that element's gradient and state
and on scalars (learning rate, step count), never on other elements (a norm, a row or column
statistic).  torch's ``ELEMENTWISE`` optimizers do; ``NEVER_SPLIT`` ones do not (Adafactor
keeps row and column factors, LBFGS one history for all parameters, SparseAdam needs sparse
gradients); anything else (a LAMB or LARS from another package) is split only when asked.
"""

from __future__ import annotations

import torch

ELEMENTWISE = tuple(getattr(torch.optim, name) for name in (
    "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adadelta", "Adamax", "NAdam", "RAdam",
    "ASGD", "Rprop"))
NEVER_SPLIT = {name: why for name, why in (
    ("Adafactor", "keeps row and column factors of each parameter"),
    ("LBFGS", "keeps one curvature history over all parameters"),
    ("SparseAdam", "steps sparse gradients only"),
) if hasattr(torch.optim, name)}


def splits_parameters(optimizer, split_parameters: bool | None) -> bool:
    """Whether a sharded ``optimizer`` may split parameters into blocks: by default when its
    class is one of torch's element-wise optimizers (exactly: a subclass may add statistics
    over a parameter); ``split_parameters=True`` or ``False`` decides, except that a split
    cannot be right for the ``NEVER_SPLIT`` classes."""
    cls = type(optimizer)
    if split_parameters is None:
        return cls in ELEMENTWISE
    if split_parameters and cls.__module__.startswith("torch.optim") \
            and cls.__name__ in NEVER_SPLIT:
        raise ValueError(f"DistributedOptimizer(sharded=True, split_parameters=True) cannot "
                         f"split parameters for {cls.__name__}: it "
                         f"{NEVER_SPLIT[cls.__name__]}, so a block's state is not the "
                         "parameter's state cut to the block; leave split_parameters unset")
    return bool(split_parameters)


def assemble(pieces, start: int, stop: int, name: str, shape=None) -> dict | None:
    """The state of a parameter's elements ``start:stop`` from ``pieces``, ``(begin, end,
    state)`` of the same parameter, or None when they do not cover those elements.  Where
    pieces overlap, each element comes from the first piece passed that holds it (pass the
    newest first).  Element-wise tensors are cut and joined (shaped as ``shape`` when given,
    flat otherwise); scalars come from the piece that gives element ``start``.  ValueError,
    naming the parameter, for a tensor that is not one value per element of its piece.  A
    single piece that is the whole range, asked for with its ``shape``, comes back as it is
    (as torch's ``state_dict`` hands out its live state)."""
    pieces = list(pieces)
    chain, at = [], start
    while at < stop:
        holder = next((j for j, (begin, end, _) in enumerate(pieces) if begin <= at < end),
                      None)
        if holder is None:
            return None
        begin, end, state = pieces[holder]
        # it gives elements up to its end, or up to where a piece passed before it begins
        upto = min([end, stop] + [b for b, _, _ in pieces[:holder] if at < b < end])
        _check_elementwise(state, end - begin, name)
        chain.append((at, upto, begin, state))
        at = upto
    if not chain:
        return None
    first = chain[0][3]
    if len(chain) == 1 and chain[0][2] == start and shape is not None \
            and all(v.shape == shape for v in _elementwise(first)):
        return first
    out = {}
    for key, value in first.items():
        if not (torch.is_tensor(value) and value.dim() > 0):
            out[key] = value.clone() if torch.is_tensor(value) else value
            continue
        parts = [state[key].detach().reshape(-1)[frm - begin:to - begin]
                 for frm, to, begin, state in chain]
        joined = torch.cat(parts) if len(parts) > 1 else parts[0].clone()
        out[key] = joined.view(shape) if shape is not None else joined
    return out


def _elementwise(state: dict) -> list:
    return [v for v in state.values() if torch.is_tensor(v) and v.dim() > 0]


def _check_elementwise(state: dict, numel: int, name: str) -> None:
    for key, value in state.items():
        if torch.is_tensor(value) and value.dim() > 0 and value.numel() != numel:
            raise ValueError(f"optimizer state {key!r} of parameter {name} has shape "
                             f"{tuple(value.shape)}, not one value per element ({numel}): "
                             "the optimizer is not element-wise, so the parameter cannot be "
                             "split into blocks; pass split_parameters=False")
