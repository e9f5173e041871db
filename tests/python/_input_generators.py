"""Whole-op input generators that test op files name (``[inputs] generator = "_input_generators:..."``)."""

from __future__ import annotations

import torch


def counting(*, dims, batch_shape, dtypes, attributes, present, device, generator):
    """x counts up from ``attributes["alpha"]``; w is all ones; bias, when present, is minus one."""
    x = (torch.arange(dims["K"] * int(torch.tensor(batch_shape).prod()), dtype=torch.float32) + attributes["alpha"])
    x = x.reshape(*batch_shape, dims["K"]).to(dtypes["T"])
    w = torch.ones(dims["N"], dims["K"], dtype=dtypes["T"])
    bias = -torch.ones(dims["N"], dtype=dtypes["T"]) if "bias" in present else None
    scale = torch.rand(dims["N"], generator=generator) + 1
    offsets = torch.arange(dims["G"], dtype=torch.int32)
    return x.to(device), w.to(device), bias, scale.to(device), offsets.to(device)


def wrong_shape(*, dims, batch_shape, dtypes, attributes, present, device, generator):
    x, w, bias, scale, offsets = counting(dims=dims, batch_shape=batch_shape, dtypes=dtypes, attributes=attributes,
                                          present=present, device=device, generator=generator)
    return x, w.t(), bias, scale, offsets
